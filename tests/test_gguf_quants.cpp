// ggml's block formats (Q4_0 ... Q8_K) decoded by GgufFile::load_f32 against the numpy reference
// of scripts/make_gguf_quant_fixtures.py (tests/data/gguf_quants: random quant bytes, finite
// scales, and the values the reference gives for them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fovea/gguf.hpp"
#include "fovea/safetensors.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

TEST(GgufQuants, EveryBlockFormatMatchesTheNumpyReference) {
  const std::string dir = test::source_dir() + "/tests/data/gguf_quants/";
  const GgufFile g = GgufFile::open(dir + "quants.gguf");
  const SafetensorsFile want = SafetensorsFile::open(dir + "expected.safetensors");
  int checked = 0;
  for (const char* name : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k", "q8_k"}) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* t = g.find_tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(ggml_type_supported(t->type));
    const Tensor got = g.load_f32(*t);
    ASSERT_NE(want.find(name), nullptr);
    const Tensor ref = want.load(*want.find(name));
    ASSERT_EQ(got.shape(), ref.shape());
    double max_abs = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float a = got.data<float>()[i], b = ref.data<float>()[i];
      ASSERT_NEAR(a, b, 1e-6f * std::fabs(b) + 1e-9f) << i;
      max_abs = std::max(max_abs, double(std::fabs(b)));
    }
    EXPECT_GT(max_abs, 0.0);  // the fixture's values are not all zero
    ++checked;
  }
  EXPECT_EQ(checked, 9);
  EXPECT_FALSE(ggml_type_supported(26));  // I32
  EXPECT_FALSE(ggml_type_supported(10));  // Q2_K: not decoded
}

// F16 tensors decode without branches (vectorizable): every one of the 65536 bit patterns as
// the scalar f16_to_f32 gives it (NaN as a NaN of the same sign).
TEST(GgufQuants, F16RowsDecodeEveryValueAsTheScalarConversion) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = uint16_t(i);
  std::vector<float> out(h.size(), -1.0f);
  ASSERT_TRUE(ggml_dequantize(uint32_t(GgmlType::f16), reinterpret_cast<const std::byte*>(h.data()), 65536, out.data()));
  int wrong = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = f16_to_f32(h[i]);
    const bool same = std::isnan(want) ? std::isnan(out[i]) && std::signbit(out[i]) == std::signbit(want)
                                       : std::memcmp(&want, &out[i], 4) == 0;
    if (!same && ++wrong <= 5) ADD_FAILURE() << "f16 0x" << std::hex << i << ": " << out[i] << " != " << want;
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace fovea
