// fovea/viz.hpp — pictures that explain an allocation.
//
//   fovea::Executor exec;
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("in.jpg"), {}, {}, exec);
//   fovea::ImageU8 o = fovea::render_overlay(t.pyramid.level(0), t.relevance, t.batch);
//   fovea::save_png(o, "overlay.png");
//
// Thread safety: render_overlay and level_colour are pure functions; a VideoSheet is used by one
// thread at a time.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/image.hpp"
#include "fovea/relevance.hpp"
#include "fovea/view.hpp"

FOVEA_API_BEGIN
namespace fovea {

// The image in gray, tinted by a heat map of the relevance score (RelevanceMap::score, what the
// allocation follows: blue = low, red = high, on a log scale between the image's lowest and
// highest tile, since measured detail spans orders of magnitude), with every
// token's border drawn in its level's colour: 0 red, 1 orange, 2 yellow, 3 green, 4 cyan,
// 5 blue, 6 violet, 7+ white. A batch of the windows foveation shows the tokens handed on (not the
// covered ones) and every window's outline, three pixels wide, in its level's colour.
ImageU8 render_overlay(const ImageViewU8& image, const RelevanceMap& relevance, const TokenBatch& batch);

// RGB colour of a level in the overlay.
void level_colour(int level, uint8_t rgb[3]);

}  // namespace fovea

namespace fovea {

// A contact sheet of a video run: up to `cells` frames spread evenly over the whole run, each a
// thumbnail of the frame in gray with its tokens' borders in their level's colour, the tokens
// whose embedding (or patch) was recomputed for that frame tinted magenta, and a caption
// "index  t s  recomputed/tokens" (refresh frames: "R" before the counts, in magenta).
//
// Bounded memory whatever the length: frames are kept at a stride (1, 2, 4, ... of the frames
// seen); when 2·cells are kept, every other one is dropped and the stride doubles. So a run of
// n frames keeps between cells and 2·cells thumbnails, evenly spaced, and shows `cells` of them.
//
//   fovea::VideoSheet sheet;                       // in the frame loop, in order:
//   if (sheet.wants(n)) sheet.add_frame(n, frame_image, index, pts_s);   // n = 0, 1, 2, ...
//   sheet.add_tokens(n, batch, recomputed, refresh);  // when frame n's tokens are known
//   fovea::save_png(sheet.render(), "sheet.png");
class VideoSheet {
 public:
  explicit VideoSheet(int cells = 12, int thumb_width = 320);
  // Whether the n-th frame of the run (0-based, in order) would be kept.
  bool wants(int64_t n) const;
  // Keeps a thumbnail of the n-th frame (the image the tokens' boxes refer to). Ignored unless
  // wants(n).
  void add_frame(int64_t n, const ImageViewU8& frame, int64_t index, double pts_s, Executor& exec);
  // The n-th frame's tokens; ignored unless its frame was kept. recomputed: one entry per token
  // (empty: none marked).
  void add_tokens(int64_t n, const TokenBatch& batch, const std::vector<uint8_t>& recomputed, bool refresh);
  int64_t kept() const;
  // The sheet: up to `cells` kept frames with tokens, 4 per row (fewer for fewer frames).
  // An empty image when no frame was kept.
  ImageU8 render() const;
  // The frame indices render() shows, in order.
  std::vector<int64_t> shown_frames() const;

 private:
  struct Cell {
    int64_t n = 0, index = 0;
    double pts_s = 0;
    float scale = 1;
    ImageU8 thumb;     // RGB, already drawn on once the tokens came
    bool drawn = false;
    int64_t tokens = 0, recomputed = 0;
    bool refresh = false;
  };
  int cells_, thumb_width_;
  int64_t stride_ = 1;
  std::vector<Cell> kept_;
  void decimate();
  std::vector<const Cell*> shown() const;
};

}  // namespace fovea
FOVEA_API_END
