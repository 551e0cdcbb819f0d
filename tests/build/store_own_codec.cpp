// A program that stores tokens with a codec of its own, linked against fovea::store alone
// (tests/CMakeLists.txt): the store needs the Codec interface (fovea/codec_interface.hpp), not
// the compress stage's codecs or FAISS. Exits 0 when the records round-trip through the store.
#include <cstdio>
#include <cstring>
#include <memory>

#include "fovea/codec_interface.hpp"
#include "fovea/store.hpp"

namespace {

// Keeps the upper two bytes of each float (bf16 by truncation): exact for values that are
// already bf16.
struct Truncate final : fovea::Codec {
  explicit Truncate(int64_t d) : d_(d) {}
  std::string spec() const override { return "truncate"; }
  int64_t dim() const override { return d_; }
  int64_t bytes_per_token() const override { return 2 * d_; }
  void encode_rows(const float* x, int64_t n, uint8_t* r) const override {
    for (int64_t i = 0; i < n * d_; ++i) std::memcpy(r + 2 * i, reinterpret_cast<const uint8_t*>(x + i) + 2, 2);
  }
  void decode_rows(const uint8_t* r, int64_t n, float* x) const override {
    for (int64_t i = 0; i < n * d_; ++i) {
      const uint32_t u = uint32_t(r[2 * i]) << 16 | uint32_t(r[2 * i + 1]) << 24;
      std::memcpy(x + i, &u, 4);
    }
  }
  int64_t d_;
};

}  // namespace

int main() {
  const int64_t d = 24, n = 37;
  fovea::StoreConfig config;
  config.dim = d;
  config.page_bytes = 4096;
  config.pool_pages = 8;
  config.codec = std::make_shared<Truncate>(d);
  fovea::TokenStore store(config);
  fovea::Tensor x(fovea::DType::f32, {n, d});
  for (int64_t i = 0; i < n * d; ++i) x.data<float>()[i] = float(i % 97) - 48.f;  // exact in bf16
  const fovea::SeqId seq = store.reserve(n);
  store.bind(seq, 0, n);
  store.write(seq, 0, x);
  const fovea::Tensor back = store.gather_decoded({{seq, 0, n}});
  if (back.dim(0) != n || back.dim(1) != d || std::memcmp(back.data<float>(), x.data<float>(), n * d * 4) != 0) {
    std::fprintf(stderr, "store_own_codec: records did not round-trip\n");
    return 1;
  }
  if (store.token_bytes() != 2 * d) {
    std::fprintf(stderr, "store_own_codec: record size %lld, expected %lld\n", (long long)store.token_bytes(),
                 (long long)(2 * d));
    return 1;
  }
  std::printf("store_own_codec: ok\n");
  return 0;
}
