// Highway versions of the int8 codec's kernels (compress_internal.hpp), one per target,
// dispatched at run time. GCC 12 does not vectorise the float -> u8 conversion below
// AVX-512BW by itself; these run at memory bandwidth on every x86 target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "compress/int8_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "compress/compress_internal.hpp"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace fovea::compress {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void EncodeU8(const float* HWY_RESTRICT x, int64_t n, int64_t dim, const float* HWY_RESTRICT lo,
              const float* HWY_RESTRICT inv, uint8_t* HWY_RESTRICT q) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const int64_t lanes = int64_t(hn::Lanes(df));
  const auto zero = hn::Zero(df), top = hn::Set(df, 255.f), half = hn::Set(df, 0.5f);
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * dim;
    uint8_t* qr = q + t * dim;
    int64_t d = 0;
    for (; d + lanes <= dim; d += lanes) {
      auto v = hn::Mul(hn::Sub(hn::LoadU(df, xr + d), hn::LoadU(df, lo + d)), hn::LoadU(df, inv + d));
      v = hn::Min(hn::Max(v, zero), top);  // x86 max/min return the second operand for NaN: NaN -> 0
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, hn::Add(v, half))), d8, qr + d);
    }
    if (d < dim) u8_affine_encode_ref(xr + d, 1, dim - d, lo + d, inv + d, qr + d);
  }
}

void DecodeU8(const uint8_t* HWY_RESTRICT q, int64_t n, int64_t dim, const float* HWY_RESTRICT lo,
              const float* HWY_RESTRICT step, float* HWY_RESTRICT x) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const int64_t lanes = int64_t(hn::Lanes(df));
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* qr = q + t * dim;
    float* xr = x + t * dim;
    int64_t d = 0;
    for (; d + lanes <= dim; d += lanes) {
      const auto v = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, qr + d)));
      hn::StoreU(hn::Add(hn::LoadU(df, lo + d), hn::Mul(hn::LoadU(df, step + d), v)), df, xr + d);
    }
    if (d < dim) u8_affine_decode_ref(qr + d, 1, dim - d, lo + d, step + d, xr + d);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fovea::compress
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fovea::compress {
HWY_EXPORT(EncodeU8);
HWY_EXPORT(DecodeU8);

void u8_affine_encode(const float* x, int64_t n, int64_t dim, const float* lo, const float* inv_step, uint8_t* q) {
  HWY_DYNAMIC_DISPATCH(EncodeU8)(x, n, dim, lo, inv_step, q);
}
void u8_affine_decode(const uint8_t* q, int64_t n, int64_t dim, const float* lo, const float* step, float* x) {
  HWY_DYNAMIC_DISPATCH(DecodeU8)(q, n, dim, lo, step, x);
}
}  // namespace fovea::compress
#endif
