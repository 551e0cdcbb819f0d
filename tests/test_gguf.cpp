// The GGUF reader (fovea/gguf.hpp) and the llama.cpp mmproj loader: valid files decode exactly,
// hostile files give one clear error and never an out-of-bounds read, the loader names what it
// does not support.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/gguf.hpp"
#include "fovea/image.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

// ---- a small GGUF writer for the tests ------------------------------------------------------
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T> Bytes& put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

using Scalar = std::variant<uint64_t, int64_t, double, bool, std::string>;

void put_scalar(Bytes& o, GgufType t, const Scalar& s) {
  switch (t) {
    case GgufType::u8: o.put<uint8_t>(uint8_t(std::get<uint64_t>(s))); break;
    case GgufType::i8: o.put<int8_t>(int8_t(std::get<int64_t>(s))); break;
    case GgufType::u16: o.put<uint16_t>(uint16_t(std::get<uint64_t>(s))); break;
    case GgufType::i16: o.put<int16_t>(int16_t(std::get<int64_t>(s))); break;
    case GgufType::u32: o.put<uint32_t>(uint32_t(std::get<uint64_t>(s))); break;
    case GgufType::i32: o.put<int32_t>(int32_t(std::get<int64_t>(s))); break;
    case GgufType::u64: o.put<uint64_t>(std::get<uint64_t>(s)); break;
    case GgufType::i64: o.put<int64_t>(std::get<int64_t>(s)); break;
    case GgufType::f32: o.put<float>(float(std::get<double>(s))); break;
    case GgufType::f64: o.put<double>(std::get<double>(s)); break;
    case GgufType::boolean: o.put<uint8_t>(std::get<bool>(s) ? 1 : 0); break;
    case GgufType::string: o.str(std::get<std::string>(s)); break;
    case GgufType::array: break;
  }
}

struct GgufBuild {
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset;  // default: packed, aligned
  };
  std::vector<std::pair<std::string, GgufValue>> kv;
  std::vector<T> tensors;
  uint64_t alignment = 32;

  void set(const std::string& key, GgufValue v) {
    for (auto& [k, old] : kv)
      if (k == key) {
        old = std::move(v);
        return;
      }
    kv.emplace_back(key, std::move(v));
  }
  void erase_kv(const std::string& key) {
    std::erase_if(kv, [&](const auto& p) { return p.first == key; });
  }
  T* tensor(const std::string& name) {
    for (T& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  std::vector<uint8_t> bytes() const {
    Bytes o;
    o.b = {'G', 'G', 'U', 'F'};
    o.put<uint32_t>(3).put<uint64_t>(tensors.size()).put<uint64_t>(kv.size());
    for (const auto& [k, v] : kv) {
      o.str(k).put<uint32_t>(uint32_t(v.type));
      if (v.type == GgufType::array) {
        o.put<uint32_t>(uint32_t(v.element_type)).put<uint64_t>(v.array.size());
        for (const Scalar& s : v.array) put_scalar(o, v.element_type, s);
      } else {
        put_scalar(o, v.type, v.scalar);
      }
    }
    uint64_t off = 0;
    std::vector<uint64_t> offsets;
    for (const T& t : tensors) {
      o.str(t.name).put<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t n : t.ne) o.put<uint64_t>(n);
      const uint64_t at = t.offset.value_or(off);
      o.put<uint32_t>(t.type).put<uint64_t>(at);
      offsets.push_back(at);
      off = at + t.data.size();
      off += (alignment - off % alignment) % alignment;
    }
    o.b.resize(o.b.size() + (alignment - o.b.size() % alignment) % alignment, 0);
    const size_t base = o.b.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (base + offsets[i] + tensors[i].data.size() > o.b.size()) o.b.resize(base + offsets[i] + tensors[i].data.size(), 0);
      std::memcpy(o.b.data() + base + offsets[i], tensors[i].data.data(), tensors[i].data.size());
    }
    return o.b;
  }
  static GgufBuild from(const GgufFile& f) {
    GgufBuild g;
    g.alignment = f.alignment();
    for (const auto& [k, v] : f.kv()) g.kv.emplace_back(k, v);
    for (const GgufTensorInfo& t : f.tensors()) {
      const auto d = f.data(t);
      const auto* p = reinterpret_cast<const uint8_t*>(d.data());
      g.tensors.push_back({t.name, {t.ne.begin(), t.ne.end()}, t.type, {p, p + d.size()}, std::nullopt});
    }
    return g;
  }
};

