// fovea/gguf.hpp — reads GGUF files (ggml / llama.cpp's model format), e.g. mmproj vision towers.
//
//   fovea::GgufFile f = fovea::GgufFile::open("mmproj-model-f16.gguf");
//   const fovea::GgufValue* v = f.find_kv("clip.vision.image_mean");   // nullptr if absent
//   std::vector<double> mean = v->as_floats("clip.vision.image_mean");  // throws on a wrong type
//   const fovea::GgufTensorInfo* t = f.find_tensor("v.patch_embd.weight");
//   fovea::Tensor w = f.load_f32(*t);   // [D, C, P, P]: ggml's dims reversed to row-major order
//
// Format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), little-endian, versions 2
// and 3: magic "GGUF", u32 version, u64 tensor count, u64 key/value count, the key/value pairs
// (u64-length strings, typed values, typed arrays), the tensor infos (name, u32 n_dims, u64
// dims in ggml order ne[0] = the fastest-varying, u32 ggml type, u64 offset), padding to
// `general.alignment` (32 by default), then the data. A tensor's offset is relative to the data
// section and a multiple of the alignment.
//
// The reader maps the file and checks everything before handing out a byte: magic and version,
// every count and length against the bytes left (with overflow checks), value types, no nested
// arrays, unique keys and tensor names, 1..4 dims, each dim ≥ 1 and the element count in range,
// a row length that is a multiple of the type's block size, offsets aligned, inside the data
// section and not overlapping. A malformed or hostile file gives one Error(corrupt_data) naming
// the file and the problem; a well-formed file of an unknown tensor type gives
// Error(unsupported) naming the type and the tensor when that tensor is loaded.
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

// GGUF metadata value types (gguf_type).
enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8,
  array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view to_string(GgufType t);

// One metadata value. Scalars are widened (integers to int64/uint64, floats to double); an
// array holds its element type and its elements (arrays never nest here).
struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType element_type = GgufType::u8;  // arrays only
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  std::vector<std::variant<uint64_t, int64_t, double, bool, std::string>> array;

  // Checked accessors: Error(corrupt_data) "key K has type T, expected ..." on a mismatch.
  // as_int accepts every integer type (and bool); as_float accepts floats and integers.
  int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
  std::vector<double> as_floats(std::string_view key) const;   // an array of numbers
  std::vector<int64_t> as_ints(std::string_view key) const;    // an array of integers
};

// ggml tensor types fovea can decode; the others are named in errors (ggml_type_name).
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8,
  q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15, bf16 = 30
};
std::string ggml_type_name(uint32_t type);
// Whether fovea decodes ggml type `type` (the GgmlType values).
bool ggml_type_supported(uint32_t type);
// The types fovea decodes, for messages: "F32, F16, BF16, Q8_0, Q4_0, ...".
const char* ggml_supported_types();
// n values of an F16 or block-quantized tensor (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
// Q8_K; n a multiple of the type's block) at src into dst, as ggml's dequantize_row_* gives them.
// False for any other type.
bool ggml_dequantize(uint32_t type, const std::byte* src, int64_t n, float* dst);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] varies fastest
  uint32_t type = 0;         // ggml_type
  uint64_t offset = 0;       // inside the data section
  uint64_t size_bytes = 0;
  // Row-major shape (ne reversed), as PyTorch / safetensors write it.
  std::vector<int64_t> shape() const;
  int64_t numel() const;
};

struct GgufLimits {
  uint64_t max_kv = 1 << 20;            // key/value pairs
  uint64_t max_tensors = 1 << 20;
  uint64_t max_string_bytes = 1 << 26;  // one string
  uint64_t max_array_elements = 1 << 22;  // an LLM vocabulary is < 1M entries
};

class GgufFile {
 public:
  // Throws Error(io) when the file cannot be opened or mapped, Error(corrupt_data) for a
  // malformed one, Error(limit_exceeded) past `limits`.
  static GgufFile open(const std::string& path, const GgufLimits& limits = {});
  // The same checks over bytes in memory (copied); `name` is used in messages.
  static GgufFile from_bytes(std::span<const uint8_t> bytes, const std::string& name,
                             const GgufLimits& limits = {});

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& kv() const { return kv_; }
  const GgufValue* find_kv(std::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // in file order
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  std::span<const std::byte> data(const GgufTensorInfo& t) const;
  // The tensor decoded to float32 with its row-major shape (ggml_type_supported types); any other
  // type throws Error(unsupported, "unsupported GGUF tensor type X in T").
  Tensor load_f32(const GgufTensorInfo& t) const;

 private:
  GgufFile() = default;
  struct Mapping;
  void parse(const GgufLimits& limits);

  std::string path_;
  std::unique_ptr<Mapping> map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  const std::byte* data_ = nullptr;
  uint64_t data_size_ = 0;
};

// True when the file starts with the GGUF magic (reads 4 bytes; false when unreadable).
bool looks_like_gguf(const std::string& path);

}  // namespace fovea
FOVEA_API_END
