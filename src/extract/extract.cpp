// Patch extraction: one P×P patch per token from its mip level, plus positions and boxes.
#include "fovea/extract.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "extract/batch.hpp"
#include "fovea/error.hpp"

namespace fovea {

void sample_block(const ImageViewU8& img, int x0, int y0, int P, const RowWriter& w, std::byte* dst,
                  size_t elem) {
  uint8_t row[256];
  const int W = img.width(), H = img.height();
  const ptrdiff_t ps = img.pixel_stride();
  const bool direct = ps == 1 && x0 >= 0 && x0 + P <= W;
  for (int c = 0; c < 3; ++c) {
    const int sc = img.channels() == 3 ? c : 0;
    for (int py = 0; py < P; ++py) {
      const uint8_t* s = img.row(sc, std::clamp(y0 + py, 0, H - 1));
      const uint8_t* src = s + x0;
      if (!direct) {
        for (int px = 0; px < P; ++px) row[px] = s[std::clamp(x0 + px, 0, W - 1) * ps];
        src = row;
      }
      w.write(src, P, c, dst + (size_t(c) * P + py) * P * elem);
    }
  }
}

std::string_view to_string(TokenWindow::Kind k) {
  switch (k) {
    case TokenWindow::Kind::base: return "base";
    case TokenWindow::Kind::query: return "query";
    case TokenWindow::Kind::detail: return "detail";
  }
  return "?";
}

std::map<std::string, Tensor> window_tensors_of(const std::vector<TokenWindow>& windows) {
  const int64_t n = int64_t(windows.size());
  Tensor boxes(DType::f32, {n, 4}), grids(DType::i32, {n, 2}), levels(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) {
    const TokenWindow& w = windows[size_t(i)];
    for (int k = 0; k < 4; ++k) boxes.data<float>()[i * 4 + k] = w.box[size_t(k)];
    grids.data<int32_t>()[i * 2] = w.grid_x;
    grids.data<int32_t>()[i * 2 + 1] = w.grid_y;
    levels.data<float>()[i] = w.level >= 0 ? float(w.level) : std::log2(std::max(w.scale, 1e-6f));
  }
  std::map<std::string, Tensor> m;
  m.emplace("window_boxes", std::move(boxes));
  m.emplace("window_grids", std::move(grids));
  m.emplace("window_levels", std::move(levels));
  return m;
}

int64_t TokenBatch::kept() const {
  if (!windowed() || covered.empty()) return size();
  const uint8_t* c = covered.data<uint8_t>();
  int64_t k = 0;
  for (int64_t i = 0; i < covered.numel(); ++i) k += c[i] == 0;
  return k;
}

void check_extract_params(const ExtractParams& p) {
  if (p.dtype != DType::f32 && p.dtype != DType::f16 && p.dtype != DType::u8)
    throw Error(Errc::invalid_argument, "patch dtype must be f32, f16 or u8, got " +
                                            std::string(dtype_name(p.dtype)));
  for (int c = 0; c < 3; ++c)
    if (!std::isfinite(p.norm.mean[c]) || !std::isfinite(p.norm.std[c]) || !(p.norm.std[c] > 0) ||
        !std::isfinite(1.0f / (255.0f * p.norm.std[c])) || !std::isfinite(p.norm.mean[c] / p.norm.std[c]))
      throw Error(Errc::invalid_argument, "normalisation std must be > 0 and mean/std finite (and mean/std, "
                                          "1/(255 std) representable as floats)");
}

PatchScale patch_scale(const ExtractParams& p) {
  PatchScale s;
  for (int c = 0; c < 3; ++c) {
    if (p.norm.enabled) {
      s.scale[c] = 1.0f / (255.0f * p.norm.std[c]);
      s.bias[c] = -p.norm.mean[c] / p.norm.std[c];
    } else {
      s.scale[c] = 1.0f / 255.0f;
      s.bias[c] = 0.0f;
    }
  }
  return s;
}

TokenBatch make_batch(int64_t n, int P, const ExtractParams& params) {
  TokenBatch b;
  b.patches = Tensor(params.dtype, {n, 3, P, P});
  b.positions = Tensor(DType::f32, {n, 4});
  b.levels = Tensor(DType::i32, {n});
  b.boxes.resize(n);
  b.patch_px = P;
  b.params = params;
  return b;
}

TokenBatch allocation_batch(const Allocation& allocation, const ExtractParams& params) {
  const TileGrid& g = allocation.rate_map.grid;
  const std::vector<Token>& tokens = allocation.layout.tokens;
  const int64_t n = static_cast<int64_t>(tokens.size());
  TokenBatch b = make_batch(n, g.patch_px, params);
  b.level_offsets = allocation.layout.level_offsets;
  float* pos = b.positions.data<float>();
  int32_t* lev = b.levels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const Token& t = tokens[size_t(i)];
    const float side = static_cast<float>(g.token_px(t.level));
    const float x0 = t.x * side, y0 = t.y * side;
    pos[i * 4 + 0] = x0 + 0.5f * side;
    pos[i * 4 + 1] = y0 + 0.5f * side;
    pos[i * 4 + 2] = side;
    pos[i * 4 + 3] = static_cast<float>(t.level);
    lev[i] = t.level;
    b.boxes[size_t(i)] = {x0, y0, x0 + side, y0 + side};
  }
  return b;
}

