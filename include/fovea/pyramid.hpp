// fovea/pyramid.hpp — mip chains of 2×2 box reductions.
//
//   fovea::Executor exec;
//   fovea::PyramidU8 pyr = fovea::build_pyramid(fovea::load_image("photo.jpg"), {}, exec);   // to 1×1
//   const fovea::ImageU8& l2 = pyr.level(2);   // extents mip_extent(w, 2) × mip_extent(h, 2)
//   pyr.level(0) = fovea::load_image("next.jpg");   // same size: the next frame...
//   fovea::rebuild_pyramid(pyr, {}, exec);          // ...reuses levels 1.. in place, no allocation
//
// Semantics (glGenerateMipmap's, made exact):
//   * level 0 is the image; level ℓ+1 has extents max(1, n >> 1) of level ℓ's;
//   * output sample (x, y) is the mean of input samples (2x..2x+1, 2y..2y+1). When an input
//     extent is odd, its last row/column is not read by this level, so mip sample (x, y) of
//     level ℓ covers exactly level-0 pixels [x·2^ℓ, (x+1)·2^ℓ) × [y·2^ℓ, (y+1)·2^ℓ): levels
//     nest exactly, which is what token positions rely on. At most 2^ℓ − 1 level-0 columns
//     (rows) at the far edge are outside level ℓ; samplers clamp to the edge there.
//   * when an extent is already 1 it stays 1 and the box shrinks to 1×2 (or 2×1);
//   * uint8 rounds half up: (a + b + c + d + 2) >> 2, (a + b + 1) >> 1 for 1×2 boxes;
//     float, with a b the top pair and c d the bottom pair, is ((a + c) + (b + d)) * 0.25f
//     (columns first; each step one binary32 add or multiply, no FMA, no reassociation) and
//     (a + b) * 0.5f for 1×2 boxes: bit-identical for every kernel and thread count.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/view.hpp"

FOVEA_API_BEGIN
namespace fovea {

// Extent of level `level` for a level-0 extent n: max(1, n >> level).
constexpr int mip_extent(int n, int level) {
  const int e = level >= 31 ? 0 : (n >> level);
  return e < 1 ? 1 : e;
}
// Number of levels in the full chain down to 1×1 (level 0 included).
int full_mip_levels(int width, int height);

struct PyramidParams {
  int max_levels = 0;  // levels to build, level 0 included; 0 or more than the chain: full chain
                       // (negative: Error(invalid_argument))
};

namespace pyramid_detail {
struct Access;
}

// Thread safety: a Pyramid is a plain value (concurrent reads are safe, a write is not);
// build_pyramid and rebuild_pyramid use only their arguments, so calls on different pyramids
// may run at once (each with its own Executor, or sharing one: see exec.hpp).
// Levels 1.. are always owned. Level 0 is owned (built from an Image) or borrowed (built from
// an ImageView: the caller's buffer, read in place and never copied). view(l) works for every
// level either way; level(l) returns the owned Image and throws Error(invalid_argument) for a
// borrowed level 0.
template <typename T>
class Pyramid {
 public:
  Pyramid() = default;
  explicit Pyramid(std::vector<Image<T>> levels) : levels_(std::move(levels)) {}
  // `levels[0]` is an empty placeholder; `base` is level 0.
  Pyramid(const ImageView<T>& base, std::vector<Image<T>> levels)
      : levels_(std::move(levels)), base_(base), borrowed_(true) {}
  Pyramid(Pyramid&& o) noexcept { *this = std::move(o); }
  Pyramid& operator=(Pyramid&& o) noexcept {
    levels_ = std::move(o.levels_);
    base_ = std::exchange(o.base_, ImageView<T>());
    borrowed_ = std::exchange(o.borrowed_, false);
    return *this;
  }

  int num_levels() const { return static_cast<int>(levels_.size()); }
  const Image<T>& level(int l) const {
    check_owned(l);
    return levels_.at(l);
  }
  Image<T>& level(int l) {
    check_owned(l);
    return levels_.at(l);
  }
  ImageView<T> view(int l) const {
    if (l == 0 && !levels_.empty()) return borrowed_ ? base_ : ImageView<T>(levels_[0]);
    return ImageView<T>(levels_.at(l));
  }
  bool borrows_level0() const { return borrowed_; }
  int width() const { return levels_.empty() ? 0 : borrowed_ ? base_.width() : levels_[0].width(); }
  int height() const { return levels_.empty() ? 0 : borrowed_ ? base_.height() : levels_[0].height(); }
  int channels() const { return levels_.empty() ? 0 : borrowed_ ? base_.channels() : levels_[0].channels(); }

