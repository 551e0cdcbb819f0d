// The AVX512-BF16 attention kernel (src/encoder/avx512bf16_kernels.cpp) against softmax
// attention in double, on CPUs that have VDPBF16PS; elsewhere it is never called.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "encoder/amx.hpp"
#include "encoder/avx512bf16.hpp"
#include "encoder/encoder_internal.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;
using test::Lcg;

// softmax(Q·Kᵀ·scale + bias)·V of query row i in double, over bf16 inputs (K, V dense [nk, hd]).
std::vector<double> plain_attention(const uint16_t* qi, const uint16_t* k, const uint16_t* v, int64_t nk, int64_t hd,
                                    double scale, const float* bias, int64_t bias_from) {
  std::vector<double> sc(static_cast<size_t>(nk));
  double mx = -INFINITY, sum = 0;
  for (int64_t t = 0; t < nk; ++t) {
    double a = 0;
    for (int64_t j = 0; j < hd; ++j) a += double(bf16_to_f32(qi[j])) * bf16_to_f32(k[t * hd + j]);
    a *= scale;
    if (bias && t >= bias_from) a += bias[t];
    mx = std::max(mx, sc[size_t(t)] = a);
  }
  for (double& x : sc) sum += (x = std::exp(x - mx));
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  for (int64_t t = 0; t < nk; ++t)
    for (int64_t j = 0; j < hd; ++j) out[size_t(j)] += sc[size_t(t)] / sum * bf16_to_f32(v[t * hd + j]);
  return out;
}

// Head widths 32 to 128; query counts around the 16-query strip; key counts around the 16-key
// groups, the 32-key steps of the packed V and the 256-key blocks of the online softmax; the
// pooled keys' bias from every position; Q with a row stride wider than hd.
TEST(EncoderAvx512Bf16, AttentionMatchesPlainSoftmaxAttention) {
  if (!avx512bf16::usable()) GTEST_SKIP() << "no AVX512-BF16 on this CPU (or FOVEA_AVX512BF16=0)";
  struct Case {
    int64_t hd, bq, nk, bias_from;  // bias_from < 0: no bias
  };
  std::vector<Case> cases;
  for (const int64_t hd : {32, 64, 96, 128})
    for (const int64_t bq : {1, 16, 21})
      for (const int64_t nk : {1, 17, 32, 255, 256, 257, 600}) cases.push_back({hd, bq, nk, -1});
  for (const int64_t nk : {7, 40, 300, 577})
    for (const int64_t from : {int64_t(0), int64_t(3), int64_t(16), int64_t(33), nk - 1})
      if (from < nk) cases.push_back({64, 20, nk, from});
  for (const Case& c : cases) {
    SCOPED_TRACE("hd=" + std::to_string(c.hd) + " bq=" + std::to_string(c.bq) + " nk=" + std::to_string(c.nk) +
                 " bias_from=" + std::to_string(c.bias_from));
    const int64_t ldq = c.hd + 32;
    Lcg g{uint32_t(c.hd * 7919 + c.bq * 131 + c.nk * 7 + c.bias_from)};
    std::vector<uint16_t> q(size_t(c.bq * ldq)), k(size_t(c.nk * c.hd)), v(k.size());
    for (uint16_t& x : q) x = f32_to_bf16(g.next(-2, 2));
    for (uint16_t& x : k) x = f32_to_bf16(g.next(-2, 2));
    for (uint16_t& x : v) x = f32_to_bf16(g.next(-1, 1));
    std::vector<float> bias(static_cast<size_t>(c.nk));
    for (float& b : bias) b = g.next(-3, 3);
    std::vector<uint16_t> vp(amx::packed_kv_elems(c.nk, c.hd));
    amx::pack_values(v.data(), c.nk, c.hd, vp.data());
    std::vector<std::byte> scratch(avx512bf16::kScratchBytes + 64);
    std::byte* sp = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
    std::vector<float> o(size_t(c.bq * c.hd), NAN);
    const double scale = 1.0 / std::sqrt(double(c.hd));
    const float* b = c.bias_from >= 0 ? bias.data() : nullptr;
    avx512bf16::attention(q.data(), c.bq, ldq, k.data(), vp.data(), c.nk, c.hd, float(scale), b, c.bias_from, sp,
                          o.data());
    double err = 0;
    for (int64_t i = 0; i < c.bq; ++i) {
      const std::vector<double> want = plain_attention(q.data() + i * ldq, k.data(), v.data(), c.nk, c.hd, scale, b,
                                                       c.bias_from);
      for (int64_t j = 0; j < c.hd; ++j) {
        ASSERT_TRUE(std::isfinite(o[size_t(i * c.hd + j)])) << "row " << i << " column " << j;
        err = std::max(err, std::fabs(o[size_t(i * c.hd + j)] - want[size_t(j)]));
      }
    }
    EXPECT_LE(err, 0.01);  // values of magnitude ≤ 1: P is bf16 (relative 2^-8), O accumulates in f32
  }
}

// A row of large scores after a block of small ones (the online softmax's rescale), and a
// strip where one query's scores are all equal: every lane's own max and sum.
TEST(EncoderAvx512Bf16, OnlineSoftmaxRescalesPerQuery) {
  if (!avx512bf16::usable()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  const int64_t hd = 64, bq = 16, nk = 700;
  std::vector<uint16_t> q(size_t(bq * hd)), k(size_t(nk * hd)), v(size_t(nk * hd));
  Lcg g{77};
  for (int64_t i = 0; i < bq; ++i)
    for (int64_t j = 0; j < hd; ++j) q[size_t(i * hd + j)] = f32_to_bf16(i == 3 ? 0.0f : g.next(0.5f, 1.0f) * float(i % 4 + 1));
  for (int64_t t = 0; t < nk; ++t)
    for (int64_t j = 0; j < hd; ++j) {
      // Keys grow along the sequence: each 256-key block has a larger max than the last.
      k[size_t(t * hd + j)] = f32_to_bf16(g.next(0.0f, 0.1f) + float(t) / float(nk));
      v[size_t(t * hd + j)] = f32_to_bf16(g.next(-1, 1));
    }
  std::vector<uint16_t> vp(amx::packed_kv_elems(nk, hd));
  amx::pack_values(v.data(), nk, hd, vp.data());
  std::vector<std::byte> scratch(avx512bf16::kScratchBytes + 64);
  std::byte* sp = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  std::vector<float> o(size_t(bq * hd));
  avx512bf16::attention(q.data(), bq, hd, k.data(), vp.data(), nk, hd, 0.125f, nullptr, 0, sp, o.data());
  for (int64_t i = 0; i < bq; ++i) {
    SCOPED_TRACE("query " + std::to_string(i));
    const std::vector<double> want = plain_attention(q.data() + i * hd, k.data(), v.data(), nk, hd, 0.125, nullptr, 0);
    for (int64_t j = 0; j < hd; ++j) EXPECT_NEAR(o[size_t(i * hd + j)], want[size_t(j)], 0.01);
  }
}

}  // namespace
}  // namespace fovea
