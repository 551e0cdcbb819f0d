// Highway row kernels of the 2×2 box reduction, compiled once per target and dispatched at
// run time (hwy/examples/skeleton.cc). Arithmetic and its order: see downsample.hpp.
//
// uint8: a row viewed as uint16 lanes holds one horizontal pair per lane, so
// (v & 0xFF) + (v >> 8) is the pair sum without any shuffle; both rows' sums plus 2, >> 2,
// fit the low byte, and ConcatEven packs the low bytes of two such vectors in order.
// float: add the two rows first (a + c, b + d per column), then ConcatEven / ConcatOdd
// de-interleave the even and odd columns for the last add: two shuffles per output vector.
//
// Each kernel runs full vectors, then 128-bit vectors for what is left, then the scalar
// reference for the last few samples: loads never go past source sample 2·dst_w − 1.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pyramid/downsample_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "pyramid/downsample.hpp"

HWY_BEFORE_NAMESPACE();
namespace fovea::pyramid_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR

// Returns the first output index not written; full vectors of `d` only.
template <class D>
HWY_INLINE int Box2x2U8Vectors(D d8, const uint8_t* HWY_RESTRICT top,
                               const uint8_t* HWY_RESTRICT bottom, uint8_t* HWY_RESTRICT dst,
                               int x, int dst_w) {
  const hn::RepartitionToWide<D> d16;
  const int n = static_cast<int>(hn::Lanes(d8));  // outputs per step, from 2n inputs per row
  const auto low_byte = hn::Set(d16, uint16_t{0x00FF});
  const auto two = hn::Set(d16, uint16_t{2});
  for (; x + n <= dst_w; x += n) {
    const auto t0 = hn::BitCast(d16, hn::LoadU(d8, top + 2 * x));
    const auto t1 = hn::BitCast(d16, hn::LoadU(d8, top + 2 * x + n));
    const auto b0 = hn::BitCast(d16, hn::LoadU(d8, bottom + 2 * x));
    const auto b1 = hn::BitCast(d16, hn::LoadU(d8, bottom + 2 * x + n));
    // Sum of the low bytes (left column) and of the high bytes (right column), <= 1020 + 2.
    const auto s0 = hn::Add(hn::Add(hn::And(t0, low_byte), hn::And(b0, low_byte)),
                            hn::Add(hn::ShiftRight<8>(t0), hn::ShiftRight<8>(b0)));
    const auto s1 = hn::Add(hn::Add(hn::And(t1, low_byte), hn::And(b1, low_byte)),
                            hn::Add(hn::ShiftRight<8>(t1), hn::ShiftRight<8>(b1)));
    const auto r0 = hn::ShiftRight<2>(hn::Add(s0, two));
    const auto r1 = hn::ShiftRight<2>(hn::Add(s1, two));
    hn::StoreU(hn::ConcatEven(d8, hn::BitCast(d8, r1), hn::BitCast(d8, r0)), d8, dst + x);
  }
  return x;
}

template <class D>
HWY_INLINE int Box2x1U8Vectors(D d8, const uint8_t* HWY_RESTRICT src, uint8_t* HWY_RESTRICT dst,
                               int x, int dst_w) {
  const hn::RepartitionToWide<D> d16;
  const int n = static_cast<int>(hn::Lanes(d8));
  const auto low_byte = hn::Set(d16, uint16_t{0x00FF});
  const auto one = hn::Set(d16, uint16_t{1});
  for (; x + n <= dst_w; x += n) {
    const auto v0 = hn::BitCast(d16, hn::LoadU(d8, src + 2 * x));
    const auto v1 = hn::BitCast(d16, hn::LoadU(d8, src + 2 * x + n));
    const auto r0 =
        hn::ShiftRight<1>(hn::Add(hn::Add(hn::And(v0, low_byte), hn::ShiftRight<8>(v0)), one));
    const auto r1 =
        hn::ShiftRight<1>(hn::Add(hn::Add(hn::And(v1, low_byte), hn::ShiftRight<8>(v1)), one));
    hn::StoreU(hn::ConcatEven(d8, hn::BitCast(d8, r1), hn::BitCast(d8, r0)), d8, dst + x);
  }
  return x;
}

template <class D>
HWY_INLINE int Box2x2F32Vectors(D d, const float* HWY_RESTRICT top,
                                const float* HWY_RESTRICT bottom, float* HWY_RESTRICT dst, int x,
                                int dst_w) {
  const int n = static_cast<int>(hn::Lanes(d));
  const auto quarter = hn::Set(d, 0.25f);
  for (; x + n <= dst_w; x += n) {
    // Columns first: v = a + c (even lanes) and b + d (odd lanes).
    const auto v0 = hn::Add(hn::LoadU(d, top + 2 * x), hn::LoadU(d, bottom + 2 * x));
    const auto v1 = hn::Add(hn::LoadU(d, top + 2 * x + n), hn::LoadU(d, bottom + 2 * x + n));
    const auto sum = hn::Add(hn::ConcatEven(d, v1, v0), hn::ConcatOdd(d, v1, v0));
    hn::StoreU(hn::Mul(sum, quarter), d, dst + x);
  }
  return x;
}

