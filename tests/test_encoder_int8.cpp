// Precision::int8: the int8 kernels (src/encoder/int8*.cpp) against their scalar reference, the
// quantizers' error bounds, and int8 encodes against fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "encoder/encoder_internal.hpp"
#include "encoder/int8.hpp"
#include "encoder/int8_attention.hpp"
#include "fovea/encoder.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;
using test::Lcg;

TEST(Int8, WeightQuantizationIsPerOutputChannelWithinHalfAStep) {
  const int64_t n = 37, k = 70;
  Lcg r{3};
  std::vector<float> w(size_t(n * k));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) w[size_t(i * k + j)] = r.next(-1, 1) * float(1 + i);  // rows of different ranges
  for (int64_t j = 0; j < k; ++j) w[size_t(5 * k + j)] = 0;  // an all-zero row
  const int8::Weight q = int8::quantize(w.data(), DType::f32, k, n, k);
  EXPECT_EQ(q.kp, 72);
  EXPECT_EQ(q.np, 64);
  EXPECT_EQ(q.scale[5], 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0;
    int32_t sum = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(w[size_t(i * k + j)]));
    if (i != 5) {
      EXPECT_FLOAT_EQ(q.scale[size_t(i)], amax / 127);
    }
    for (int64_t j = 0; j < k; ++j) {
      const int v = q.q(i, j);
      sum += v;
      EXPECT_GE(v, -127);
      EXPECT_LE(v, 127);
      EXPECT_LE(std::fabs(float(v) * q.scale[size_t(i)] - w[size_t(i * k + j)]), q.scale[size_t(i)] * 0.5001f + 1e-12f);
    }
    EXPECT_EQ(q.sum[size_t(i)], sum);
    for (int64_t j = k; j < q.kp; ++j) EXPECT_EQ(q.q(i, j), 0);  // k's padding multiplies to nothing
  }
  // bf16 weights quantize from their float values.
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  const int8::Weight qb = int8::quantize(wb.data(), DType::bf16, k, n, k);
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(bf16_to_f32(wb[size_t(i * k + j)])));
    EXPECT_FLOAT_EQ(qb.scale[size_t(i)], amax / 127);
  }
  // Already-quantized values keep their bytes.
  std::vector<int8_t> raw(size_t(n * k));
  std::vector<float> sc(size_t(n), 0.5f);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = int8_t(int(i % 255) - 127);
  const int8::Weight qr = int8::from_quantized(raw.data(), sc.data(), n, k);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) ASSERT_EQ(qr.q(i, j), raw[size_t(i * k + j)]);
}

TEST(Int8, RowQuantizationKeepsZeroExactAndErrorWithinHalfAStep) {
  Lcg r{9};
  for (const int qmax : {127, 255}) {
    for (const int64_t k : {1, 5, 64, 777}) {
      std::vector<float> x(static_cast<size_t>(k));
      for (float& v : x) v = r.next(-0.3f, 5.0f);  // skewed, as GELU outputs are
      x[0] = 0;
      std::vector<uint8_t> u(size_t((k + 3) / 4 * 4), 7);
      float s = 0;
      int32_t z = -1;
      int8::quantize_row_ref(x.data(), k, int64_t(u.size()), qmax, u.data(), &s, &z);
      EXPECT_GE(z, 0);
      EXPECT_LE(z, qmax);
      EXPECT_EQ(u[0], z);  // 0 is represented exactly
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_LE(u[size_t(j)], qmax);
        EXPECT_LE(std::fabs(s * float(int(u[size_t(j)]) - z) - x[size_t(j)]), s * 0.5001f + 1e-6f) << j;
      }
      for (size_t j = size_t(k); j < u.size(); ++j) EXPECT_EQ(u[j], 0);
    }
  }
  // A constant zero row: every value is the zero point, and the scale stays finite.
  std::vector<float> zero(9, 0.0f);
  std::vector<uint8_t> u(12);
  float s = 0;
  int32_t z = -1;
  int8::quantize_row_ref(zero.data(), 9, 12, 255, u.data(), &s, &z);
  EXPECT_EQ(z, 0);
  EXPECT_TRUE(std::isfinite(s) && s > 0);
}

