// Attention (src/encoder/attention.cpp): the fast exact kernels against a plain double-precision
// softmax attention, the hierarchical approximation's limits (all blocks = exact; odd N), its
// quadtree blocks, and the --attention option of the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "encoder/attention.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

using namespace encoder_detail;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.numel() != b.numel()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.data<float>()[i])) return false;
  return true;
}

// n random tokens of model c over a w × h image (xorshift, fixed seed).
void random_tokens(const VitConfig& c, int64_t n, int w, int h, Tensor* patches, Tensor* positions, uint32_t seed = 7) {
  *patches = Tensor(DType::f32, {n, c.channels, c.patch_px, c.patch_px});
  *positions = Tensor(DType::f32, {n, 4});
  uint32_t s = seed;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return float(s % 100000) / 100000.0f;
  };
  for (int64_t i = 0; i < patches->numel(); ++i) patches->data<float>()[i] = next() * 4 - 2;
  for (int64_t i = 0; i < n; ++i) {
    float* p = positions->data<float>() + i * 4;
    p[0] = next() * w, p[1] = next() * h, p[2] = float(c.patch_px), p[3] = 0;
  }
}

TEST(EncoderAttention, ParseAndPrint) {
  EXPECT_EQ(parse_attention("exact").mode, AttentionParams::Mode::exact);
  const AttentionParams h = parse_attention("hierarchical");
  EXPECT_EQ(h.mode, AttentionParams::Mode::hierarchical);
  EXPECT_EQ(h.top_k, 8);
  EXPECT_EQ(h.block_tokens, 64);
  const AttentionParams k = parse_attention("hierarchical:3");
  EXPECT_EQ(k.top_k, 3);
  EXPECT_EQ(k.block_tokens, 64);
  const AttentionParams kb = parse_attention("hierarchical:5:32");
  EXPECT_EQ(kb.top_k, 5);
  EXPECT_EQ(kb.block_tokens, 32);
  EXPECT_EQ(to_string(kb), "hierarchical:5:32");
  EXPECT_EQ(to_string(parse_attention(to_string(kb))), "hierarchical:5:32");
  EXPECT_EQ(to_string(AttentionParams{}), "exact");
  for (const char* bad : {"", "Exact", "hier", "hierarchical:", "hierarchical:0", "hierarchical:-1", "hierarchical:x",
                          "hierarchical:4:", "hierarchical:4:0", "hierarchical:4:8:2", "hierarchical4", "exact:3",
                          "hierarchical:99999999999"}) {
    try {
      parse_attention(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument) << bad;
      EXPECT_NE(std::string(e.what()).find("hierarchical:K"), std::string::npos) << e.what();
    }
  }
}

// The fast kernels (head-major copies, balanced blocks, online softmax over several key blocks)
// and the reference path against attention computed directly in double, for r != T (the
// incremental encoder's case), fp32 and bf16.
// Many rows (150; T spans two key blocks) and the incremental encoder's few rows of a frame
// against one key block (24 × 273, 128 × 1024, a single row).
class AttentionRows : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};
INSTANTIATE_TEST_SUITE_P(EncoderAttention, AttentionRows,
                         ::testing::Values(std::pair<int64_t, int64_t>{150, 1300}, std::pair<int64_t, int64_t>{24, 273},
                                           std::pair<int64_t, int64_t>{128, 1024}, std::pair<int64_t, int64_t>{1, 17}));
