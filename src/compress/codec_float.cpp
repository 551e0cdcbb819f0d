// fp16 and bf16: 2·D bytes a token, round to nearest even, nothing to learn.
#include "compress/compress_internal.hpp"

namespace fovea::compress {
namespace {

class FloatCodec final : public Codec {
 public:
  FloatCodec(bool bf16, int64_t dim) : bf16_(bf16), dim_(dim) {}
  std::string spec() const override { return bf16_ ? "bf16" : "fp16"; }
  int64_t dim() const override { return dim_; }
  int64_t bytes_per_token() const override { return 2 * dim_; }

  // Records are byte-packed (no alignment): memcpy per element keeps that legal.
  void encode_rows(const float* x, int64_t n, uint8_t* r) const override {
    const int64_t total = n * dim_;
    for (int64_t i = 0; i < total; ++i) {
      const uint16_t h = bf16_ ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
      r[2 * i] = uint8_t(h & 0xff);
      r[2 * i + 1] = uint8_t(h >> 8);
    }
  }
  void decode_rows(const uint8_t* r, int64_t n, float* x) const override {
    const int64_t total = n * dim_;
    for (int64_t i = 0; i < total; ++i) {
      const uint16_t h = uint16_t(r[2 * i] | (r[2 * i + 1] << 8));
      x[i] = bf16_ ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  std::optional<ElementwiseDecode> elementwise_decode() const override {
    ElementwiseDecode d;
    d.kind = bf16_ ? ElementwiseDecode::Kind::bf16 : ElementwiseDecode::Kind::f16;
    return d;
  }

 private:
  bool bf16_;
  int64_t dim_;
};

}  // namespace

std::unique_ptr<Codec> make_float_codec(bool bf16, int64_t dim) { return std::make_unique<FloatCodec>(bf16, dim); }

}  // namespace fovea::compress
