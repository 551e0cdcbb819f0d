#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "fovea/viz.hpp"

namespace fovea {

void level_colour(int level, uint8_t rgb[3]) {
  static const uint8_t kPalette[8][3] = {{230, 25, 25},  {255, 140, 0},  {255, 225, 25}, {60, 200, 75},
                                         {70, 220, 230}, {40, 90, 240}, {170, 60, 230}, {255, 255, 255}};
  const int i = std::clamp(level, 0, 7);
  std::copy_n(kPalette[i], 3, rgb);
}

namespace {
// A compact blue → cyan → yellow → red ramp for t in [0, 1].
void heat(float t, float rgb[3]) {
  t = std::clamp(t, 0.0f, 1.0f);
  const float r = std::clamp(1.5f - std::fabs(4.0f * t - 3.0f), 0.0f, 1.0f);
  const float g = std::clamp(1.5f - std::fabs(4.0f * t - 2.0f), 0.0f, 1.0f);
  const float b = std::clamp(1.5f - std::fabs(4.0f * t - 1.0f), 0.0f, 1.0f);
  rgb[0] = 255 * r;
  rgb[1] = 255 * g;
  rgb[2] = 255 * b;
}
}  // namespace

ImageU8 render_overlay(const ImageViewU8& image, const RelevanceMap& relevance, const TokenBatch& batch) {
  const int W = image.width(), H = image.height();
  ImageU8 out(W, H, 3);
  const TileGrid& g = relevance.grid;
  // The score is the prior (floor + query) plus the measured detail, which is heavy-tailed (a
  // few edges or lines of text hold most of it): a log scale shows both the fovea's falloff
  // and the periphery's content. A map with zeros (built by hand) falls back to linear.
  float lo = 0, hi = 0;
  if (!relevance.score.empty()) {
    lo = *std::min_element(relevance.score.begin(), relevance.score.end());
    hi = *std::max_element(relevance.score.begin(), relevance.score.end());
  }
  const bool log_scale = lo > 0 && hi > lo;
  const float span = log_scale ? std::log(hi / lo) : hi > lo ? hi - lo : 1.0f;
  std::vector<float> position(relevance.score.size());
  for (size_t t = 0; t < position.size(); ++t) {
    const float v = relevance.score[t];
    position[t] = log_scale ? std::log(v / lo) / span : (v - lo) / span;
  }
  for (int y = 0; y < H; ++y) {
    const int ty = std::min(g.tiles_y - 1, y / g.patch_px);
    for (int x = 0; x < W; ++x) {
      const int tx = std::min(g.tiles_x - 1, x / g.patch_px);
      float gray;
      if (image.channels() == 3)
        gray = 0.299f * image.at(0, y, x) + 0.587f * image.at(1, y, x) + 0.114f * image.at(2, y, x);
      else
        gray = image.at(0, y, x);
      float h[3];
      heat(position[size_t(ty) * g.tiles_x + tx], h);
      for (int c = 0; c < 3; ++c)
        out.at(c, y, x) = static_cast<uint8_t>(std::lround(0.55f * gray + 0.45f * h[c]));
    }
  }
  // Borders: the top and left edge of every box (right/bottom belong to the neighbours),
  // plus the image's own right and bottom edge. `thick` widens the line inwards.
  auto border = [&](const std::array<float, 4>& b, int level, int thick) {
    uint8_t col[3];
    level_colour(level, col);
    for (int k = 0; k < thick; ++k) {
      const int x0 = std::clamp(static_cast<int>(std::lround(b[0])) + k, 0, W - 1);
      const int y0 = std::clamp(static_cast<int>(std::lround(b[1])) + k, 0, H - 1);
      const int x1 = std::clamp(static_cast<int>(std::lround(b[2])) - 1 - k, 0, W - 1);
      const int y1 = std::clamp(static_cast<int>(std::lround(b[3])) - 1 - k, 0, H - 1);
      const bool edge_r = thick > 1 || x1 == W - 1, edge_b = thick > 1 || y1 == H - 1;
      for (int c = 0; c < 3; ++c) {
        for (int x = x0; x <= x1; ++x) {
          out.at(c, y0, x) = col[c];
          if (edge_b) out.at(c, y1, x) = col[c];
        }
        for (int y = y0; y <= y1; ++y) {
          out.at(c, y, x0) = col[c];
          if (edge_r) out.at(c, y, x1) = col[c];
        }
      }
    }
  };
  if (!batch.windowed()) {
    for (int64_t i = 0; i < batch.size(); ++i) border(batch.boxes[i], batch.levels.data<int32_t>()[i], 1);
    return out;
  }
  // Windows: the kept tokens of the coarsest window first, so finer borders stay on top; then every
  // window's outline, three pixels wide, in its level's colour.
  std::vector<size_t> order(batch.windows.size());
  std::vector<int64_t> first(batch.windows.size() + 1, 0);
  for (size_t w = 0; w < order.size(); ++w) order[w] = w, first[w + 1] = first[w] + batch.windows[w].tokens();
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return batch.windows[a].scale > batch.windows[b].scale; });
  const uint8_t* covered = batch.covered.data<uint8_t>();
  for (size_t w : order)
    for (int64_t i = first[w]; i < std::min(first[w + 1], batch.size()); ++i)
      if (!covered[i]) border(batch.boxes[i], batch.levels.data<int32_t>()[i], 1);
  for (size_t w : order) {
    const TokenWindow& win = batch.windows[w];
    border(win.box, std::max(0, static_cast<int>(std::lround(std::log2(std::max(win.scale, 1.0f))))), 3);
  }
  return out;
}

}  // namespace fovea
