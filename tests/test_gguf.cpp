// The GGUF reader (fovea/gguf.hpp): valid files decode exactly, hostile files give one clear
// error and never an out-of-bounds read. (The mmproj loader and the CLI: test_encoder_gguf.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fovea/error.hpp"
#include "fovea/gguf.hpp"
#include "gguf_build.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace test;

TEST(Gguf, ParsesAValidFileAndDecodesEveryType) {
  const GgufFile f = GgufFile::from_bytes(sample().bytes(), "sample.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.find_kv("general.architecture")->as_string("a"), "clip");
  EXPECT_EQ(f.find_kv("u8")->as_int("u8"), 200);
  EXPECT_EQ(f.find_kv("i8")->as_int("i8"), -5);
  EXPECT_EQ(f.find_kv("u16")->as_int("u16"), 60000);
  EXPECT_EQ(f.find_kv("i16")->as_int("i16"), -30000);
  EXPECT_EQ(f.find_kv("u32")->as_int("u32"), 4000000000ll);
  EXPECT_EQ(f.find_kv("u64")->as_int("u64"), int64_t(1) << 40);
  EXPECT_EQ(f.find_kv("i64")->as_int("i64"), int64_t(-1) << 40);
  EXPECT_EQ(f.find_kv("f32")->as_float("f32"), 0.25);
  EXPECT_EQ(f.find_kv("f64")->as_float("f64"), 1e-300);
  EXPECT_TRUE(f.find_kv("flag")->as_bool("flag"));
  EXPECT_EQ(f.find_kv("mean")->as_floats("mean"), (std::vector<double>{0.5, 0.25, 0.125}));
  EXPECT_EQ(f.find_kv("layers")->as_ints("layers"), (std::vector<int64_t>{3, -1}));
  EXPECT_THROW(f.find_kv("mean")->as_string("mean"), Error);
  EXPECT_THROW(f.find_kv("names")->as_floats("names"), Error);
  EXPECT_THROW(f.find_kv("flag")->as_string("flag"), Error);
  EXPECT_EQ(f.find_kv("absent"), nullptr);

  const GgufTensorInfo* t = f.find_tensor("t.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 3}));  // ggml ne [3, 2] is row-major [2, 3]
  const Tensor a = f.load_f32(*t);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.data<float>()[i], float(i) - 2.5f);
  const Tensor h = f.load_f32(*f.find_tensor("t.f16"));
  EXPECT_EQ(h.data<float>()[0], 1.5f);
  EXPECT_EQ(h.data<float>()[1], -0.125f);
  EXPECT_EQ(h.data<float>()[2], 65504.0f);
  const Tensor b = f.load_f32(*f.find_tensor("t.bf16"));
  EXPECT_EQ(b.data<float>()[0], 3.0f);
  EXPECT_EQ(b.data<float>()[1], bf16_to_f32(f32_to_bf16(-1e30f)));
  const Tensor q = f.load_f32(*f.find_tensor("t.q8_0"));
  ASSERT_EQ(q.shape(), (std::vector<int64_t>{2, 32}));
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(q.data<float>()[j], 0.5f * float(j - 16));
    EXPECT_EQ(q.data<float>()[32 + j], -2.0f * float(int8_t(127 - 4 * j)));
  }
  // k-quants decode too (their values against a numpy reference: test_gguf_quants.cpp).
  const Tensor k = f.load_f32(*f.find_tensor("t.q4_k"));
  EXPECT_EQ(k.numel(), f.find_tensor("t.q4_k")->numel());
  for (int64_t i = 0; i < k.numel(); ++i) ASSERT_TRUE(std::isfinite(k.data<float>()[i]));
}

// Every proper prefix of a valid file is an error naming the file, never a crash.
TEST(Gguf, EveryTruncationIsAClearError) {
  const std::vector<uint8_t> good = sample().bytes();
  for (size_t n = 0; n < good.size(); ++n) {
    try {
      GgufFile::from_bytes(std::span(good.data(), n), "cut.gguf");
      FAIL() << "a " << n << "-byte prefix parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
      EXPECT_NE(std::string(e.what()).find("cut.gguf"), std::string::npos);
    }
  }
}