TEST_P(AttentionRows, MatchPlainSoftmaxAttention) {
  const auto [r, T] = GetParam();
  const int64_t heads = 4, hd = 24, D = heads * hd;
  std::vector<float> q(size_t(r * 2 * D)), kv(size_t(T * 2 * D));  // row strides 2D and 2D
  uint32_t s = 99;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return float(s % 100000) / 50000.0f - 1.0f;
  };
  for (float& v : q) v = next() * 2;
  for (float& v : kv) v = next() * 2;
  std::vector<double> want(size_t(r * D));
  for (int h = 0; h < heads; ++h)
    for (int64_t i = 0; i < r; ++i) {
      std::vector<double> sc(static_cast<size_t>(T));
      double mx = -INFINITY;
      for (int64_t t = 0; t < T; ++t) {
        double a = 0;
        for (int64_t j = 0; j < hd; ++j) a += double(q[i * 2 * D + h * hd + j]) * kv[t * 2 * D + h * hd + j];
        sc[t] = a / std::sqrt(double(hd));
        mx = std::max(mx, sc[t]);
      }
      double sum = 0;
      for (double& v : sc) sum += (v = std::exp(v - mx));
      for (int64_t j = 0; j < hd; ++j) {
        double a = 0;
        for (int64_t t = 0; t < T; ++t) a += sc[t] * kv[t * 2 * D + D + h * hd + j];
        want[i * D + h * hd + j] = a / sum;
      }
    }
  Gemm gemm;
  gemm.reserve_threads(2);
  for (bool reference : {false, true}) {
    std::vector<float> out(size_t(r * D));
    attention_rows({reference, reference ? 1 : 2, &gemm}, reinterpret_cast<const std::byte*>(q.data()), 2 * D, r,
                   reinterpret_cast<const std::byte*>(kv.data()), 2 * D, T, D, int(heads), DType::f32,
                   reinterpret_cast<std::byte*>(out.data()));
    double err = 0;
    for (size_t i = 0; i < out.size(); ++i) err = std::max(err, std::fabs(out[i] - want[i]));
    EXPECT_LE(err, 2e-5) << (reference ? "reference" : "fast");
  }
  // bf16: inputs rounded, P in bf16; per-row cosine to the f64 result. oneDNN's bf16 kernels
  // exist only on AVX-512 / AMX CPUs (encode() runs fp32 elsewhere).
  if (!bf16_supported()) GTEST_SKIP() << "fp32 checked; this CPU has no bf16 matrix kernels for the bf16 half";
  std::vector<uint16_t> q16(q.size()), kv16(kv.size()), out16(size_t(r * D));
  to_bf16_row(q.data(), q16.data(), int64_t(q.size()));
  to_bf16_row(kv.data(), kv16.data(), int64_t(kv.size()));
  attention_rows({false, 2, &gemm}, reinterpret_cast<const std::byte*>(q16.data()), 2 * D, r,
                 reinterpret_cast<const std::byte*>(kv16.data()), 2 * D, T, D, int(heads), DType::bf16,
                 reinterpret_cast<std::byte*>(out16.data()));
  double worst = 1;
  for (int64_t i = 0; i < r; ++i) {
    double xy = 0, xx = 0, yy = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double x = bf16_to_f32(out16[i * D + j]), y = want[i * D + j];
      xy += x * y, xx += x * x, yy += y * y;
    }
    worst = std::min(worst, xy / std::sqrt(xx * yy));
  }
  EXPECT_GE(worst, 0.995);
}

