// check_tiling: how an allocation's tokens cover the finest tiles (fovea/allocate.hpp).
#include <algorithm>
#include <vector>

#include "fovea/allocate.hpp"

namespace fovea {

TilingReport check_tiling(const Allocation& a) {
  const TileGrid& g = a.rate_map.grid;
  TilingReport r;
  r.tiles = g.tiles();
  const bool have_rate_map = int64_t(a.rate_map.level.size()) == r.tiles;
  std::vector<int> hits(size_t(std::max<int64_t>(0, r.tiles)), 0);
  for (const Token& t : a.layout.tokens) {
    if (t.level < 0 || t.level > 30 || t.x < 0 || t.y < 0 || t.x >= g.tiles_x_at(t.level) ||
        t.y >= g.tiles_y_at(t.level)) {
      ++r.outside;
      continue;
    }
    const int s = 1 << t.level;
    for (int y = t.y * s; y < std::min(g.tiles_y, (t.y + 1) * s); ++y)
      for (int x = t.x * s; x < std::min(g.tiles_x, (t.x + 1) * s); ++x) {
        const size_t i = size_t(y) * g.tiles_x + x;
        ++hits[i];
        if (have_rate_map && a.rate_map.level[i] != t.level) ++r.rate_map_mismatches;
      }
  }
  for (int h : hits) {
    r.covered += h >= 1;
    r.overlapping += h > 1;
  }
  if (!have_rate_map) r.rate_map_mismatches += r.tiles;
  int levels = a.layout.num_levels();
  if (have_rate_map)
    for (uint8_t l : a.rate_map.level) levels = std::max(levels, int(l) + 1);
  r.area_per_level.assign(size_t(levels), 0.0);
  if (have_rate_map && r.tiles > 0)
    for (uint8_t l : a.rate_map.level) r.area_per_level[l] += 1.0 / double(r.tiles);
  return r;
}

}  // namespace fovea