struct Case {
  int64_t m, n, k;
  Post post = Post::none;
  bool accumulate = false, bias = true;
  DType a_dt = DType::f32, c_dt = DType::f32;
  int64_t lda_pad = 0, ldc_pad = 0;
};

std::string describe(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " post=" + std::to_string(int(c.post)) + (c.accumulate ? " acc" : "") + (c.bias ? " bias" : "") +
         (c.a_dt == DType::bf16 ? " a=bf16" : "") + (c.c_dt == DType::bf16 ? " c=bf16" : "");
}

float out_at(const std::vector<uint8_t>& c, DType dt, size_t i) {
  if (dt == DType::f32) {
    float f;
    std::memcpy(&f, c.data() + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, c.data() + i * 2, 2);
  return bf16_to_f32(h);
}

// Every kernel this CPU runs gives the scalar reference's result for its qmax: bit for bit
// without an activation (exact integer sums, the same fused multiply-add), within the
// activation's approximation with one.
TEST(Int8, KernelsMatchTheScalarReference) {
  const std::vector<Case> cases = {
      {1, 1, 1},
      {7, 33, 5, Post::none, false, false},
      {13, 64, 70, Post::gelu_erf},
      {29, 100, 769, Post::quick_gelu, true},
      {50, 96, 128, Post::gelu_tanh, false, true, DType::bf16, DType::bf16, 3, 5},
      {17, 40, 36, Post::none, true, true, DType::bf16, DType::bf16},
      {64, 32, 3072, Post::none, true, true, DType::f32, DType::f32, 8, 0},
      {300, 48, 64, Post::gelu_erf, false, true, DType::f32, DType::bf16},  // more than one row block
  };
  int kernels_run = 0;
  for (const int8::Kernel kern : {int8::Kernel::avx2, int8::Kernel::avxvnni, int8::Kernel::vnni256, int8::Kernel::vnni512}) {
    if (!int8::available(kern)) continue;
    ++kernels_run;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(int8::name(kern)) + " " + describe(c));
      Lcg r{uint32_t(c.m * 131 + c.n * 7 + c.k)};
      const int64_t lda = c.k + c.lda_pad, ldc = c.n + c.ldc_pad;
      std::vector<float> af(size_t(c.m * lda)), w(size_t(c.n * c.k)), bias(size_t(c.n));
      for (float& v : af) v = r.next(-2, 3);
      for (float& v : w) v = r.next(-1, 1);
      for (float& v : bias) v = r.next(-1, 1);
      std::vector<uint16_t> ab(af.size());
      for (size_t i = 0; i < af.size(); ++i) ab[i] = f32_to_bf16(af[i]);
      const int8::Weight q = int8::quantize(w.data(), DType::f32, c.k, c.n, c.k);
      const size_t ces = c.c_dt == DType::f32 ? 4 : 2;
      std::vector<uint8_t> c0(size_t(c.m * ldc) * ces);
      for (size_t i = 0; i < c0.size(); i += ces) {
        const float v = r.next(-1, 1);
        if (ces == 4) std::memcpy(c0.data() + i, &v, 4);
        else {
          const uint16_t h = f32_to_bf16(v);
          std::memcpy(c0.data() + i, &h, 2);
        }
      }
      std::vector<uint8_t> want(c0), got(c0);
      int8::Args g;
      g.a = c.a_dt == DType::f32 ? static_cast<const void*>(af.data()) : ab.data(), g.lda = lda, g.a_dt = c.a_dt;
      g.w = &q, g.bias = c.bias ? bias.data() : nullptr;
      g.ldc = ldc, g.c_dt = c.c_dt, g.m = c.m, g.post = c.post, g.accumulate = c.accumulate;
      g.c = want.data();
      int8::gemm_reference(g, int8::act_max(kern));
      g.c = got.data();
      int8::gemm(kern, g, 2);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < ldc; ++j) {
          const size_t at = size_t(i * ldc + j);
          const float a = out_at(got, c.c_dt, at), b = out_at(want, c.c_dt, at);
          if (j >= c.n) {
            ASSERT_EQ(a, out_at(c0, c.c_dt, at)) << "wrote past n at " << i << "," << j;
          } else if (c.post == Post::none && c.c_dt == DType::f32) {
            ASSERT_EQ(a, b) << i << "," << j;
          } else {
            ASSERT_NEAR(a, b, 2e-5f + (c.c_dt == DType::bf16 ? 0.008f : 1e-5f) * std::fabs(b)) << i << "," << j;
          }
        }
    }
  }
