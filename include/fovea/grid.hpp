// fovea/grid.hpp — the tile grid every stage after the pyramid shares.
//
//   fovea::TileGrid g = fovea::TileGrid::make(1000, 600, 16);   // 63 × 38 finest tiles of 16 px
//   int64_t coarse = g.tiles_at(2);                              // nodes of the level-2 grid
//
// A finest tile is P×P level-0 pixels (P = patch size, 16 by default; 14 supported, any
// 2..256 accepted). A token at level ℓ is one P×P patch sampled from mip level ℓ, so it covers
// a square of 2^ℓ × 2^ℓ finest tiles, P·2^ℓ level-0 pixels on a side. Tiles at the right and
// bottom edges may reach past the image; samplers clamp to the edge there.
//
// Thread safety: TileGrid is a plain value.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>

FOVEA_API_BEGIN
namespace fovea {

struct TileGrid {
  int image_width = 0, image_height = 0;  // level-0 pixels
  int patch_px = 16;                      // P
  int tiles_x = 0, tiles_y = 0;           // ceil(width / P), ceil(height / P)

  // Throws Error(invalid_argument) for non-positive extents or P outside [2, 256].
  static TileGrid make(int width, int height, int patch_px);

  int64_t tiles() const { return int64_t(tiles_x) * tiles_y; }
  // Nodes of the level-ℓ token grid: ceil(tiles / 2^ℓ) per axis.
  int tiles_x_at(int level) const { return ((tiles_x - 1) >> level) + 1; }
  int tiles_y_at(int level) const { return ((tiles_y - 1) >> level) + 1; }
  int64_t tiles_at(int level) const { return int64_t(tiles_x_at(level)) * tiles_y_at(level); }
  // Token side at level ℓ in level-0 pixels.
  int64_t token_px(int level) const { return int64_t(patch_px) << level; }
};

}  // namespace fovea
FOVEA_API_END
