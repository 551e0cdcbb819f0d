#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"

namespace fovea {
namespace {

std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

void expect_corrupt(const std::vector<uint8_t>& bytes, const std::string& fragment,
                    Errc code = Errc::corrupt_data) {
  try {
    SafetensorsFile::from_bytes(bytes, "t.safetensors");
    FAIL() << "accepted a file that should fail with: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.safetensors"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  Tensor a(DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = i * 0.5f;
  Tensor b(DType::u8, {5});
  Tensor c(DType::i32, {0, 4});  // empty tensors are legal
  Tensor d(DType::bf16, {3});
  d.data<uint16_t>()[1] = f32_to_bf16(2.5f);
  const NamedTensor ts[] = {{"a", &a}, {"b", &b}, {"c", &c}, {"d", &d}};
  const std::vector<uint8_t> bytes = serialize_safetensors(ts, {{"k", "v"}});
  EXPECT_EQ((bytes[0] | bytes[1] << 8) % 8, 0);  // data buffer 8-byte aligned
  const SafetensorsFile f = SafetensorsFile::from_bytes(bytes, "mem");
  ASSERT_EQ(f.entries().size(), 4u);
  EXPECT_EQ(f.metadata().at("k"), "v");
  const Tensor a2 = f.load(*f.find("a"));
  EXPECT_EQ(a2.shape(), a.shape());
  EXPECT_EQ(0, std::memcmp(a2.bytes(), a.bytes(), a.size_bytes()));
  EXPECT_EQ(f.find("c")->numel(), 0);
  EXPECT_FLOAT_EQ(f.load_f32(*f.find("d")).data<float>()[1], 2.5f);
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, RejectsMalformedHeaders) {
  expect_corrupt({1, 2, 3}, "too short");
  std::vector<uint8_t> huge = raw_file("{}", 0);
  huge[6] = 1;  // 2^48-byte header
  expect_corrupt(huge, "exceeds the limit", Errc::limit_exceeded);
  // Not safetensors at all: what it is, not a header length read from its first bytes.
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
  expect_corrupt(std::vector<uint8_t>(png.begin(), png.end()), "is not a safetensors file: it is a PNG image");
  const std::string lfs = "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n";
  expect_corrupt(std::vector<uint8_t>(lfs.begin(), lfs.end()), "it is a Git LFS pointer");
  const std::string junk(64, '\x7f');
  expect_corrupt(std::vector<uint8_t>(junk.begin(), junk.end()),
                 "its header does not begin with '{' (it starts with 7f 7f 7f 7f 7f 7f 7f 7f)");
  std::vector<uint8_t> past = raw_file("{}", 0);
  past[0] = 200;
  expect_corrupt(past, "runs past the end");
  expect_corrupt(raw_file("{not json", 0), "not valid JSON");
  expect_corrupt(raw_file("[1,2]", 0), "not a JSON object");
  expect_corrupt(raw_file(std::string(100, '[') + std::string(100, ']'), 0), "nests too deeply");
  expect_corrupt(raw_file(R"({"__metadata__": {"a": 3}})", 0), "not a string");
  expect_corrupt(raw_file(R"({"x": 3})", 0), "not an object");
  expect_corrupt(raw_file(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", 4), "no string dtype");
  expect_corrupt(raw_file(R"({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}})", 4), "unknown dtype");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), "non-negative");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4), "non-negative");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4), "data_offsets");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4), "non-integer");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4), "begin > end");
}

TEST(Safetensors, RejectsInconsistentOffsets) {
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4), "ends at byte 8");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4), "need 8");
  expect_corrupt(raw_file(R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                              "y": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})", 6), "overlaps");
  expect_corrupt(raw_file(R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})", 8), "belong to no tensor");
  expect_corrupt(raw_file(R"({"x": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 9), "trailing bytes");
  // A shape whose byte count overflows 64 bits must not wrap around to a small number.
  expect_corrupt(raw_file(R"({"x": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0),
                 "too large");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0),
                 "too large");
  expect_corrupt(raw_file(R"({"x": {"dtype": "F32", "shape": [1024, 1024], "data_offsets": [0, 0]}})", 0), "need");
}

TEST(Safetensors, UnknownButValidDtypesLoadOnlyThroughRawBytes) {
  const SafetensorsFile f = SafetensorsFile::from_bytes(
      raw_file(R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}})", 3), "b");
  const auto& e = *f.find("m");
  EXPECT_FALSE(e.dtype_known);
  EXPECT_EQ(f.data(e).size(), 3u);
  EXPECT_THROW(f.load(e), Error);
}

TEST(Safetensors, RandomCorruptionNeverCrashes) {
  Tensor a(DType::f32, {16, 16});
  Tensor b(DType::f16, {7});
  const NamedTensor ts[] = {{"weight", &a}, {"bias", &b}};
  const std::vector<uint8_t> good = serialize_safetensors(ts, {{"format", "pt"}});
  std::mt19937 rng(42);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> bad = good;
    const int flips = 1 + trial % 4;
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % std::min<size_t>(bad.size(), 8 + 200);  // mostly the header
      bad[at] = static_cast<uint8_t>(rng());
    }
    if (trial % 5 == 0) bad.resize(rng() % bad.size());
    try {
      const SafetensorsFile f = SafetensorsFile::from_bytes(bad, "fuzz");
      for (const auto& e : f.entries()) {
        ASSERT_LE(e.end, f.data(e).size() + e.begin);
        if (e.dtype_known) (void)f.load(e);
      }
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_LT(accepted, 3000);
}

TEST(Safetensors, SaveIsAtomicAndOpenMaps) {
  const std::string path = ::testing::TempDir() + "/fovea_st_test.safetensors";
  Tensor a(DType::f32, {4});
  a.data<float>()[3] = 7;
  save_safetensors(path, {{"a", &a}}, {{"x", "y"}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.load(*f.find("a")).data<float>()[3], 7.0f);
  EXPECT_THROW(SafetensorsFile::open(path + ".missing"), Error);
  EXPECT_THROW(save_safetensors("/nonexistent-dir/x.safetensors", {{"a", &a}}), Error);
}

}  // namespace
}  // namespace fovea