#if defined(__x86_64__)
  if (int8_supported()) {
    EXPECT_GT(kernels_run, 0);
  }
#endif
}

// A non-finite value in a row of A makes that row's outputs NaN (as float GEMMs propagate it),
// on every kernel, and leaves the other rows alone.
TEST(Int8, NonFiniteInputsGiveNaNRows) {
  const int64_t m = 5, n = 40, k = 72;
  test::Lcg r{13};
  std::vector<float> a(size_t(m * k)), w(size_t(n * k));
  for (float& v : a) v = r.next(-1, 1);
  for (float& v : w) v = r.next(-1, 1);
  a[size_t(1 * k + 3)] = NAN;
  a[size_t(3 * k + 70)] = INFINITY;  // in the scalar tail of an 8-wide loop
  const int8::Weight q = int8::quantize(w.data(), DType::f32, k, n, k);
  for (const int8::Kernel kern : {int8::Kernel::scalar, int8::Kernel::avx2, int8::Kernel::avxvnni, int8::Kernel::vnni256,
                                  int8::Kernel::vnni512}) {
    if (!int8::available(kern)) continue;
    SCOPED_TRACE(int8::name(kern));
    std::vector<float> c(size_t(m * n), 0.0f);
    int8::Args g;
    g.a = a.data(), g.lda = k, g.w = &q, g.c = c.data(), g.ldc = n, g.m = m;
    int8::gemm(kern, g, 2);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float v = c[size_t(i * n + j)];
        if (i == 1 || i == 3) {
          EXPECT_TRUE(std::isnan(v)) << i << "," << j;
        } else {
          EXPECT_TRUE(std::isfinite(v)) << i << "," << j;
        }
      }
  }
}

// The int8 product is close to the float product it stands for.
TEST(Int8, ProductIsCloseToFloat) {
  const int64_t m = 40, n = 64, k = 512;
  Lcg r{21};
  std::vector<float> a(size_t(m * k)), w(size_t(n * k)), c(size_t(m * n)), f(size_t(m * n));
  for (float& v : a) v = r.next(-1, 1);
  for (float& v : w) v = r.next(-1, 1) / 20;
  const int8::Weight q = int8::quantize(w.data(), DType::f32, k, n, k);
  int8::Args g;
  g.a = a.data(), g.lda = k, g.w = &q, g.c = c.data(), g.ldc = n, g.m = m;
  for (const int qmax : {127, 255}) {
    int8::gemm_reference(g, qmax);
    double num = 0, den = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t t = 0; t < k; ++t) s += double(a[size_t(i * k + t)]) * w[size_t(j * k + t)];
        num += (c[size_t(i * n + j)] - s) * (c[size_t(i * n + j)] - s), den += s * s;
      }
    EXPECT_LT(std::sqrt(num / den), qmax == 255 ? 0.01 : 0.02) << qmax;
  }
}

