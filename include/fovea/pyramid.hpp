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

#include <cstdint>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/image.hpp"

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
template <typename T>
class Pyramid {
 public:
  Pyramid() = default;
  explicit Pyramid(std::vector<Image<T>> levels) : levels_(std::move(levels)) {}
  Pyramid(Pyramid&&) noexcept = default;
  Pyramid& operator=(Pyramid&&) noexcept = default;

  int num_levels() const { return static_cast<int>(levels_.size()); }
  const Image<T>& level(int l) const { return levels_.at(l); }
  Image<T>& level(int l) { return levels_.at(l); }
  int width() const { return levels_.empty() ? 0 : levels_[0].width(); }
  int height() const { return levels_.empty() ? 0 : levels_[0].height(); }
  int channels() const { return levels_.empty() ? 0 : levels_[0].channels(); }

 private:
  friend struct pyramid_detail::Access;
  std::vector<Image<T>> levels_;
};

using PyramidU8 = Pyramid<uint8_t>;
using PyramidF32 = Pyramid<float>;

// Takes the image as level 0 (move it in; clone() to keep a copy) and adds the reductions.
// Row strips of each level run in parallel on `exec`; exec.reference() selects the scalar
// kernels. Output is identical for every thread count and kernel choice.
PyramidU8 build_pyramid(ImageU8 base, const PyramidParams& params, Executor& exec);
PyramidF32 build_pyramid(ImageF32 base, const PyramidParams& params, Executor& exec);

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
