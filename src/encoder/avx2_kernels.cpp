// The AVX2 + FMA f32 GEMM of avx2.hpp. This translation unit alone is compiled with -mavx2
// -mfma (src/encoder/CMakeLists.txt); its functions run only after avx2::usable() (avx2.cpp,
// plain flags) said yes.
//
// Layout. W [N, K] is cut into panels of 16 output columns, each K rows of 16 floats
// (W transposed: one 64-byte line per k), so the kernel loads two vectors of W per k. A is read
// where it lies (row stride lda), one broadcast per row and k.
//
// Schedule (BLIS's, with the roles named for this product). Each thread owns a contiguous range
// of panels and packs them itself, when asked, so there is no barrier between packing and use.
// For a block of ≤ kMc rows of A, for each of its panels, for each kKc-deep slice of K, a 6 × 16
// register block (12 accumulators) runs over every 6 rows of the block; partial sums wait in a
// per-thread buffer between slices, and the epilogue (alpha, bias, activation, accumulate)
// writes C once per block and panel. A ViT's M (a foveated image: ~274 rows) is one block, so a
// panel is packed once per call; larger M repacks it per block (a 1/kMc share of the work).
// The sizes are measured, not derived: on a Zen 3 (32 KiB L1, 512 KiB L2), one core, W packed
// on the fly, kKc ∈ {128 ... 3072} × kMc ∈ {96 ... 1200} gave 80-91 GFLOP/s over ViT-B/16's
// shapes, within ~3 % of each other for kKc ≥ 768 and kMc ≥ 288; smaller blocks lose because
// the on-the-fly packing repeats per block (grouping 16 panels per packing, tried, was within
// noise of this). docs/explanation/encoder.md, "Kernels and dispatch".
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "encoder/avx2.hpp"
#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail::avx2 {

namespace {

constexpr int64_t kKc = 1024;  // k per slice (ViT-B/16: K = 768 is one slice, 3072 three)
constexpr int64_t kMc = 576;   // rows of A per block at most, a multiple of kMr
constexpr int kMr = 6;

// ---- packing ------------------------------------------------------------------------------

inline __m256 load8(const void* w, DType dt, int64_t off) {
  if (dt == DType::f32) return _mm256_loadu_ps(static_cast<const float*>(w) + off);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16 → f32: exact
}

inline float load1(const void* w, DType dt, int64_t off) {
  if (dt == DType::f32) return static_cast<const float*>(w)[off];
  const uint32_t bits = uint32_t(static_cast<const uint16_t*>(w)[off]) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// r[i] (8 floats of row i) → r[i] = column i.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Panel p of W into dst (k × 16 floats; aligned or not: the arena's are 64-byte aligned).
void pack_panel(const void* w, DType dt, int64_t ldw, int64_t n, int64_t k, int64_t p, float* dst) {
  const int64_t j0 = p * kNr, cols = std::min(kNr, n - j0);
  int64_t kk = 0;
  if (cols == kNr) {
    for (; kk + 8 <= k; kk += 8)
      for (int h = 0; h < 2; ++h) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = load8(w, dt, (j0 + 8 * h + i) * ldw + kk);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (kk + i) * kNr + 8 * h, r[i]);
      }
  }
  for (; kk < k; ++kk)
    for (int64_t j = 0; j < kNr; ++j) dst[kk * kNr + j] = j < cols ? load1(w, dt, (j0 + j) * ldw + kk) : 0.0f;
}

// ---- the 6 × 16 block ---------------------------------------------------------------------

// acc[MR, 16] (row stride ldacc) (+)= A[MR rows, kc] (row stride lda) · B[kc, 16] (row stride
// ldb: a panel's slice, 16, or 16 columns of a row-major matrix read where they lie).
template <int MR>
inline void block(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, float* acc, int64_t ldacc,
                  bool first) {
  __m256 c0[MR], c1[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    c0[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * ldacc);
    c1[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * ldacc + 8);
  }
  const float* ar[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) ar[r] = a + r * lda;
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 b0 = _mm256_loadu_ps(b + kk * ldb), b1 = _mm256_loadu_ps(b + kk * ldb + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(ar[r] + kk);
      c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(acc + r * ldacc, c0[r]);
    _mm256_storeu_ps(acc + r * ldacc + 8, c1[r]);
  }
}

inline void block_rows(int mr, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc, float* acc,
                       int64_t ldacc, bool first) {
  switch (mr) {
    case 6: block<6>(a, lda, b, ldb, kc, acc, ldacc, first); break;
    case 5: block<5>(a, lda, b, ldb, kc, acc, ldacc, first); break;
    case 4: block<4>(a, lda, b, ldb, kc, acc, ldacc, first); break;
    case 3: block<3>(a, lda, b, ldb, kc, acc, ldacc, first); break;
    case 2: block<2>(a, lda, b, ldb, kc, acc, ldacc, first); break;
    default: block<1>(a, lda, b, ldb, kc, acc, ldacc, first); break;
  }
}

