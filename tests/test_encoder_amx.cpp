// The AMX linear-layer kernels (src/encoder/amx_kernels.cpp) against the reference GEMM, on
// CPUs that have AMX; elsewhere they are never called, and the dispatch test checks that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "encoder/amx.hpp"
#include "encoder/attention.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;

using test::Lcg;

struct Case {
  int64_t m, n, k;
  Post post;
  bool accumulate, bias;
  DType w_dt, c_dt;
  int64_t lda_pad, ldc_pad;
};

std::string name(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " post=" + std::to_string(int(c.post)) + (c.accumulate ? " acc" : "") + (c.bias ? " bias" : "") +
         (c.w_dt == DType::bf16 ? " w=bf16" : " w=f32") + (c.c_dt == DType::bf16 ? " c=bf16" : " c=f32");
}

// A, W, bias and the starting C of a case, with the GemmArgs the reference and AMX both read.
struct Operands {
  std::vector<uint16_t> a;
  std::vector<float> wf, bias;
  std::vector<uint16_t> wb;
  std::vector<std::byte> c0;
  GemmArgs ref(const Case& c, void* out) const {
    GemmArgs g{};
    g.a = a.data(), g.lda = c.k + c.lda_pad, g.a_dt = DType::bf16;
    g.w = c.w_dt == DType::f32 ? static_cast<const void*>(wf.data()) : wb.data(), g.ldw = c.k, g.w_dt = c.w_dt;
    g.bias = c.bias ? bias.data() : nullptr;
    g.c = out, g.ldc = c.n + c.ldc_pad, g.c_dt = c.c_dt;
    g.m = c.m, g.n = c.n, g.k = c.k, g.post = c.post, g.accumulate = c.accumulate;
    g.constant_w = true;
    return g;
  }
};

Operands operands(const Case& c, uint32_t seed) {
  Lcg r{seed};
  Operands o;
  const int64_t lda = c.k + c.lda_pad, ldc = c.n + c.ldc_pad;
  o.a.resize(size_t(c.m * lda));
  for (uint16_t& v : o.a) v = f32_to_bf16(r.next(-2, 2));
  o.wf.resize(size_t(c.n * c.k));
  for (float& v : o.wf) v = r.next(-1, 1) / std::sqrt(float(c.k));
  o.wb.resize(o.wf.size());
  for (size_t i = 0; i < o.wf.size(); ++i) o.wb[i] = f32_to_bf16(o.wf[i]);
  o.bias.resize(size_t(c.n));
  for (float& v : o.bias) v = r.next(-1, 1);
  const size_t es = c.c_dt == DType::f32 ? 4 : 2;
  o.c0.resize(size_t(c.m * ldc) * es);
  for (int64_t i = 0; i < c.m * ldc; ++i) {
    const float v = r.next(-1, 1);
    if (c.c_dt == DType::f32) std::memcpy(o.c0.data() + i * 4, &v, 4);
    else {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(o.c0.data() + i * 2, &h, 2);
    }
  }
  return o;
}

