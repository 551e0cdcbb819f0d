// fovea/safetensors.hpp — the file format fovea reads checkpoints from and writes tokens to.
//
//   fovea::SafetensorsFile f = fovea::SafetensorsFile::open("model.safetensors");
//   const auto* e = f.find("vision_model.embeddings.patch_embedding.weight");  // nullptr if absent
//   fovea::Tensor w = f.load(*e);                                              // a copy
//   std::span<const std::byte> raw = f.data(*e);                               // zero-copy (mmap)
//
//   fovea::Tensor patches(fovea::DType::f32, {10, 3, 16, 16});
//   fovea::save_safetensors("out.safetensors", {{"patches", &patches}}, {{"budget", "273"}});
//
// Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {str: str}}, then the byte buffer. The reader maps the file and validates everything before
// handing out a byte: header length (≤ max_header_bytes and inside the file), JSON syntax,
// known dtypes, non-negative shapes whose byte size matches the offsets, offsets in bounds,
// no two tensors overlapping, and the tensors covering the whole buffer with no gaps. A
// malformed or hostile file gives Error(corrupt_data) naming the file and the problem.
//
// Thread safety: a SafetensorsFile is immutable once opened (a read-only mapping): its const
// methods may be called from any number of threads. The save functions keep no shared state.
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100ull << 20;
};

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    std::string dtype_name;  // as written, e.g. "BF16"
    bool dtype_known = false;  // false for dtypes fovea has no DType for (BOOL, F8_*, U32, U64)
    DType dtype = DType::u8;
    size_t element_size = 1;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte offsets inside the data buffer
    int64_t numel() const;
  };

  // Throws Error(io) if the file cannot be opened or mapped, Error(corrupt_data) /
  // Error(limit_exceeded) for a malformed file.
  static SafetensorsFile open(const std::string& path, const SafetensorsLimits& limits = {});
  // Same validation over bytes in memory (copied).
  static SafetensorsFile from_bytes(std::span<const uint8_t> bytes, const std::string& name,
                                    const SafetensorsLimits& limits = {});

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in file (offset) order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const Entry* find(std::string_view name) const;
  std::span<const std::byte> data(const Entry& e) const;
  // A copy as a Tensor; throws Error(unsupported) for dtypes fovea cannot represent.
  Tensor load(const Entry& e) const;
  // As load(), converted to float32 (from F32, F16, BF16, F64 and the integer types).
  Tensor load_f32(const Entry& e) const;

 private:
  SafetensorsFile() = default;
  struct Mapping;
  void parse(const SafetensorsLimits& limits);

  std::string path_;
  std::unique_ptr<Mapping> map_;
  const std::byte* buffer_ = nullptr;  // start of the data buffer
  uint64_t buffer_size_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct NamedTensor {
  std::string name;
  const Tensor* tensor = nullptr;
};

// Serialises tensors in the given order (offsets ascending, header padded with spaces to a
// multiple of 8 bytes so every tensor is 8-byte aligned when the file is mapped).
std::vector<uint8_t> serialize_safetensors(std::span<const NamedTensor> tensors,
                                           const std::map<std::string, std::string>& metadata);
// serialize + write_file_atomic. Throws Error(io) on failure; no partial file is left.
void save_safetensors(const std::string& path, std::span<const NamedTensor> tensors,
                      const std::map<std::string, std::string>& metadata = {});
inline void save_safetensors(const std::string& path, std::initializer_list<NamedTensor> tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  save_safetensors(path, std::span<const NamedTensor>(tensors.begin(), tensors.size()), metadata);
}

}  // namespace fovea
FOVEA_API_END
