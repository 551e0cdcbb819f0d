// For the tests: a small GGUF writer, a valid sample file and a set of hostile files, shared by
// test_gguf.cpp (the reader) and test_encoder_gguf.cpp (the mmproj loader and the CLI).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/gguf.hpp"

namespace fovea::test {

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

inline void put_scalar(Bytes& o, GgufType t, const Scalar& s) {
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

inline GgufValue scalar(GgufType t, Scalar s) {
  GgufValue v;
  v.type = t;
  v.scalar = std::move(s);
  return v;
}
inline GgufValue array(GgufType et, std::vector<Scalar> items) {
  GgufValue v;
  v.type = GgufType::array;
  v.element_type = et;
  v.array = std::move(items);
  return v;
}

template <typename T> inline std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A small valid file: every scalar type, arrays, and one tensor of each decodable type.
inline GgufBuild sample() {
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

struct Hostile {
  std::string name;
  std::vector<uint8_t> bytes;
  Errc code;
  std::string fragment;
};

// Hostile variants of sample() and hand-made headers, each with the error it must give.
inline std::vector<Hostile> hostile_files() {
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
    // Not "magic": the file's own name holds that.
    out.push_back({"magic", b, Errc::corrupt_data, "does not start with the magic \"GGUF\""});
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
    out.push_back({"bool", o.b, Errc::corrupt_data, "is a bool of value 2"});
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
    out.push_back({"overlap", g.bytes(), Errc::corrupt_data, " overlap (data offsets "});
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

}  // namespace fovea::test