float at(const std::vector<std::byte>& c, DType dt, int64_t i) {
  if (dt == DType::f32) {
    float v;
    std::memcpy(&v, c.data() + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, c.data() + i * 2, 2);
  return bf16_to_f32(h);
}

amx::GemmArgs amx_args(const GemmArgs& g, uint16_t* packed, bool pack, int threads) {
  amx::GemmArgs a;
  a.a = static_cast<const uint16_t*>(g.a), a.lda = g.lda;
  a.w = g.w, a.ldw = g.ldw, a.w_dt = g.w_dt;
  a.packed = packed, a.pack = pack;
  a.bias = g.bias;
  a.c = g.c, a.ldc = g.ldc, a.c_dt = g.c_dt;
  a.m = g.m, a.n = g.n, a.k = g.k, a.post = g.post, a.accumulate = g.accumulate;
  a.threads = threads;
  return a;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // Row counts around the 16-row tiles and 32-row blocks; a ViT-B/16 foveated batch (274).
  for (int64_t m : {1, 15, 16, 17, 31, 32, 33, 100, 274})
    out.push_back({m, 64, 96, Post::none, false, true, DType::f32, DType::f32, 0, 0});
  for (Post p : {Post::quick_gelu, Post::gelu_tanh, Post::gelu_erf})
    for (DType cdt : {DType::f32, DType::bf16}) out.push_back({45, 96, 64, p, false, true, DType::f32, cdt, 0, 0});
  out.push_back({70, 32, 768, Post::none, true, true, DType::f32, DType::f32, 0, 0});    // the residual add
  out.push_back({70, 64, 128, Post::none, true, false, DType::bf16, DType::bf16, 0, 0});  // accumulate into bf16
  out.push_back({37, 128, 64, Post::gelu_erf, false, false, DType::bf16, DType::bf16, 0, 0});
  out.push_back({50, 64, 64, Post::none, false, true, DType::f32, DType::f32, 32, 64});   // strided A and C (swiglu's fc2)
  // A chunk of rows smaller than M (K large: ~1 MiB of A per chunk is 170 rows at K = 3072).
  out.push_back({300, 32, 3072, Post::none, true, true, DType::bf16, DType::f32, 0, 0});
  return out;
}

// Every case against the reference GEMM (double accumulation of the same bf16 values): within
// f32 rounding of the products' magnitude, and bf16 rounding of the output where it is bf16.
TEST(EncoderAmx, MatchesTheReferenceGemm) {
  if (!amx::usable()) GTEST_SKIP() << "no AMX on this CPU (or FOVEA_AMX=0 / ONEDNN_MAX_CPU_ISA below AMX)";
  for (const Case& c : cases()) {
    SCOPED_TRACE(name(c));
    const Operands o = operands(c, uint32_t(c.m * 131 + c.n * 7 + c.k));
    std::vector<std::byte> want = o.c0, got = o.c0;
    gemm_reference(o.ref(c, want.data()));
    std::vector<uint16_t> packed(amx::packed_bytes(c.n, c.k) / 2);
    amx::gemm(amx_args(o.ref(c, got.data()), packed.data(), true, 2));
    const int64_t ldc = c.n + c.ldc_pad;
    double worst = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        const int64_t idx = i * ldc + j;
        const float w = at(want, c.c_dt, idx), g = at(got, c.c_dt, idx);
        if (j >= c.n) {  // the padding of C is never written
          ASSERT_EQ(g, at(o.c0, c.c_dt, idx)) << "wrote C's padding at row " << i;
          continue;
        }
        ASSERT_TRUE(std::isfinite(g)) << i << "," << j;
        const double tol = (c.c_dt == DType::bf16 ? 1.6e-2 : 2e-5) * std::max(1.0, double(std::fabs(w))) +
                           (c.post == Post::gelu_erf ? 1e-6 : 0.0);
        worst = std::max(worst, std::fabs(double(g) - w) / tol);
        ASSERT_NEAR(g, w, tol) << "row " << i << " col " << j;
      }
    EXPECT_LE(worst, 1.0);
  }
}

// Packed once (amx::pack, a model's second use) or on the fly (its first use), on 1 or 2
// threads: the same bits, so an encode does not change when its weights get packed.
TEST(EncoderAmx, PackedOnTheFlyAndThreadCountsGiveTheSameBits) {
  if (!amx::usable()) GTEST_SKIP() << "no AMX on this CPU";
  for (const Case& c : {Case{274, 96, 768, Post::quick_gelu, false, true, DType::f32, DType::bf16, 0, 0},
                        Case{130, 64, 3072, Post::none, true, true, DType::bf16, DType::f32, 0, 0}}) {
    SCOPED_TRACE(name(c));
    const Operands o = operands(c, 99);
    std::vector<uint16_t> fly(amx::packed_bytes(c.n, c.k) / 2), once(fly.size());
    std::vector<std::byte> a = o.c0, b = o.c0, d = o.c0;
    amx::gemm(amx_args(o.ref(c, a.data()), fly.data(), true, 2));
    amx::pack(o.ref(c, nullptr).w, c.w_dt, c.k, c.n, c.k, once.data(), 2);
    EXPECT_EQ(fly, once) << "pack() and the on-the-fly panels differ";
    amx::gemm(amx_args(o.ref(c, b.data()), once.data(), false, 2));
    amx::gemm(amx_args(o.ref(c, d.data()), once.data(), false, 1));
    EXPECT_EQ(a, b);
    EXPECT_EQ(b, d);
  }
}

