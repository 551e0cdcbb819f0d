// compress/compress_internal.hpp — private to src/compress: one factory per codec file, and
// the per-dimension 8-bit affine code that int8 and pca:K+int8 share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fovea/compress.hpp"

namespace fovea::compress {

std::unique_ptr<Codec> make_float_codec(bool bf16, int64_t dim);
std::unique_ptr<Codec> make_int8_codec(int64_t dim);
std::unique_ptr<Codec> make_pca_codec(int64_t dim, int64_t k, bool int8);
std::unique_ptr<Codec> make_pq_codec(int64_t dim, int64_t m, bool opq);
std::unique_ptr<Codec> make_faiss_codec(int64_t dim, const std::string& factory);

// x[d] ≈ lo[d] + step[d] * q, q in 0..255.
struct AffineU8 {
  std::vector<float> lo, step, inv_step;  // [D] each
  bool ready() const { return !lo.empty(); }
  // min/max per dimension over n rows, widened by 1/32 of the range each side (new data
  // slightly outside the training range then still codes exactly rather than clamping).
  void calibrate(const float* x, int64_t n, int64_t dim);
  void set(std::vector<float> lo_, std::vector<float> step_);
  void encode(const float* x, int64_t n, uint8_t* q) const;
  void decode(const uint8_t* q, int64_t n, float* x) const;
  // State as "<prefix>.lo" / "<prefix>.step" [D] f32.
  void append_state(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  void load_state(const std::string& prefix, int64_t dim, const std::map<std::string, const Tensor*>& t);
};

// The vectorised kernels (runtime dispatch by target_clones) and their plain references.
void u8_affine_encode(const float* x, int64_t n, int64_t dim, const float* lo, const float* inv_step, uint8_t* q);
void u8_affine_decode(const uint8_t* q, int64_t n, int64_t dim, const float* lo, const float* step, float* x);
void u8_affine_encode_ref(const float* x, int64_t n, int64_t dim, const float* lo, const float* inv_step, uint8_t* q);
void u8_affine_decode_ref(const uint8_t* q, int64_t n, int64_t dim, const float* lo, const float* step, float* x);

// Sets OpenMP's thread count for this thread while in scope (0: leave it).
class OmpThreads {
 public:
  explicit OmpThreads(int threads);
  ~OmpThreads();
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_ = 0;
};

// A state tensor by name, checked to be f32 of the given shape; Error(corrupt_data) otherwise.
const Tensor& state_tensor(const std::map<std::string, const Tensor*>& t, const std::string& name,
                           const std::vector<int64_t>& shape);
// Error(invalid_argument) unless x is [n, dim] f32; Error(unsupported) when n < min.
void check_training(const Codec& c, const Tensor& x);

}  // namespace fovea::compress
