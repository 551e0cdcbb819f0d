#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

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

TEST(Tensor, DefaultAndMovedFromAreEmpty) {
  Tensor t;
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.size_bytes(), 0u);
  EXPECT_EQ(t.bytes(), nullptr);
  EXPECT_EQ(t.data<float>(), nullptr);
  EXPECT_EQ(t.data<uint8_t>(), nullptr);  // nothing to misread
  EXPECT_TRUE(t.clone().empty());
  // A rank-0 tensor made with an empty shape is a scalar, not empty.
  Tensor scalar(DType::i64, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_FALSE(scalar.empty());
  scalar.data<int64_t>()[0] = 7;
  EXPECT_EQ(scalar.clone().data<int64_t>()[0], 7);
  Tensor a(DType::f32, {2, 3});
  a.data<float>()[5] = 1.5f;
  Tensor b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.numel(), 0);
  EXPECT_EQ(a.rank(), 0u);
  EXPECT_EQ(b.numel(), 6);
  EXPECT_EQ(b.data<float>()[5], 1.5f);
  Tensor c;
  c = std::move(b);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{2, 3}));
  // A zero-extent tensor is empty too, but keeps its shape and dtype.
  Tensor z(DType::u8, {0, 4});
  EXPECT_TRUE(z.empty());
  EXPECT_EQ(z.rank(), 2u);
}

TEST(Tensor, TypedAccessChecksTheDtype) {
  Tensor f(DType::f32, {4});
  EXPECT_NE(f.data<float>(), nullptr);
  // Same size, other type: the old sizeof check let these through.
  EXPECT_THROW(f.data<int32_t>(), Error);
  Tensor i8(DType::i8, {4});
  EXPECT_NE(i8.data<int8_t>(), nullptr);
  EXPECT_THROW(i8.data<uint8_t>(), Error);
  EXPECT_THROW(Tensor(DType::u8, {4}).data<int8_t>(), Error);
  EXPECT_THROW(Tensor(DType::f64, {4}).data<int64_t>(), Error);
  EXPECT_THROW(Tensor(DType::i16, {4}).data<uint16_t>(), Error);
  // 16-bit floats are read as their bit patterns through uint16_t, and only so.
  for (DType t : {DType::f16, DType::bf16, DType::u16}) {
    Tensor h(t, {3});
    EXPECT_NE(h.data<uint16_t>(), nullptr) << dtype_name(t);
    EXPECT_THROW(h.data<float>(), Error) << dtype_name(t);
    EXPECT_THROW(h.data<int16_t>(), Error) << dtype_name(t);
  }
  Tensor h(DType::f16, {1});
  h.data<uint16_t>()[0] = f32_to_f16(0.5f);
  EXPECT_EQ(f16_to_f32(std::as_const(h).data<uint16_t>()[0]), 0.5f);
  // The message names both types.
  try {
    (void)h.data<float>();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("F16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("F32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("uint16_t"), std::string::npos) << e.what();
  }
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

namespace fovea {
namespace {

// Error messages quote what files say; what reaches a terminal is printable and bounded.
TEST(Error, MessagesArePrintableAndBounded) {
  EXPECT_STREQ(Error(Errc::io, "plain 'ascii' and caf\xc3\xa9").what(), "plain 'ascii' and caf\xc3\xa9");
  EXPECT_STREQ(Error(Errc::io, std::string("a\x1b[31m\0b\x7f\tc\nd", 13)).what(), "a\\x1b[31m\\x00b\\x7f\\x09c\nd");
  EXPECT_STREQ(Error(Errc::io, "C1 \xc2\x9b" "2J, not \xc2\xa0").what(), "C1 \\x9b2J, not \xc2\xa0");  // CSI escaped, NBSP kept
  // Not UTF-8 (Latin-1, overlong, a surrogate, cut short) escaped; 4-byte characters kept.
  EXPECT_STREQ(Error(Errc::io, "caf\xe9 \xc0\xaf \xed\xa0\x80 \xf0\x9f\x98\x80 \xe2\x82").what(),
               "caf\\xe9 \\xc0\\xaf \\xed\\xa0\\x80 \xf0\x9f\x98\x80 \\xe2\\x82");
  const std::string big(10000, 'x');
  EXPECT_STREQ(Error(Errc::io, big).what(), (std::string(4096, 'x') + "... (5904 more bytes)").c_str());
  // Cut at a character boundary: 4095 ASCII bytes and then a 2-byte character.
  const std::string e = Error::printable(std::string(4095, 'x') + "\xc3\xa9" + "tail");
  EXPECT_EQ(e, std::string(4095, 'x') + "... (6 more bytes)");
  EXPECT_EQ(Error::printable(std::string(4096, 'y')), std::string(4096, 'y'));
}

}  // namespace
}  // namespace fovea