Tensor random_patches(const VitConfig& c, int64_t n, Tensor* positions) {
  Tensor p(DType::f32, {n, c.channels, c.patch_px, c.patch_px});
  *positions = Tensor(DType::f32, {n, 4});
  Lcg r{77};
  for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = r.next(-2, 2);
  for (int64_t i = 0; i < n; ++i) {
    float* q = positions->data<float>() + i * 4;
    q[0] = r.next(0, 224), q[1] = r.next(0, 224), q[2] = float(c.patch_px), q[3] = 0;
  }
  return p;
}

double min_row_cosine(const Tensor& a, const Tensor& b) {
  double worst = 1;
  const int64_t n = a.dim(0), d = a.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    const float* x = a.data<float>() + i * d;
    const float* y = b.data<float>() + i * d;
    double xy = 0, xx = 0, yy = 0;
    for (int64_t j = 0; j < d; ++j) xy += double(x[j]) * y[j], xx += double(x[j]) * x[j], yy += double(y[j]) * y[j];
    worst = std::min(worst, xy / std::sqrt(xx * yy));
  }
  return worst;
}

TEST(Int8, EncodeIsCloseToFp32AndSaysWhatRan) {
  const VitModel m = VitModel::load("random:vit-tiny:5");
  Tensor positions;
  const Tensor patches = random_patches(m.config(), 150, &positions);
  Executor exec({.threads = 2});
  const Encoding f = encode(m, patches, positions, {.image_width = 224, .image_height = 224}, exec);
  const Encoding q =
      encode(m, patches, positions, {.precision = Precision::int8, .image_width = 224, .image_height = 224}, exec);
  EXPECT_EQ(q.precision, runnable_precision(Precision::int8));
  if (!int8_supported()) GTEST_SKIP() << "no int8 kernels on this CPU: int8 ran fp32";
  EXPECT_EQ(q.precision, Precision::int8);
  EXPECT_NE(std::string(matrix_kernels(Precision::int8)).find("int8-"), std::string::npos);
  const double mean = mean_row_cosine(f.embeddings, q.embeddings);
  EXPECT_GT(mean, 0.99);
  EXPECT_LT(mean, 1.0);  // it did quantize
  EXPECT_GT(min_row_cosine(f.embeddings, q.embeddings), 0.97);
  // The reference executor runs the same int8 arithmetic on the scalar kernel.
  Executor ref({.threads = 1, .kernels = Kernels::reference});
  const Encoding qr =
      encode(m, patches, positions, {.precision = Precision::int8, .image_width = 224, .image_height = 224}, ref);
  EXPECT_GT(mean_row_cosine(q.embeddings, qr.embeddings), 0.995);
  // Quantized once per model, shared by later calls.
  ASSERT_TRUE(m.impl().int8_layers);
  EXPECT_EQ(m.impl().int8_layers->weights.size(), size_t(4 * m.config().layers));
}

