// The AVX2 f32 linear-layer kernel (src/encoder/avx2_kernels.cpp) against the reference GEMM,
// on CPUs that have AVX2 and FMA; elsewhere it is never called, and the dispatch test checks
// which kernel Gemm::run takes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "encoder/avx2.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;

using test::Lcg;

struct Case {
  int64_t m, n, k;
  Post post = Post::none;
  bool accumulate = false, bias = true;
  DType w_dt = DType::f32;
  int64_t lda_pad = 0, ldc_pad = 0;
  float alpha = 1.0f;
};

std::string name(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " post=" + std::to_string(int(c.post)) + (c.accumulate ? " acc" : "") + (c.bias ? " bias" : "") +
         (c.w_dt == DType::bf16 ? " w=bf16" : " w=f32") + " alpha=" + std::to_string(c.alpha);
}

struct Operands {
  std::vector<float> a, wf, bias, c0;
  std::vector<uint16_t> wb;
  GemmArgs ref(const Case& c, float* out) const {
    GemmArgs g{};
    g.a = a.data(), g.lda = c.k + c.lda_pad, g.a_dt = DType::f32;
    g.w = c.w_dt == DType::f32 ? static_cast<const void*>(wf.data()) : wb.data(), g.ldw = c.k, g.w_dt = c.w_dt;
    g.bias = c.bias ? bias.data() : nullptr;
    g.c = out, g.ldc = c.n + c.ldc_pad, g.c_dt = DType::f32;
    g.m = c.m, g.n = c.n, g.k = c.k, g.post = c.post, g.accumulate = c.accumulate, g.alpha = c.alpha;
    g.constant_w = true;
    return g;
  }
};

Operands operands(const Case& c, uint32_t seed) {
  Lcg r{seed};
  Operands o;
  o.a.resize(size_t(c.m * (c.k + c.lda_pad)));
  for (float& v : o.a) v = r.next(-2, 2);
  o.wf.resize(size_t(c.n * c.k));
  for (float& v : o.wf) v = r.next(-1, 1) / std::sqrt(float(c.k));
  o.wb.resize(o.wf.size());
  for (size_t i = 0; i < o.wf.size(); ++i) o.wb[i] = f32_to_bf16(o.wf[i]);
  o.bias.resize(size_t(c.n));
  for (float& v : o.bias) v = r.next(-1, 1);
  o.c0.resize(size_t(c.m * (c.n + c.ldc_pad)));
  for (float& v : o.c0) v = r.next(-1, 1);
  return o;
}

avx2::GemmArgs avx2_args(const GemmArgs& g, const float* packed, int threads) {
  avx2::GemmArgs a;
  a.a = static_cast<const float*>(g.a), a.lda = g.lda;
  a.w = g.w, a.ldw = g.ldw, a.w_dt = g.w_dt;
  a.packed = packed;
  a.bias = g.bias;
  a.c = static_cast<float*>(g.c), a.ldc = g.ldc;
  a.m = g.m, a.n = g.n, a.k = g.k, a.alpha = g.alpha, a.post = g.post, a.accumulate = g.accumulate;
  a.threads = threads;
  return a;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // Row counts around the 6-row register block; a ViT-B/16 foveated batch (274); more rows than
  // one block of A (576), split into even blocks.
  for (int64_t m : {1, 5, 6, 7, 12, 13, 100, 274, 601}) out.push_back({m, 48, 96});
  // Column counts that are not a multiple of the 16-column panels, fewer than one panel.
  for (int64_t n : {1, 7, 17, 40}) out.push_back({9, n, 64});
  // K: not a multiple of 8 (the packing's transposes), and deeper than one 1024-deep slice.
  for (int64_t k : {1, 3, 13, 1025, 3072}) out.push_back({14, 32, k});
  for (Post p : {Post::quick_gelu, Post::gelu_tanh, Post::gelu_erf}) out.push_back({45, 96, 64, p});
  out.push_back({70, 32, 768, Post::none, true});                                // the residual add
  out.push_back({37, 64, 128, Post::gelu_erf, false, false, DType::bf16});       // bf16 weights (a BF16 file)
  out.push_back({50, 64, 64, Post::none, false, true, DType::f32, 32, 64});      // strided A and C (swiglu's fc2)
  out.push_back({20, 48, 64, Post::none, false, true, DType::f32, 0, 0, 0.125f});  // alpha
  return out;
}

