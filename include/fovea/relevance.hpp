// fovea/relevance.hpp — one score per finest tile: where tokens should go.
//
//   fovea::Executor exec;
//   fovea::PyramidU8 pyr = fovea::build_pyramid(fovea::load_image("photo.jpg"), {}, exec);
//   fovea::Query q;
//   q.fixations.push_back({512, 300});                        // px in the original image
//   fovea::RelevanceMap rel = fovea::compute_relevance(pyr, 16, q, {}, exec);
//   int tx = 3, ty = 2;                                       // a finest tile
//   float s = rel.score[ty * rel.grid.tiles_x + tx];
//
// Two parts, both read by the allocator (allocate.hpp):
//   * detail (rate–distortion, RelevanceMap::detail): per tile and mip level j, the measured
//     squared error of mip j+1 against mip j: what a token one level coarser loses there. It is
//     weighted by (1 + w_query·query)^detail_focus (the query focuses the error that counts; and
//     each level's detail is capped at its largest value in the query's focus, the tiles whose
//     query term is at least half its peak, so sharper content beside what is looked at cannot
//     pull the fovea off it) and,
//     with no query, by max(2^(−fine_bias·j), fine_bias_floor) (fine detail such as small text
//     over smooth structure, without starving large regions at small budgets);
//   * prior = floor + w_info·information + w_saliency·saliency + w_query·query, each term in
//     [0, 1], a content-blind prior (entropy and saliency are off by default).
// score = prior + Σ_j detail[j]: everything the allocator gains on the tile by refining it from
// the coarsest level to level 0 (at the default sharpness 1, where the prior's gains over the
// levels sum to the prior). It is the map to look at (the overlay, the token file's `relevance`
// tensor): tiles with a higher score get finer tokens. The terms of the prior:
//   * information: Shannon entropy of the tile's luma histogram (`entropy_bins` bins, over the
//     tile's pixels at pyramid level `stats_level`, 1 by default), divided by
//     log2(entropy_bins), so a flat tile scores 0 and a tile using every bin equally 1;
//   * saliency: centre-surround colour contrast on the grid of tile means (the tile-resolution
//     mip): |G(σ=1) ∗ I − G(σ=s) ∗ I| in an opponent colour space, summed over surround scales
//     s ∈ {2, 4, 8} tiles (each Gaussian approximated by three box blurs), then divided by its
//     maximum or 16 grey levels, whichever is larger (a coarse Itti–Koch / frequency-tuned
//     saliency; cheap because it runs on the tile grid, not on pixels);
//   * query: the strongest of
//       - fixations, through cortical magnification M(e) = M0 / (e + e0) with e the distance
//         from the fixation to the tile, in units of the image's longer side. The term is
//         M(e)/M(0) = e0 / (e + e0); with the allocator's default sharpness (token side ∝
//         1/relevance) token size then grows linearly with eccentricity, as receptive fields do.
//         When the fixated content stands out (fine detail ≥ 2× the image's mean), e is a
//         geodesic that runs cheaply along rows of like content (`fixation_spread`) and dearly
//         into unlike content, and the scale is half that content's height: the fovea takes the
//         shape of a line of text. A radius (`Fixation::radius_px`) makes it a disc;
//       - regions: 1 inside the box; outside it s / (d + s) with d the distance in pixels from
//         the box and s = min(e0 · longer side, half the box's shorter side): the box says how
//         far the interest extends, so a small box on a large image falls off quickly;
//       - an embedding: cosine similarity of `embedding` with per-tile features from the
//         `tile_features` hook (filled by the encoder), clamped at 0, divided by its maximum.
// With an empty query the map is purely bottom-up.
//
// Thread safety: the functions are pure and may run on any number of threads; the query
// hook (RelevanceParams::tile_features) is called on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/grid.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/tensor.hpp"

