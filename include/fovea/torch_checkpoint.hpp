// fovea/torch_checkpoint.hpp — PyTorch checkpoints (what torch.save writes: `.pt`, `.pth`, HF's
// `pytorch_model.bin`), read without torch and without running their pickle.
//
//   fovea::TorchCheckpoint ck = fovea::TorchCheckpoint::open("vit_b_16-c867db91.pth");
//   const auto* e = ck.find("conv_proj.weight");        // nullptr if absent
//   fovea::Tensor w = ck.load_f32(*e);                   // a copy, any dtype, any strides
//   std::span<const std::byte> raw = ck.data(*e);        // zero-copy (mmap) when e->contiguous
//
// Format (torch.serialization, PyTorch >= 1.6): a ZIP archive of stored (uncompressed) entries
// under one root folder: `data.pkl` (the pickled object), `data/<key>` (one raw storage per
// key, little-endian), `version`, and `byteorder` (torch >= 2.1). Tensors in the pickle are
// `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` calls whose storage is
// a persistent id `('storage', torch.FloatStorage, key, location, numel)`. The legacy format
// (PyTorch < 1.6, or _use_new_zipfile_serialization=False) is read too: pickles of the magic
// number, protocol 1001, system info, the object and the sorted storage keys, then each
// storage as an int64 element count and its elements.
//
// Safety. The pickle is interpreted, never executed: a small stack machine knows the opcodes of
// protocols 2-5 that torch.save emits, builds dicts, lists, tuples, numbers and strings, and
// recognises only OrderedDict, _rebuild_tensor_v2, _rebuild_parameter[_with_state] and the
// torch.*Storage types. Every other global (a pickled nn.Module's class, numpy scalars, an
// argparse Namespace in a training checkpoint, os.system in a hostile file) becomes an inert
// placeholder object: nothing is imported or called, whatever the file says. Sizes, offsets
// and strides are checked against the archive before a byte is handed out; a malformed or
// hostile file gives Error(corrupt_data) (or Error(unsupported): TorchScript archives,
// compressed entries, big-endian data, storage views) naming the file and the problem.
//
// Which tensors. The tensors of the pickled object, named as model.state_dict() names them:
// - a dict of tensors (a state dict) gives its keys;
// - a training checkpoint (a dict without tensors at its top) gives the state dict under the
//   first of "state_dict", "model_state_dict", "model", "module", "model_ema", "state_dict_ema",
//   "ema", "teacher", "student", "net", "network" that holds tensors, else under its only
//   value that does (root_key() says which);
// - a whole pickled nn.Module (torch.save(model)) gives its parameters and buffers, walked
//   through `_parameters`, `_buffers` and `_modules` as state_dict() would.
// Nested dicts of tensors are joined with '.'; a "module." prefix on every name (DataParallel)
// is removed.
//
// Thread safety: immutable once opened; const methods may be called from any thread.
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

struct TorchCheckpointLimits {
  uint64_t max_pickle_bytes = 256ull << 20;  // data.pkl
  uint64_t max_tensors = 1u << 18;  // names (of at most 1024 bytes each)
};

class TorchCheckpoint {
 public:
  struct Entry {
    std::string name;
    std::string dtype_name;     // safetensors spelling: "F32", "BF16", "I64", "BOOL", ...
    bool dtype_known = false;   // false for types fovea has no DType for (BOOL, complex, ...)
    DType dtype = DType::u8;
    size_t element_size = 1;
    std::vector<int64_t> shape;
    std::vector<int64_t> stride;  // in elements, as torch's
    bool contiguous = false;      // row-major dense: data() is the tensor
    uint64_t storage_offset = 0;  // elements into the storage
    std::string storage_key;
    int64_t numel() const;
  };

  // Throws Error(io) if the file cannot be opened or mapped, Error(corrupt_data) /
  // Error(unsupported) / Error(limit_exceeded) for a file fovea cannot read.
  static TorchCheckpoint open(const std::string& path, const TorchCheckpointLimits& limits = {});
  // Same over bytes in memory (copied): fuzzing, buffers.
  static TorchCheckpoint from_bytes(std::span<const uint8_t> bytes, const std::string& name,
                                    const TorchCheckpointLimits& limits = {});
  // Whether the bytes start like a ZIP archive (what open() expects).
  static bool looks_like(std::span<const uint8_t> head);

  TorchCheckpoint(TorchCheckpoint&&) noexcept;
  TorchCheckpoint& operator=(TorchCheckpoint&&) noexcept;
  ~TorchCheckpoint();

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }  // in pickle order
  const Entry* find(std::string_view name) const;
  // The key of a training checkpoint the tensors were found under ("" for a state dict or a
  // pickled module); what a whole pickled object was ("state dict", "nn.Module <class>").
  const std::string& root_key() const { return root_key_; }
  const std::string& object_kind() const { return object_kind_; }
  // The tensor's bytes where they lie; empty unless e.contiguous (use load/load_f32 then).
  std::span<const std::byte> data(const Entry& e) const;
  // A copy as a dense Tensor; throws Error(unsupported) for dtypes fovea cannot represent.
  Tensor load(const Entry& e) const;
  // As load(), converted to float32.
  Tensor load_f32(const Entry& e) const;

 private:
  TorchCheckpoint() = default;
  struct FOVEA_INTERNAL Impl;
  void parse(const TorchCheckpointLimits& limits);

  std::string path_;
  std::unique_ptr<Impl> impl_;
  std::vector<Entry> entries_;
  std::string root_key_, object_kind_;
};

// Whether the file starts like a PyTorch checkpoint: a ZIP archive, or torch.save's legacy
// (pre-1.6) format. Reads 4 bytes; false when the file cannot be read.
bool looks_like_torch_checkpoint(const std::string& path);

}  // namespace fovea
FOVEA_API_END