// Every case against the reference GEMM (double accumulation): within f32 rounding of the
// products' magnitude; C's padding columns untouched.
TEST(EncoderAvx2, MatchesTheReferenceGemm) {
  if (!avx2::usable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU (or FOVEA_AVX2=0 / ONEDNN_MAX_CPU_ISA below AVX2)";
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const Operands o = operands(c, uint32_t(c.m * 131 + c.n * 7 + c.k));
    std::vector<float> want = o.c0, got = o.c0;
    gemm_reference(o.ref(c, want.data()));
    avx2::gemm(avx2_args(o.ref(c, got.data()), nullptr, 2));
    const int64_t ldc = c.n + c.ldc_pad;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const int64_t idx = i * ldc + j;
        if (j >= c.n) {
          ASSERT_EQ(got[size_t(idx)], o.c0[size_t(idx)]) << "wrote C's padding at row " << i;
          continue;
        }
        const float w = want[size_t(idx)], g = got[size_t(idx)];
        ASSERT_TRUE(std::isfinite(g)) << i << "," << j;
        const double tol = 2e-5 * std::max(1.0, double(std::fabs(w))) + (c.post == Post::gelu_erf ? 1e-6 : 0.0);
        ASSERT_NEAR(g, w, tol) << "row " << i << " col " << j;
      }
  }
}

// Packed once (avx2::pack, a model's second use) or on the fly (its first use), on 1 or 2
// threads: the same bits, so an encode does not change when its weights get packed.
TEST(EncoderAvx2, PackedOnTheFlyAndThreadCountsGiveTheSameBits) {
  if (!avx2::usable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  for (const Case& c : {Case{274, 96, 768, Post::quick_gelu}, Case{130, 40, 3072, Post::none, true, true, DType::bf16},
                        Case{700, 33, 200, Post::gelu_tanh}}) {
    SCOPED_TRACE(name(c));
    const Operands o = operands(c, 99);
    std::vector<float> once(avx2::packed_floats(c.n, c.k));
    avx2::pack(o.ref(c, nullptr).w, c.w_dt, c.k, c.n, c.k, once.data(), 2);
    std::vector<float> a = o.c0, b = o.c0, d = o.c0, e = o.c0;
    avx2::gemm(avx2_args(o.ref(c, a.data()), nullptr, 2));
    avx2::gemm(avx2_args(o.ref(c, b.data()), once.data(), 2));
    avx2::gemm(avx2_args(o.ref(c, d.data()), once.data(), 1));
    avx2::gemm(avx2_args(o.ref(c, e.data()), nullptr, 1));
    EXPECT_EQ(a, b);
    EXPECT_EQ(b, d);
    EXPECT_EQ(d, e);
  }
}

// A NaN or infinity in the input reaches the output through the activations (the encoder
// reports non-finite embeddings; the exp's clamp must not hide them).
TEST(EncoderAvx2, NonFiniteValuesStayNonFinite) {
  if (!avx2::usable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  for (Post p : {Post::none, Post::quick_gelu, Post::gelu_tanh, Post::gelu_erf}) {
    SCOPED_TRACE(int(p));
    const Case c{20, 32, 32, p};
    Operands o = operands(c, 5);
    o.a[3 * 32 + 5] = std::nanf("");
    std::vector<float> got = o.c0;
    avx2::gemm(avx2_args(o.ref(c, got.data()), nullptr, 2));
    for (int64_t j = 0; j < c.n; ++j) EXPECT_TRUE(std::isnan(got[size_t(3 * c.n + j)])) << j;
    for (int64_t j = 0; j < c.n; ++j) EXPECT_TRUE(std::isfinite(got[size_t(4 * c.n + j)])) << j;
  }
}

// Large inputs to the activations saturate as the functions do (exp's clamp), not to NaN.
TEST(EncoderAvx2, ActivationsSaturate) {
  if (!avx2::usable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  for (Post p : {Post::quick_gelu, Post::gelu_tanh, Post::gelu_erf}) {
    SCOPED_TRACE(int(p));
    const Case c{2, 16, 1, p, false, false};
    Operands o = operands(c, 1);
    o.a = {1.0f, 1.0f};
    for (int64_t j = 0; j < 16; ++j) o.wf[size_t(j)] = float(j - 8) * 40.0f;  // -320 ... 280
    std::vector<float> want = o.c0, got = o.c0;
    gemm_reference(o.ref(c, want.data()));
    avx2::gemm(avx2_args(o.ref(c, got.data()), nullptr, 1));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i]))) << i;
  }
}

