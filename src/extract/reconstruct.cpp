// "What the model sees": every token's patch stretched back over its box.
#include <algorithm>
#include <cmath>

#include "fovea/error.hpp"
#include "fovea/extract.hpp"

namespace fovea {

ImageU8 reconstruct(const TokenBatch& batch, int width, int height, Executor& exec) {
  const int P = batch.patch_px;
  const int64_t n = batch.size();
  if (batch.patches.rank() != 4 || batch.patches.dim(1) != 3 || batch.patches.dim(2) != P ||
      batch.patches.dim(3) != P || batch.boxes.size() != size_t(n))
    throw Error(Errc::invalid_argument, "token batch is not [N, 3, P, P] with one box per token");
  ImageU8 out(width, height, 3, /*zero=*/true);
  const DType dt = batch.patches.dtype();
  const Normalization& norm = batch.params.norm;
  // Back to 0..255: float patches were (v/255 − mean)/std, or v/255 without normalisation.
  float scale[3], bias[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = norm.enabled ? 255.0f * norm.std[c] : 255.0f;
    bias[c] = norm.enabled ? 255.0f * norm.mean[c] : 0.0f;
  }
  const size_t plane = size_t(P) * P;
  auto paint = [&](int64_t first, int64_t count) {
   exec.parallel_for(count, 8, [&](int64_t j0, int64_t j1) {
    std::vector<float> patch(3 * plane);
    for (int64_t i = first + j0; i < first + j1; ++i) {
      if (batch.windowed() && batch.covered.data<uint8_t>()[i]) continue;
      const std::byte* src = batch.patches.bytes() + size_t(i) * 3 * plane * dtype_size(dt);
      for (size_t k = 0; k < 3 * plane; ++k) {
        const int c = static_cast<int>(k / plane);
        switch (dt) {
          case DType::u8: patch[k] = static_cast<float>(reinterpret_cast<const uint8_t*>(src)[k]); break;
          case DType::f32: patch[k] = reinterpret_cast<const float*>(src)[k] * scale[c] + bias[c]; break;
          case DType::f16:
            patch[k] = f16_to_f32(reinterpret_cast<const uint16_t*>(src)[k]) * scale[c] + bias[c];
            break;
          default: patch[k] = 0; break;
        }
      }
      const auto& box = batch.boxes[i];
      const float bw = box[2] - box[0], bh = box[3] - box[1];
      // Pixels whose centre lies in the box belong to this token: boxes that tile the plane
      // then paint every pixel exactly once.
      const int x_begin = std::max(0, static_cast<int>(std::ceil(box[0] - 0.5f)));
      const int x_end = std::min(width, static_cast<int>(std::ceil(box[2] - 0.5f)));
      const int y_begin = std::max(0, static_cast<int>(std::ceil(box[1] - 0.5f)));
      const int y_end = std::min(height, static_cast<int>(std::ceil(box[3] - 0.5f)));
      for (int y = y_begin; y < y_end; ++y) {
        const float v = std::clamp((y + 0.5f - box[1]) / bh * P - 0.5f, 0.0f, float(P - 1));
        const int v0 = static_cast<int>(v);
        const int v1 = std::min(P - 1, v0 + 1);
        const float fv = v - v0;
        for (int c = 0; c < 3; ++c) {
          const float* p = patch.data() + c * plane;
          uint8_t* d = out.row(c, y);
          for (int x = x_begin; x < x_end; ++x) {
            const float u = std::clamp((x + 0.5f - box[0]) / bw * P - 0.5f, 0.0f, float(P - 1));
            const int u0 = static_cast<int>(u);
            const int u1 = std::min(P - 1, u0 + 1);
            const float fu = u - u0;
            const float top = p[v0 * P + u0] + (p[v0 * P + u1] - p[v0 * P + u0]) * fu;
            const float bot = p[v1 * P + u0] + (p[v1 * P + u1] - p[v1 * P + u0]) * fu;
            const float val = top + (bot - top) * fv;
            d[x] = static_cast<uint8_t>(std::clamp(std::nearbyint(val), 0.0f, 255.0f));
          }
        }
      }
    }
   });
  };
  if (!batch.windowed()) {
    paint(0, n);
    return out;
  }
  // Windows overlap: paint them one after another, coarsest first, so that finer pixels win
  // (the tokens of one window tile its box and never overlap each other).
  std::vector<int64_t> first(batch.windows.size() + 1, 0);
  for (size_t w = 0; w < batch.windows.size(); ++w) first[w + 1] = first[w] + batch.windows[w].tokens();
  if (first.back() != n) throw Error(Errc::invalid_argument, "token batch: the windows do not add up to its tokens");
  std::vector<size_t> order(batch.windows.size());
  for (size_t w = 0; w < order.size(); ++w) order[w] = w;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return batch.windows[a].scale > batch.windows[b].scale; });
  for (size_t w : order) paint(first[w], batch.windows[w].tokens());
  return out;
}

}  // namespace fovea
