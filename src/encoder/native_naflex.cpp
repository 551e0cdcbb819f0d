// SigLIP 2 NaFlex: the processor's resize rule (get_image_size_for_max_num_patches), its patches
// and their positions, and the encode of several images through encode_batch (attention within
// each image: what the padding masks of Siglip2VisionModel compute on the valid rows).
#include <cmath>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/native.hpp"

namespace fovea {

NativeSize naflex_size(int height, int width, int patch_px, int max_num_patches) {
  if (height < 1 || width < 1) throw invalid_argument("naflex_size: the image size must be positive");
  if (patch_px < 1 || patch_px > 1024) throw invalid_argument("naflex_size: the patch size must be within 1..1024");
  if (max_num_patches < 1 || max_num_patches > (1 << 24))
    throw invalid_argument("naflex_size: max_num_patches must be within 1..2^24 (got " + std::to_string(max_num_patches) + ")");
  const double P = patch_px;
  auto scaled = [P](double scale, int size) { return std::max(P, std::ceil(double(size) * scale / P) * P); };
  constexpr double eps = 1e-5;
  double lo = eps / 10, hi = 100.0;
  while (hi - lo >= eps) {
    const double s = (lo + hi) / 2;
    if ((scaled(s, height) / P) * (scaled(s, width) / P) <= double(max_num_patches)) lo = s;
    else hi = s;
  }
  const double h = scaled(lo, height), w = scaled(lo, width);
  if (!(h < 2e9 && w < 2e9)) throw invalid_argument("naflex_size: the resized size is out of range");
  return {int(h), int(w)};
}

namespace {

void require_naflex(const VitModel& model, const char* what) {
  if (!model.config().native.naflex())
    throw invalid_argument(std::string(what) + ": '" + model.source() +
                           "' is not a SigLIP 2 NaFlex tower (Siglip2VisionModel with a linear patch embedding)");
}

}  // namespace

NaflexInput naflex_input(const VitModel& model, const ImageViewU8& image) {
  require_naflex(model, "naflex_input");
  image.check("naflex_input: image");
  const VitConfig& c = model.config();
  const int P = c.patch_px, W = image.width(), H = image.height();
  if (image.channels() != c.channels)
    throw invalid_argument("naflex_input: the image has " + std::to_string(image.channels()) + " channels, the model takes " +
                           std::to_string(c.channels));
  if (W % P || H % P)
    throw invalid_argument("naflex_input: a " + std::to_string(W) + "x" + std::to_string(H) +
                           " image's sides are not multiples of the patch size " + std::to_string(P) +
                           ": resize it to naflex_size first (prepare_naflex does)");
  NaflexInput in;
  in.grid = {1, H / P, W / P};
  const int64_t N = in.grid.patches();
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, "naflex_input: more than 2^20 patches");
  in.patches = Tensor(DType::f32, {N, c.channels, P, P});
  in.positions = Tensor(DType::f32, {N, 4});
  const Normalization norm = normalization(c.input);
  float* o = in.patches.data<float>();
  float* pos = in.positions.data<float>();
  for (int gy = 0; gy < in.grid.h; ++gy)
    for (int gx = 0; gx < in.grid.w; ++gx) {
      for (int ch = 0; ch < c.channels; ++ch) {
        const float scale = 1.0f / (255.0f * norm.std[size_t(ch % 3)]), shift = -norm.mean[size_t(ch % 3)] / norm.std[size_t(ch % 3)];
        for (int y = 0; y < P; ++y)
          for (int x = 0; x < P; ++x) *o++ = float(image.at(ch, gy * P + y, gx * P + x)) * scale + shift;
      }
      *pos++ = (float(gx) + 0.5f) * float(P), *pos++ = (float(gy) + 0.5f) * float(P), *pos++ = float(P), *pos++ = 0.0f;
    }
  return in;
}

NaflexInput prepare_naflex(const VitModel& model, const ImageViewU8& image, int max_num_patches) {
  require_naflex(model, "prepare_naflex");
  image.check("prepare_naflex: image");
  const VitConfig& c = model.config();
  if (max_num_patches < 0) throw invalid_argument("prepare_naflex: max_num_patches must be >= 0 (0: the model's)");
  const int n = max_num_patches > 0 ? max_num_patches : c.native.max_num_patches;
  const NativeSize s = naflex_size(image.height(), image.width(), c.patch_px, n);
  if (s.width == image.width() && s.height == image.height()) return naflex_input(model, image);
  const ImageU8 r = resize_bilinear_pil(image, s.width, s.height);
  return naflex_input(model, ImageViewU8(r));
}

namespace {

struct Gathered {
  Tensor patches, positions;
  std::vector<ImageSpan> spans;
};

// Every image's patches and positions one after another, checked against the model.
Gathered gather(const VitModel& model, std::span<const NaflexInput> images) {
  require_naflex(model, "encode_naflex");
  if (images.empty()) throw invalid_argument("encode_naflex: no image to encode");
  const VitConfig& c = model.config();
  const int64_t P = c.patch_px, K = int64_t(c.channels) * P * P;
  int64_t N = 0;
  for (const NaflexInput& in : images) {
    const NativeGrid& g = in.grid;
    if (g.t != 1 || g.h < 1 || g.w < 1 || g.h > 65536 || g.w > 65536)
      throw invalid_argument("encode_naflex: a grid needs t = 1 and positive sides up to 65536");
    const int64_t n = g.patches();
    if (in.patches.dtype() != DType::f32 || in.patches.rank() != 4 || in.patches.dim(0) != n ||
        in.patches.dim(1) != c.channels || in.patches.dim(2) != P || in.patches.dim(3) != P)
      throw invalid_argument("encode_naflex: an image's patches must be [h·w = " + std::to_string(n) + ", " +
                             std::to_string(c.channels) + ", " + std::to_string(P) + ", " + std::to_string(P) +
                             "] float32 (naflex_input)");
    if (in.positions.dtype() != DType::f32 || in.positions.rank() != 2 || in.positions.dim(0) != n ||
        in.positions.dim(1) != 4)
      throw invalid_argument("encode_naflex: an image's positions must be [" + std::to_string(n) + ", 4] float32");
    N += n;
    if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, "encode_naflex: more than 2^20 patches");
  }
  Tensor patches(DType::f32, {N, c.channels, P, P}), positions(DType::f32, {N, 4});
  std::vector<ImageSpan> spans;
  int64_t r = 0;
  for (const NaflexInput& in : images) {
    const int64_t n = in.grid.patches();
    std::copy_n(in.patches.data<float>(), n * K, patches.data<float>() + r * K);
    std::copy_n(in.positions.data<float>(), n * 4, positions.data<float>() + r * 4);
    spans.push_back({n, int(in.grid.w * P), int(in.grid.h * P)});
    r += n;
  }
  return {std::move(patches), std::move(positions), std::move(spans)};
}

}  // namespace

std::vector<Encoding> encode_naflex(EncoderContext& ctx, const VitModel& model, std::span<const NaflexInput> images,
                                    const EncodeParams& params, Executor& exec) {
  const Gathered g = gather(model, images);
  return encode_batch(ctx, model, g.patches, g.positions, g.spans, params, exec);
}

std::vector<Encoding> encode_naflex(const VitModel& model, std::span<const NaflexInput> images, const EncodeParams& params,
                                    Executor& exec) {
  const Gathered g = gather(model, images);
  return encode_batch(model, g.patches, g.positions, g.spans, params, exec);
}

}  // namespace fovea
