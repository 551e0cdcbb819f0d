// fovea/codec_interface.hpp — the Codec interface alone: what a token store needs to hold
// compressed records, without the codecs themselves (their factory, FAISS training and the
// compression reports are fovea/compress.hpp, in the compress stage).
//
//   // A codec that keeps the first two bytes of each float (truncated bf16), written against
//   // the interface only:
//   struct Bf16Truncate final : fovea::Codec {
//     std::string spec() const override { return "bf16-truncate"; }
//     int64_t dim() const override { return 4; }
//     int64_t bytes_per_token() const override { return 8; }
//     void encode_rows(const float* x, int64_t n, uint8_t* r) const override {
//       for (int64_t i = 0; i < n * 4; ++i) std::memcpy(r + 2 * i, reinterpret_cast<const uint8_t*>(x + i) + 2, 2);
//     }
//     void decode_rows(const uint8_t* r, int64_t n, float* x) const override {
//       for (int64_t i = 0; i < n * 4; ++i) {
//         uint32_t u = uint32_t(r[2 * i]) << 16 | uint32_t(r[2 * i + 1]) << 24;
//         std::memcpy(x + i, &u, 4);
//       }
//     }
//   };
//   fovea::StoreConfig config;          // fovea/store.hpp
//   config.dim = 4;
//   config.codec = std::make_shared<Bf16Truncate>();
//
// A program that stores tokens links fovea::store, which depends on this stage only: the
// compress stage (and with it FAISS) is linked only by those who make or train codecs.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

// A decode simple enough for a shader: every output element comes from its own bytes of the
// record (the store's Vulkan gather decodes these on the device).
struct ElementwiseDecode {
  enum class Kind : uint8_t {
    f16,        // x[d] = half(record[2d..2d+1])
    bf16,       // x[d] = bfloat16(record[2d..2d+1])
    u8_affine,  // x[d] = lo[d] + step[d] * record[d]
  };
  Kind kind = Kind::f16;
  std::vector<float> lo, step;  // u8_affine only: [D] each
};

class Codec {
 public:
  virtual ~Codec() = default;

  // The spec string that make_codec() takes to build this codec ("pca:128+int8").
  virtual std::string spec() const = 0;
  // D: floats per token.
  virtual int64_t dim() const = 0;
  virtual int64_t bytes_per_token() const = 0;

  // Whether train() must run (or a codebook be loaded) before encode/decode.
  virtual bool needs_training() const { return false; }
  virtual bool trained() const { return true; }
  // Vectors below which train() throws, and below which it trains but warns.
  virtual int64_t min_train_vectors() const { return 0; }
  virtual int64_t recommended_train_vectors() const { return 0; }
  // `x`: [n, D] f32. Throws Error(invalid_argument) for a bad shape or dtype, Error(unsupported)
  // for too few vectors.
  virtual void train(const Tensor& x) {}

  // n tokens, row-major: x [n, D] floats -> n records of bytes_per_token() bytes, and back.
  // The raw forms do no checking; call them with trained codecs and the right sizes.
  virtual void encode_rows(const float* x, int64_t n, uint8_t* records) const = 0;
  virtual void decode_rows(const uint8_t* records, int64_t n, float* x) const = 0;

  // Checked forms: [N, D] f32 -> [N, bytes_per_token()] u8, and back.
  Tensor encode(const Tensor& x) const;
  Tensor decode(const Tensor& records) const;

  // The learned state, as named f32 tensors (empty for fp16/bf16), and its inverse.
  virtual std::vector<std::pair<std::string, Tensor>> state() const { return {}; }
  // Throws Error(corrupt_data) naming the tensor that is missing or has the wrong shape.
  virtual void load_state(const std::map<std::string, const Tensor*>& tensors) {}

  // Set when decoding is elementwise (fp16, bf16, int8), for decoding on a device.
  virtual std::optional<ElementwiseDecode> elementwise_decode() const { return std::nullopt; }

  // BLAKE2b-256 (hex) of the spec, D and every state tensor: the compressed file's reference.
  std::string state_hash() const;

  // OpenMP threads for FAISS's training and coding (set for the call, restored after; 0: the
  // OpenMP default). 1 by default: on shared, busy cores FAISS's many short parallel regions
  // wait at barriers for descheduled threads (a PQ training here took 78 s on 2 threads
  // under load and 3.5 s on one).
  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }

 private:
  int threads_ = 1;
};

}  // namespace fovea
FOVEA_API_END
