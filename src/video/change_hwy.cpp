// Highway version of the change test's row kernel (see change.hpp), one per target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "video/change_hwy.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "video/change.hpp"

HWY_BEFORE_NAMESPACE();
namespace fovea::video_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AbsDiffAccumulateRow(const uint8_t* HWY_RESTRICT a, const uint8_t* HWY_RESTRICT b, uint16_t* HWY_RESTRICT acc,
                          int n) {
  const hn::ScalableTag<uint16_t> d16;
  const hn::Rebind<uint8_t, decltype(d16)> d8;  // half-width u8 vector, one byte per u16 lane
  const int lanes = static_cast<int>(hn::Lanes(d16));
  int x = 0;
  for (; x + lanes <= n; x += lanes) {
    // |a − b| on u8 as (a ∸ b) | (b ∸ a): saturated differences, one of them 0.
    const auto va = hn::LoadU(d8, a + x), vb = hn::LoadU(d8, b + x);
    const auto ad = hn::Or(hn::SaturatedSub(va, vb), hn::SaturatedSub(vb, va));
    hn::StoreU(hn::Add(hn::LoadU(d16, acc + x), hn::PromoteTo(d16, ad)), d16, acc + x);
  }
  absdiff_accumulate_row_ref(a + x, b + x, acc + x, n - x);
}

}  // namespace HWY_NAMESPACE
}  // namespace fovea::video_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fovea::video_detail {
HWY_EXPORT(AbsDiffAccumulateRow);

void absdiff_accumulate_row(const uint8_t* a, const uint8_t* b, uint16_t* acc, int n) {
  HWY_DYNAMIC_DISPATCH(AbsDiffAccumulateRow)(a, b, acc, n);
}
}  // namespace fovea::video_detail
#endif
