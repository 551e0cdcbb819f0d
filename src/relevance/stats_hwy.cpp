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

}  // namespace HWY_NAMESPACE
}  // namespace fovea::relevance_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fovea::relevance_detail {
HWY_EXPORT(LumaRow);
HWY_EXPORT(AccumulateRow);

void luma_row(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int n) {
  HWY_DYNAMIC_DISPATCH(LumaRow)(r, g, b, out, n);
}
void accumulate_row(const uint8_t* row, uint16_t* acc, int n) { HWY_DYNAMIC_DISPATCH(AccumulateRow)(row, acc, n); }
}  // namespace fovea::relevance_detail
#endif
