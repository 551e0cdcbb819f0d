// The rate–distortion report's measurements: one trained codec over evaluation embeddings.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "fovea/compress.hpp"
#include "fovea/error.hpp"

namespace fovea {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The divisor of d nearest to `target` (ties: the smaller, so the codec is no larger).
int64_t divisor_near(int64_t d, int64_t target) {
  int64_t best = 1;
  for (int64_t m = 1; m <= d; ++m)
    if (d % m == 0 && std::llabs(m - target) < std::llabs(best - target)) best = m;
  return best;
}

}  // namespace

std::vector<std::string> default_report_codecs(int64_t dim) {
  std::vector<std::string> s{"fp16", "bf16", "int8"};
  const int64_t b6 = std::max<int64_t>(1, dim / 6), b12 = std::max<int64_t>(1, dim / 12);
  s.push_back("pca:" + std::to_string(b6 / 2));             // fp16 coefficients: D/6 bytes
  s.push_back("pca:" + std::to_string(b6) + "+int8");        // D/6 bytes
  s.push_back("pca:" + std::to_string(b12) + "+int8");       // D/12 bytes
  const int64_t m6 = divisor_near(dim, b6), m12 = divisor_near(dim, b12);
  for (const char* q : {"pq:", "opq:"}) {
    s.push_back(q + std::to_string(m6));
    s.push_back(q + std::to_string(m12));
  }
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

RateDistortionRow measure_codec(const Codec& codec, const Tensor& eval, int reps) {
  if (eval.dtype() != DType::f32 || eval.rank() != 2 || eval.dim(1) != codec.dim())
    throw Error(Errc::invalid_argument, "report: embeddings must be [N, " + std::to_string(codec.dim()) + "] F32");
  reps = std::max(reps, 1);
  const int64_t n = eval.dim(0);
  RateDistortionRow r;
  r.codec = codec.spec();
  r.bytes_per_token = codec.bytes_per_token();
  r.ratio_vs_fp32 = double(4 * codec.dim()) / double(codec.bytes_per_token());
  r.tokens_in = r.tokens_out = n;
  const double f32_bytes = double(eval.size_bytes());
  Tensor codes(DType::u8, {n, codec.bytes_per_token()});
  Tensor decoded(DType::f32, {n, codec.dim()});
  Tensor copy(DType::f32, {n, codec.dim()});
  double enc = 1e30, dec = 1e30, cpy = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    codec.encode_rows(eval.data<float>(), n, codes.data<uint8_t>());
    enc = std::min(enc, seconds_since(t0));
    t0 = Clock::now();
    codec.decode_rows(codes.data<uint8_t>(), n, decoded.data<float>());
    dec = std::min(dec, seconds_since(t0));
    t0 = Clock::now();
    std::memcpy(copy.bytes(), eval.bytes(), eval.size_bytes());
    cpy = std::min(cpy, seconds_since(t0));
  }
  r.encode_gb_s = f32_bytes / std::max(enc, 1e-9) * 1e-9;
  r.decode_gb_s = f32_bytes / std::max(dec, 1e-9) * 1e-9;
  r.memcpy_gb_s = f32_bytes / std::max(cpy, 1e-9) * 1e-9;
  r.distortion = measure_distortion(eval, decoded, codec.threads());
  return r;
}

}  // namespace fovea