// Blocks are quadtree cells: on a 16×16 grid of tokens, blocks of 16 are the 4×4 cells.
// The incremental encoder's cache keeps K and V head-major and calls
// attention_rows_kv_head_major: the same results as attention_rows on the interleaved K|V, bit
// for bit (f32 with the fast and the reference kernels, bf16 with the reference ones: oneDNN
// 2.6 has no bf16 matmul on CPUs without AVX-512; several row and key counts, key blocks).
TEST(EncoderAttention, HeadMajorKeysAndValuesGiveTheSameBits) {
  Gemm gemm;
  gemm.reserve_threads(2);
  for (DType dt : {DType::f32, DType::bf16})
    for (auto [r, T, D, heads] : {std::tuple<int64_t, int64_t, int64_t, int>{16, 273, 64, 4}, {5, 40, 48, 3},
                                  {32, 1500, 32, 2}}) {
      SCOPED_TRACE(std::string(dt == DType::f32 ? "f32" : "bf16") + " r=" + std::to_string(r) +
                   " T=" + std::to_string(T));
      const int64_t hd = D / heads;
      const size_t es = dt == DType::f32 ? 4 : 2;
      std::vector<float> qf(size_t(r * 3 * D)), kvf(size_t(T * 2 * D));
      uint32_t s = 99u + uint32_t(T);
      auto next = [&] {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        return float(s % 2001) / 1000.0f - 1.0f;
      };
      for (float& v : qf) v = next();
      for (float& v : kvf) v = next();
      std::vector<std::byte> q(qf.size() * es), kv(kvf.size() * es), khm(size_t(T * D) * es), vhm(size_t(T * D) * es);
      if (dt == DType::f32) {
        std::memcpy(q.data(), qf.data(), q.size()), std::memcpy(kv.data(), kvf.data(), kv.size());
      } else {
        to_bf16_row(qf.data(), reinterpret_cast<uint16_t*>(q.data()), int64_t(qf.size()));
        to_bf16_row(kvf.data(), reinterpret_cast<uint16_t*>(kv.data()), int64_t(kvf.size()));
      }
      for (int64_t t = 0; t < T; ++t)
        for (int h = 0; h < heads; ++h) {
          std::memcpy(khm.data() + size_t((h * T + t) * hd) * es, kv.data() + size_t(t * 2 * D + h * hd) * es, size_t(hd) * es);
          std::memcpy(vhm.data() + size_t((h * T + t) * hd) * es, kv.data() + size_t(t * 2 * D + D + h * hd) * es,
                      size_t(hd) * es);
        }
      for (bool reference : {false, true}) {
        if (dt == DType::bf16 && !reference) continue;
        std::vector<std::byte> a(size_t(r * D) * es), b(size_t(r * D) * es, std::byte{1});
        const AttentionExec ex{reference, reference ? 1 : 2, &gemm};
        attention_rows(ex, q.data(), 3 * D, r, kv.data(), 2 * D, T, D, heads, dt, a.data());
        AttentionWorkspace ws;
        attention_rows_kv_head_major(ex, q.data(), 3 * D, r, khm.data(), vhm.data(), T, D, heads, dt, b.data(), &ws);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << (reference ? "reference" : "fast");
      }
    }
}

TEST(EncoderAttention, PlanBlocksAreQuadtreeCells) {
  std::vector<float> pos;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x) pos.insert(pos.end(), {x * 8.0f + 4, y * 8.0f + 4, 8, 0});
  AttentionParams a;
  a.mode = AttentionParams::Mode::hierarchical;
  a.block_tokens = 16;
  const HierarchicalPlan p = plan_hierarchical(a, 1, pos.data(), 4, 256);
  ASSERT_EQ(p.blocks(), 16);
  ASSERT_EQ(p.order.size(), 257u);
  EXPECT_EQ(p.order[0], 0);  // the class token first, not in a block
  EXPECT_EQ(p.block_start.front(), 1);
  EXPECT_EQ(p.block_start.back(), 257);
  std::set<int32_t> seen(p.order.begin(), p.order.end());
  EXPECT_EQ(seen.size(), 257u);  // a permutation
  for (int64_t b = 0; b < p.blocks(); ++b) {
    std::set<std::pair<int, int>> cells;
    for (int64_t i = p.block_start[b]; i < p.block_start[b + 1]; ++i) {
      const int tok = p.order[i] - 1;
      cells.insert({(tok % 16) / 4, (tok / 16) / 4});
    }
    EXPECT_EQ(cells.size(), 1u) << "block " << b << " spans several 4x4 cells";
  }
}