// ---- epilogue -----------------------------------------------------------------------------

inline __m256 exp_ps(__m256 x) {  // Cephes' expf: |relative error| ≲ 2e-7 on [-87, 88.37]
  x = _mm256_min_ps(_mm256_set1_ps(88.37f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n, n in [-126, 127] after the clamp: the exponent field directly.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline __m256 erf_ps(__m256 x) {  // Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7), as the AMX epilogue
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), ax, _mm256_set1_ps(1.0f)));
  __m256 p = _mm256_set1_ps(1.061405429f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
  p = _mm256_mul_ps(p, t);
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
  const __m256 y = _mm256_fnmadd_ps(p, e, _mm256_set1_ps(1.0f));
  return _mm256_or_ps(y, _mm256_and_ps(x, sign));  // x's sign back; a NaN x stays NaN
}

inline __m256 activate(__m256 v, Post post) {
  const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
  switch (post) {
    case Post::none: return v;
    case Post::quick_gelu: {  // v·sigmoid(1.702 v)
      const __m256 e = exp_ps(_mm256_mul_ps(v, _mm256_set1_ps(-1.702f)));
      return _mm256_div_ps(v, _mm256_add_ps(one, e));
    }
    case Post::gelu_tanh: {  // 0.5 v (1 + tanh(√(2/π)(v + 0.044715 v³))), tanh y = 1 − 2 / (e^{2y} + 1)
      const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
      const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v));
      const __m256 e = exp_ps(_mm256_add_ps(y, y));
      const __m256 th = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
      return _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, th));
    }
    case Post::gelu_erf: {  // 0.5 v (1 + erf(v / √2))
      const __m256 er = erf_ps(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
      return _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, er));
    }
  }
  return v;
}

// Rows [0, rows) of acc (row stride 16) into C at (i0, panel p's columns).
void epilogue(const GemmArgs& g, const float* acc, int64_t i0, int64_t rows, int64_t p) {
  const int64_t j0 = p * kNr, cols = std::min(kNr, g.n - j0);
  alignas(32) float bias[kNr] = {};
  if (g.bias) std::memcpy(bias, g.bias + j0, size_t(cols) * 4);
  const __m256 alpha = _mm256_set1_ps(g.alpha), b0 = _mm256_load_ps(bias), b1 = _mm256_load_ps(bias + 8);
  for (int64_t r = 0; r < rows; ++r) {
    // alpha·x + b in one rounding; with alpha = 1 that is x + b exactly.
    const __m256 v0 = activate(_mm256_fmadd_ps(_mm256_load_ps(acc + r * kNr), alpha, b0), g.post);
    const __m256 v1 = activate(_mm256_fmadd_ps(_mm256_load_ps(acc + r * kNr + 8), alpha, b1), g.post);
    float* c = g.c + (i0 + r) * g.ldc + j0;
    if (cols == kNr) {
      _mm256_storeu_ps(c, g.accumulate ? _mm256_add_ps(v0, _mm256_loadu_ps(c)) : v0);
      _mm256_storeu_ps(c + 8, g.accumulate ? _mm256_add_ps(v1, _mm256_loadu_ps(c + 8)) : v1);
    } else {
      alignas(32) float v[kNr];
      _mm256_store_ps(v, v0), _mm256_store_ps(v + 8, v1);
      for (int64_t j = 0; j < cols; ++j) c[j] = g.accumulate ? v[j] + c[j] : v[j];
    }
  }
}

// ---- per-thread buffers -------------------------------------------------------------------

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

// A thread's own buffer of at least `floats` (grown, never shrunk; OpenMP's threads persist).
float* thread_buffer(std::unique_ptr<float, AlignedFree>& buf, size_t& cap, size_t floats) {
  if (cap < floats) {
    const size_t bytes = (floats * 4 + 63) & ~size_t(63);
    buf.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!buf) throw std::bad_alloc();
    cap = floats;
  }
  return buf.get();
}

// The rows of one block of A: the rows split evenly into blocks of at most kMc, each a
// multiple of kMr (M = 274 is one block, not 288 + nothing; M = 300 is 150 + 150).
int64_t block_rows_for(int64_t m) {
  const int64_t blocks = (m + kMc - 1) / kMc;
  const int64_t rows = (m + blocks - 1) / blocks;
  return (rows + kMr - 1) / kMr * kMr;
}

