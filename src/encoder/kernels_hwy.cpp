// Highway row kernels of the encoder (LayerNorm, online softmax, bf16 conversion), one per
// target, with the scalar references they are tested against at the bottom.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "encoder/kernels_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <cstring>

#include "encoder/encoder_internal.hpp"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace fovea::encoder_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;

// Round to nearest even, as f32_to_bf16 (inputs here are finite).
HWY_INLINE void StoreBf16(DF df, hn::Vec<DF> v, uint16_t* HWY_RESTRICT out) {
  const DU32 du;
  const DI32 di;
  const DU16 d16;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto r = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), lsb));
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, out);
}

void ToBf16Row(const float* HWY_RESTRICT x, uint16_t* HWY_RESTRICT out, int64_t n) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  int64_t i = 0;
  for (; i + L <= n; i += L) StoreBf16(df, hn::LoadU(df, x + i), out + i);
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void FromBf16Row(const uint16_t* HWY_RESTRICT x, float* HWY_RESTRICT out, int64_t n) {
  const DF df;
  const DU32 du;
  const DU16 d16;
  const int64_t L = hn::Lanes(df);
  int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, x + i)))), df, out + i);
  for (; i < n; ++i) out[i] = bf16_to_f32(x[i]);
}

void LayerNormRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, const float* HWY_RESTRICT b,
                  float eps, int64_t n, void* HWY_RESTRICT out, DType out_dt) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  // Two passes (mean, then centred variance) as PyTorch does, in f32 lanes then f64 totals.
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + L <= n; i += L) acc = hn::Add(acc, hn::LoadU(df, x + i));
  double sum = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) sum += x[i];
  const float mean = float(sum / double(n));
  const auto vm = hn::Set(df, mean);
  acc = hn::Zero(df);
  for (i = 0; i + L <= n; i += L) {
    const auto d = hn::Sub(hn::LoadU(df, x + i), vm);
    acc = hn::MulAdd(d, d, acc);
  }
  double ss = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) ss += double(x[i] - mean) * (x[i] - mean);
  const float rstd = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  const auto vr = hn::Set(df, rstd);
  if (out_dt == DType::f32) {
    float* o = static_cast<float*>(out);
    for (i = 0; i + L <= n; i += L) {
      const auto y = hn::MulAdd(hn::Mul(hn::Sub(hn::LoadU(df, x + i), vm), vr), hn::LoadU(df, w + i), hn::LoadU(df, b + i));
      hn::StoreU(y, df, o + i);
    }
    for (; i < n; ++i) o[i] = (x[i] - mean) * rstd * w[i] + b[i];
  } else {
    uint16_t* o = static_cast<uint16_t*>(out);
    for (i = 0; i + L <= n; i += L) {
      const auto y = hn::MulAdd(hn::Mul(hn::Sub(hn::LoadU(df, x + i), vm), vr), hn::LoadU(df, w + i), hn::LoadU(df, b + i));
      StoreBf16(df, y, o + i);
    }
    for (; i < n; ++i) o[i] = f32_to_bf16((x[i] - mean) * rstd * w[i] + b[i]);
  }
}

float SoftmaxStepRow(const float* HWY_RESTRICT s, int64_t n, float scale, float* m, float* l,
                     void* HWY_RESTRICT p, DType p_dt) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  auto vmax = hn::Set(df, -INFINITY);
  int64_t i = 0;
  for (; i + L <= n; i += L) vmax = hn::Max(vmax, hn::LoadU(df, s + i));
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; i < n; ++i) mx = std::max(mx, s[i]);
  const float m_new = std::max(*m, mx * scale);
  const float corr = std::exp(*m - m_new);  // exp(-inf) = 0 on the first block
  const auto vs = hn::Set(df, scale), vmn = hn::Set(df, -m_new);
  auto vsum = hn::Zero(df);
  if (p_dt == DType::f32) {
    float* o = static_cast<float*>(p);
    for (i = 0; i + L <= n; i += L) {
      const auto e = hn::Exp(df, hn::MulAdd(hn::LoadU(df, s + i), vs, vmn));
      vsum = hn::Add(vsum, e);
      hn::StoreU(e, df, o + i);
    }
    float tail = 0;
    for (; i < n; ++i) tail += (o[i] = std::exp(s[i] * scale - m_new));
    *l = *l * corr + hn::GetLane(hn::SumOfLanes(df, vsum)) + tail;
  } else {
    uint16_t* o = static_cast<uint16_t*>(p);
    for (i = 0; i + L <= n; i += L) {
      const auto e = hn::Exp(df, hn::MulAdd(hn::LoadU(df, s + i), vs, vmn));
      vsum = hn::Add(vsum, e);
      StoreBf16(df, e, o + i);
    }
    float tail = 0;
    for (; i < n; ++i) {
      const float e = std::exp(s[i] * scale - m_new);
      tail += e;
      o[i] = f32_to_bf16(e);
    }
    *l = *l * corr + hn::GetLane(hn::SumOfLanes(df, vsum)) + tail;
  }
  *m = m_new;
  return corr;
}