// top_k >= the number of blocks: every key is exact, so hierarchical = exact up to summation order.
TEST(EncoderAttention, HierarchicalWithEveryBlockIsExact) {
  const VitModel m = VitModel::load("random:vit-tiny:3");
  Tensor patches, positions;
  random_tokens(m.config(), 300, 640, 480, &patches, &positions);
  for (const Kernels k : {Kernels::best, Kernels::reference}) {
    Executor exec({.threads = k == Kernels::reference ? 1 : 2, .kernels = k});
    EncodeParams p{.image_width = 640, .image_height = 480};
    const Encoding exact = encode(m, patches, positions, p, exec);
    p.attention = parse_attention("hierarchical:10:32");  // 300 / 32 → 10 blocks
    const Encoding h10 = encode(m, patches, positions, p, exec);
    EXPECT_LE(max_abs_diff(exact.embeddings, h10.embeddings), 1e-4);
    EXPECT_LE(max_abs_diff(exact.class_token, h10.class_token), 1e-4);
    // The attention op's time is timed apart, and is part of the encode's.
    for (const Encoding* e : {&exact, &h10}) {
      EXPECT_GT(e->attention_ms, 0.0);
      EXPECT_LT(e->attention_ms, e->encode_ms);
    }
    p.attention = parse_attention("hierarchical:1000:32");
    EXPECT_LE(max_abs_diff(exact.embeddings, encode(m, patches, positions, p, exec).embeddings), 1e-4);
    // Fewer blocks than that is an approximation: different, but close on this near-uniform model.
    p.attention = parse_attention("hierarchical:2:32");
    const Encoding h2 = encode(m, patches, positions, p, exec);
    EXPECT_GT(max_abs_diff(exact.embeddings, h2.embeddings), 1e-6);
    EXPECT_GE(mean_row_cosine(exact.embeddings, h2.embeddings), 0.99);
  }
}

// A query block picks the key blocks its queries could attend to most, not those its mean query
// prefers. Three blocks of 4 (D = 4, one head, no class token), top_k = 1: blocks 0 and 1 hold
// four identical keys and values each, so their pooled rows are exact; block 2 holds three
// ordinary keys and one that query 3 matches sharply. Queries 0-2 like block 1, and the block's
// mean query ranks block 1 above block 2; but only block 2 loses anything by pooling, and query 3
// puts nearly all of its attention on one of its keys. Ranking by the keys' score bounds picks
// block 2, which makes every row of the approximation exact.
TEST(EncoderAttention, HierarchicalRanksBlocksByTheirBestKey) {
  constexpr int64_t T = 12, D = 4;
  std::vector<float> qkv(size_t(T * 3 * D), 0.0f);  // rows: q | k | v
  auto set = [&](int64_t row, int part, std::array<float, 4> x) {
    std::copy(x.begin(), x.end(), qkv.begin() + row * 3 * D + part * D);
  };
  for (int64_t r = 0; r < 4; ++r) set(r, 1, {0, 0, 1, 0}), set(r, 2, {1, 0, 0, 0});       // block 0
  for (int64_t r = 4; r < 8; ++r) set(r, 1, {1, 0, 0, 0}), set(r, 2, {0, 1, 0, 0});       // block 1
  for (int64_t r = 8; r < 11; ++r) set(r, 1, {-1, 0, 0, 0}), set(r, 2, {0, 0, 0, 1});     // block 2
  set(11, 1, {0, 20, 0, 0}), set(11, 2, {0, 0, 1, 0});                                      // its sharp key
  for (int64_t r = 0; r < 3; ++r) set(r, 0, {2, 0, 0, 0});  // queries 0-2: block 1
  set(3, 0, {0, 2, 0, 0});                                  // query 3: key 11
  for (int64_t r = 4; r < T; ++r) set(r, 0, {0, 0, 1, 0});
  HierarchicalPlan plan;
  plan.top_k = 1;
  plan.order.resize(T);
  for (int64_t i = 0; i < T; ++i) plan.order[size_t(i)] = int32_t(i);
  plan.block_start = {0, 4, 8, 12};
  for (const bool ref : {true, false}) {
    Gemm gemm;
    const AttentionExec ex{ref, 1, &gemm};
    const auto* in = reinterpret_cast<const std::byte*>(qkv.data());
    std::vector<float> exact(size_t(T * D)), approx(size_t(T * D));
    attention_rows(ex, in, 3 * D, T, in + D * 4, 3 * D, T, D, 1, DType::f32, reinterpret_cast<std::byte*>(exact.data()));
    attention_rows(ex, in, 3 * D, T, in + D * 4, 3 * D, T, D, 1, DType::f32, reinterpret_cast<std::byte*>(approx.data()),
                   &plan);
    EXPECT_GT(exact[3 * D + 2], 0.99f) << "query 3 attends to key 11 (value e2)";
    for (int64_t i = 0; i < T * D; ++i) EXPECT_NEAR(approx[size_t(i)], exact[size_t(i)], 1e-4) << ref << " " << i;
  }
}

