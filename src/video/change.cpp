// Per-tile change test between two frames, tolerant of codec noise.
//
// A tile is dirty when any 4×4 block inside it (clipped to the tile and the image) has a mean
// absolute difference, over its pixels and the three channels, above the threshold. Averaging
// over 48 samples takes the per-pixel codec noise down about sevenfold (it is nearly
// independent from pixel to pixel); taking the max over the blocks keeps an object of a few
// pixels visible, which a whole-tile mean would dilute 16 times.
//
// Schedule: tile rows in parallel; inside one, each band of 4 pixel rows first sums |a − b|
// per column over channels and rows (a Highway row kernel, change_hwy.cpp: u16 sums, at most
// 12 rows of 255), then adds columns up per block.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/video.hpp"
#include "video/change.hpp"

namespace fovea {

std::vector<uint8_t> changed_tiles(const ImageU8& a, const ImageU8& b, const TileGrid& g, float threshold,
                                   Executor& exec) {
  if (a.width() != b.width() || a.height() != b.height() || a.channels() != b.channels() || a.empty())
    throw Error(Errc::invalid_argument, "changed_tiles: the two frames differ in size or are empty");
  if (g.image_width != a.width() || g.image_height != a.height())
    throw Error(Errc::invalid_argument, "changed_tiles: the tile grid is for another image size");
  if (!(threshold >= 0)) throw Error(Errc::invalid_argument, "changed_tiles: the threshold must be >= 0");
  if (a.channels() > 64) throw Error(Errc::invalid_argument, "changed_tiles: more than 64 channels");
  const int W = a.width(), H = a.height(), C = a.channels(), P = g.patch_px;
  constexpr int kBlock = 4;
  std::vector<uint8_t> dirty(size_t(g.tiles()), 0);
  // Chunks of at least ~8 MiB read (a 1080p frame pair is one): the test is memory-bound at
  // a few GB/s, and a pool wake-up (or a worker preempted on shared cores) costs more than a
  // small frame's whole pass.
  const int64_t row_bytes = int64_t(P) * W * C * 2;
  const int64_t grain = std::max<int64_t>(1, ((int64_t(8) << 20) + row_bytes - 1) / row_bytes);
  const bool ref = exec.reference();
  exec.parallel_for(g.tiles_y, grain, [&](int64_t ty0, int64_t ty1) {
    std::vector<uint16_t> col(static_cast<size_t>(W), 0u);
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      uint8_t* drow = dirty.data() + size_t(ty) * g.tiles_x;
      const int y_end = std::min(H, int(ty + 1) * P);
      for (int by = int(ty) * P; by < y_end; by += kBlock) {
        const int rows = std::min(kBlock, std::min(y_end, by + kBlock) - by);
        std::fill(col.begin(), col.end(), 0u);
        for (int c = 0; c < C; ++c)
          for (int y = by; y < by + rows; ++y) {
            if (ref) video_detail::absdiff_accumulate_row_ref(a.row(c, y), b.row(c, y), col.data(), W);
            else video_detail::absdiff_accumulate_row(a.row(c, y), b.row(c, y), col.data(), W);
          }
        for (int tx = 0; tx < g.tiles_x; ++tx) {
          if (drow[tx]) continue;
          const int x_end = std::min(W, (tx + 1) * P);
          for (int bx = tx * P; bx < x_end; bx += kBlock) {
            const int cols = std::min(kBlock, x_end - bx);
            uint32_t sum = 0;
            for (int x = bx; x < bx + cols; ++x) sum += col[size_t(x)];
            if (float(sum) > threshold * float(cols * rows * C)) {
              drow[tx] = 1;
              break;
            }
          }
        }
      }
    }
  });
  return dirty;
}

}  // namespace fovea