// A NaN or infinity in the input reaches the output through the activations (the encoder
// reports non-finite embeddings; a clamp must not hide them).
TEST(EncoderAmx, NonFiniteValuesStayNonFinite) {
  if (!amx::usable()) GTEST_SKIP() << "no AMX on this CPU";
  for (Post p : {Post::none, Post::quick_gelu, Post::gelu_tanh, Post::gelu_erf}) {
    SCOPED_TRACE(int(p));
    Case c{20, 32, 32, p, false, true, DType::f32, DType::f32, 0, 0};
    Operands o = operands(c, 5);
    o.a[3 * 32 + 5] = 0x7fc0;  // NaN in row 3
    std::vector<std::byte> got = o.c0;
    std::vector<uint16_t> packed(amx::packed_bytes(c.n, c.k) / 2);
    amx::gemm(amx_args(o.ref(c, got.data()), packed.data(), true, 2));
    for (int64_t j = 0; j < c.n; ++j) EXPECT_TRUE(std::isnan(at(got, DType::f32, 3 * c.n + j))) << j;
    for (int64_t j = 0; j < c.n; ++j) EXPECT_TRUE(std::isfinite(at(got, DType::f32, 4 * c.n + j))) << j;
  }
}

// Through Gemm::run: a bf16 linear layer gives the reference's values whichever kernel runs
// (AMX where usable, oneDNN's otherwise), and a second use (packed for good) the first's bits.
TEST(EncoderAmx, GemmRunTakesTheTilesForBf16LinearLayers) {
  if (!bf16_supported()) GTEST_SKIP() << "no bf16 kernels on this CPU";
  const Case c{274, 768, 768, Post::gelu_erf, false, true, DType::f32, DType::bf16, 0, 0};
  const Operands o = operands(c, 3);
  std::vector<std::byte> want = o.c0, first = o.c0, second = o.c0;
  gemm_reference(o.ref(c, want.data()));
  Gemm gemm;
  const OmpThreadsScope team(2);
  gemm.run(o.ref(c, first.data()));
  EXPECT_EQ(gemm.packed_stats().weights, 0) << "a first use must not pack for good";
  gemm.run(o.ref(c, second.data()));
  EXPECT_EQ(gemm.packed_stats().weights, 1);
  if (amx::usable()) {
    EXPECT_EQ(gemm.packed_stats().bytes, amx::packed_bytes(c.n, c.k));
  }
  EXPECT_EQ(first, second);
  for (int64_t i = 0; i < c.m * c.n; i += 97) EXPECT_NEAR(at(first, c.c_dt, i), at(want, c.c_dt, i), 1.6e-2 * std::max(1.0f, std::fabs(at(want, c.c_dt, i))));
}

// Attention on the tiles (amx::attention, exact attention's path and the hierarchical blocks')
// against softmax attention in double over the same bf16 inputs: head widths 32 and 64, query
// and key counts around the 16-row and 32-key tiles, r != T as the video encoder calls it.
TEST(EncoderAmx, AttentionMatchesPlainSoftmaxAttention) {
  if (!amx::usable()) GTEST_SKIP() << "no AMX on this CPU";
  for (const int64_t hd : {32, 64})
    for (const auto& [r, T] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 17}, {33, 100}, {150, 1300}, {16, 32}}) {
      SCOPED_TRACE("hd=" + std::to_string(hd) + " r=" + std::to_string(r) + " T=" + std::to_string(T));
      const int64_t heads = 2, D = heads * hd;
      Lcg g{uint32_t(hd * 1000 + r * 7 + T)};
      std::vector<uint16_t> q(size_t(r * 2 * D)), kv(size_t(T * 2 * D));
      for (uint16_t& v : q) v = f32_to_bf16(g.next(-2, 2));
      for (uint16_t& v : kv) v = f32_to_bf16(g.next(-2, 2));
      std::vector<uint16_t> out(size_t(r * D));
      Gemm gemm;
      gemm.reserve_threads(2);
      attention_rows({false, 2, &gemm}, reinterpret_cast<const std::byte*>(q.data()), 2 * D, r,
                     reinterpret_cast<const std::byte*>(kv.data()), 2 * D, T, D, int(heads), DType::bf16,
                     reinterpret_cast<std::byte*>(out.data()));
      double worst = 1, err = 0;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < r; ++i) {
          std::vector<double> sc(static_cast<size_t>(T));
          double mx = -INFINITY, sum = 0;
          for (int64_t t = 0; t < T; ++t) {
            double a = 0;
            for (int64_t j = 0; j < hd; ++j)
              a += double(bf16_to_f32(q[i * 2 * D + h * hd + j])) * bf16_to_f32(kv[t * 2 * D + h * hd + j]);
            mx = std::max(mx, sc[size_t(t)] = a / std::sqrt(double(hd)));
          }
          for (double& v : sc) sum += (v = std::exp(v - mx));
          double xy = 0, xx = 0, yy = 0;
          for (int64_t j = 0; j < hd; ++j) {
            double a = 0;
            for (int64_t t = 0; t < T; ++t) a += sc[size_t(t)] * bf16_to_f32(kv[t * 2 * D + D + h * hd + j]);
            const double want = a / sum, got = bf16_to_f32(out[i * D + h * hd + j]);
            ASSERT_TRUE(std::isfinite(got));
            err = std::max(err, std::fabs(got - want));
            xy += got * want, xx += got * got, yy += want * want;
          }
          worst = std::min(worst, xy / std::sqrt(xx * yy));
        }
      EXPECT_GE(worst, 0.999);
      EXPECT_LE(err, 0.03);  // values of magnitude ~1: P and the output are bf16
    }
}

