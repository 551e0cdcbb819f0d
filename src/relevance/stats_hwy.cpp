// Highway versions of the relevance row kernels (see stats.hpp), one per target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "relevance/stats_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "relevance/stats.hpp"

HWY_BEFORE_NAMESPACE();
namespace fovea::relevance_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void LumaRow(const uint8_t* HWY_RESTRICT r, const uint8_t* HWY_RESTRICT g, const uint8_t* HWY_RESTRICT b,
             uint8_t* HWY_RESTRICT out, int n) {
  const hn::ScalableTag<uint16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;  // half-width u8 vector, one byte per u16 lane
  const int lanes = static_cast<int>(hn::Lanes(d16));
  const auto wr = hn::Set(d16, uint16_t{77}), wg = hn::Set(d16, uint16_t{150}), wb = hn::Set(d16, uint16_t{29});
  const auto half = hn::Set(d16, uint16_t{128});
  int x = 0;
  for (; x + lanes <= n; x += lanes) {
    const auto vr = hn::PromoteTo(d16, hn::LoadU(d8, r + x));
    const auto vg = hn::PromoteTo(d16, hn::LoadU(d8, g + x));
    const auto vb = hn::PromoteTo(d16, hn::LoadU(d8, b + x));
    // 77·255 + 150·255 + 29·255 + 128 = 65408: no u16 overflow.
    const auto sum = hn::Add(hn::Add(hn::Mul(vr, wr), hn::Mul(vg, wg)), hn::Add(hn::Mul(vb, wb), half));
    // Highway 1.0 demotes i16 (not u16) to u8; the values are <= 255 either way.
    const hn::RebindToSigned<decltype(d16)> di16;
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di16, hn::ShiftRight<8>(sum))), d8, out + x);
  }
  luma_row_ref(r + x, g + x, b + x, out + x, n - x);
}

void AccumulateRow(const uint8_t* HWY_RESTRICT row, uint16_t* HWY_RESTRICT acc, int n) {
  const hn::ScalableTag<uint16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;
  const int lanes = static_cast<int>(hn::Lanes(d16));
  int x = 0;
  for (; x + lanes <= n; x += lanes)
    hn::StoreU(hn::Add(hn::LoadU(d16, acc + x), hn::PromoteTo(d16, hn::LoadU(d8, row + x))), d16, acc + x);
  accumulate_row_ref(row + x, acc + x, n - x);
}

void BlockEnergyRow(const uint8_t* HWY_RESTRICT r0, const uint8_t* HWY_RESTRICT r1, uint32_t* HWY_RESTRICT acc,
                    int blocks) {
#if HWY_TARGET == HWY_SCALAR
  block_energy_row_ref(r0, r1, acc, blocks);  // one lane: no even/odd split to vectorise
#else
  // i32 lanes: 2N pixels of a row are promoted into two vectors, whose even and odd lanes are
  // the left and right columns of N blocks.
  const hn::ScalableTag<int32_t> d32;
  const hn::Rebind<uint8_t, decltype(d32)> d8;  // quarter-width u8, one byte per i32 lane
  const hn::RebindToUnsigned<decltype(d32)> du32;
  const int lanes = static_cast<int>(hn::Lanes(d32));
  const auto four = hn::Set(d32, 4);
  int i = 0;
  for (; i + lanes <= blocks; i += lanes) {
    const int x = 2 * i;
    const auto p0 = hn::PromoteTo(d32, hn::LoadU(d8, r0 + x));
    const auto p1 = hn::PromoteTo(d32, hn::LoadU(d8, r0 + x + lanes));
    const auto q0 = hn::PromoteTo(d32, hn::LoadU(d8, r1 + x));
    const auto q1 = hn::PromoteTo(d32, hn::LoadU(d8, r1 + x + lanes));
    const auto a = hn::ConcatEven(d32, p1, p0), b = hn::ConcatOdd(d32, p1, p0);
    const auto c = hn::ConcatEven(d32, q1, q0), d = hn::ConcatOdd(d32, q1, q0);
    const auto s = hn::Add(hn::Add(a, b), hn::Add(c, d));
    const auto sq = hn::Add(hn::Add(hn::Mul(a, a), hn::Mul(b, b)), hn::Add(hn::Mul(c, c), hn::Mul(d, d)));
    const auto v = hn::Sub(hn::Mul(four, sq), hn::Mul(s, s));
    hn::StoreU(hn::Add(hn::LoadU(du32, acc + i), hn::BitCast(du32, v)), du32, acc + i);
  }
  block_energy_row_ref(r0 + 2 * i, r1 + 2 * i, acc + i, blocks - i);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace fovea::relevance_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fovea::relevance_detail {
HWY_EXPORT(LumaRow);
HWY_EXPORT(AccumulateRow);
HWY_EXPORT(BlockEnergyRow);

void luma_row(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int n) {
  HWY_DYNAMIC_DISPATCH(LumaRow)(r, g, b, out, n);
}
void accumulate_row(const uint8_t* row, uint16_t* acc, int n) { HWY_DYNAMIC_DISPATCH(AccumulateRow)(row, acc, n); }
void block_energy_row(const uint8_t* r0, const uint8_t* r1, uint32_t* acc, int blocks) {
  HWY_DYNAMIC_DISPATCH(BlockEnergyRow)(r0, r1, acc, blocks);
}
}  // namespace fovea::relevance_detail
#endif