template <class D>
HWY_INLINE int Box2x1F32Vectors(D d, const float* HWY_RESTRICT src, float* HWY_RESTRICT dst,
                                int x, int dst_w) {
  const int n = static_cast<int>(hn::Lanes(d));
  const auto half = hn::Set(d, 0.5f);
  for (; x + n <= dst_w; x += n) {
    const auto v0 = hn::LoadU(d, src + 2 * x);
    const auto v1 = hn::LoadU(d, src + 2 * x + n);
    hn::StoreU(hn::Mul(hn::Add(hn::ConcatEven(d, v1, v0), hn::ConcatOdd(d, v1, v0)), half), d,
               dst + x);
  }
  return x;
}

using U8x16Tag = hn::CappedTag<uint8_t, 16>;

// One output vector of box2x2 from the even/odd input pairs: t0 holds top inputs [0, n), t1
// inputs [n, 2n) (bottom likewise): Box2x2U8Vectors' arithmetic on vectors already loaded.
template <class D, class V>
HWY_INLINE V Reduce2x2U8(D d8, V t0v, V t1v, V b0v, V b1v) {
  const hn::RepartitionToWide<D> d16;
  const auto low_byte = hn::Set(d16, uint16_t{0x00FF});
  const auto two = hn::Set(d16, uint16_t{2});
  const auto t0 = hn::BitCast(d16, t0v), t1 = hn::BitCast(d16, t1v);
  const auto b0 = hn::BitCast(d16, b0v), b1 = hn::BitCast(d16, b1v);
  const auto s0 = hn::Add(hn::Add(hn::And(t0, low_byte), hn::And(b0, low_byte)),
                          hn::Add(hn::ShiftRight<8>(t0), hn::ShiftRight<8>(b0)));
  const auto s1 = hn::Add(hn::Add(hn::And(t1, low_byte), hn::And(b1, low_byte)),
                          hn::Add(hn::ShiftRight<8>(t1), hn::ShiftRight<8>(b1)));
  const auto r0 = hn::ShiftRight<2>(hn::Add(s0, two));
  const auto r1 = hn::ShiftRight<2>(hn::Add(s1, two));
  return hn::ConcatEven(d8, hn::BitCast(d8, r1), hn::BitCast(d8, r0));
}

// RGB interleaved (pixel stride 3): LoadInterleaved3 splits 2n pixels of each row into planar
// channel vectors, which then reduce exactly as a planar row does.
template <class D>
HWY_INLINE int Box2x2Rgb3Vectors(D d8, const uint8_t* HWY_RESTRICT top, const uint8_t* HWY_RESTRICT bottom,
                                 uint8_t* HWY_RESTRICT d0, uint8_t* HWY_RESTRICT d1, uint8_t* HWY_RESTRICT d2, int x,
                                 int dst_w) {
  const int n = static_cast<int>(hn::Lanes(d8));
  using V = hn::Vec<D>;
  for (; x + n <= dst_w; x += n) {
    V tr0, tg0, tb0, tr1, tg1, tb1, br0, bg0, bb0, br1, bg1, bb1;
    hn::LoadInterleaved3(d8, top + 6 * x, tr0, tg0, tb0);
    hn::LoadInterleaved3(d8, top + 6 * x + 3 * n, tr1, tg1, tb1);
    hn::LoadInterleaved3(d8, bottom + 6 * x, br0, bg0, bb0);
    hn::LoadInterleaved3(d8, bottom + 6 * x + 3 * n, br1, bg1, bb1);
    hn::StoreU(Reduce2x2U8(d8, tr0, tr1, br0, br1), d8, d0 + x);
    hn::StoreU(Reduce2x2U8(d8, tg0, tg1, bg0, bg1), d8, d1 + x);
    hn::StoreU(Reduce2x2U8(d8, tb0, tb1, bb0, bb1), d8, d2 + x);
  }
  return x;
}

