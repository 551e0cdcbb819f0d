// faiss:FACTORY — any FAISS index_factory string used as a standalone codec (sa_encode /
// sa_decode), e.g. "faiss:PCA128,SQ8" or "faiss:OPQ96,PQ96". It exists so the report can run
// FAISS's own pipelines beside fovea's codecs on the same tokens, in the same run. Its state is
// FAISS's serialised index, kept as one U8 tensor in the codebook.
#include <cstring>

#include <faiss/Index.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/io.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>

#include "compress/compress_internal.hpp"
#include "fovea/error.hpp"

namespace fovea::compress {
namespace {

class FaissCodec final : public Codec {
 public:
  FaissCodec(int64_t dim, std::string factory) : dim_(dim), factory_(std::move(factory)) {
    try {
      index_.reset(faiss::index_factory(int(dim), factory_.c_str()));
      bytes_ = int64_t(index_->sa_code_size());
    } catch (const faiss::FaissException& e) {
      throw Error(Errc::invalid_argument, "codec 'faiss:" + factory_ + "': FAISS cannot build it: " + first_line(e.what()));
    }
    if (bytes_ < 1) throw Error(Errc::invalid_argument, "codec 'faiss:" + factory_ + "' has no standalone codes");
  }
  std::string spec() const override { return "faiss:" + factory_; }
  int64_t dim() const override { return dim_; }
  int64_t bytes_per_token() const override { return bytes_; }
  bool needs_training() const override { return true; }
  bool trained() const override { return index_->is_trained; }
  int64_t min_train_vectors() const override { return 2; }
  int64_t recommended_train_vectors() const override { return 39 * 256; }
  void train(const Tensor& x) override {
    check_training(*this, x);
    const OmpThreads omp(threads());
    try {
      index_->train(x.dim(0), x.data<float>());
    } catch (const faiss::FaissException& e) {
      throw Error(Errc::unsupported, "codec " + spec() + ": FAISS training failed with " + std::to_string(x.dim(0)) +
                                         " vectors: " + first_line(e.what()));
    }
  }
  void encode_rows(const float* x, int64_t n, uint8_t* r) const override {
    const OmpThreads omp(threads());
    index_->sa_encode(n, x, r);
  }
  void decode_rows(const uint8_t* r, int64_t n, float* x) const override {
    const OmpThreads omp(threads());
    index_->sa_decode(n, r, x);
  }
  std::vector<std::pair<std::string, Tensor>> state() const override {
    faiss::VectorIOWriter w;
    faiss::write_index(index_.get(), &w);
    Tensor t(DType::u8, {int64_t(w.data.size())});
    std::memcpy(t.bytes(), w.data.data(), w.data.size());
    std::vector<std::pair<std::string, Tensor>> s;
    s.emplace_back("faiss.index", std::move(t));
    return s;
  }
  void load_state(const std::map<std::string, const Tensor*>& t) override {
    auto it = t.find("faiss.index");
    if (it == t.end() || !it->second || it->second->dtype() != DType::u8 || it->second->rank() != 1)
      throw Error(Errc::corrupt_data, "codebook tensor 'faiss.index' (U8) is missing");
    faiss::VectorIOReader r;
    r.data.assign(it->second->data<uint8_t>(), it->second->data<uint8_t>() + it->second->numel());
    try {
      std::unique_ptr<faiss::Index> idx(faiss::read_index(&r));
      if (idx->d != dim_ || int64_t(idx->sa_code_size()) != bytes_ || !idx->is_trained)
        throw Error(Errc::corrupt_data, "codebook tensor 'faiss.index' is not a trained " + spec() + " index");
      index_ = std::move(idx);
    } catch (const faiss::FaissException& e) {
      throw Error(Errc::corrupt_data, "codebook tensor 'faiss.index' does not load: " + first_line(e.what()));
    }
  }

 private:
  static std::string first_line(const char* what) {
    std::string s(what);
    const size_t nl = s.find('\n');
    return nl == std::string::npos ? s : s.substr(0, nl);
  }
  int64_t dim_;
  std::string factory_;
  int64_t bytes_ = 0;
  std::unique_ptr<faiss::Index> index_;
};

}  // namespace

std::unique_ptr<Codec> make_faiss_codec(int64_t dim, const std::string& factory) {
  return std::make_unique<FaissCodec>(dim, factory);
}

}  // namespace fovea::compress