// The fast kernels' hierarchical attention (on AVX2-only CPUs: the picked blocks read where they
// lie, in runs of adjacent blocks) gives the reference's rows: head width 64, one global row,
// blocks of uneven sizes, top_k 3 of 7 with peaked scores, so that picked blocks are adjacent
// for some query blocks and apart for others.
TEST(EncoderAttention, HierarchicalFastKernelsMatchTheReference) {
  constexpr int64_t hd = 64, heads = 2, D = hd * heads, G = 1;
  const std::vector<int64_t> sizes = {40, 33, 64, 17, 50, 64, 21};
  HierarchicalPlan plan;
  plan.top_k = 3;
  plan.n_global = G;
  plan.block_start = {G};  // offsets into the order, whose first G entries are the global rows
  for (int64_t n : sizes) plan.block_start.push_back(plan.block_start.back() + n);
  const int64_t T = plan.block_start.back();
  // The global row first, then the token rows in a permuted order (reversed here).
  for (int64_t g = 0; g < G; ++g) plan.order.push_back(int32_t(g));
  for (int64_t i = 0; i < T - G; ++i) plan.order.push_back(int32_t(T - 1 - i));
  std::vector<float> qkv(size_t(T * 3 * D));
  uint32_t st = 17;
  for (float& x : qkv) {
    st = st * 1664525u + 1013904223u;
    x = (float(st >> 8) / float(1 << 24) * 2 - 1) * 2.5f;  // logits up to ~10: peaked attention
  }
  const auto* in = reinterpret_cast<const std::byte*>(qkv.data());
  std::vector<float> ref(size_t(T * D)), fast(size_t(T * D));
  Gemm gemm;
  gemm.reserve_threads(2);
  attention_rows({true, 1, &gemm}, in, 3 * D, T, in + D * 4, 3 * D, T, D, int(heads), DType::f32,
                 reinterpret_cast<std::byte*>(ref.data()), &plan);
  attention_rows({false, 2, &gemm}, in, 3 * D, T, in + D * 4, 3 * D, T, D, int(heads), DType::f32,
                 reinterpret_cast<std::byte*>(fast.data()), &plan);
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(fast[i], ref[i], 2e-4) << "element " << i;
  // And not exact attention: the approximation is in effect.
  std::vector<float> exact(size_t(T * D));
  attention_rows({true, 1, &gemm}, in, 3 * D, T, in + D * 4, 3 * D, T, D, int(heads), DType::f32,
                 reinterpret_cast<std::byte*>(exact.data()));
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::fabs(ref[i] - exact[i])));
  EXPECT_GT(worst, 1e-3);
}

