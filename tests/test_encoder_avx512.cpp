// The AVX-512 f32 attention kernel (src/encoder/avx512.hpp) against plain softmax attention in
// double, on the shapes its blocking splits unevenly (strips of 12 rows, pairs of 16-key panels,
// 32 columns of V at a time, 128-key blocks), and through the encoder where it runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "encoder/avx512.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;
using test::Lcg;
using test::max_abs_diff;

TEST(EncoderAvx512, AttentionMatchesPlainSoftmaxAttention) {
  if (!avx512::usable()) GTEST_SKIP() << "no AVX-512 on this CPU (or FOVEA_AVX512=0)";
  for (const int64_t hd : {16, 48, 64, 80})
    for (const auto& [bq, nk] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {5, 17}, {12, 16}, {11, 31}, {13, 33}, {12, 127}, {24, 128}, {7, 129}, {25, 255}, {64, 257}, {13, 600}})
      for (const bool with_bias : {false, true}) {
        SCOPED_TRACE("hd=" + std::to_string(hd) + " bq=" + std::to_string(bq) + " nk=" + std::to_string(nk) +
                     (with_bias ? " bias" : ""));
        Lcg g{uint32_t(hd * 1000 + bq * 7 + nk)};
        const int64_t ldq = hd + 3;  // Q rows strided, as a head's view would be
        std::vector<float> q(size_t(bq * ldq)), k(size_t(nk * hd)), v(size_t(nk * hd));
        std::vector<float> bias(static_cast<size_t>(nk));
        for (float& x : q) x = g.next(-2, 2);
        for (float& x : k) x = g.next(-2, 2);
        for (float& x : v) x = g.next(-1, 1);
        for (float& x : bias) x = g.next(-3, 1);
        const int64_t bias_from = nk / 2;
        const float scale = 1.0f / std::sqrt(float(hd));
        std::vector<float> o(size_t(bq * hd));
        avx512::attention(q.data(), bq, ldq, k.data(), v.data(), nk, hd, scale, with_bias ? bias.data() : nullptr,
                          bias_from, o.data());
        for (int64_t i = 0; i < bq; ++i) {
          std::vector<double> sc(static_cast<size_t>(nk));
          double mx = -INFINITY, sum = 0;
          for (int64_t t = 0; t < nk; ++t) {
            double a = 0;
            for (int64_t j = 0; j < hd; ++j) a += double(q[size_t(i * ldq + j)]) * k[size_t(t * hd + j)];
            a *= scale;
            if (with_bias && t >= bias_from) a += bias[size_t(t)];
            mx = std::max(mx, sc[size_t(t)] = a);
          }
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int64_t j = 0; j < hd; ++j) {
            double a = 0;
            for (int64_t t = 0; t < nk; ++t) a += sc[size_t(t)] * v[size_t(t * hd + j)];
            ASSERT_NEAR(o[size_t(i * hd + j)], a / sum, 2e-5) << "row " << i << " col " << j;
          }
        }
        // Each row's output depends on that row alone: two calls over halves of Q give its bits.
        if (bq > 1) {
          const int64_t half = bq / 2;
          std::vector<float> o2(size_t(bq * hd));
          avx512::attention(q.data(), half, ldq, k.data(), v.data(), nk, hd, scale, with_bias ? bias.data() : nullptr,
                            bias_from, o2.data());
          avx512::attention(q.data() + half * ldq, bq - half, ldq, k.data(), v.data(), nk, hd, scale,
                            with_bias ? bias.data() : nullptr, bias_from, o2.data() + half * hd);
          EXPECT_EQ(o, o2);
        }
      }
}

// Scores far apart (a sharply peaked softmax, the running max moving between key blocks) and
// far below zero stay finite and exact: the online rescaling, not the exp's range, carries them.
TEST(EncoderAvx512, AttentionKeepsPeakedAndFarNegativeScoresExact) {
  if (!avx512::usable()) GTEST_SKIP() << "no AVX-512 on this CPU (or FOVEA_AVX512=0)";
  const int64_t hd = 64, bq = 3, nk = 300;
  std::vector<float> q(size_t(bq * hd), 0.0f), k(size_t(nk * hd), 0.0f), v(size_t(nk * hd));
  for (int64_t t = 0; t < nk; ++t)
    for (int64_t j = 0; j < hd; ++j) v[size_t(t * hd + j)] = float(t % 7) - 3.0f + 0.01f * float(j);
  // Row 0: one key (in the third block) scores 200 above the rest; row 1: every score -500 but
  // one at -400; row 2: all equal.
  q[0] = 1, q[size_t(hd)] = 1;
  for (int64_t t = 0; t < nk; ++t) k[size_t(t * hd)] = t == 270 ? 1600.0f : (t == 5 ? -3200.0f : -4000.0f);
  const float scale = 1.0f / 8;  // 1 / sqrt(64)
  std::vector<float> o(size_t(bq * hd));
  avx512::attention(q.data(), bq, hd, k.data(), v.data(), nk, hd, scale, nullptr, 0, o.data());
  for (int64_t j = 0; j < hd; ++j) {
    EXPECT_NEAR(o[size_t(j)], v[size_t(270 * hd + j)], 1e-5) << j;       // all weight on key 270
    EXPECT_NEAR(o[size_t(hd + j)], v[size_t(270 * hd + j)], 1e-5) << j;  // row 1 = row 0's scores
    double mean = 0;
    for (int64_t t = 0; t < nk; ++t) mean += v[size_t(t * hd + j)];
    EXPECT_NEAR(o[size_t(2 * hd + j)], mean / double(nk), 1e-5) << j;
  }
}

// Through the encoder: an fp32 encode where the kernel runs gives the reference kernels'
// embeddings, exact and hierarchical, within fp32 rounding.
TEST(EncoderAvx512, EncodesMatchTheReferenceKernels) {
  if (!avx512::usable()) GTEST_SKIP() << "no AVX-512 on this CPU (or FOVEA_AVX512=0)";
  const VitModel m = VitModel::load("random:vit-tiny:2");
  Tensor patches(DType::f32, {300, 3, 16, 16}), positions(DType::f32, {300, 4});
  Lcg g{11};
  for (int64_t i = 0; i < patches.numel(); ++i) patches.data<float>()[i] = g.next(-2, 2);
  for (int i = 0; i < 300; ++i) {
    float* p = positions.data<float>() + i * 4;
    p[0] = (float(i % 20) + 0.5f) * 16, p[1] = (float(i / 20) + 0.5f) * 16, p[2] = 16, p[3] = 0;
  }
  for (const char* att : {"exact", "hierarchical:2:32"}) {
    SCOPED_TRACE(att);
    EncodeParams p{.image_width = 320, .image_height = 240, .attention = parse_attention(att)};
    Executor fast({.threads = 2}), ref({.threads = 1, .kernels = Kernels::reference});
    const Encoding a = encode(m, patches, positions, p, fast), b = encode(m, patches, positions, p, ref);
    EXPECT_LE(max_abs_diff(a.embeddings, b.embeddings), 2e-4);
  }
}

}  // namespace
}  // namespace fovea