void Box2x2InterleavedU8(const uint8_t* top, const uint8_t* bottom, ptrdiff_t pixel_stride, int channels,
                         uint8_t* const* dst, int dst_w) {
  int x = 0;
  if (pixel_stride == 3 && channels == 3) {
    x = Box2x2Rgb3Vectors(hn::ScalableTag<uint8_t>(), top, bottom, dst[0], dst[1], dst[2], 0, dst_w);
    x = Box2x2Rgb3Vectors(U8x16Tag(), top, bottom, dst[0], dst[1], dst[2], x, dst_w);
  }
  uint8_t* rest[3] = {};
  for (int c = 0; c < channels; ++c) rest[c] = dst[c] + x;
  box2x2_interleaved_ref(top + 2 * x * pixel_stride, bottom + 2 * x * pixel_stride, pixel_stride, channels, rest,
                         dst_w - x);
}

// Full vectors, then 128-bit ones (a no-op where full vectors are 128-bit).
using U8x16 = hn::CappedTag<uint8_t, 16>;
using F32x4 = hn::CappedTag<float, 4>;

void Box2x2U8(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w) {
  int x = Box2x2U8Vectors(hn::ScalableTag<uint8_t>(), top, bottom, dst, 0, dst_w);
  x = Box2x2U8Vectors(U8x16(), top, bottom, dst, x, dst_w);
  box2x2_ref(top + 2 * x, bottom + 2 * x, dst + x, dst_w - x);
}

void Box2x1U8(const uint8_t* src, uint8_t* dst, int dst_w) {
  int x = Box2x1U8Vectors(hn::ScalableTag<uint8_t>(), src, dst, 0, dst_w);
  x = Box2x1U8Vectors(U8x16(), src, dst, x, dst_w);
  box2x1_ref(src + 2 * x, dst + x, dst_w - x);
}

void Box2x2F32(const float* top, const float* bottom, float* dst, int dst_w) {
  int x = Box2x2F32Vectors(hn::ScalableTag<float>(), top, bottom, dst, 0, dst_w);
  x = Box2x2F32Vectors(F32x4(), top, bottom, dst, x, dst_w);
  box2x2_ref(top + 2 * x, bottom + 2 * x, dst + x, dst_w - x);
}

void Box2x1F32(const float* src, float* dst, int dst_w) {
  int x = Box2x1F32Vectors(hn::ScalableTag<float>(), src, dst, 0, dst_w);
  x = Box2x1F32Vectors(F32x4(), src, dst, x, dst_w);
  box2x1_ref(src + 2 * x, dst + x, dst_w - x);
}

#else  // HWY_SCALAR lacks ConcatEven/ConcatOdd: its "SIMD" kernels are the reference.

void Box2x2InterleavedU8(const uint8_t* top, const uint8_t* bottom, ptrdiff_t pixel_stride, int channels,
                         uint8_t* const* dst, int dst_w) {
  box2x2_interleaved_ref(top, bottom, pixel_stride, channels, dst, dst_w);
}

void Box2x2U8(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w) {
  box2x2_ref(top, bottom, dst, dst_w);
}
void Box2x1U8(const uint8_t* src, uint8_t* dst, int dst_w) { box2x1_ref(src, dst, dst_w); }
void Box2x2F32(const float* top, const float* bottom, float* dst, int dst_w) {
  box2x2_ref(top, bottom, dst, dst_w);
}
void Box2x1F32(const float* src, float* dst, int dst_w) { box2x1_ref(src, dst, dst_w); }

#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace fovea::pyramid_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fovea::pyramid_detail {

HWY_EXPORT(Box2x2U8);
HWY_EXPORT(Box2x1U8);
HWY_EXPORT(Box2x2F32);
HWY_EXPORT(Box2x1F32);
HWY_EXPORT(Box2x2InterleavedU8);

void box2x2_interleaved_simd(const uint8_t* top, const uint8_t* bottom, ptrdiff_t pixel_stride, int channels,
                             uint8_t* const* dst, int dst_w) {
  HWY_DYNAMIC_DISPATCH(Box2x2InterleavedU8)(top, bottom, pixel_stride, channels, dst, dst_w);
}

void box2x2_simd(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w) {
  HWY_DYNAMIC_DISPATCH(Box2x2U8)(top, bottom, dst, dst_w);
}
void box2x2_simd(const float* top, const float* bottom, float* dst, int dst_w) {
  HWY_DYNAMIC_DISPATCH(Box2x2F32)(top, bottom, dst, dst_w);
}
void box2x1_simd(const uint8_t* src, uint8_t* dst, int dst_w) {
  HWY_DYNAMIC_DISPATCH(Box2x1U8)(src, dst, dst_w);
}
void box2x1_simd(const float* src, float* dst, int dst_w) {
  HWY_DYNAMIC_DISPATCH(Box2x1F32)(src, dst, dst_w);
}

int64_t simd_compiled_targets() { return HWY_TARGETS; }

}  // namespace fovea::pyramid_detail
#endif  // HWY_ONCE