// bf16 through attention_rows, exact and hierarchical (its ranking's bound GEMM in bf16 too),
// on whichever kernels this CPU runs (AMX, AVX512-BF16 or oneDNN): the scalar reference of the
// same algorithm agrees.
TEST(EncoderAttention, Bf16FastKernelsMatchTheReference) {
  if (!bf16_supported()) GTEST_SKIP() << "this CPU has no bf16 matrix kernels";
  const int64_t heads = 3, hd = 64, D = heads * hd, n = 300, T = n + 1;
  test::Lcg g{5};
  std::vector<uint16_t> qkv(size_t(T * 3 * D));
  for (uint16_t& x : qkv) x = f32_to_bf16(g.next(-1.5f, 1.5f));
  std::vector<float> pos(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(2 * i)] = float(i % 20), pos[size_t(2 * i + 1)] = float(i / 20);
  AttentionParams ap;
  ap.mode = AttentionParams::Mode::hierarchical, ap.top_k = 2, ap.block_tokens = 32;
  const HierarchicalPlan plan = plan_hierarchical(ap, 1, pos.data(), 2, n);
  for (const bool hier : {false, true}) {
    SCOPED_TRACE(hier ? "hierarchical" : "exact");
    Gemm gemm;
    gemm.reserve_threads(2);
    std::vector<uint16_t> fast(size_t(T * D)), ref(size_t(T * D));
    const auto* qp = reinterpret_cast<const std::byte*>(qkv.data());
    const auto* kvp = reinterpret_cast<const std::byte*>(qkv.data() + D);
    attention_rows({false, 2, &gemm}, qp, 3 * D, T, kvp, 3 * D, T, D, int(heads), DType::bf16,
                   reinterpret_cast<std::byte*>(fast.data()), hier ? &plan : nullptr);
    attention_rows({true, 1, nullptr}, qp, 3 * D, T, kvp, 3 * D, T, D, int(heads), DType::bf16,
                   reinterpret_cast<std::byte*>(ref.data()), hier ? &plan : nullptr);
    double err = 0;
    for (size_t i = 0; i < fast.size(); ++i) err = std::max(err, double(std::fabs(bf16_to_f32(fast[i]) - bf16_to_f32(ref[i]))));
    EXPECT_LE(err, 0.02);
  }
}

TEST(EncoderAttention, HierarchicalOddTokenCounts) {
  const VitModel m = VitModel::load("random:vit-tiny:5");
  Executor exec({.threads = 2});
  for (int64_t n : {1, 2, 3, 17, 37, 129}) {
    Tensor patches, positions;
    random_tokens(m.config(), n, 333, 201, &patches, &positions, uint32_t(n));
    for (Precision prec : {Precision::fp32, Precision::bf16}) {
      EncodeParams p{.precision = prec, .image_width = 333, .image_height = 201};
      p.attention = parse_attention("hierarchical:2:8");
      const Encoding e = encode(m, patches, positions, p, exec);
      ASSERT_EQ(e.embeddings.shape(), (std::vector<int64_t>{n, m.config().hidden})) << n;
      EXPECT_TRUE(all_finite(e.embeddings)) << n;
      if (n <= 16) {  // at most two blocks: all exact
        p.attention = {};
        const Encoding x = encode(m, patches, positions, p, exec);
        EXPECT_GE(mean_row_cosine(x.embeddings, e.embeddings), prec == Precision::fp32 ? 0.99999 : 0.999) << n;
      }
    }
  }
  // All tokens at one point (zero extent): one Morton code, still valid blocks.
  Tensor patches, positions;
  random_tokens(m.config(), 40, 100, 100, &patches, &positions);
  for (int64_t i = 0; i < 40; ++i) positions.data<float>()[i * 4] = 50, positions.data<float>()[i * 4 + 1] = 50;
  EncodeParams p{.image_width = 100, .image_height = 100};
  p.attention = parse_attention("hierarchical:1:8");
  EXPECT_TRUE(all_finite(encode(m, patches, positions, p, exec).embeddings));
  p.attention.top_k = 0;
  EXPECT_THROW(encode(m, patches, positions, p, exec), Error);
}