 private:
  friend struct pyramid_detail::Access;
  void check_owned(int l) const {
    if (l == 0 && borrowed_)
      throw Error(Errc::invalid_argument, "this pyramid borrows its level 0 (the caller's pixels): use view(0)");
  }
  std::vector<Image<T>> levels_;
  ImageView<T> base_;  // a borrowed level 0 (the caller's pixels); unused when owned
  bool borrowed_ = false;
};

using PyramidU8 = Pyramid<uint8_t>;
using PyramidF32 = Pyramid<float>;

// Takes the image as level 0 (move it in; clone() to keep a copy) and adds the reductions.
// Row strips of each level run in parallel on `exec`; exec.reference() selects the scalar
// kernels. Output is identical for every thread count and kernel choice.
PyramidU8 build_pyramid(ImageU8 base, const PyramidParams& params, Executor& exec);
PyramidF32 build_pyramid(ImageF32 base, const PyramidParams& params, Executor& exec);
// Borrows `base` as level 0 (no copy; interleaved or planar, see fovea/view.hpp): the first
// reduction reads it in place (de-interleaving two rows at a time in cache). The result is
// valid while `base`'s buffer lives, and identical to build_pyramid(to_image(base), ...).
PyramidU8 build_pyramid(const ImageViewU8& base, const PyramidParams& params, Executor& exec);

// Recomputes levels 1.. of `pyramid` from its level 0 (which the caller has replaced or
// written into), with `params` deciding the level count as for build_pyramid. Every level
// whose extents and channels already fit is overwritten in place, so in the steady state (a
// video's frames, same-size images) nothing is allocated and no memory is touched for the
// first time: on machines where a first-touch page fault costs microseconds, that is most of
// a fresh build's time. Levels that do not fit are reallocated, extra ones dropped. The result
// is build_pyramid's for the same level 0, bit for bit. Throws Error(invalid_argument) when
// level 0 is missing or empty.
void rebuild_pyramid(PyramidU8& pyramid, const PyramidParams& params, Executor& exec);
void rebuild_pyramid(PyramidF32& pyramid, const PyramidParams& params, Executor& exec);

// One reduction step: dst must have extents (mip_extent(src.w, 1), mip_extent(src.h, 1)) and
// the same channel count, or Error(invalid_argument) is thrown.
void downsample_2x2(const ImageU8& src, ImageU8& dst, Executor& exec);
void downsample_2x2(const ImageF32& src, ImageF32& dst, Executor& exec);

}  // namespace fovea

// ---- incremental update (src/pyramid/update.cpp) -----------------------------------------------
namespace fovea {

// Which parts of a pyramid an update touched. Level ℓ's node grid has ceil(tiles / 2^ℓ) nodes
// per axis (TileGrid::tiles_x_at); node (x, y) covers level-ℓ samples [x·P, (x+1)·P) ×
// [y·P, (y+1)·P), clipped to the level: exactly the footprint of a level-ℓ token (x, y).
struct PyramidDirty {
  int tile_px = 0;
  std::vector<int> nodes_x, nodes_y;          // per level
  std::vector<std::vector<uint8_t>> nodes;    // per level: [nodes_y · nodes_x], 1 = recomputed
  int64_t samples_recomputed = 0;             // per channel, over levels 1..
  bool dirty(int level, int x, int y) const { return nodes[level][size_t(y) * nodes_x[level] + x] != 0; }
};

// After level 0 of `pyramid` changed inside some finest tiles (P×P px; `dirty_tiles` has one
// entry per tile of the ceil(W/P) × ceil(H/P) grid, raster order, nonzero = changed), recomputes
// in place only the samples of levels 1.. whose 2^ℓ × 2^ℓ level-0 footprint holds a changed
// tile, level by level (each from the level above, with the same row kernels as build_pyramid).
// The result is bit-identical to build_pyramid of the new level 0. Throws
// Error(invalid_argument) for a tile size outside [2, 256], a mask of the wrong size or an
// empty pyramid.
PyramidDirty update_pyramid(PyramidU8& pyramid, int tile_px, std::span<const uint8_t> dirty_tiles, Executor& exec);
PyramidDirty update_pyramid(PyramidF32& pyramid, int tile_px, std::span<const uint8_t> dirty_tiles, Executor& exec);

}  // namespace fovea
FOVEA_API_END