namespace fovea {

struct Fixation {
  float x_px = 0, y_px = 0;  // original-image pixels
  float weight = 1;          // scales this fixation's term (the query term is the max over all)
  // Size hint: the radius (px) of what is looked at. 0: unknown, the falloff starts at the
  // fixation with scale e0 · long side. > 0: full inside the disc, falling off outside it with
  // scale min(e0 · long side, radius), as a region does.
  float radius_px = 0;
};

struct Region {
  float x0_px = 0, y0_px = 0, x1_px = 0, y1_px = 0;  // [x0, x1) × [y0, y1), original pixels
  float weight = 1;
};

struct Query {
  std::vector<Fixation> fixations;
  std::vector<Region> regions;
  std::vector<float> embedding;  // empty: none
  bool empty() const { return fixations.empty() && regions.empty() && embedding.empty(); }
};

// Per-tile features for the embedding term: returns [tiles_y * tiles_x, D] float32, row-major
// in raster tile order. D must equal the query embedding's length.
using TileFeatureFn = std::function<Tensor(const PyramidU8&, const TileGrid&)>;

struct RelevanceWeights {
  // Entropy and saliency are off by default: the detail term measures what they estimated (where
  // a coarser token loses content), better, at a quarter of their cost. Each is computed only
  // when its weight is > 0.
  float information = 0.0f;
  float saliency = 0.0f;
  float query = 8.0f;
  // Every tile's share of the budget regardless of content: keeps every score > 0 (the periphery
  // still gets coarse tokens) and, against the detail term, how evenly a budget spreads.
  float floor = 0.5f;
  // Rate–distortion: weight of the measured detail energy (see RelevanceMap::detail). 0 turns
  // it off and the allocation follows the prior alone.
  float detail = 1.0f;
};

struct RelevanceParams {
  RelevanceWeights weights;
  float e0 = 0.05f;        // half-saturation eccentricity, in units of the image's longer side
  int entropy_bins = 16;   // 2..256
  // Pyramid level the tile statistics (entropy, colour means) are measured on, 0..3. Level 1,
  // the default, sees each P x P tile as (P/2)^2 half-resolution pixels: the 2x2 average
  // removes pixel noise that would otherwise read as information, strokes of 2 px and more
  // survive, and it reads a quarter of the pixels. Lowered automatically when P is not a
  // multiple of 2^level or the pyramid is shorter (tiny images).
  int stats_level = 1;
  // How a fixation takes the shape of what it looks at, in (0, 1]: crossing a tile as detailed
  // as the fixated content costs `fixation_spread` of the distance of crossing a flat one, so
  // the fovea extends along a line of text instead of a fixed disc. 1: purely radial.
  float fixation_spread = 0.25f;
  // How much the query focuses the detail term: detail is weighted by (1 + w_query·query)^focus,
  // in [0, 4]. 3: the error near the query counts ~700 times the periphery's, so the query
  // decides where tokens go and the detail decides their shape there.
  float detail_focus = 3.0f;
  // Fine-detail bias of the bottom-up allocation (an empty query; with a query it is 0), in
  // [0, 4]: the detail gain of mip j is weighted by 2^(−fine_bias·j). 0: plain squared error
  // over the image (best whole-image PSNR at every budget); 2: every mip level's error per
  // sample counts the same, so fine detail (text strokes) wins over smooth large structures.
  float fine_bias = 1.5f;
  // The least weight the fine bias gives a level's error, in [0, 1]: 2^(−fine_bias·j) is
  // raised to it, so coarse structure (large smooth regions at their coarsest level) still
  // counts and a small budget is not all spent on fine detail. 0: no floor; 1: no bias. With the
  // default 0.125 the whole-image PSNR at B = 64 went from −0.03 to +0.39 dB over uniform's on
  // the eval's 48 scenes while text under 20 px read better at B = 273 (docs/explanation/relevance.md).
  float fine_bias_floor = 0.125f;
  TileFeatureFn tile_features;  // required when the query has an embedding
};

struct RelevanceMap {
  TileGrid grid;
  // All [tiles_y * tiles_x], raster order. `score` = prior + Σ_j detail[j] (what the
  // allocation follows, see above); `prior` the weighted sum of the terms below, which are
  // given before weighting, each in [0, 1] (query is all zeros without a query).
  std::vector<float> score;
  std::vector<float> prior;
  std::vector<float> information;
  std::vector<float> saliency;
  std::vector<float> query;
  // Rate–distortion, [levels − 1][tiles]: detail[j][t] is what the allocator gains, on tile t,
  // by sampling it from mip j instead of mip j+1: the squared error (summed over channels and
  // the tile's level-0 pixels) between mip j and mip j+1 upsampled, divided by the image's mean
  // total per tile (so the image's detail sums to 1 a tile on average), times
  // weights.detail · (1 + weights.query · query[t]): the query focuses the error that counts.
  // Empty when weights.detail is 0.
  std::vector<std::vector<float>> detail;
  std::vector<float> detail_total;  // [tiles] Σ_j of the normalised energy, before weighting
  float detail_scale = 0;           // 1 / the normaliser (per unit of squared grey level)
};

// Throws Error(invalid_argument) for a bad patch size, non-finite query coordinates, an
// inverted region, an embedding without a tile_features hook or of the wrong length.
RelevanceMap compute_relevance(const PyramidU8& pyramid, int patch_px, const Query& query,
                               const RelevanceParams& params, Executor& exec);

// ---- across video frames ---------------------------------------------------------------------
// What compute_relevance measures on the pixels and a video session keeps from frame to frame:
// the detail energy per tile and level (a pass over the pyramid's fine levels, most of the
// cost), before any weighting.
struct RelevanceCache {
  std::vector<std::vector<float>> energy;  // [levels − 1][tiles]
  int width = 0, height = 0, channels = 0, patch_px = 0;
  int levels = 0;                          // 0: nothing kept
};

// compute_relevance, bit for bit, on a pyramid that differs from the one `cache` was last filled
// from only inside the finest tiles `changed` marks (one entry per tile of the patch_px grid,
// raster order): their detail energies, and those of the tiles whose samples reach into them,
// are measured again, the others kept. An empty `changed`, or a cache filled from another size,
// patch, channel or level count, measures everything. The cache is updated (emptied when the
// energy is not needed: detail weight 0 and no shaped fixation). Throws as compute_relevance,
// and Error(invalid_argument) when `changed` is neither empty nor one entry per tile.
RelevanceMap compute_relevance(const PyramidU8& pyramid, int patch_px, const Query& query,
                               const RelevanceParams& params, Executor& exec, RelevanceCache& cache,
                               std::span<const uint8_t> changed);

// Human-readable summary of a query for metadata and logs, e.g. "fixation(512,300)".
std::string describe(const Query& query);

// The fixations (their disc, with a radius) and regions of `query` that lie wholly outside a
// width × height image, described as describe() does: most often coordinates given in another
// resolution, or before EXIF orientation. They are legal (a fixation off the image still pulls
// the fovea to the nearest border), so callers warn rather than fail.
std::vector<std::string> query_outside(const Query& query, int width, int height);

}  // namespace fovea
