// fovea/extract.hpp — from an allocation to the tensors a vision encoder eats, and back.
//
//   fovea::Executor exec;
//   fovea::ImageU8 img = fovea::load_image("photo.jpg");
//   fovea::PyramidU8 pyr = fovea::build_pyramid(img.clone(), {}, exec);
//   fovea::Allocation alloc = fovea::allocate(fovea::compute_relevance(pyr, 16, {}, {}, exec), {.budget_tokens = 273});
//   fovea::TokenBatch b = fovea::extract(pyr, alloc, {}, exec);
//   // b.patches [N, 3, P, P] float32 (CLIP-normalised), float16 or uint8
//   // b.positions [N, 4] float32: centre x, centre y, side (px, original image), level
//   fovea::ImageU8 seen = fovea::reconstruct(b, img.width(), img.height(), exec);
//
// A token's patch is sampled from its own mip level: level-ℓ samples [x·P, (x+1)·P) ×
// [y·P, (y+1)·P) of mip ℓ, clamped to the mip's edge (CLAMP_TO_EDGE). Level-0 patches are
// therefore the raw pixels. Gray images are replicated to 3 channels.
//
// Thread safety: the functions are pure (they read their arguments and write only their
// results) and may run on any number of threads; the structs are plain values.
#pragma once
#include "fovea/export.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/allocate.hpp"
#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/tensor.hpp"
#include "fovea/view.hpp"

FOVEA_API_BEGIN
namespace fovea {

struct Normalization {
  // Applied to float outputs as (x/255 − mean) / std. CLIP's defaults.
  std::array<float, 3> mean{0.48145466f, 0.4578275f, 0.40821073f};
  std::array<float, 3> std{0.26862954f, 0.26130258f, 0.27577711f};
  bool enabled = true;  // false: float outputs hold x/255 in [0, 1]
};

struct ExtractParams {
  DType dtype = DType::f32;  // f32, f16 or u8 (u8 is never normalised)
  Normalization norm;
};

// One window of the windows foveation (fovea/windows.hpp): a grid_x × grid_y grid of P×P tokens
// that the encoder reads as a standalone image of (grid_x·P) × (grid_y·P) pixels, showing `box`
// of the original image.
struct TokenWindow {
  enum class Kind : uint8_t {
    base,    // the whole image resized to the tower's native size (a VLM's base view)
    query,   // placed on a fixation or a region of the query
    detail,  // placed where the relevance map has the most to gain (no query, or budget left)
  };
  std::array<float, 4> box{};  // [x0, y0, x1, y1) in original-image pixels, inside the image
  int grid_x = 0, grid_y = 0;  // tokens per axis
  int level = -1;              // the mip level sampled (box side = grid·P·2^level); -1: resized
  float scale = 1;             // original pixels per window pixel (geometric mean of both axes)
  Kind kind = Kind::base;
  int64_t tokens() const { return int64_t(grid_x) * grid_y; }
};
std::string_view to_string(TokenWindow::Kind k);
// The windows as the token and embeddings files store them: window_boxes [W, 4] f32 (x0, y0, x1,
// y1 in image pixels), window_grids [W, 2] i32 (tokens across, down) and window_levels [W] f32
// (log2 of original pixels per window pixel: the mip level of every window but a resized base
// view).
std::map<std::string, Tensor> window_tensors_of(const std::vector<TokenWindow>& windows);

struct TokenBatch {
  Tensor patches;    // [N, 3, P, P]
  Tensor positions;  // [N, 4] float32: centre x px, centre y px, side px, level
  Tensor levels;     // [N] int32; for the uniform baseline, log2(side / P) rounded
  // Each token's box in original-image pixels [x0, y0, x1, y1) (not clipped to the image).
  // The uniform baseline's boxes are not quite square.
  std::vector<std::array<float, 4>> boxes;
  std::vector<int32_t> level_offsets;  // runs per level (foveated); {0, N} for uniform
  int patch_px = 0;
  ExtractParams params;
  // The windows foveation only (empty otherwise): the tokens are the windows' grids, window
  // after window, each in raster order, and each window is encoded as an image of its own.
  std::vector<TokenWindow> windows;
  Tensor window;   // [N] int32: the window of each token
  Tensor covered;  // [N] uint8: 1 when a finer window covers the token's box; such tokens give
                   // context to their own window's encode and are dropped from its output
  int64_t size() const { return patches.empty() ? 0 : patches.dim(0); }
  bool windowed() const { return !windows.empty(); }
  // Tokens handed on after encoding: size() minus the covered ones.
  int64_t kept() const;
};

// Throws Error(invalid_argument) for an unsupported dtype or an allocation that needs more
// levels than the pyramid has.
TokenBatch extract(const PyramidU8& pyramid, const Allocation& allocation,
                   const ExtractParams& params, Executor& exec);

// The uniform baseline: resize `image` to grid.resized_{width,height} (area filter) and cut
// it into a grid_x × grid_y grid of P×P patches, raster order. `image` is read in place.
TokenBatch extract_uniform(const ImageViewU8& image, const UniformGrid& grid, int patch_px,
                           const ExtractParams& params, Executor& exec);

// "What the model sees": every token's patch (de-normalised) stretched bilinearly over its
// box, clipped to the image. Full level-0 coverage reproduces the image exactly.
ImageU8 reconstruct(const TokenBatch& batch, int width, int height, Executor& exec);

}  // namespace fovea
FOVEA_API_END
