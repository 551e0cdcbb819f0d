// pca:K and pca:K+int8: project on the top-K principal axes of the training data (FAISS
// PCAMatrix computes them), store the K coefficients as fp16 or as per-axis int8.
#include <algorithm>
#include <cmath>

#include <faiss/VectorTransform.h>
#include <faiss/impl/FaissException.h>

#include "compress/compress_internal.hpp"
#include "fovea/error.hpp"

namespace fovea::compress {
namespace {

class PcaCodec final : public Codec {
 public:
  PcaCodec(int64_t dim, int64_t k, bool int8) : dim_(dim), k_(k), int8_(int8) {}
  std::string spec() const override { return "pca:" + std::to_string(k_) + (int8_ ? "+int8" : ""); }
  int64_t dim() const override { return dim_; }
  int64_t bytes_per_token() const override { return int8_ ? k_ : 2 * k_; }
  bool needs_training() const override { return true; }
  bool trained() const override { return !mean_.empty(); }
  int64_t min_train_vectors() const override { return k_ + 1; }
  int64_t recommended_train_vectors() const override { return std::max<int64_t>(4 * dim_, 1000); }

  void train(const Tensor& x) override {
    check_training(*this, x);
    const OmpThreads omp(threads());
    const int64_t n = x.dim(0);
    faiss::PCAMatrix pca{int(dim_), int(k_)};
    try {
      pca.train(n, x.data<float>());
    } catch (const faiss::FaissException& e) {
      throw Error(Errc::internal, "codec " + spec() + ": FAISS PCA training failed: " + e.what());
    }
    // pca.A holds the top-K axes as rows ([K, D]); encoding is C (x - mean).
    set(std::vector<float>(pca.mean.begin(), pca.mean.end()), std::vector<float>(pca.A.begin(), pca.A.begin() + k_ * dim_));
    if (int8_) {
      std::vector<float> y(size_t(n * k_));
      project(x.data<float>(), n, y.data());
      q_.calibrate(y.data(), n, k_);
    }
  }

  void encode_rows(const float* x, int64_t n, uint8_t* r) const override {
    const OmpThreads omp(threads());
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t m = std::min(kBlock, n - at);
      std::vector<float> y(size_t(m * k_));
      project(x + at * dim_, m, y.data());
      uint8_t* out = r + at * bytes_per_token();
      if (int8_) {
        q_.encode(y.data(), m, out);
      } else {
        for (int64_t i = 0; i < m * k_; ++i) {
          const uint16_t h = f32_to_f16(y[size_t(i)]);
          out[2 * i] = uint8_t(h & 0xff);
          out[2 * i + 1] = uint8_t(h >> 8);
        }
      }
    }
  }

  void decode_rows(const uint8_t* r, int64_t n, float* x) const override {
    const OmpThreads omp(threads());
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t m = std::min(kBlock, n - at);
      std::vector<float> y(size_t(m * k_));
      const uint8_t* in = r + at * bytes_per_token();
      if (int8_) {
        q_.decode(in, m, y.data());
      } else {
        for (int64_t i = 0; i < m * k_; ++i) y[size_t(i)] = f16_to_f32(uint16_t(in[2 * i] | (in[2 * i + 1] << 8)));
      }
      dec_->apply_noalloc(m, y.data(), x + at * dim_);  // mean + C^T y
    }
  }

  std::vector<std::pair<std::string, Tensor>> state() const override {
    std::vector<std::pair<std::string, Tensor>> s;
    Tensor mean(DType::f32, {dim_}), comp(DType::f32, {k_, dim_});
    std::copy(mean_.begin(), mean_.end(), mean.data<float>());
    std::copy(comp_.begin(), comp_.end(), comp.data<float>());
    s.emplace_back("pca.mean", std::move(mean));
    s.emplace_back("pca.components", std::move(comp));
    if (int8_) q_.append_state("pca.int8", s);
    return s;
  }

  void load_state(const std::map<std::string, const Tensor*>& t) override {
    const Tensor& mean = state_tensor(t, "pca.mean", {dim_});
    const Tensor& comp = state_tensor(t, "pca.components", {k_, dim_});
    std::vector<float> m(mean.data<float>(), mean.data<float>() + dim_);
    std::vector<float> c(comp.data<float>(), comp.data<float>() + k_ * dim_);
    for (float v : m)
      if (!std::isfinite(v)) throw Error(Errc::corrupt_data, "codebook tensor 'pca.mean' has a non-finite value");
    for (float v : c)
      if (!std::isfinite(v)) throw Error(Errc::corrupt_data, "codebook tensor 'pca.components' has a non-finite value");
    if (int8_) q_.load_state("pca.int8", k_, t);
    set(std::move(m), std::move(c));
  }

 private:
  static constexpr int64_t kBlock = 4096;  // tokens per BLAS call (bounds the temporary)

  void set(std::vector<float> mean, std::vector<float> comp) {
    mean_ = std::move(mean);
    comp_ = std::move(comp);
    // y = C x + b with b = -C mean; x = C^T y + mean. Both are sgemm calls inside FAISS.
    enc_ = std::make_unique<faiss::LinearTransform>(int(dim_), int(k_), true);
    enc_->A = comp_;
    enc_->b.assign(size_t(k_), 0.f);
    for (int64_t j = 0; j < k_; ++j) {
      double s = 0;
      for (int64_t d = 0; d < dim_; ++d) s += double(comp_[size_t(j * dim_ + d)]) * mean_[size_t(d)];
      enc_->b[size_t(j)] = float(-s);
    }
    enc_->is_trained = true;
    dec_ = std::make_unique<faiss::LinearTransform>(int(k_), int(dim_), true);
    dec_->A.assign(size_t(dim_ * k_), 0.f);
    for (int64_t j = 0; j < k_; ++j)
      for (int64_t d = 0; d < dim_; ++d) dec_->A[size_t(d * k_ + j)] = comp_[size_t(j * dim_ + d)];
    dec_->b = mean_;
    dec_->is_trained = true;
  }

  void project(const float* x, int64_t n, float* y) const { enc_->apply_noalloc(n, x, y); }

  int64_t dim_, k_;
  bool int8_;
  std::vector<float> mean_, comp_;
  std::unique_ptr<faiss::LinearTransform> enc_, dec_;
  AffineU8 q_;
};

}  // namespace

std::unique_ptr<Codec> make_pca_codec(int64_t dim, int64_t k, bool int8) {
  return std::make_unique<PcaCodec>(dim, k, int8);
}

}  // namespace fovea::compress