void run_panels(const GemmArgs& g, int64_t p0, int64_t p1) {
  thread_local std::unique_ptr<float, AlignedFree> own_buf, acc_buf;
  thread_local size_t own_cap = 0, acc_cap = 0;
  const int64_t mc_max = block_rows_for(g.m);
  float* acc = thread_buffer(acc_buf, acc_cap, size_t(mc_max * kNr));
  float* own = g.packed ? nullptr : thread_buffer(own_buf, own_cap, size_t(g.k * kNr));
  for (int64_t i0 = 0; i0 < g.m; i0 += mc_max) {
    const int64_t mc = std::min(mc_max, g.m - i0);
    for (int64_t p = p0; p < p1; ++p) {
      const float* panel = g.packed ? g.packed + p * kNr * g.k : own;
      if (!g.packed) pack_panel(g.w, g.w_dt, g.ldw, g.n, g.k, p, own);
      for (int64_t kb = 0; kb < g.k; kb += kKc) {
        const int64_t kc = std::min(kKc, g.k - kb);
        for (int64_t ir = 0; ir < mc; ir += kMr)
          block_rows(int(std::min<int64_t>(kMr, mc - ir)), g.a + (i0 + ir) * g.lda + kb, g.lda, panel + kb * kNr, kNr,
                     kc, acc + ir * kNr, kNr, kb == 0);
      }
      if (g.k == 0) std::memset(acc, 0, size_t(mc * kNr) * 4);
      epilogue(g, acc, i0, mc, p);
    }
  }
}

}  // namespace

void pack(const void* w, DType w_dt, int64_t ldw, int64_t n, int64_t k, float* dst, int threads) {
  const int64_t np = panels(n);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t p = 0; p < np; ++p) pack_panel(w, w_dt, ldw, n, k, p, dst + p * kNr * k);
}

void gemm(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  const int64_t np = panels(g.n);
  const int threads = int(std::clamp<int64_t>(g.threads, 1, np));
  if (threads == 1) {
    run_panels(g, 0, np);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    run_panels(g, np * t / nt, np * (t + 1) / nt);
  }
}

namespace {

// One strip of ≤ kMr query rows against one block of bk keys (S: mr × ls floats, L1-resident):
// the online-softmax step of each row (m, l its running max and sum), P written over S, and O's
// rows rescaled when the max moved. The same step as softmax_step_row (kernels_hwy.cpp), kept
// apart on purpose: calling that per row, on Highway's AVX2 target (what an AVX2-only CPU
// dispatches to), made this kernel ~9 % slower (`bench_encode --attention-kernel`, interleaved
// runs on an Ice Lake Xeon with Highway capped at AVX2: 68.6-69.0 against 75.2-75.6 GFLOP/s at
// 64 × 576, 65.8-66.2 against 71.8-72.3 at 64 × 4096); its exp is Highway's, more exact and
// dearer than exp_ps, behind a dispatched call per row. On the AVX3 target the two were equal
// within 1.5 %.
inline void softmax_strip(float* s, int mr, int64_t ls, int64_t bk, float scale, float* m, float* l, float* o,
                          int64_t hd, bool first) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const int64_t full = bk / 8 * 8;
  alignas(32) static constexpr int32_t kLane[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const __m256i tail_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(bk - full)),
                                                _mm256_load_si256(reinterpret_cast<const __m256i*>(kLane)));
  for (int r = 0; r < mr; ++r) {
    float* row = s + r * ls;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int64_t j = 0; j < full; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
    if (full < bk)
      vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(row + full),
                                                 _mm256_castsi256_ps(tail_mask)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float m_new = std::max(m[r], _mm_cvtss_f32(h) * scale);
    const float corr = std::exp(m[r] - m_new);  // exp(-inf) = 0 on the first block
    const __m256 vmn = _mm256_set1_ps(-m_new);
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t j = 0; j < full; j += 8) {
      const __m256 e = exp_ps(_mm256_fmadd_ps(_mm256_loadu_ps(row + j), vscale, vmn));
      vsum = _mm256_add_ps(vsum, e);
      _mm256_storeu_ps(row + j, e);
    }
    if (full < bk) {
      const __m256 e = _mm256_and_ps(exp_ps(_mm256_fmadd_ps(_mm256_loadu_ps(row + full), vscale, vmn)),
                                     _mm256_castsi256_ps(tail_mask));
      vsum = _mm256_add_ps(vsum, e);
      _mm256_storeu_ps(row + full, e);
    }
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(vsum), _mm256_extractf128_ps(vsum, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
    l[r] = l[r] * corr + _mm_cvtss_f32(t);
    m[r] = m_new;
    if (!first && corr != 1.0f) {
      const __m256 vc = _mm256_set1_ps(corr);
      float* orow = o + r * hd;
      for (int64_t j = 0; j < hd; j += 8) _mm256_storeu_ps(orow + j, _mm256_mul_ps(_mm256_loadu_ps(orow + j), vc));
    }
  }
}

}  // namespace

