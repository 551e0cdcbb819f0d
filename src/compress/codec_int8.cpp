// int8: per dimension an 8-bit affine code calibrated on training data, D bytes a token.
//
// The vectorised kernels are in int8_hwy.cpp (Highway, dispatched at run time); the *_ref
// versions here are the scalar references the tests compare them with, and the tails.
#include <algorithm>
#include <cmath>

#include "compress/compress_internal.hpp"
#include "fovea/error.hpp"

namespace fovea::compress {

void u8_affine_encode_ref(const float* x, int64_t n, int64_t dim, const float* lo, const float* inv_step, uint8_t* q) {
  for (int64_t i = 0; i < n * dim; ++i) {
    const int64_t d = i % dim;
    const float v = (x[i] - lo[d]) * inv_step[d];
    q[i] = std::isnan(v) ? 0 : uint8_t(std::floor(std::clamp(v, 0.f, 255.f) + 0.5f));
  }
}

void u8_affine_decode_ref(const uint8_t* q, int64_t n, int64_t dim, const float* lo, const float* step, float* x) {
  for (int64_t i = 0; i < n * dim; ++i) {
    const volatile float prod = step[i % dim] * float(q[i]);  // no fused multiply-add
    x[i] = lo[i % dim] + prod;
  }
}

void AffineU8::calibrate(const float* x, int64_t n, int64_t dim) {
  std::vector<float> mn(size_t(dim), INFINITY), mx(size_t(dim), -INFINITY);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t d = 0; d < dim; ++d) {
      const float v = x[t * dim + d];
      if (!std::isfinite(v)) continue;
      mn[size_t(d)] = std::min(mn[size_t(d)], v);
      mx[size_t(d)] = std::max(mx[size_t(d)], v);
    }
  std::vector<float> l(static_cast<size_t>(dim)), s(static_cast<size_t>(dim));
  for (int64_t d = 0; d < dim; ++d) {
    float a = mn[size_t(d)], b = mx[size_t(d)];
    if (!(a <= b)) a = b = 0;  // no finite value seen
    const float margin = (b - a) / 32;
    a -= margin;
    b += margin;
    l[size_t(d)] = a;
    s[size_t(d)] = b > a ? (b - a) / 255.f : 1.f;  // a constant dimension codes as q = 0
  }
  set(std::move(l), std::move(s));
}

void AffineU8::set(std::vector<float> lo_, std::vector<float> step_) {
  lo = std::move(lo_);
  step = std::move(step_);
  inv_step.resize(step.size());
  for (size_t d = 0; d < step.size(); ++d) inv_step[d] = step[d] > 0 ? 1.f / step[d] : 0.f;
}

void AffineU8::encode(const float* x, int64_t n, uint8_t* q) const {
  u8_affine_encode(x, n, int64_t(lo.size()), lo.data(), inv_step.data(), q);
}

void AffineU8::decode(const uint8_t* q, int64_t n, float* x) const {
  u8_affine_decode(q, n, int64_t(lo.size()), lo.data(), step.data(), x);
}

void AffineU8::append_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  const int64_t d = int64_t(lo.size());
  Tensor l(DType::f32, {d}), s(DType::f32, {d});
  std::copy(lo.begin(), lo.end(), l.data<float>());
  std::copy(step.begin(), step.end(), s.data<float>());
  out.emplace_back(prefix + ".lo", std::move(l));
  out.emplace_back(prefix + ".step", std::move(s));
}

void AffineU8::load_state(const std::string& prefix, int64_t dim, const std::map<std::string, const Tensor*>& t) {
  const Tensor& l = state_tensor(t, prefix + ".lo", {dim});
  const Tensor& s = state_tensor(t, prefix + ".step", {dim});
  std::vector<float> lv(l.data<float>(), l.data<float>() + dim), sv(s.data<float>(), s.data<float>() + dim);
  for (int64_t d = 0; d < dim; ++d)
    if (!std::isfinite(lv[size_t(d)]) || !std::isfinite(sv[size_t(d)]) || sv[size_t(d)] <= 0)
      throw Error(Errc::corrupt_data, "codebook tensor '" + prefix + ".step' or '.lo' has a non-finite or non-positive value");
  set(std::move(lv), std::move(sv));
}

namespace {

class Int8Codec final : public Codec {
 public:
  explicit Int8Codec(int64_t dim) : dim_(dim) {}
  std::string spec() const override { return "int8"; }
  int64_t dim() const override { return dim_; }
  int64_t bytes_per_token() const override { return dim_; }
  bool needs_training() const override { return true; }
  bool trained() const override { return q_.ready(); }
  int64_t min_train_vectors() const override { return 2; }
  int64_t recommended_train_vectors() const override { return 1000; }
  void train(const Tensor& x) override {
    check_training(*this, x);
    q_.calibrate(x.data<float>(), x.dim(0), dim_);
  }
  void encode_rows(const float* x, int64_t n, uint8_t* r) const override { q_.encode(x, n, r); }
  void decode_rows(const uint8_t* r, int64_t n, float* x) const override { q_.decode(r, n, x); }
  std::vector<std::pair<std::string, Tensor>> state() const override {
    std::vector<std::pair<std::string, Tensor>> s;
    q_.append_state("int8", s);
    return s;
  }
  void load_state(const std::map<std::string, const Tensor*>& t) override { q_.load_state("int8", dim_, t); }
  std::optional<ElementwiseDecode> elementwise_decode() const override {
    ElementwiseDecode d;
    d.kind = ElementwiseDecode::Kind::u8_affine;
    d.lo = q_.lo;
    d.step = q_.step;
    return d;
  }

 private:
  int64_t dim_;
  AffineU8 q_;
};

}  // namespace

std::unique_ptr<Codec> make_int8_codec(int64_t dim) { return std::make_unique<Int8Codec>(dim); }

}  // namespace fovea::compress