// The int8 attention kernel (both products on vpdpbusd) against softmax attention in double:
// head widths 32 to 128, query counts around the 16-query strip, key counts around the 16-key
// groups, the 4-key value quads and the 256-key blocks; keys and values with a large shared offset
// in a few channels (what the smoothing takes out); a key with a NaN makes every output NaN, as
// float attention does.
TEST(Int8, AttentionIsCloseToSoftmaxAttention) {
  if (!int8attn::usable()) GTEST_SKIP() << "no AVX512-VNNI + AVX512-BF16 on this CPU (or FOVEA_INT8_ATTENTION=0)";
  for (const int64_t hd : {32, 64, 96, 128})
    for (const int64_t bq : {1, 16, 21})
      for (const int64_t nk : {1, 3, 17, 256, 257, 600}) {
        SCOPED_TRACE("hd=" + std::to_string(hd) + " bq=" + std::to_string(bq) + " nk=" + std::to_string(nk));
        const int64_t ldq = hd + 32;
        Lcg g{uint32_t(hd * 7919 + bq * 131 + nk * 7)};
        std::vector<uint16_t> q(size_t(bq * ldq)), k(size_t(nk * hd)), v(k.size());
        for (uint16_t& x : q) x = f32_to_bf16(g.next(-2, 2));
        for (int64_t t = 0; t < nk; ++t)
          for (int64_t j = 0; j < hd; ++j) k[size_t(t * hd + j)] = f32_to_bf16(g.next(-2, 2) + (j % 16 == 3 ? 20.0f : 0.0f));
        for (int64_t t = 0; t < nk; ++t)
          for (int64_t j = 0; j < hd; ++j) v[size_t(t * hd + j)] = f32_to_bf16(g.next(-1, 1) + (j % 8 == 1 ? 3.0f : 0.0f));
        std::vector<int8_t> kq(k.size());
        std::vector<float> ks(static_cast<size_t>(nk));
        std::vector<int32_t> ksum(static_cast<size_t>(nk));
        int8attn::quantize_keys(k.data(), nk, hd, kq.data(), ks.data(), ksum.data());
        std::vector<int8_t> vq(int8attn::values_bytes(nk, hd));
        std::vector<float> vs(size_t(2 * hd));
        int8attn::quantize_values(v.data(), nk, hd, vq.data(), vs.data());
        std::vector<std::byte> scratch(int8attn::kScratchBytes + 64);
        std::byte* sp = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
        std::vector<float> o(size_t(bq * hd), NAN);
        const double scale = 1.0 / std::sqrt(double(hd));
        int8attn::attention(q.data(), bq, ldq, kq.data(), ks.data(), ksum.data(), vq.data(), vs.data(), nk, hd, float(scale), sp,
                            o.data());
        double err = 0;
        for (int64_t i = 0; i < bq; ++i) {
          std::vector<double> sc(static_cast<size_t>(nk));
          double mx = -INFINITY, sum = 0;
          for (int64_t t = 0; t < nk; ++t) {
            double a = 0;
            for (int64_t j = 0; j < hd; ++j) a += double(bf16_to_f32(q[size_t(i * ldq + j)])) * bf16_to_f32(k[size_t(t * hd + j)]);
            mx = std::max(mx, sc[size_t(t)] = a * scale);
          }
          for (double& x : sc) sum += (x = std::exp(x - mx));
          for (int64_t j = 0; j < hd; ++j) {
            double want = 0;
            for (int64_t t = 0; t < nk; ++t) want += sc[size_t(t)] / sum * bf16_to_f32(v[size_t(t * hd + j)]);
            ASSERT_TRUE(std::isfinite(o[size_t(i * hd + j)])) << "row " << i << " column " << j;
            err = std::max(err, std::fabs(o[size_t(i * hd + j)] - want));
          }
        }
        // Scores up to ~12 in magnitude with int8 steps of ~1/64 of a row's range, P in steps of
        // 1/255: a few hundredths on outputs of magnitude <= 4 (bf16 alone: ~0.005).
        EXPECT_LE(err, 0.05);
        if (nk > 1) {  // one key: O is V exactly
          EXPECT_GT(err, 0.0);
        }
        if (nk == 257 && bq == 16) {
          k[size_t(100 * hd + 5)] = f32_to_bf16(NAN);
          int8attn::quantize_keys(k.data(), nk, hd, kq.data(), ks.data(), ksum.data());
          int8attn::attention(q.data(), bq, ldq, kq.data(), ks.data(), ksum.data(), vq.data(), vs.data(), nk, hd, float(scale), sp,
                              o.data());
          for (int64_t i = 0; i < bq; ++i) EXPECT_TRUE(std::isnan(o[size_t(i * hd)])) << "row " << i;
        }
      }
}

}  // namespace
}  // namespace fovea

