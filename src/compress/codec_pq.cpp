// pq:M and opq:M: FAISS product quantization, M sub-quantizers of 256 centroids (M bytes a
// token); opq first rotates by an orthogonal matrix FAISS learns jointly with the PQ.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <faiss/VectorTransform.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/ProductQuantizer.h>

#include "compress/compress_internal.hpp"
#include "fovea/error.hpp"

namespace fovea::compress {
namespace {

constexpr int64_t kCentroids = 256;

class PqCodec final : public Codec {
 public:
  // The quantizer (256·D centroids) is made by train() or load_state(), once the size is backed
  // by data: a codebook claiming D = 2^20 is refused for its tensors before 1 GiB is allocated.
  PqCodec(int64_t dim, int64_t m, bool opq) : dim_(dim), m_(m), opq_(opq) {}
  std::string spec() const override { return (opq_ ? "opq:" : "pq:") + std::to_string(m_); }
  int64_t dim() const override { return dim_; }
  int64_t bytes_per_token() const override { return m_; }
  bool needs_training() const override { return true; }
  bool trained() const override { return trained_; }
  // k-means needs a point per centroid; FAISS asks for 39 per centroid.
  int64_t min_train_vectors() const override { return kCentroids; }
  int64_t recommended_train_vectors() const override { return 39 * kCentroids; }

  void train(const Tensor& x) override {
    check_training(*this, x);
    const OmpThreads omp(threads());
    const int64_t n = x.dim(0);
    try {
      const float* data = x.data<float>();
      std::vector<float> rotated;
      if (opq_) {
        faiss::OPQMatrix opq{int(dim_), int(m_)};
        faiss::ProductQuantizer inner{size_t(dim_), size_t(m_), 8};
        quiet(inner);
        opq.pq = &inner;
        // FAISS's defaults are 50 outer iterations (4 k-means iterations each, 40 for the first)
        // on up to 65536 points: hours on 2 busy cores at D = 768. 12 outer iterations on at
        // most 16384 points keep most of the gain (the objective falls fastest early); the PQ
        // after the rotation trains on every vector.
        opq.niter = 12;
        opq.niter_pq_0 = 12;
        opq.max_train_points = 16384;
        opq.verbose = false;
        opq.train(n, data);
        rot_ = opq.A;
        rotated.resize(size_t(n * dim_));
        rotate(data, n, rotated.data());
        data = rotated.data();
      }
      pq_ = faiss::ProductQuantizer(size_t(dim_), size_t(m_), 8);
      quiet(pq_);
      pq_.train(size_t(n), data);
    } catch (const faiss::FaissException& e) {
      throw Error(Errc::internal, "codec " + spec() + ": FAISS training failed: " + e.what());
    }
    trained_ = true;
  }

  void encode_rows(const float* x, int64_t n, uint8_t* r) const override {
    const OmpThreads omp(threads());
    if (!opq_) {
      pq_.compute_codes(x, r, size_t(n));
      return;
    }
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t k = std::min(kBlock, n - at);
      std::vector<float> y(size_t(k * dim_));
      rotate(x + at * dim_, k, y.data());
      pq_.compute_codes(y.data(), r + at * m_, size_t(k));
    }
  }

  void decode_rows(const uint8_t* r, int64_t n, float* x) const override {
    const OmpThreads omp(threads());
    if (!opq_) {
      pq_.decode(r, x, size_t(n));
      return;
    }
    for (int64_t at = 0; at < n; at += kBlock) {
      const int64_t k = std::min(kBlock, n - at);
      std::vector<float> y(size_t(k * dim_));
      pq_.decode(r + at * m_, y.data(), size_t(k));
      unrotate(y.data(), k, x + at * dim_);
    }
  }

  std::vector<std::pair<std::string, Tensor>> state() const override {
    std::vector<std::pair<std::string, Tensor>> s;
    Tensor c(DType::f32, {m_, kCentroids, dim_ / m_});
    std::copy(pq_.centroids.begin(), pq_.centroids.end(), c.data<float>());
    s.emplace_back("pq.centroids", std::move(c));
    if (opq_) {
      Tensor a(DType::f32, {dim_, dim_});
      std::copy(rot_.begin(), rot_.end(), a.data<float>());
      s.emplace_back("opq.rotation", std::move(a));
    }
    return s;
  }

  void load_state(const std::map<std::string, const Tensor*>& t) override {
    const Tensor& c = state_tensor(t, "pq.centroids", {m_, kCentroids, dim_ / m_});
    const float* cp = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i)
      if (!std::isfinite(cp[i])) throw Error(Errc::corrupt_data, "codebook tensor 'pq.centroids' has a non-finite value");
    if (opq_) {
      const Tensor& a = state_tensor(t, "opq.rotation", {dim_, dim_});
      rot_.assign(a.data<float>(), a.data<float>() + dim_ * dim_);
      for (float v : rot_)
        if (!std::isfinite(v)) throw Error(Errc::corrupt_data, "codebook tensor 'opq.rotation' has a non-finite value");
    }
    pq_ = faiss::ProductQuantizer(size_t(dim_), size_t(m_), 8);
    quiet(pq_);
    pq_.centroids.assign(cp, cp + c.numel());
    trained_ = true;
  }

 private:
  static constexpr int64_t kBlock = 4096;

  // Our own note replaces FAISS's per-sub-space "please provide at least ..." warnings.
  static void quiet(faiss::ProductQuantizer& pq) {
    pq.cp.min_points_per_centroid = 1;
    pq.verbose = false;
  }

  // y = R x and x = R^T y with R [D, D] row-major (FAISS's LinearTransform convention).
  void rotate(const float* x, int64_t n, float* y) const { linear(x, n, y, false); }
  void unrotate(const float* y, int64_t n, float* x) const { linear(y, n, x, true); }
  void linear(const float* in, int64_t n, float* out, bool transpose) const {
    faiss::LinearTransform lt{int(dim_), int(dim_), false};
    if (!transpose) {
      lt.A = rot_;
    } else {
      lt.A.resize(rot_.size());
      for (int64_t i = 0; i < dim_; ++i)
        for (int64_t j = 0; j < dim_; ++j) lt.A[size_t(j * dim_ + i)] = rot_[size_t(i * dim_ + j)];
    }
    lt.is_trained = true;
    lt.apply_noalloc(n, in, out);
  }

  int64_t dim_, m_;
  bool opq_;
  bool trained_ = false;
  faiss::ProductQuantizer pq_;
  std::vector<float> rot_;
};

}  // namespace

std::unique_ptr<Codec> make_pq_codec(int64_t dim, int64_t m, bool opq) { return std::make_unique<PqCodec>(dim, m, opq); }

}  // namespace fovea::compress