void attention(const float* q, int64_t bq, int64_t ldq, const float* k, const float* v, int64_t nk, int64_t hd,
               float scale, const float* bias, int64_t bias_from, float* o) {
  std::memset(o, 0, size_t(bq * hd) * 4);
  if (bq <= 0 || nk <= 0) return;
  // Keys per block: the block's packed keys and its values (2 · kBk · hd floats, 64 KiB at hd =
  // 64) stay in L2 while every strip of kMr query rows runs over them; a strip's scores (kMr ·
  // kBk floats) and its O rows stay in L1 from Q·Kᵀ through the softmax to P·V.
  constexpr int64_t kBk = 128;
  const int64_t bk_max = std::min(kBk, (nk + kNr - 1) / kNr * kNr);
  thread_local std::unique_ptr<float, AlignedFree> kp_buf, s_buf;
  thread_local size_t kp_cap = 0, s_cap = 0;
  thread_local std::vector<float> m, l;
  float* kp = thread_buffer(kp_buf, kp_cap, size_t(bk_max * hd));
  float* s = thread_buffer(s_buf, s_cap, size_t(kMr * bk_max));
  m.assign(size_t(bq), -INFINITY);
  l.assign(size_t(bq), 0.0f);
  const float inv_scale = 1.0f / scale;
  for (int64_t k0 = 0; k0 < nk; k0 += kBk) {
    const int64_t bk = std::min(kBk, nk - k0), np = (bk + kNr - 1) / kNr, ls = np * kNr;
    for (int64_t p = 0; p < np; ++p) pack_panel(k + k0 * hd, DType::f32, hd, bk, hd, p, kp + p * kNr * hd);
    for (int64_t ir = 0; ir < bq; ir += kMr) {
      const int mr = int(std::min<int64_t>(kMr, bq - ir));
      // S[mr, ls] = Q[ir .. ir + mr) · K[k0 .. k0 + bk)ᵀ.
      for (int64_t p = 0; p < np; ++p)
        block_rows(mr, q + ir * ldq, ldq, kp + p * kNr * hd, kNr, hd, s + p * kNr, ls, true);
      if (bias && k0 + bk > bias_from) {
        const int64_t j0 = std::max<int64_t>(0, bias_from - k0);
        for (int r = 0; r < mr; ++r)
          for (int64_t j = j0; j < bk; ++j) s[r * ls + j] += bias[k0 + j] * inv_scale;
      }
      softmax_strip(s, mr, ls, bk, scale, m.data() + ir, l.data() + ir, o + ir * hd, hd, k0 == 0);
      // O[ir .. ir + mr) += P · V[k0 .. k0 + bk): 16 columns of V at a time, read where they lie.
      for (int64_t c = 0; c < hd; c += kNr) block_rows(mr, s, ls, v + k0 * hd + c, hd, bk, o + ir * hd + c, hd, false);
    }
  }
  for (int64_t i = 0; i < bq; ++i) {
    const float inv = 1.0f / l[size_t(i)];
    for (int64_t j = 0; j < hd; ++j) o[i * hd + j] *= inv;
  }
}

double fma_peak_gflops(int threads, double seconds) {
  double total = 0;
#pragma omp parallel num_threads(std::max(1, threads)) reduction(+ : total)
  {
    // Twelve independent chains (FMA latency 4 × 2 pipes needs ≥ 8), in named registers: an
    // array would be kept in memory across the asm barrier, and its store-to-load latency
    // would be measured instead.
    __m256 c0 = _mm256_set1_ps(0.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0,
           c10 = c0, c11 = c0;
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    int64_t iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      for (int rep = 0; rep < 4096; ++rep) {
        c0 = _mm256_fmadd_ps(c0, x, y), c1 = _mm256_fmadd_ps(c1, x, y), c2 = _mm256_fmadd_ps(c2, x, y);
        c3 = _mm256_fmadd_ps(c3, x, y), c4 = _mm256_fmadd_ps(c4, x, y), c5 = _mm256_fmadd_ps(c5, x, y);
        c6 = _mm256_fmadd_ps(c6, x, y), c7 = _mm256_fmadd_ps(c7, x, y), c8 = _mm256_fmadd_ps(c8, x, y);
        c9 = _mm256_fmadd_ps(c9, x, y), c10 = _mm256_fmadd_ps(c10, x, y), c11 = _mm256_fmadd_ps(c11, x, y);
        // The chains must run: the compiler may not see through this.
        __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7), "+x"(c8),
                         "+x"(c9), "+x"(c10), "+x"(c11));
      }
      iters += 4096;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < seconds);
    total += double(iters) * 12 * 8 * 2 / el / 1e9;
  }
  return total;
}

}  // namespace fovea::encoder_detail::avx2
