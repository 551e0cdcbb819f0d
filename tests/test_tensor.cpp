#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tensor.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

TEST(Tensor, ZeroFilledAlignedAndMoveOnly) {
  Tensor t(DType::f32, {3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.size_bytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  static_assert(!std::is_copy_constructible_v<Tensor>);
  Tensor c = t.clone();
  c.data<float>()[0] = 1;
  EXPECT_EQ(t.data<float>()[0], 0.0f);
}

TEST(Tensor, NegativeExtentIsAnError) {
  EXPECT_THROW(Tensor(DType::u8, {2, -1}), Error);
}

TEST(Half, RoundTripsEveryHalfValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 2048)), 1.0f);                // tie -> even
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even (up)
  EXPECT_EQ(f16_to_f32(f32_to_f16(65520.0f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(f32_to_f16(65519.0f)), 65504.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1e-8f)), 0.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(-2.0f)), -2.0f);
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace fovea
