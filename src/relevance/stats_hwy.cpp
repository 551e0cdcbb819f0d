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
  block_energy_row_ref(r0, r1, acc, blocks);  // one lane: no pairs to add
#else
  // The 2x2 Haar identity: with a b the top pair and c d the bottom one,
  //   4 · Σ (x − mean)² = H² + V² + D² = ((a + c) − (b + d))² + 2 · ((a − c)² + (b − d)²),
  // so from the column sums s = r0 + r1 and differences e = r0 − r1 (i16 lanes) one block is
  // (s₀ − s₁)² + 2 · (e₀² + e₁²): two pairwise multiply-adds (pmaddwd on x86) and one multiply.
  const hn::ScalableTag<int16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;  // half-width u8, one byte per i16 lane
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::RebindToUnsigned<decltype(d32)> du32;
  const int px = static_cast<int>(hn::Lanes(d16));  // pixels of a row per step
  const auto plus_minus = hn::OddEven(hn::Set(d16, int16_t{-1}), hn::Set(d16, int16_t{1}));
  int i = 0;
  for (; 2 * i + px <= 2 * blocks; i += px / 2) {
    const auto a = hn::PromoteTo(d16, hn::LoadU(d8, r0 + 2 * i));
    const auto b = hn::PromoteTo(d16, hn::LoadU(d8, r1 + 2 * i));
    const auto sum = hn::Add(a, b), diff = hn::Sub(a, b);
    auto e1 = hn::Zero(d32), h1 = hn::Zero(d32);
    const auto e = hn::RearrangeToOddPlusEven(hn::ReorderWidenMulAccumulate(d32, diff, diff, hn::Zero(d32), e1), e1);
    const auto h = hn::RearrangeToOddPlusEven(hn::ReorderWidenMulAccumulate(d32, sum, plus_minus, hn::Zero(d32), h1), h1);
    const auto v = hn::Add(hn::Mul(h, h), hn::ShiftLeft<1>(e));
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