// Hierarchical attention says it is experimental and what it cost on a real pretrained tower:
// the measured range for a measured K:B, the range over all of them otherwise; exact says nothing.
TEST(EncoderAttention, HierarchicalIsLabelledExperimentalWithItsRealTowerCost) {
  const AttentionCaveat exact = attention_caveat(AttentionParams{});
  EXPECT_FALSE(exact.experimental);
  EXPECT_TRUE(exact.text.empty());
  const AttentionCaveat k8 = attention_caveat(parse_attention("hierarchical"));
  EXPECT_TRUE(k8.experimental);
  EXPECT_EQ(k8.measured, "hierarchical:8:64");
  EXPECT_EQ(k8.text.rfind("experimental: mean per-token cosine to exact attention ", 0), 0u) << k8.text;
  EXPECT_NE(k8.text.find("ViT-Ti/16 at N=4096 (hierarchical:8:64)"), std::string::npos) << k8.text;
  // The default falls well short of exact on a real tower, and more blocks get closer.
  EXPECT_LT(k8.cosine_hi, 0.99);
  EXPECT_LT(k8.cosine_lo, k8.cosine_hi);
  const AttentionCaveat k32 = attention_caveat(parse_attention("hierarchical:32:64"));
  EXPECT_GT(k32.cosine_lo, k8.cosine_lo);
  EXPECT_EQ(k32.measured, "hierarchical:32:64");
  const AttentionCaveat other = attention_caveat(parse_attention("hierarchical:8:32"));
  EXPECT_EQ(other.measured, "hierarchical:4:64 to hierarchical:32:64");
  EXPECT_LE(other.cosine_lo, k8.cosine_lo);
  EXPECT_GE(other.cosine_hi, k32.cosine_hi);
  // What an embeddings file records.
  const VitModel m = VitModel::load("random:vit-tiny");
  EXPECT_EQ(encoder_metadata(m, Precision::fp32, parse_attention("hierarchical")).at("attention"),
            "hierarchical:8:64 (approximate, " + k8.text + ")");
  EXPECT_EQ(encoder_metadata(m, Precision::fp32).at("attention"), "exact");
}

int count_lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

TEST(EncoderAttention, CliOptionAndMetadata) {
  const std::string dir = test::temp_dir("encoder_attention_cli");
  const std::string image = dir + "/in.png";
  save_png(test::gradient_image(96, 64, 3), image);
  for (const char* bad : {"bogus", "hierarchical:0", "hierarchical:2:0", "hierarchical:two"}) {
    const auto r = test::run_cli({"encode", image, "--model", "random:vit-tiny", "--attention", bad});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("--attention"), std::string::npos) << r.err;
  }
  const std::string out = dir + "/e.safetensors";
  const auto r = test::run_cli({"encode", image, "--model", "random:vit-tiny", "--attention", "hierarchical:2:4",
                                "--check-fp32", "--json", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["encoder"]["attention"]["mode"], "hierarchical");
  EXPECT_EQ(j["encoder"]["attention"]["approximate"], true);
  // Experimental, with what it cost on a real tower: 2:4 was not measured, so the range over
  // every K:B that was.
  const AttentionCaveat caveat = attention_caveat(parse_attention("hierarchical:2:4"));
  EXPECT_EQ(j["encoder"]["attention"]["experimental"], true);
  EXPECT_EQ(j["encoder"]["attention"]["caveat"], caveat.text);
  EXPECT_EQ(j["encoder"]["attention"]["real_tower_mean_cosine"], nlohmann::json({caveat.cosine_lo, caveat.cosine_hi}));
  EXPECT_EQ(j["encoder"]["attention"]["real_tower_measured"], "hierarchical:4:64 to hierarchical:32:64");
  EXPECT_EQ(j["encoder"]["attention"]["top_k_blocks"], 2);
  EXPECT_GT(j["encoder"]["cosine_vs_fp32"].get<double>(), 0.9);
  EXPECT_GT(j["timings_ms"]["attention"].get<double>(), 0.0);
  EXPECT_LT(j["timings_ms"]["attention"].get<double>(), j["timings_ms"]["encode"].get<double>());
  const SafetensorsFile f = SafetensorsFile::open(out);
  EXPECT_EQ(f.metadata().at("attention"), "hierarchical:2:4 (approximate, " + caveat.text + ")");
  const auto x = test::run_cli({"encode", image, "--model", "random:vit-tiny", "--json", "-o", out});
  ASSERT_EQ(x.exit_code, 0) << x.err;
  EXPECT_EQ(nlohmann::json::parse(x.out)["encoder"]["attention"]["mode"], "exact");
  EXPECT_EQ(SafetensorsFile::open(out).metadata().at("attention"), "exact");
}

}  // namespace
}  // namespace fovea
