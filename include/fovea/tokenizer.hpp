// fovea/tokenizer.hpp — the whole CPU pipeline in one call: pyramid → relevance → allocation
// → extraction, with per-stage timings, and the safetensors file it is saved as.
//
//   fovea::Executor exec;
//   fovea::Query q;  q.fixations.push_back({512, 300});
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("in.jpg"), q, {}, exec);
//   fovea::save_tokens("out.safetensors", t, q, {});
//
// The file holds: patches [N,3,P,P], positions [N,4] f32, levels [N] i32, rate_map
// [tiles_y, tiles_x] u8, relevance [tiles_y, tiles_x] f32, and __metadata__ (image size,
// budget, patch size, mode, query, dtype, normalisation, fovea version).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "fovea/allocate.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/relevance.hpp"

namespace fovea {

struct TokenizeParams {
  int patch_px = 16;
  bool uniform = false;  // the baseline: resize so a plain grid holds <= budget tokens
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
  RelevanceMap relevance;   // computed in both modes (the overlay shows it)
  Allocation allocation;    // foveated mode; in uniform mode only rate_map is filled
  std::optional<UniformGrid> uniform;
  TokenBatch batch;
  StageTimings timings;
  bool is_uniform() const { return uniform.has_value(); }
};

// Takes the image by value (move it in). Throws fovea::Error for bad parameters.
Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& exec);

// __metadata__ of the token file (all values are strings, as safetensors requires).
std::map<std::string, std::string> token_metadata(const Tokenization& t, const Query& query,
                                                  const TokenizeParams& params);
// Writes the token file atomically; `extra` metadata is merged in (e.g. "source").
void save_tokens(const std::string& path, const Tokenization& t, const Query& query,
                 const TokenizeParams& params, const std::map<std::string, std::string>& extra = {});

}  // namespace fovea
