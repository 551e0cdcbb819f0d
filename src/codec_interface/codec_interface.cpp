// The Codec interface's non-virtual parts: the checked encode/decode and the state hash.
#include <blake2.h>

#include <string>

#include "fovea/codec_interface.hpp"
#include "fovea/error.hpp"

namespace fovea {
Tensor Codec::encode(const Tensor& x) const {
  if (x.dtype() != DType::f32 || x.rank() != 2 || x.dim(1) != dim())
    throw invalid_argument("codec " + spec() + ": embeddings must be [N, " + std::to_string(dim()) + "] F32");
  if (!trained()) throw invalid_argument("codec " + spec() + " is not trained (train it or load a codebook)");
  Tensor out(DType::u8, {x.dim(0), bytes_per_token()});
  if (x.dim(0) > 0) encode_rows(x.data<float>(), x.dim(0), out.data<uint8_t>());
  return out;
}

Tensor Codec::decode(const Tensor& records) const {
  if (records.dtype() != DType::u8 || records.rank() != 2 || records.dim(1) != bytes_per_token())
    throw Error(Errc::corrupt_data, "codec " + spec() + ": records must be [N, " + std::to_string(bytes_per_token()) +
                                        "] U8");
  if (!trained()) throw invalid_argument("codec " + spec() + " is not trained (train it or load a codebook)");
  Tensor out(DType::f32, {records.dim(0), dim()});
  if (records.dim(0) > 0) decode_rows(records.data<uint8_t>(), records.dim(0), out.data<float>());
  return out;
}

std::string Codec::state_hash() const {
  blake2b_state h;
  blake2b_init(&h, 32);
  const std::string s = "fovea.codec\n" + spec() + "\n" + std::to_string(dim()) + "\n";
  blake2b_update(&h, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  for (const auto& [name, t] : state()) {
    std::string head = name + "\n";
    for (int64_t e : t.shape()) head += std::to_string(e) + ",";
    head += "\n";
    blake2b_update(&h, reinterpret_cast<const uint8_t*>(head.data()), head.size());
    blake2b_update(&h, reinterpret_cast<const uint8_t*>(t.bytes()), t.size_bytes());
  }
  uint8_t digest[32];
  blake2b_final(&h, digest, 32);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

}  // namespace fovea
