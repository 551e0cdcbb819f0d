// pyramid/downsample.hpp — row kernels of the 2×2 box reduction (private to src/pyramid).
//
// Every kernel writes `dst_w` output samples from one or two source rows and reads only
// source samples [0, 2·dst_w) (box2x2, box2x1) or [0, dst_w) (box1x2): never the row padding.
//
// Exact arithmetic, identical in the scalar reference and in every SIMD target:
//   box2x2  (a b / c d, a b from the top row):
//             uint8  (a + b + c + d + 2) >> 2          (integer, exact)
//             float  ((a + c) + (b + d)) * 0.25f       (columns first, then the two columns)
//   box2x1  (a b, a source row of height 1)     and
//   box1x2  (a over b, a source column of width 1):
//             uint8  (a + b + 1) >> 1
//             float  (a + b) * 0.5f
// Each float operation is a single IEEE binary32 add or multiply rounded to nearest; the
// multiplies by 0.25 and 0.5 are exact (barring underflow to subnormals, which is also
// identical everywhere), so the only rounding choices are the adds, and their order above is
// the contract. The SIMD kernels add the two rows first (vertical) and then the even and odd
// columns, which is the same expression, so no FMA or reassociation can change a bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include <vector>

#include "fovea/pyramid.hpp"

namespace fovea::pyramid_detail {

// The private side of Pyramid, for the pyramid stage's own functions.
struct Access {
  template <typename T>
  static std::vector<Image<T>>& levels(Pyramid<T>& p) {
    return p.levels_;
  }
};

// Scalar reference (downsample_ref.cpp).
void box2x2_ref(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w);
void box2x2_ref(const float* top, const float* bottom, float* dst, int dst_w);
void box2x1_ref(const uint8_t* src, uint8_t* dst, int dst_w);
void box2x1_ref(const float* src, float* dst, int dst_w);
void box1x2_ref(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w);
void box1x2_ref(const float* top, const float* bottom, float* dst, int dst_w);

// Highway kernels (downsample_hwy.cpp), dispatched at run time to the best target the CPU
// supports — or to the one a test selected with hwy::SetSupportedTargetsForTest.
void box2x2_simd(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w);
void box2x2_simd(const float* top, const float* bottom, float* dst, int dst_w);
void box2x1_simd(const uint8_t* src, uint8_t* dst, int dst_w);
void box2x1_simd(const float* src, float* dst, int dst_w);

// The first reduction of an interleaved level 0 (fovea/view.hpp): `top` and `bottom` are rows
// of pixels `pixel_stride` samples apart, channel c of a pixel at +c; writes dst[c][0, dst_w)
// for c < channels, planar. Reads pixels [0, 2·dst_w) only. Same arithmetic as box2x2 (the
// SIMD version de-interleaves in registers and is bit-identical to the reference).
void box2x2_interleaved_ref(const uint8_t* top, const uint8_t* bottom, ptrdiff_t pixel_stride, int channels,
                            uint8_t* const* dst, int dst_w);
void box2x2_interleaved_simd(const uint8_t* top, const uint8_t* bottom, ptrdiff_t pixel_stride, int channels,
                             uint8_t* const* dst, int dst_w);

// HWY_TARGETS as compiled into downsample_hwy.cpp (a bit mask of HWY_* targets): tests
// intersect it with hwy::SupportedTargets() to run every kernel on every target.
int64_t simd_compiled_targets();

// The kernels one reduction uses, chosen once per call from Executor::reference().
template <typename T>
struct RowKernels {
  void (*box2x2)(const T*, const T*, T*, int);
  void (*box2x1)(const T*, T*, int);
  void (*box1x2)(const T*, const T*, T*, int);
};

template <typename T>
RowKernels<T> row_kernels(bool reference) {
  using B22 = void (*)(const T*, const T*, T*, int);
  using B21 = void (*)(const T*, T*, int);
  // box1x2 only ever runs on a 1-sample column (one sample per row): no SIMD version.
  if (reference)
    return {static_cast<B22>(&box2x2_ref), static_cast<B21>(&box2x1_ref),
            static_cast<B22>(&box1x2_ref)};
  return {static_cast<B22>(&box2x2_simd), static_cast<B21>(&box2x1_simd),
          static_cast<B22>(&box1x2_ref)};
}

}  // namespace fovea::pyramid_detail