namespace fovea {
namespace {

Tensor fixture_tokens(const VitModel& m, int64_t n, Tensor* positions) {
  Tensor p(DType::f32, {n, m.config().channels, m.config().patch_px, m.config().patch_px});
  *positions = Tensor(DType::f32, {n, 4});
  test::Lcg r{5};
  for (int64_t i = 0; i < p.numel(); ++i) p.data<float>()[i] = r.next(-2, 2);
  const float side = float(m.config().native_px());
  for (int64_t i = 0; i < n; ++i) {
    float* q = positions->data<float>() + i * 4;
    q[0] = r.next(0, side), q[1] = r.next(0, side), q[2] = float(m.config().patch_px), q[3] = 0;
  }
  return p;
}

// fovea convert: a bf16 copy encodes as the source does up to bf16 rounding of its matrices; an
// int8 copy carries the int8 layer matrices, so its int8 encode equals the source's bit for bit.
TEST(Convert, Bf16AndInt8CopiesOfACheckpoint) {
  for (const char* name : {"clip", "torchvision"}) {
    SCOPED_TRACE(name);
    const std::string src = test::source_dir() + "/tests/data/encoder/" + name;
    const std::string spec = std::string(name) == "clip" ? src : src + "/model.safetensors";
    const std::string dir = test::temp_dir("convert_" + std::string(name));
    const VitModel m = VitModel::load(spec);
    Tensor positions;
    const Tensor patches = fixture_tokens(m, 40, &positions);
    Executor exec({.threads = 2});
    const float side = float(m.config().native_px());
    EncodeParams p{.image_width = int(side), .image_height = int(side)};
    const Encoding ref32 = encode(m, patches, positions, p, exec);

    const std::string out16 = std::string(name) == "clip" ? dir + "/bf16" : dir + "/bf16.safetensors";
    const ConvertResult r16 = convert_checkpoint(spec, out16, Precision::bf16);
    EXPECT_EQ(r16.int8_matrices, 0);
    const VitModel b = VitModel::load(out16);
    EXPECT_EQ(b.config().hidden, m.config().hidden);
    EXPECT_EQ(b.config().naming, m.config().naming);
    EXPECT_GT(mean_row_cosine(ref32.embeddings, encode(b, patches, positions, p, exec).embeddings), 0.999);

    const std::string out8 = std::string(name) == "clip" ? dir + "/int8" : dir + "/int8.safetensors";
    const ConvertResult r8 = convert_checkpoint(spec, out8, Precision::int8);
    EXPECT_EQ(r8.int8_matrices, 4 * m.config().layers);
    if (std::string(name) == "clip") {
      // A directory in, a directory out, with the checkpoint's JSON files.
      EXPECT_EQ(r8.path, out8 + "/model.safetensors");
      EXPECT_TRUE(std::filesystem::exists(out8 + "/config.json"));
      EXPECT_TRUE(std::filesystem::exists(out8 + "/preprocessor_config.json"));
    }
    const VitModel q = VitModel::load(out8);
    ASSERT_TRUE(q.impl().int8_layers);
    EXPECT_TRUE(q.impl().int8_layers->stored);
    EXPECT_EQ(q.tensors_ignored(), 0);
    if (!int8_supported()) continue;
    p.precision = Precision::int8;
    const Encoding a = encode(m, patches, positions, p, exec), c = encode(q, patches, positions, p, exec);
    ASSERT_EQ(a.embeddings.numel(), c.embeddings.numel());
    EXPECT_EQ(std::memcmp(a.embeddings.bytes(), c.embeddings.bytes(), a.embeddings.size_bytes()), 0);
  }
  // Other formats, and an output onto its own input, are refused with a clear error.
  const std::string gguf = test::source_dir() + "/tests/data/encoder/gguf_llava/mmproj.gguf";
  EXPECT_THROW(convert_checkpoint(gguf, test::temp_dir("convert_bad") + "/x.safetensors", Precision::bf16), Error);
  const std::string tv = test::source_dir() + "/tests/data/encoder/torchvision/model.safetensors";
  EXPECT_THROW(convert_checkpoint(tv, tv, Precision::int8), Error);
  EXPECT_THROW(convert_checkpoint(tv, test::temp_dir("convert_bad") + "/y.safetensors", Precision::fp32), Error);
}

}  // namespace
}  // namespace fovea