// The f32 attention kernel (exact attention's and the hierarchical blocks' path on AVX2-only
// CPUs) against softmax attention in double: head widths 16, 64 and 80, query counts around the
// 6-row register block, key counts around the 16-key panels and the 256-key blocks, with and
// without a bias on the last keys (the hierarchical mode's pooled rows).
TEST(EncoderAvx2, AttentionMatchesPlainSoftmaxAttention) {
  if (!avx2::usable()) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  for (const int64_t hd : {16, 64, 80})
    for (const auto& [bq, nk] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 17}, {6, 127}, {12, 128}, {7, 129}, {6, 255}, {7, 256}, {64, 257}, {13, 600}})
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
        avx2::attention(q.data(), bq, ldq, k.data(), v.data(), nk, hd, scale, with_bias ? bias.data() : nullptr,
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
          avx2::attention(q.data(), half, ldq, k.data(), v.data(), nk, hd, scale, with_bias ? bias.data() : nullptr,
                          bias_from, o2.data());
          avx2::attention(q.data() + half * ldq, bq - half, ldq, k.data(), v.data(), nk, hd, scale,
                          with_bias ? bias.data() : nullptr, bias_from, o2.data() + half * hd);
          EXPECT_EQ(o, o2);
        }
      }
}

// Through Gemm::run: an f32 linear layer takes the AVX2 kernel exactly where
// Gemm::avx2_takes_f32() says (AVX2-only CPUs), gives the reference's values whichever kernel
// runs, packs from its second use where the AVX2 kernel runs, and the second use gives the
// first's bits.
TEST(EncoderAvx2, GemmRunTakesTheKernelForF32LinearLayers) {
  const Case c{274, 768, 768, Post::gelu_erf};
  const Operands o = operands(c, 3);
  std::vector<float> want = o.c0, first = o.c0, second = o.c0;
  gemm_reference(o.ref(c, want.data()));
  Gemm gemm;
  const OmpThreadsScope team(2);
  gemm.run(o.ref(c, first.data()));
  EXPECT_EQ(gemm.packed_stats().weights, 0) << "a first use must not pack for good";
  gemm.run(o.ref(c, second.data()));
  EXPECT_EQ(gemm.packs_weights(DType::f32), gemm.packed_stats().weights == 1);
  if (Gemm::avx2_takes_f32()) {
    EXPECT_TRUE(avx2::usable());
    EXPECT_EQ(gemm.packed_stats().bytes, avx2::packed_floats(c.n, c.k) * 4);
    EXPECT_STREQ(matrix_kernels(Precision::fp32), "avx2+onednn");
  } else {
    EXPECT_STREQ(matrix_kernels(Precision::fp32), "onednn");
  }
  EXPECT_EQ(first, second);
  for (size_t i = 0; i < want.size(); i += 97) EXPECT_NEAR(first[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i])));
}

}  // namespace
}  // namespace fovea