void ExpShiftSumRow(float* HWY_RESTRICT x, const float* HWY_RESTRICT m, float* HWY_RESTRICT l, int64_t n) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), hn::LoadU(df, m + i)));
    hn::StoreU(e, df, x + i);
    hn::StoreU(hn::Add(hn::LoadU(df, l + i), e), df, l + i);
  }
  for (; i < n; ++i) l[i] += (x[i] = std::exp(x[i] - m[i]));
}

float MaxProductRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT y, int64_t n) {
  const DF df;
  const int64_t L = hn::Lanes(df);
  auto vmax = hn::Set(df, -INFINITY);
  int64_t i = 0;
  for (; i + L <= n; i += L) vmax = hn::Max(vmax, hn::Mul(hn::LoadU(df, x + i), hn::LoadU(df, y + i)));
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; i < n; ++i) mx = std::max(mx, x[i] * y[i]);
  return mx;
}

}  // namespace HWY_NAMESPACE
}  // namespace fovea::encoder_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fovea::encoder_detail {
HWY_EXPORT(ToBf16Row);
HWY_EXPORT(FromBf16Row);
HWY_EXPORT(LayerNormRow);
HWY_EXPORT(SoftmaxStepRow);
HWY_EXPORT(ExpShiftSumRow);
HWY_EXPORT(MaxProductRow);

void to_bf16_row(const float* x, uint16_t* out, int64_t n) { HWY_DYNAMIC_DISPATCH(ToBf16Row)(x, out, n); }
void from_bf16_row(const uint16_t* x, float* out, int64_t n) { HWY_DYNAMIC_DISPATCH(FromBf16Row)(x, out, n); }
void layer_norm_row(const float* x, const float* w, const float* b, float eps, int64_t n, void* out,
                    DType out_dt) {
  HWY_DYNAMIC_DISPATCH(LayerNormRow)(x, w, b, eps, n, out, out_dt);
}
void exp_shift_sum_row(float* x, const float* m, float* l, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ExpShiftSumRow)(x, m, l, n);
}
float max_product_row(const float* x, const float* y, int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxProductRow)(x, y, n); }
float softmax_step_row(const float* s, int64_t n, float scale, float* m, float* l, void* p, DType p_dt) {
  return HWY_DYNAMIC_DISPATCH(SoftmaxStepRow)(s, n, scale, m, l, p, p_dt);
}

// ---- scalar references ------------------------------------------------------------------------

void layer_norm_row_ref(const float* x, const float* w, const float* b, float eps, int64_t n, void* out,
                        DType out_dt) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt(ss / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) {
    const float y = float((x[i] - mean) * rstd * w[i] + b[i]);
    if (out_dt == DType::f32) static_cast<float*>(out)[i] = y;
    else static_cast<uint16_t*>(out)[i] = f32_to_bf16(y);
  }
}

void exp_shift_sum_row_ref(float* x, const float* m, float* l, int64_t n) {
  for (int64_t i = 0; i < n; ++i) l[i] += (x[i] = std::exp(x[i] - m[i]));
}

float max_product_row_ref(const float* x, const float* y, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i] * y[i]);
  return mx;
}

float softmax_step_row_ref(const float* s, int64_t n, float scale, float* m, float* l, void* p, DType p_dt) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, s[i] * scale);
  const float m_new = std::max(*m, mx);
  const float corr = std::exp(*m - m_new);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(s[i] * scale - m_new);
    sum += e;
    if (p_dt == DType::f32) static_cast<float*>(p)[i] = e;
    else static_cast<uint16_t*>(p)[i] = f32_to_bf16(e);
  }
  *l = float(*l * corr + sum);
  *m = m_new;
  return corr;
}

}  // namespace fovea::encoder_detail
#endif
