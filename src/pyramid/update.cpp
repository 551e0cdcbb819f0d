// Incremental pyramid update: only the footprints of changed tiles are reduced again.
//
// Level-ℓ sample X depends on level-(ℓ−1) samples 2X and 2X+1 only (floor semantics), so with
// nodes of P×P samples at every level, node (x, y) of level ℓ depends on nodes 2x..2x+1,
// 2y..2y+1 of level ℓ−1 and on nothing else. The dirty node masks are propagated down that
// quadtree, and each level recomputes its dirty nodes from the level above, in horizontal runs
// of neighbouring dirty nodes (so the SIMD row kernels see long rows), with the row kernels
// build_pyramid uses: the same inputs through the same arithmetic, so the same bits.
#include <algorithm>
#include <string>

#include "fovea/error.hpp"
#include "fovea/pyramid.hpp"
#include "pyramid/downsample.hpp"

namespace fovea {

namespace {

using pyramid_detail::RowKernels;
using pyramid_detail::row_kernels;

struct Run {
  int y;       // node row
  int x0, x1;  // nodes [x0, x1)
};

// Level-l samples of nodes `run` (rows of node row run.y, columns of nodes [x0, x1)),
// channel c, from src = level l−1.
template <typename T>
void reduce_run(const Image<T>& src, Image<T>& dst, int c, const Run& run, int P, const RowKernels<T>& k) {
  const int xs = run.x0 * P, xe = std::min(run.x1 * P, dst.width());
  const int ys = run.y * P, ye = std::min((run.y + 1) * P, dst.height());
  if (xs >= xe || ys >= ye) return;
  if (src.height() == 1) {  // dst is one row: 2×1 boxes (or 1×1 → 1×1)
    if (src.width() == 1) dst.row(c, 0)[0] = src.row(c, 0)[0];
    else k.box2x1(src.row(c, 0) + 2 * xs, dst.row(c, 0) + xs, xe - xs);
    return;
  }
  for (int y = ys; y < ye; ++y) {
    const T* top = src.row(c, 2 * y);
    const T* bottom = src.row(c, 2 * y + 1);
    if (src.width() == 1) k.box1x2(top, bottom, dst.row(c, y), 1);
    else k.box2x2(top + 2 * xs, bottom + 2 * xs, dst.row(c, y) + xs, xe - xs);
  }
}

template <typename T>
PyramidDirty update(Pyramid<T>& pyr, int P, std::span<const uint8_t> dirty, Executor& exec) {
  if (pyr.num_levels() < 1 || pyr.level(0).empty())
    throw Error(Errc::invalid_argument, "update_pyramid: the pyramid is empty");
  if (P < 2 || P > 256)
    throw Error(Errc::invalid_argument, "update_pyramid: tile size must be in [2, 256], got " + std::to_string(P));
  const int W = pyr.width(), H = pyr.height(), C = pyr.channels();
  const int tx = (W + P - 1) / P, ty = (H + P - 1) / P;
  if (dirty.size() != size_t(tx) * size_t(ty))
    throw Error(Errc::invalid_argument, "update_pyramid: the dirty mask has " + std::to_string(dirty.size()) +
                                            " entries, the " + std::to_string(tx) + "x" + std::to_string(ty) +
                                            " tile grid needs " + std::to_string(size_t(tx) * ty));
  PyramidDirty out;
  out.tile_px = P;
  const int L = pyr.num_levels();
  out.nodes_x.resize(L);
  out.nodes_y.resize(L);
  out.nodes.resize(L);
  out.nodes_x[0] = tx, out.nodes_y[0] = ty;
  out.nodes[0].assign(dirty.begin(), dirty.end());
  for (uint8_t& v : out.nodes[0]) v = v ? 1 : 0;

  const RowKernels<T> k = row_kernels<T>(exec.reference());
  std::vector<Run> runs;
  for (int l = 1; l < L; ++l) {
    const int pnx = out.nodes_x[l - 1], pny = out.nodes_y[l - 1];
    const int nx = ((tx - 1) >> l) + 1, ny = ((ty - 1) >> l) + 1;
    out.nodes_x[l] = nx, out.nodes_y[l] = ny;
    std::vector<uint8_t>& m = out.nodes[l];
    m.assign(size_t(nx) * ny, 0);
    const std::vector<uint8_t>& pm = out.nodes[l - 1];
    for (int y = 0; y < pny; ++y)
      for (int x = 0; x < pnx; ++x)
        if (pm[size_t(y) * pnx + x]) m[size_t(y >> 1) * nx + (x >> 1)] = 1;

    runs.clear();
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx;) {
        if (!m[size_t(y) * nx + x]) {
          ++x;
          continue;
        }
        int e = x + 1;
        while (e < nx && m[size_t(y) * nx + e]) ++e;
        runs.push_back({y, x, e});
        x = e;
      }
    if (runs.empty()) {
      for (int r = l + 1; r < L; ++r) {  // nothing below changes either
        out.nodes_x[r] = ((tx - 1) >> r) + 1, out.nodes_y[r] = ((ty - 1) >> r) + 1;
        out.nodes[r].assign(size_t(out.nodes_x[r]) * out.nodes_y[r], 0);
      }
      break;
    }
    const Image<T>& src = pyr.level(l - 1);
    Image<T>& dst = pyr.level(l);
    for (const Run& r : runs) {
      const int xs = r.x0 * P, xe = std::min(r.x1 * P, dst.width());
      const int ys = r.y * P, ye = std::min((r.y + 1) * P, dst.height());
      if (xs < xe && ys < ye) out.samples_recomputed += int64_t(xe - xs) * (ye - ys);
    }
    const int64_t tasks = int64_t(runs.size()) * C;
    int64_t level_samples = 0;
    for (const Run& r : runs) level_samples += int64_t(r.x1 - r.x0) * P * P;
    // A few dirty tiles are microseconds of work: waking the pool would cost more (and, on
    // shared cores, a preempted worker stalls the whole level). Threads only for large updates.
    const int64_t grain = level_samples * C * int64_t(sizeof(T)) < (int64_t(1) << 18) ? tasks : 1;
    exec.parallel_for(tasks, grain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) reduce_run(src, dst, int(t % C), runs[size_t(t / C)], P, k);
    });
  }
  return out;
}

}  // namespace

PyramidDirty update_pyramid(PyramidU8& pyramid, int tile_px, std::span<const uint8_t> dirty_tiles, Executor& exec) {
  return update(pyramid, tile_px, dirty_tiles, exec);
}
PyramidDirty update_pyramid(PyramidF32& pyramid, int tile_px, std::span<const uint8_t> dirty_tiles,
                            Executor& exec) {
  return update(pyramid, tile_px, dirty_tiles, exec);
}

}  // namespace fovea