GgufValue scalar(GgufType t, Scalar s) {
  GgufValue v;
  v.type = t;
  v.scalar = std::move(s);
  return v;
}
GgufValue array(GgufType et, std::vector<Scalar> items) {
  GgufValue v;
  v.type = GgufType::array;
  v.element_type = et;
  v.array = std::move(items);
  return v;
}

template <typename T> std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A small valid file: every scalar type, arrays, and one tensor of each decodable type.
GgufBuild sample() {
  GgufBuild g;
  g.set("general.architecture", scalar(GgufType::string, std::string("clip")));
  g.set("u8", scalar(GgufType::u8, uint64_t(200)));
  g.set("i8", scalar(GgufType::i8, int64_t(-5)));
  g.set("u16", scalar(GgufType::u16, uint64_t(60000)));
  g.set("i16", scalar(GgufType::i16, int64_t(-30000)));
  g.set("u32", scalar(GgufType::u32, uint64_t(4000000000u)));
  g.set("i32", scalar(GgufType::i32, int64_t(-7)));
  g.set("u64", scalar(GgufType::u64, uint64_t(1) << 40));
  g.set("i64", scalar(GgufType::i64, int64_t(-1) << 40));
  g.set("f32", scalar(GgufType::f32, 0.25));
  g.set("f64", scalar(GgufType::f64, 1e-300));
  g.set("flag", scalar(GgufType::boolean, true));
  g.set("mean", array(GgufType::f32, {0.5, 0.25, 0.125}));
  g.set("layers", array(GgufType::i32, {int64_t(3), int64_t(-1)}));
  g.set("names", array(GgufType::string, {std::string("a"), std::string("bc")}));
  std::vector<float> f32(6);
  for (int i = 0; i < 6; ++i) f32[i] = float(i) - 2.5f;
  g.tensors.push_back({"t.f32", {3, 2}, 0, raw(f32), std::nullopt});
  std::vector<uint16_t> f16 = {f32_to_f16(1.5f), f32_to_f16(-0.125f), f32_to_f16(65504.0f), f32_to_f16(0.0f)};
  g.tensors.push_back({"t.f16", {4}, 1, raw(f16), std::nullopt});
  std::vector<uint16_t> bf = {f32_to_bf16(3.0f), f32_to_bf16(-1e30f)};
  g.tensors.push_back({"t.bf16", {2}, 30, raw(bf), std::nullopt});
  // Q8_0: two blocks of 32 (d = 0.5, q = j − 16; d = −2, q = 127 − 4j).
  std::vector<uint8_t> q;
  for (int b = 0; b < 2; ++b) {
    const uint16_t d = f32_to_f16(b == 0 ? 0.5f : -2.0f);
    q.push_back(uint8_t(d & 0xff));
    q.push_back(uint8_t(d >> 8));
    for (int j = 0; j < 32; ++j) q.push_back(uint8_t(int8_t(b == 0 ? j - 16 : 127 - 4 * j)));
  }
  g.tensors.push_back({"t.q8_0", {32, 2}, 8, q, std::nullopt});
  // Q4_K (256 elements in 144 bytes): valid, but not decodable by fovea.
  g.tensors.push_back({"t.q4_k", {256}, 12, std::vector<uint8_t>(144, 0), std::nullopt});
  return g;
}

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
  try {
    f.load_f32(*f.find_tensor("t.q4_k"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::unsupported);
    EXPECT_NE(std::string(e.what()).find("unsupported GGUF tensor type Q4_K in t.q4_k"), std::string::npos) << e.what();
  }
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

struct Hostile {
  std::string name;
  std::vector<uint8_t> bytes;
  Errc code;
  std::string fragment;
};

// Byte offset of the first tensor info (after the header and the key/values of `g`).
std::vector<Hostile> hostile_files() {
  std::vector<Hostile> out;
  auto header = [](uint32_t version, uint64_t nt, uint64_t nkv) {
    Bytes o;
    o.b = {'G', 'G', 'U', 'F'};
    o.put<uint32_t>(version).put<uint64_t>(nt).put<uint64_t>(nkv);
    return o;
  };
  {
    std::vector<uint8_t> b = sample().bytes();
    b[0] = 'X';
    out.push_back({"magic", b, Errc::corrupt_data, "magic"});
  }
  out.push_back({"version1", header(1, 0, 0).b, Errc::unsupported, "version 1"});
  out.push_back({"bigendian", header(0x03000000u, 0, 0).b, Errc::unsupported, "big-endian"});
  out.push_back({"kv_count", header(3, 0, uint64_t(1) << 62).b, Errc::corrupt_data, "key/value count"});
  out.push_back({"tensor_count", header(3, ~uint64_t(0), 0).b, Errc::corrupt_data, "tensor count"});
  {
    Bytes o = header(3, 0, 1);
    o.put<uint64_t>(~uint64_t(0)).put<uint64_t>(0).put<uint64_t>(0);  // key length 2^64 − 1
    out.push_back({"key_length", o.b, Errc::corrupt_data, "claims"});
  }
  {
    Bytes o = header(3, 0, 1);
    o.str("k").put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 63);  // string value length
    out.push_back({"string_length", o.b, Errc::corrupt_data, "claims"});
  }
  {
    Bytes o = header(3, 0, 1);
    o.str("k").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(uint64_t(1) << 62);  // 2^62 floats
    out.push_back({"array_length", o.b, Errc::corrupt_data, "array elements"});
  }
  {
    Bytes o = header(3, 0, 1);
    o.str("k").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(1);
    out.push_back({"nested_array", o.b, Errc::corrupt_data, "nested"});
  }
  {
    Bytes o = header(3, 0, 1);
    o.str("k").put<uint32_t>(13).put<uint64_t>(0);
    out.push_back({"value_type", o.b, Errc::corrupt_data, "unknown value type 13"});
  }
  {
    Bytes o = header(3, 0, 1);
    o.str("k").put<uint32_t>(7).put<uint8_t>(2);
    out.push_back({"bool", o.b, Errc::corrupt_data, "bool"});
  }
  {
    GgufBuild g = sample();
    g.kv.push_back({"u8", scalar(GgufType::u8, uint64_t(1))});
    out.push_back({"duplicate_key", g.bytes(), Errc::corrupt_data, "key u8 appears twice"});
  }
  {
    GgufBuild g = sample();
    g.set("general.alignment", scalar(GgufType::u32, uint64_t(24)));
    out.push_back({"alignment", g.bytes(), Errc::corrupt_data, "power of two"});
  }
  {
    GgufBuild g = sample();
    g.tensors[0].ne = {};
    out.push_back({"zero_dims", g.bytes(), Errc::corrupt_data, "0 dimensions"});
    g = sample();
    g.tensors[0].ne = {1, 1, 1, 1, 6};
    out.push_back({"five_dims", g.bytes(), Errc::corrupt_data, "5 dimensions"});
    g = sample();
    g.tensors[0].ne = {uint64_t(1) << 40, uint64_t(1) << 40};
    out.push_back({"dims_overflow", g.bytes(), Errc::corrupt_data, "overflows"});
    g = sample();
    g.tensors[0].ne = {uint64_t(1) << 30, 8};  // a valid count, far more data than the file holds
    out.push_back({"beyond_data", g.bytes(), Errc::corrupt_data, "runs past the end"});
    g = sample();
    g.tensors[1].offset = 8;  // not a multiple of 32
    out.push_back({"unaligned", g.bytes(), Errc::corrupt_data, "not a multiple of the alignment"});
    g = sample();
    g.tensors[1].offset = 0;  // on top of t.f32
    out.push_back({"overlap", g.bytes(), Errc::corrupt_data, "overlap"});
    g = sample();
    g.tensors[2].type = 99;
    out.push_back({"unknown_type", g.bytes(), Errc::unsupported, "unsupported GGUF tensor type 99 in t.bf16"});
    g = sample();
    g.tensors[3].ne = {16, 4};  // Q8_0 rows must be multiples of 32
    out.push_back({"q8_rows", g.bytes(), Errc::corrupt_data, "multiple of Q8_0's block"});
    g = sample();
    g.tensors[1].name = "t.f32";
    out.push_back({"duplicate_tensor", g.bytes(), Errc::corrupt_data, "appears twice"});
  }
  return out;
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

// ---- the mmproj loader ---------------------------------------------------------------------------

void expect_load_error(const std::string& path, Errc code, const std::vector<std::string>& fragments) {
  try {
    VitModel::load(path);
    ADD_FAILURE() << "loaded " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << f << " not in: " << e.what();
  }
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

TEST(GgufMmproj, LoadsTheLlavaLayoutAndItsContract) {
  const VitModel m = VitModel::load(fixture("gguf_llava"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "gguf_mmproj");
  EXPECT_EQ(c.family, VitFamily::clip);
  EXPECT_TRUE(c.class_token);
  EXPECT_TRUE(c.pre_norm);
  EXPECT_EQ(c.final_norm, FinalNorm::none);  // the converter leaves post_layernorm out
  EXPECT_EQ(c.layers, 2);                     // every stored block: HF's hidden_states[-2]
  EXPECT_EQ(c.projector, ProjectorType::mlp);
  EXPECT_EQ(c.projector_hidden, 48);
  EXPECT_EQ(c.projector_dim, 40);
  EXPECT_EQ(c.act, Activation::quick_gelu);
  EXPECT_EQ(c.input.source, "GGUF clip.vision.image_mean / image_std");
  EXPECT_FLOAT_EQ(c.input.mean[0], 0.48145466f);
  EXPECT_FLOAT_EQ(c.input.std[2], 0.27577711f);
  EXPECT_NE(embedding_output(c).find("projector"), std::string::npos);
  const VitModel s = VitModel::load(fixture("gguf_siglip"));
  EXPECT_EQ(s.config().family, VitFamily::siglip);
  EXPECT_FALSE(s.config().class_token);
  EXPECT_TRUE(s.config().patch_bias);
  EXPECT_EQ(s.config().final_norm, FinalNorm::all_tokens);
  EXPECT_EQ(s.config().act, Activation::gelu_tanh);
  EXPECT_EQ(s.config().projector, ProjectorType::none);
  EXPECT_FLOAT_EQ(s.config().input.mean[1], 0.5f);
}

TEST(GgufMmproj, FeatureLayerSelectsTheBlocksRun) {
  const std::string dir = test::temp_dir("gguf_feature");
  GgufBuild g = GgufBuild::from(GgufFile::open(fixture("gguf_llava")));
  g.set("clip.vision.feature_layer", array(GgufType::i32, {int64_t(1)}));
  write_file(dir + "/one.gguf", g.bytes());
  const VitModel m = VitModel::load(dir + "/one.gguf");
  EXPECT_EQ(m.config().layers, 1);
  EXPECT_EQ(m.config().layers_in_checkpoint, 2);
  g.set("clip.vision.feature_layer", array(GgufType::i32, {int64_t(1), int64_t(2)}));
  write_file(dir + "/two.gguf", g.bytes());
  expect_load_error(dir + "/two.gguf", Errc::unsupported, {"feature_layer lists 2 layers"});
  g.set("clip.vision.feature_layer", array(GgufType::i32, {int64_t(7)}));
  write_file(dir + "/seven.gguf", g.bytes());
  expect_load_error(dir + "/seven.gguf", Errc::corrupt_data, {"feature_layer 7"});
}

TEST(GgufMmproj, NamesWhatItDoesNotSupportOrFind) {
  const std::string dir = test::temp_dir("gguf_loader_errors");
  const GgufBuild base = GgufBuild::from(GgufFile::open(fixture("gguf_llava")));
  GgufBuild g = base;
  g.set("clip.projector_type", scalar(GgufType::string, std::string("ldp")));
  write_file(dir + "/ldp.gguf", g.bytes());
  expect_load_error(dir + "/ldp.gguf", Errc::unsupported, {"projector type 'ldp' is not supported", "'mlp'", "resampler"});

  g = base;
  std::erase_if(g.tensors, [](const GgufBuild::T& t) { return t.name == "v.blk.1.ln2.bias" || t.name == "mm.2.bias"; });
  write_file(dir + "/missing.gguf", g.bytes());
  expect_load_error(dir + "/missing.gguf", Errc::corrupt_data, {"missing 2 tensor(s)", "v.blk.1.ln2.bias [32]", "mm.2.bias [40]"});

  g = base;
  GgufBuild::T* q = g.tensor("v.blk.0.attn_q.weight");
  q->type = 12;  // Q4_K, a valid ggml type; its 256-element rows cannot be a 32x32 matrix
  q->ne = {256, 4};
  q->data.assign(4 * 144, 0);
  write_file(dir + "/q4k.gguf", g.bytes());
  expect_load_error(dir + "/q4k.gguf", Errc::corrupt_data, {"v.blk.0.attn_q.weight has shape [4, 256], expected [32, 32]"});
  q->type = 26;  // I32: right shape, a type fovea does not decode
  q->ne = {32, 32};
  q->data.assign(32 * 32 * 4, 0);
  write_file(dir + "/i32.gguf", g.bytes());
  expect_load_error(dir + "/i32.gguf", Errc::unsupported, {"unsupported GGUF tensor type I32 in v.blk.0.attn_q.weight"});

  g = base;
  g.set("general.architecture", scalar(GgufType::string, std::string("llama")));
  write_file(dir + "/llm.gguf", g.bytes());
  expect_load_error(dir + "/llm.gguf", Errc::unsupported, {"architecture 'llama'", "mmproj"});

  g = base;
  g.erase_kv("clip.vision.image_mean");
  write_file(dir + "/nomean.gguf", g.bytes());
  expect_load_error(dir + "/nomean.gguf", Errc::corrupt_data, {"clip.vision.image_mean"});

  g = base;
  g.set("clip.vision.embedding_length", scalar(GgufType::u32, uint64_t(48)));
  write_file(dir + "/width.gguf", g.bytes());
  expect_load_error(dir + "/width.gguf", Errc::corrupt_data, {"v.patch_embd.weight has shape [32, 3, 8, 8]"});
}

// The CLI: every hostile file is one "fovea: error:" line and exit 1, and no output file.
TEST(GgufCli, HostileFilesExitOneWithOneLine) {
  const std::string dir = test::temp_dir("gguf_cli");
  const std::string image = fixture("gguf_llava", "image.png");
  std::vector<Hostile> files = hostile_files();
  const std::vector<uint8_t> real = [&] {
    std::ifstream in(fixture("gguf_llava"), std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }();
  files.push_back({"truncated_real", std::vector<uint8_t>(real.begin(), real.begin() + real.size() / 2), Errc::corrupt_data,
                   "runs past the end"});
  files.push_back({"header_only", std::vector<uint8_t>(real.begin(), real.begin() + 16), Errc::corrupt_data, "key/value count"});
  for (const Hostile& h : files) {
    const std::string path = dir + "/" + h.name + ".gguf";
    write_file(path, h.bytes);
    const test::RunResult r = test::run_cli({"encode", image, "--uniform", "--model", path, "-o", dir + "/o.safetensors"});
    EXPECT_EQ(r.exit_code, 1) << h.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << h.name << ": " << r.err;
    EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << h.name << ": " << r.err;
    EXPECT_NE(r.err.find(h.fragment), std::string::npos) << h.name << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(dir + "/o.safetensors"));
}

}  // namespace
}  // namespace fovea
