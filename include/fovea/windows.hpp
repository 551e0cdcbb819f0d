// fovea/windows.hpp — foveation a frozen tower can read: native-size windows.
//
//   fovea::Executor exec;
//   fovea::PyramidU8 pyr = fovea::build_pyramid(fovea::load_image("photo.jpg"), {}, exec);
//   fovea::Query q;
//   q.fixations.push_back({.x_px = 300, .y_px = 200});
//   fovea::RelevanceMap rel = fovea::compute_relevance(pyr, 16, q, {}, exec);
//   fovea::WindowPlan plan = fovea::plan_windows(rel, q, {.budget_tokens = 392, .grid = 14});
//   fovea::TokenBatch b = fovea::extract_windows(pyr, plan, {}, exec);   // b.windows, b.window, b.covered
//
// A ViT trained at one native size (S×S pixels, S = G·P: 224 for a 14×14 grid of 16-px patches)
// computes features that depend on the scale of every patch and on the window around it. One
// sequence that mixes mip levels (the `mixed` foveation: allocate.hpp's quadtree) is outside
// what a frozen tower was trained on, and its features drift. The windows foveation spends the
// budget on sequences the tower knows:
//   * a base view: the whole image resized (squashed) to S×S, as a VLM's base view;
//   * finer windows: S×S pixels of mip level ℓ, i.e. S·2^ℓ original pixels square, each encoded
//     as a standalone image, so its tokens are what the tower computes for that window.
// Tokens of a coarser window whose box lies wholly inside a finer native window are *covered*:
// they are encoded (their window needs them as context) and dropped from the output, so the
// tokens handed on are at most the budget (keep_covered hands them on too).
//
// Where the windows go, in this order, each while the tokens handed on stay within the budget:
//   1. the query: a level-0 window centred on every fixation and on every region's centre
//      (clamped into the image; a focus inside a window already placed at its level is skipped);
//   2. the relevance map: greedily, the window (any level finer than the base view, centred on a
//      focus or at any tile position) with the largest gain per token added. A tile's gain is
//      what the relevance stage measured: prior · (levels gained) + Σ detail[j] over the mip
//      levels j it newly resolves (RelevanceMap::detail, rate–distortion). With no query this is
//      the only step: windows land on the most detailed parts of the image. With no query the
//      candidates also include *strips*: level-0 windows of G or ⌈G/2⌉ tokens across and 2, 3 or 4
//      down, on the tile lattice, whose detail is at least twice that of the bands as tall above
//      and below them together (a line: of text, most often). A chosen strip grows sideways, up to
//      G tokens, while the next tile column holds a tenth of its mean column's gain. A strip is
//      encoded as a standalone image of its own size (positions interpolated, as the tower's own
//      code does for a non-square image) and covers nothing: the base view's tokens under it are
//      handed on too, so a strip adds a line's full-resolution pixels without taking anything from
//      the whole-image features;
//   3. with no query, never coarser than uniform where the windows resolve less: the windows of
//      step 2 take their share of the image's detail (of what seeing every tile at level 0 would
//      gain) all the way to full resolution; a uniform grid of the budget (uniform_grid) takes
//      every tile (log2 b − log2 u) / log2 b of the way there (b, u: the base view's and the
//      grid's image pixels per pixel). When the detail is spread so evenly that the windows'
//      share is the smaller (a page of text, a texture), the plan is that grid alone: one base
//      "view" of grid_x × grid_y tokens, the uniform baseline's tokens (positions interpolated).
// A native window of level ℓ must fit inside the image (S·2^ℓ ≤ both sides) and be at least half
// a level finer than the base view. Its origin lies on the 2^ℓ-pixel lattice, so its pixels are
// exactly mip ℓ's (a box filter of the original). A budget below G² gives a base view of
// g×g tokens, g = ⌊√budget⌋ (positions interpolated, as a uniform grid), and no window.
//
// Thread safety: pure functions of their arguments; the structs are plain values.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/allocate.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/relevance.hpp"

FOVEA_API_BEGIN
namespace fovea {

// How a budget becomes tokens.
enum class Foveation : uint8_t {
  mixed,    // one sequence mixing mip levels (allocate.hpp): for towers trained on such sequences
  windows,  // native-size windows (this header): for frozen towers
};
std::string_view to_string(Foveation f);
// "mixed" or "windows"; throws Error(invalid_argument) naming both.
Foveation parse_foveation(std::string_view s);

struct WindowParams {
  int budget_tokens = 392;  // tokens handed on (after dropping covered ones), >= 1
  int grid = 14;            // G: the tower's native grid (tokens per side), 1..256
  bool keep_covered = false;  // hand on covered tokens too (the budget then bounds them as well)
  int max_windows = 64;       // at most this many windows (the base view included), 1..4096
};

struct WindowPlan {
  // The base view first, then the others in the order chosen. Native windows are grid × grid
  // tokens; strips (no query) level 0 and narrower; a uniform fallback is the base view alone.
  std::vector<TokenWindow> windows;
  std::vector<std::vector<uint8_t>> covered;  // [window][token], raster order within the window
  int patch_px = 0;
  int image_width = 0, image_height = 0;
  int64_t encoded_tokens() const;  // Σ windows' tokens: what the encoder reads
  int64_t kept_tokens() const;     // handed on: encoded minus covered (all of them with keep_covered)
  // The mip levels the windows sample (max level + 1; 1 when only the base view).
  int pyramid_levels() const;
  // The variable-rate map of the plan: per finest tile, the level (log2 of the scale, rounded)
  // of the finest window whose kept tokens cover the tile's centre.
  RateMap rate_map() const;
};

// Throws Error(invalid_argument) for parameters out of range.
WindowPlan plan_windows(const RelevanceMap& relevance, const Query& query, const WindowParams& params);

// The plan's tokens: the base view resized from level 0 (area filter), every other window cut
// from its mip level. Positions, levels and boxes are in original-image pixels, as a mixed
// batch's; `windows`, `window` and `covered` describe the windows. Throws Error(invalid_argument)
// when the pyramid is not the plan's image or has fewer levels than the plan samples.
TokenBatch extract_windows(const PyramidU8& pyramid, const WindowPlan& plan, const ExtractParams& params,
                           Executor& exec);

// The mip levels a windows plan for this image may sample, with a G-token native grid and
// P-px patches: enough for the finest windows and for the relevance's detail up to the base
// view's scale (what tokenize builds its pyramid with).
int windows_pyramid_levels(int width, int height, int patch_px, int grid);

}  // namespace fovea
FOVEA_API_END
