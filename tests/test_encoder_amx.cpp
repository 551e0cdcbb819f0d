// The AMX linear-layer kernels (src/encoder/amx_kernels.cpp) against the reference GEMM, on
// CPUs that have AMX; elsewhere they are never called, and the dispatch test checks that.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "encoder/amx.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/encoder.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;

struct Lcg {
  uint32_t s;
  float next(float lo, float hi) {
    s = s * 1664525u + 1013904223u;
    return lo + (hi - lo) * float(s >> 8) / float(1 << 24);
  }
};

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

}  // namespace
}  // namespace fovea
