// fovea/allocate.hpp — spend a token budget where relevance is: a quadtree over finest tiles.
//
//   fovea::Executor exec;
//   fovea::PyramidU8 pyr = fovea::build_pyramid(fovea::load_image("photo.jpg"), {}, exec);
//   fovea::RelevanceMap relevance = fovea::compute_relevance(pyr, 16, fovea::Query{}, {}, exec);
//   fovea::Allocation a = fovea::allocate(relevance, {.budget_tokens = 273});
//   for (const fovea::Token& tok : a.layout.tokens) { /* sorted by level */ (void)tok; }
//   int level_of_tile_0 = a.rate_map.level[0];   // per finest tile: the level covering it
//
// The algorithm: start from the coarsest tiling (every node of the level-L grid, L =
// max_level), split nodes that have a single child for free, then repeatedly split the node
// with the highest priority. Splitting a level-ℓ node gains
//        gain(ℓ) = (sum of prior over the node's tiles) · 2^(−α·ℓ)      the prior (query, floor)
//                + (sum of detail[ℓ−1] over the node's tiles)          the distortion it removes
// (RelevanceMap::detail: the measured error of mip ℓ against mip ℓ−1, rate–distortion), and
//        priority = max over d = 1..lookahead of (gain(ℓ) + … + gain(ℓ−d+1)) / (tokens added)
// so detail that only shows at fine levels (text strokes) is reached even when the first split
// alone gains little. α = 2 − 1/sharpness: on the prior alone this is greedy descent on
// Σ_tiles prior · D(side), whose continuous optimum makes a token's side proportional to
// prior^(−sharpness): sharpness 1 (the default) gives side ∝ 1/prior, so a fixation's linear
// cortical magnification maps to token size growing linearly with eccentricity; sharpness 0.5
// makes token *density* proportional to the prior. An empty `detail` gives exactly that. (The
// prior is RelevanceMap::prior; a map whose `prior` is empty, e.g. one built by hand, uses
// `score` as its prior.) Every
// node's priority is fixed when it is created, and it stops at the first split that no longer
// fits the budget, so
//   * the token count never exceeds the budget and lands within 2 of it (a split costs at
//     most 3 tokens) unless every tile is already at level 0;
//   * the splits made for budget B are a prefix of those for any B' > B: a larger budget
//     never lowers the resolution of any tile.
// Ties break by level, then y, then x, so the result is deterministic.
//
// Thread safety: allocate() and uniform_grid() are pure functions of their arguments, safe to
// call from any number of threads; the structs are plain values (concurrent reads are safe).
#pragma once
#include "fovea/export.hpp"

#include <array>
#include <cstdint>
#include <vector>

#include "fovea/grid.hpp"
#include "fovea/relevance.hpp"

FOVEA_API_BEGIN
namespace fovea {

// One token: node (x, y) of the level-ℓ grid, covering finest tiles
// [x·2^ℓ, (x+1)·2^ℓ) × [y·2^ℓ, (y+1)·2^ℓ) clipped to the grid.
struct Token {
  int32_t x = 0, y = 0;
  int32_t level = 0;
  bool operator==(const Token&) const = default;
};

struct TokenLayout {
  std::vector<Token> tokens;           // sorted by (level, y, x)
  std::vector<int32_t> level_offsets;  // num_levels + 1 entries
  int num_levels() const { return level_offsets.empty() ? 0 : int(level_offsets.size()) - 1; }
  int64_t count_at(int level) const { return level_offsets[level + 1] - level_offsets[level]; }
};

// The variable-rate shading image of the allocation: one texel per finest tile.
struct RateMap {
  TileGrid grid;
  std::vector<uint8_t> level;  // [tiles_y * tiles_x], raster order

  // VK_KHR_fragment_shading_rate attachment texels (and D3D12_SHADING_RATE values, which use
  // the same encoding): (log2(w) << 2) | log2(h). Level 0 → 1×1 (0), 1 → 2×2 (5),
  // 2 and above → 4×4 (10), the largest rate either API defines.
  std::vector<uint8_t> shading_rate_codes() const;
};

struct AllocParams {
  int budget_tokens = 273;
  // Coarsest level of the quadtree. -1: the coarsest level whose token still fits inside the
  // image, the largest L >= 0 with 2^L·P <= the shorter side (an image shorter than P gets 0).
  // A square image then starts from 4 tokens (1 when its side is exactly 2^L·P), a w:h one
  // from about 4·w/h; a coarser token would sample mostly edge padding. An explicit level is
  // clamped to the first at which the grid is a single node.
  int max_level = -1;
  // How strongly token size follows relevance: side ∝ relevance^(−sharpness). In [0.5, 4].
  float sharpness = 1.0f;
  // How many levels deep a split's gain is looked ahead, in [1, 8]: a node's priority is its
  // best gain per extra token over splitting it 1..lookahead levels deep at once.
  int lookahead = 3;
};

struct Allocation {
  RateMap rate_map;
  TokenLayout layout;
  int budget_tokens = 0;
  int max_level = 0;           // the L actually used
  int64_t coarsest_tokens = 0;  // the smallest budget this image accepts at this L
};

// Throws Error(invalid_argument) when the budget is below the coarsest tiling (the message
// says how many tokens that is), max_level is outside [-1, 24], lookahead outside [1, 8], or
// a prior, score or detail value is negative or not finite.
Allocation allocate(const RelevanceMap& relevance, const AllocParams& params);

int resolve_max_level(const TileGrid& grid, int max_level);

// How a layout covers the finest tiles: the check any consumer of an allocation can run (the
// CLI's --json coverage, the tests, a caller that edits a layout, e.g. video hysteresis).
// Exact tiling means every tile is covered by exactly one token, every token lies inside its
// level's grid, and the rate map names the covering token's level for every tile.
struct TilingReport {
  int64_t tiles = 0;
  int64_t covered = 0;              // tiles covered by at least one token
  int64_t overlapping = 0;          // tiles covered by more than one
  int64_t outside = 0;              // tokens whose node is outside their level's grid
  int64_t rate_map_mismatches = 0;  // tiles whose rate-map level is not the covering token's
  std::vector<double> area_per_level;  // share of the tiles at each level (from the rate map)
  bool exact() const {
    return covered == tiles && overlapping == 0 && outside == 0 && rate_map_mismatches == 0;
  }
};
TilingReport check_tiling(const Allocation& allocation);

// The uniform baseline at the same budget: what a standard VLM does. The image is resized to
// (grid_x·P) × (grid_y·P) with the largest grid_x·grid_y ≤ budget that keeps the aspect
// ratio (floor of the ideal scale on each axis, at least 1); an image whose native grid
// ceil(w/P) × ceil(h/P) already fits is not downscaled, only resized to the next multiple
// of P.
struct UniformGrid {
  int grid_x = 0, grid_y = 0;
  int resized_width = 0, resized_height = 0;
  int64_t tokens() const { return int64_t(grid_x) * grid_y; }
};
UniformGrid uniform_grid(int width, int height, int patch_px, int budget_tokens);

}  // namespace fovea
FOVEA_API_END
