#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "fovea/error.hpp"
#include "fovea/image.hpp"
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

TEST(Image, MovedFromIsEmptyAndPlanesArePadded) {
  ImageU8 a(37, 5, 3);
  a.at(2, 4, 36) = 9;
  EXPECT_EQ(a.stride() % 64, 0u);
  EXPECT_GE(a.stride(), 37u);
  ImageU8 b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.width(), 0);
  EXPECT_EQ(b.at(2, 4, 36), 9);
  ImageU8 c;
  c = std::move(b);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(c.clone().at(2, 4, 36), 9);
  EXPECT_THROW(ImageU8(0, 3, 3), Error);
  EXPECT_THROW(ImageU8(3, 3, 2), Error);
  EXPECT_THROW(ImageU8(1 << 30, 1 << 30, 3), Error);
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