TokenBatch extract(const PyramidU8& pyramid, const Allocation& allocation,
                   const ExtractParams& params, Executor& exec) {
  check_extract_params(params);
  const TileGrid& g = allocation.rate_map.grid;
  const int P = g.patch_px;
  if (pyramid.width() != g.image_width || pyramid.height() != g.image_height)
    throw Error(Errc::invalid_argument, "allocation was made for a different image size");
  if (allocation.max_level >= pyramid.num_levels())
    throw Error(Errc::invalid_argument, "allocation needs mip level " +
                                            std::to_string(allocation.max_level) + " but the pyramid has " +
                                            std::to_string(pyramid.num_levels()) + " levels");
  const std::vector<Token>& tokens = allocation.layout.tokens;
  TokenBatch b = allocation_batch(allocation, params);
  const RowWriter writer(params);
  const size_t elem = dtype_size(params.dtype);
  const size_t patch_bytes = size_t(3) * P * P * elem;
  exec.parallel_for(b.size(), 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Token& t = tokens[size_t(i)];
      sample_block(pyramid.view(t.level), t.x * P, t.y * P, P, writer,
                   b.patches.bytes() + size_t(i) * patch_bytes, elem);
    }
  });
  return b;
}

TokenBatch extract_uniform(const ImageViewU8& image, const UniformGrid& grid, int patch_px,
                           const ExtractParams& params, Executor& exec) {
  check_extract_params(params);
  const int P = patch_px;
  if (grid.resized_width != grid.grid_x * P || grid.resized_height != grid.grid_y * P || grid.grid_x < 1 ||
      grid.grid_y < 1)
    throw Error(Errc::invalid_argument, "uniform grid does not match the patch size");
  const ImageU8 resized = resize_area(image, grid.resized_width, grid.resized_height, exec);
  const int64_t n = grid.tokens();
  TokenBatch b = make_batch(n, P, params);
  b.level_offsets = {0, static_cast<int32_t>(n)};
  const RowWriter writer(params);
  const size_t elem = dtype_size(params.dtype);
  const size_t patch_bytes = size_t(3) * P * P * elem;
  const float cell_w = float(image.width()) / grid.grid_x, cell_h = float(image.height()) / grid.grid_y;
  const float side = std::sqrt(cell_w * cell_h);
  const float level = std::log2(side / P);
  float* pos = b.positions.data<float>();
  int32_t* lev = b.levels.data<int32_t>();
  exec.parallel_for(n, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int gx = static_cast<int>(i % grid.grid_x), gy = static_cast<int>(i / grid.grid_x);
      sample_block(resized, gx * P, gy * P, P, writer, b.patches.bytes() + size_t(i) * patch_bytes, elem);
      const float x0 = gx * cell_w, y0 = gy * cell_h;
      pos[i * 4 + 0] = x0 + 0.5f * cell_w;
      pos[i * 4 + 1] = y0 + 0.5f * cell_h;
      pos[i * 4 + 2] = side;
      pos[i * 4 + 3] = level;
      lev[i] = std::max(0, static_cast<int>(std::lround(level)));
      // Neighbours compute their shared edge the same way, so boxes tile without gaps.
      b.boxes[i] = {x0, y0, (gx + 1) * cell_w, (gy + 1) * cell_h};
    }
  });
  return b;
}

}  // namespace fovea
