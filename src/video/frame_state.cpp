// What the mixed and the windows foveations of a video share (frame_state.hpp).
#include "video/frame_state.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace fovea::video_detail {

bool change_test(const ImageU8& frame, const PyramidU8& reference, int64_t processed, const VideoParams& p,
                 TileGrid& grid, Executor& exec, FrameResult& r, std::vector<uint8_t>& dirty) {
  const bool size_changed = reference.num_levels() == 0 || reference.width() != frame.width() ||
                            reference.height() != frame.height();
  if (processed == 0) r.refresh = true, r.refresh_reason = "first";
  else if (size_changed) r.refresh = true, r.refresh_reason = "size";
  else if (p.reuse == Reuse::off) r.refresh = true, r.refresh_reason = "reuse-off";
  else if (p.keyframe_interval > 0 && processed % p.keyframe_interval == 0)
    r.refresh = true, r.refresh_reason = "keyframe";
  if (size_changed) grid = TileGrid::make(frame.width(), frame.height(), p.tokenize.patch_px);
  r.tiles = grid.tiles();
  dirty.clear();
  if (!r.refresh) {
    dirty = changed_tiles(frame, reference.level(0), grid, p.change_threshold, exec);
    r.dirty_tiles = std::count(dirty.begin(), dirty.end(), uint8_t(1));
    if (double(r.dirty_tiles) > double(p.refresh_fraction) * double(r.tiles))
      r.refresh = true, r.refresh_reason = "scene-cut";
  }
  return size_changed;
}

void copy_tiles(const ImageU8& src, ImageU8& dst, const TileGrid& g, const std::vector<uint8_t>& dirty,
                Executor& exec) {
  const int P = g.patch_px, W = src.width(), H = src.height();
  const int64_t n = std::count(dirty.begin(), dirty.end(), uint8_t(1));
  // Small copies run on the caller: a pool wake-up costs more than a few tiles' memcpy.
  const int64_t grain = n * P * P * src.channels() < (int64_t(1) << 18) ? g.tiles_y : 1;
  exec.parallel_for(g.tiles_y, grain, [&](int64_t ty0, int64_t ty1) {
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const uint8_t* drow = dirty.data() + size_t(ty) * g.tiles_x;
      for (int tx = 0; tx < g.tiles_x;) {  // runs of dirty tiles: one memcpy per row and run
        if (!drow[tx]) {
          ++tx;
          continue;
        }
        int e = tx + 1;
        while (e < g.tiles_x && drow[e]) ++e;
        const int x0 = tx * P, x1 = std::min(W, e * P);
        for (int c = 0; c < src.channels(); ++c)
          for (int y = int(ty) * P; y < std::min(H, int(ty + 1) * P); ++y)
            std::memcpy(dst.row(c, y) + x0, src.row(c, y) + x0, size_t(x1 - x0));
        tx = e;
      }
    }
  });
}

bool same_query(const Query& a, const Query& b) {
  if (a.fixations.size() != b.fixations.size() || a.regions.size() != b.regions.size() || a.embedding != b.embedding)
    return false;
  for (size_t i = 0; i < a.fixations.size(); ++i)
    if (a.fixations[i].x_px != b.fixations[i].x_px || a.fixations[i].y_px != b.fixations[i].y_px ||
        a.fixations[i].weight != b.fixations[i].weight)
      return false;
  for (size_t i = 0; i < a.regions.size(); ++i)
    if (a.regions[i].x0_px != b.regions[i].x0_px || a.regions[i].y0_px != b.regions[i].y0_px ||
        a.regions[i].x1_px != b.regions[i].x1_px || a.regions[i].y1_px != b.regions[i].y1_px ||
        a.regions[i].weight != b.regions[i].weight)
      return false;
  return true;
}

}  // namespace fovea::video_detail

namespace fovea::video_detail {

bool estimate_patch_shift(const ImageU8& prev, const ImageU8& cur, int step, int max_steps, int& dx, int& dy) {
  dx = dy = 0;
  const int W = cur.width(), H = cur.height(), C = std::min(cur.channels(), 3);
  if (prev.width() != W || prev.height() != H || prev.channels() < C || step < 1 || max_steps < 1) return false;
  constexpr int kLevels = 2;  // codec noise tolerated by the estimate (acceptance is byte-exact)
  // The share of samples (every sx-th pixel of every sy-th row of the overlap) within kLevels.
  auto share = [&](int ox, int oy, int sx, int sy) {
    const int x0 = std::max(0, -ox), x1 = std::min(W, W - ox), y0 = std::max(0, -oy), y1 = std::min(H, H - oy);
    int64_t same = 0, total = 0;
    for (int y = y0; y < y1; y += sy) {
      for (int x = x0; x < x1; x += sx) {
        bool eq = true;
        for (int c = 0; c < C && eq; ++c) eq = std::abs(int(cur.row(c, y)[x]) - int(prev.row(c, y + oy)[x + ox])) <= kLevels;
        same += eq, ++total;
      }
    }
    return total ? double(same) / double(total) : 0.0;
  };
  // A coarse probe (about 32 × 16 samples) for every candidate, then every 4th pixel of every
  // 4th row for the candidates the probe leaves: most candidates cost a few hundred samples.
  const int px = std::max(4, W / 32), py = std::max(4, H / 16);
  double best = 0;
  for (int sy = -max_steps; sy <= max_steps; ++sy) {
    for (int sx = -max_steps; sx <= max_steps; ++sx) {
      if (sx == 0 && sy == 0) continue;
      const int ox = sx * step, oy = sy * step;
      if (2 * (W - std::abs(ox)) < W || 2 * (H - std::abs(oy)) < H) continue;  // less than half of either side
      if (share(ox, oy, px, py) < 0.5) continue;
      const double s = share(ox, oy, 4, 4);
      if (s > best) best = s, dx = ox, dy = oy;
    }
  }
  if (best < 0.5) dx = dy = 0;
  return best >= 0.5;
}

}  // namespace fovea::video_detail
