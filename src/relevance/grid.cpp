#include "fovea/grid.hpp"

#include <string>

#include "fovea/error.hpp"

namespace fovea {

TileGrid TileGrid::make(int width, int height, int patch_px) {
  if (width <= 0 || height <= 0)
    throw Error(Errc::invalid_argument, "image extents must be positive, got " +
                                            std::to_string(width) + "x" + std::to_string(height));
  if (patch_px < 2 || patch_px > 256)
    throw Error(Errc::invalid_argument,
                "patch size must be in [2, 256] pixels, got " + std::to_string(patch_px));
  TileGrid g;
  g.image_width = width;
  g.image_height = height;
  g.patch_px = patch_px;
  g.tiles_x = (width + patch_px - 1) / patch_px;
  g.tiles_y = (height + patch_px - 1) / patch_px;
  return g;
}

}  // namespace fovea