// The bias of the hierarchical mode's pooled keys (log count, in score units after the scale)
// applies from bias_from on, in every position relative to the 16-key vectors.
TEST(EncoderAmx, AttentionAddsTheBiasFromItsFirstKey) {
  if (!amx::usable()) GTEST_SKIP() << "no AMX on this CPU";
  const int64_t hd = 64, bq = 20;
  for (const int64_t nk : {7, 40, 77})
    for (const int64_t from : {int64_t(0), int64_t(3), int64_t(16), int64_t(33), nk - 1}) {
      if (from >= nk) continue;
      SCOPED_TRACE("nk=" + std::to_string(nk) + " from=" + std::to_string(from));
      Lcg g{uint32_t(nk * 31 + from)};
      std::vector<uint16_t> q(size_t(bq * hd)), k(size_t(nk * hd)), v(size_t(nk * hd));
      for (uint16_t& x : q) x = f32_to_bf16(g.next(-1, 1));
      for (uint16_t& x : k) x = f32_to_bf16(g.next(-1, 1));
      for (uint16_t& x : v) x = f32_to_bf16(g.next(-1, 1));
      std::vector<float> bias(static_cast<size_t>(nk));
      for (float& b : bias) b = g.next(-3, 3);
      std::vector<uint16_t> kp(amx::packed_kv_elems(nk, hd)), vp(kp.size());
      amx::pack_keys(k.data(), nk, hd, kp.data());
      amx::pack_values(v.data(), nk, hd, vp.data());
      std::vector<std::byte> scratch(amx::attention_scratch_bytes(nk) + 64);
      std::byte* sp = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
      std::vector<float> o(size_t(bq * hd));
      const float scale = 0.125f;
      amx::attention(q.data(), bq, hd, kp.data(), vp.data(), nk, hd, scale, bias.data(), from, sp, o.data());
      for (int64_t i = 0; i < bq; ++i) {
        std::vector<double> sc(static_cast<size_t>(nk));
        double mx = -INFINITY, sum = 0;
        for (int64_t t = 0; t < nk; ++t) {
          double a = 0;
          for (int64_t j = 0; j < hd; ++j) a += double(bf16_to_f32(q[i * hd + j])) * bf16_to_f32(k[t * hd + j]);
          a = a * scale + (t >= from ? bias[size_t(t)] : 0.0);
          mx = std::max(mx, sc[size_t(t)] = a);
        }
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < hd; ++j) {
          double a = 0;
          for (int64_t t = 0; t < nk; ++t) a += sc[size_t(t)] * bf16_to_f32(v[t * hd + j]);
          ASSERT_NEAR(o[i * hd + j], a / sum, 1e-2) << "row " << i << " col " << j;
        }
      }
    }
}

}  // namespace
}  // namespace fovea