// The reader builds the name of what it reads only when the read fails (not one string per
// field and array element): the messages still name the exact field, element and tensor.
TEST(Gguf, TruncationMessagesNameTheField) {
  GgufBuild g;
  GgufValue names;
  names.type = GgufType::array;
  names.element_type = GgufType::string;
  names.array = {std::string(10, 'a'), std::string(10, 'b')};
  g.set("names", names);
  const std::string tname(40, 't');
  g.tensors.push_back({tname, {4, 2}, uint32_t(GgmlType::f32), std::vector<uint8_t>(32), std::nullopt});
  const std::vector<uint8_t> good = g.bytes();
  ASSERT_NO_THROW(GgufFile::from_bytes(good, "ok.gguf"));
  // Layout: header 24 bytes; key "names" (8 + 5), type, element type (4 each), length (8),
  // two strings of 8 + 10; then the tensor: name (8 + 40), n_dims (4), two dims (8 each),
  // type (4), offset (8). Cuts late enough that the count checks (bytes left per key/value,
  // per array element, per tensor) pass, so each read itself runs out.
  const size_t type = 24 + 13, elem0 = type + 16, elem1 = elem0 + 18, tensor = elem1 + 18;
  const size_t ndims = tensor + 48, dim0 = ndims + 4;
  const struct {
    size_t cut;
    std::string fragment;
  } cases[] = {
      {type + 2, "key names's type runs past the end"},
      {type + 6, "key names's element type runs past the end"},
      {type + 13, "key names's array length runs past the end"},
      {elem1 + 4, "key names[1] length runs past the end"},
      {elem1 + 14, "key names[1] claims 10 bytes"},
      {tensor + 36, "tensor 0's name claims 40 bytes"},
      {ndims + 2, "tensor " + tname + "'s dimension count runs past the end"},
      {dim0 + 12, "tensor " + tname + "'s dimension 1 runs past the end"},
      {dim0 + 18, "tensor " + tname + "'s type runs past the end"},
      {dim0 + 24, "tensor " + tname + "'s offset runs past the end"},
  };
  for (const auto& c : cases) {
    try {
      GgufFile::from_bytes(std::span(good.data(), c.cut), "cut.gguf");
      ADD_FAILURE() << "a " << c.cut << "-byte prefix parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.fragment), std::string::npos) << c.cut << ": " << e.what();
    }
  }
}

TEST(Gguf, HostileFilesGiveOneClearError) {
  for (const Hostile& h : hostile_files()) {
    try {
      GgufFile::from_bytes(h.bytes, h.name + ".gguf");
      ADD_FAILURE() << h.name << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), h.code) << h.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(h.fragment), std::string::npos) << h.name << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << h.name;
    }
  }
}

// Random byte flips in the header and tensor table: parse errors are fovea::Errors, and a file
// that parses has every tensor inside its data (decoding them reads only mapped bytes).
TEST(Gguf, RandomCorruptionNeverCrashes) {
  const std::vector<uint8_t> good = sample().bytes();
  const GgufFile ok = GgufFile::from_bytes(good, "sample.gguf");
  const size_t table_end = good.size() - size_t(ok.tensors().back().offset + ok.tensors().back().size_bytes);
  uint32_t s = 2463534242u;
  auto next = [&] { return s ^= s << 13, s ^= s >> 17, s ^= s << 5; };
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + int(next() % 4);
    for (int k = 0; k < flips; ++k) b[next() % table_end] ^= uint8_t(1u << (next() % 8));
    try {
      const GgufFile f = GgufFile::from_bytes(b, "fuzz.gguf");
      for (const GgufTensorInfo& t : f.tensors()) {
        ASSERT_LE(t.offset + t.size_bytes, b.size());
        try {
          (void)f.load_f32(t);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), Errc::unsupported);
        }
      }
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  }
  RecordProperty("parsed", parsed);
  RecordProperty("rejected", rejected);
  EXPECT_GT(rejected, 0);
}

std::string fixture(const std::string& dir, const std::string& file = "mmproj.gguf") {
  return test::source_dir() + "/tests/data/encoder/" + dir + "/" + file;
}

TEST(Gguf, ReadsTheMmprojFixtures) {
  const GgufFile f = GgufFile::open(fixture("gguf_llava"));
  EXPECT_EQ(f.find_kv("clip.projector_type")->as_string("p"), "mlp");
  EXPECT_EQ(f.find_kv("clip.vision.block_count")->as_int("b"), 2);
  const GgufTensorInfo* pe = f.find_tensor("v.patch_embd.weight");
  ASSERT_NE(pe, nullptr);
  EXPECT_EQ(pe->ne, (std::vector<int64_t>{8, 8, 3, 32}));  // ggml order of PyTorch's [D, C, P, P]
  EXPECT_EQ(pe->shape(), (std::vector<int64_t>{32, 3, 8, 8}));
  EXPECT_EQ(ggml_type_name(pe->type), "F16");
  EXPECT_EQ(ggml_type_name(f.find_tensor("mm.0.weight")->type), "Q8_0");
  const GgufFile s = GgufFile::open(fixture("gguf_siglip"));
  EXPECT_EQ(s.alignment(), 64u);
  for (const GgufTensorInfo& t : s.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
}

}  // namespace
}  // namespace fovea
