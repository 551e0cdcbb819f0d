// fovea/tokenize.hpp — the whole pipeline in one call: pyramid → relevance → allocation →
// extraction, with per-stage timings, and the safetensors file it is saved as.
//
//   fovea::Executor exec;
//   fovea::Query q;
//   q.fixations.push_back({512, 300});
//   fovea::TokenizeParams params;   // budget 273, 16-px patches, CLIP normalisation
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("in.jpg"), q, params, exec);
//   fovea::save_tokens("out.safetensors", t, q, params);
//
// The two stages that touch pixels (build the pyramid, sample the patches) are pluggable:
// tokenize(..., stages) runs them through a TokenizeStages, e.g. the Vulkan backend's
// (VulkanBackend::tokenize_stages); everything else (checks, order, relevance, allocation,
// timings) is this one function for every backend.
//
// The file holds: patches [N,3,P,P], positions [N,4] f32, levels [N] i32, rate_map
// [tiles_y, tiles_x] u8, relevance [tiles_y, tiles_x] f32, and __metadata__ (image size,
// budget, patch size, mode, query, dtype, normalisation, fovea version). The windows foveation
// adds window [N] i32 and covered [N] u8 per token, and per window window_boxes [W, 4] f32
// (x0, y0, x1, y1 in image pixels), window_grids [W, 2] i32 (tokens across, down) and
// window_levels [W] f32 (log2 of original pixels per window pixel; an integer mip level for every
// window but a resized base view). Its N counts every encoded token; the covered ones are
// dropped after encoding (metadata tokens_kept).
//
// Thread safety: tokenize() uses only its arguments (the image, the query, the Executor and,
// when given, the stages object): calls on different inputs may run at once, each with its own
// Executor (one Executor shared by threads runs their parallel loops one after another). A
// TokenizeStages object that keeps state between its stages (the Vulkan backend's) serves one
// tokenize() at a time. Tokenization is a plain value.
#pragma once
#include "fovea/export.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fovea/allocate.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/relevance.hpp"
#include "fovea/view.hpp"
#include "fovea/windows.hpp"

FOVEA_API_BEGIN
namespace fovea {

struct TokenizeParams {
  int patch_px = 16;
  bool uniform = false;  // the baseline: resize so a plain grid holds <= budget tokens
  // How the budget becomes tokens when not uniform: one sequence of mixed mip levels (alloc), or
  // native-size windows (windows; fovea/windows.hpp) for a frozen tower. The budget is
  // alloc.budget_tokens in every mode (windows.budget_tokens is ignored).
  Foveation foveation = Foveation::mixed;
  WindowParams windows;
  AllocParams alloc;
  RelevanceParams relevance;
  ExtractParams extract;
};

struct StageTimings {
  double pyramid_ms = 0, relevance_ms = 0, allocate_ms = 0, extract_ms = 0;
  double total_ms() const { return pyramid_ms + relevance_ms + allocate_ms + extract_ms; }
};

struct Tokenization {
  PyramidU8 pyramid;        // level 0 is the input image
  RelevanceMap relevance;   // computed in every mode (the overlay shows it)
  Allocation allocation;    // mixed foveation; in uniform and windows modes only rate_map,
                            // budget_tokens and max_level are filled
  std::optional<UniformGrid> uniform;
  std::optional<WindowPlan> windows;  // the windows foveation
  TokenBatch batch;
  StageTimings timings;
  bool is_uniform() const { return uniform.has_value(); }
  bool is_windowed() const { return windows.has_value(); }
  // "uniform", "foveated" (mixed) or "windows": the token file's `mode`.
  const char* mode() const { return is_uniform() ? "uniform" : is_windowed() ? "windows" : "foveated"; }
};

// The pixel stages of tokenize(). This base class runs them on the CPU (fovea::build_pyramid,
// fovea::extract on `exec`); a backend overrides both and may keep state between them (the
// Vulkan backend keeps the pyramid on the device for the sampling). tokenize() calls
// build_pyramid once, then, in foveated mode, extract once with the pyramid it returned. The
// uniform baseline's patches are always cut on the CPU (extract_uniform, from level 0).
class TokenizeStages {
 public:
  TokenizeStages() = default;
  virtual ~TokenizeStages() = default;
  TokenizeStages(const TokenizeStages&) = delete;
  TokenizeStages& operator=(const TokenizeStages&) = delete;

  // fovea::build_pyramid's contract: level 0 is `image` (moved in), params.max_levels levels.
  // Relevance and allocation read this pyramid on the CPU.
  virtual PyramidU8 build_pyramid(ImageU8 image, const PyramidParams& params, Executor& exec);
  // The same for the caller's pixels (tokenize(ImageViewU8, ...)): the CPU borrows `image` as
  // level 0 (fovea::build_pyramid(ImageViewU8)); a device backend copies it for its upload.
  virtual PyramidU8 build_pyramid(const ImageViewU8& image, const PyramidParams& params, Executor& exec);
  // fovea::extract's contract: the allocation's tokens sampled from `pyramid`.
  virtual TokenBatch extract(const PyramidU8& pyramid, const Allocation& allocation, const ExtractParams& params,
                             Executor& exec);
};

// Takes the image by value (move it in). Throws fovea::Error for bad parameters, and whatever
// a stage throws (e.g. Error(device)). Uses the CPU stages.
Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& exec);
// The same pipeline with the pixel stages of `stages`.
Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& exec,
                      TokenizeStages& stages);
// Reads the caller's pixels in place (fovea/view.hpp: interleaved HWC as numpy arrays and video
// frames hold them, or planar): nothing copies the whole image. The result's pyramid borrows
// `image` as its level 0, so the buffer must outlive the Tokenization and stay unchanged
// while tokenize runs. Output is identical to tokenize(to_image(image), ...).
Tokenization tokenize(const ImageViewU8& image, const Query& query, const TokenizeParams& params, Executor& exec);
Tokenization tokenize(const ImageViewU8& image, const Query& query, const TokenizeParams& params, Executor& exec,
                      TokenizeStages& stages);

// __metadata__ of the token file (all values are strings, as safetensors requires).
std::map<std::string, std::string> token_metadata(const Tokenization& t, const Query& query,
                                                  const TokenizeParams& params);
// The token file's bytes (what save_tokens writes); `extra` metadata is merged in.
std::vector<uint8_t> serialize_tokens(const Tokenization& t, const Query& query, const TokenizeParams& params,
                                      const std::map<std::string, std::string>& extra = {});
// Writes the token file atomically; `extra` metadata is merged in (e.g. "source").
void save_tokens(const std::string& path, const Tokenization& t, const Query& query,
                 const TokenizeParams& params, const std::map<std::string, std::string>& extra = {});

}  // namespace fovea
FOVEA_API_END
