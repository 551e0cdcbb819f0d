// The AVX-512 f32 attention kernel of avx512.hpp. This translation unit alone is compiled with
// -mavx512f -mavx2 -mfma (src/encoder/CMakeLists.txt); its functions run only after
// avx512::usable() (avx512.cpp, plain flags) said yes.
//
// The schedule is avx2::attention's (avx2_kernels.cpp) on 512-bit registers. Keys in blocks of
// 128, each block's keys packed into avx2's panels (16 keys, k-major: one vector per dimension),
// V read where it lies. For every strip of ≤ 12 query rows: S = Q·Kᵀ (a 12 × 32 register block,
// 24 accumulators, two adjacent panels per pass), the online-softmax step per row (P over S),
// then O += P·V (32 columns of V at a time), the strip's scores (12 × 128 floats) in L1 from
// the first product to the last.
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (the _mm512_undefined_* they use for
// the reductions and masked loads; GCC bug 105593): not this file's values.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
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
#include "encoder/avx512.hpp"

namespace fovea::encoder_detail::avx512 {

namespace {

constexpr int kMr = 12;        // query rows per strip
constexpr int64_t kNp = 16;    // keys per packed panel (avx2's), floats per vector

// c[MR, 16·NV] (row stride ldc) (+)= a[MR rows, kc] (row stride lda) · B[kc, 16·NV], B's two
// 16-column halves at b0 and b1 (each row stride ldb: two adjacent key panels, or two runs of
// 16 columns of V). b1 is not read when NV = 1.
template <int MR, int NV>
inline void block(const float* a, int64_t lda, const float* b0, const float* b1, int64_t ldb, int64_t kc, float* c,
                  int64_t ldc, bool first) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    c0[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc);
    if constexpr (NV == 2) c1[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + 16);
  }
  const float* ar[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) ar[r] = a + r * lda;
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512 x0 = _mm512_loadu_ps(b0 + kk * ldb);
    const __m512 x1 = NV == 2 ? _mm512_loadu_ps(b1 + kk * ldb) : x0;
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(ar[r][kk]);
      c0[r] = _mm512_fmadd_ps(av, x0, c0[r]);
      if constexpr (NV == 2) c1[r] = _mm512_fmadd_ps(av, x1, c1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    _mm512_storeu_ps(c + r * ldc, c0[r]);
    if constexpr (NV == 2) _mm512_storeu_ps(c + r * ldc + 16, c1[r]);
  }
}

template <int NV>
inline void rows_nv(int mr, const float* a, int64_t lda, const float* b0, const float* b1, int64_t ldb, int64_t kc,
                    float* c, int64_t ldc, bool first) {
  switch (mr) {
    case 12: block<12, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 11: block<11, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 10: block<10, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 9: block<9, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 8: block<8, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 7: block<7, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 6: block<6, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 5: block<5, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 4: block<4, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 3: block<3, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    case 2: block<2, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
    default: block<1, NV>(a, lda, b0, b1, ldb, kc, c, ldc, first); break;
  }
}

inline void rows(int mr, int nv, const float* a, int64_t lda, const float* b0, const float* b1, int64_t ldb,
                 int64_t kc, float* c, int64_t ldc, bool first) {
  if (nv == 2) rows_nv<2>(mr, a, lda, b0, b1, ldb, kc, c, ldc, first);
  else rows_nv<1>(mr, a, lda, b0, b1, ldb, kc, c, ldc, first);
}

inline __m512 exp_ps(__m512 x) {  // Cephes' expf, as avx2_kernels.cpp: |relative error| ≲ 2e-7
  x = _mm512_min_ps(_mm512_set1_ps(88.37f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  // 2^n, n in [-126, 127] after the clamp: the exponent field directly.
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// The online-softmax step of each of a strip's mr rows over one block of bk keys (S: mr × ls
// floats): m, l the rows' running max and sum, P written over S (zero past bk in its last
// vector), O's rows rescaled when the max moved.
inline void softmax_strip(float* s, int mr, int64_t ls, int64_t bk, float scale, float* m, float* l, float* o,
                          int64_t hd, bool first) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const int64_t full = bk / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (bk - full)) - 1u);
  for (int r = 0; r < mr; ++r) {
    float* row = s + r * ls;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < full; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(row + j));
    if (tail) vmax = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, row + full));
    const float m_new = std::max(m[r], _mm512_reduce_max_ps(vmax) * scale);
    const float corr = std::exp(m[r] - m_new);  // exp(-inf) = 0 on the first block
    const __m512 vmn = _mm512_set1_ps(-m_new);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j = 0; j < full; j += 16) {
      const __m512 e = exp_ps(_mm512_fmadd_ps(_mm512_loadu_ps(row + j), vscale, vmn));
      vsum = _mm512_add_ps(vsum, e);
      _mm512_storeu_ps(row + j, e);
    }
    if (tail) {
      const __m512 e = _mm512_maskz_mov_ps(tail, exp_ps(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, row + full), vscale, vmn)));
      vsum = _mm512_add_ps(vsum, e);
      _mm512_storeu_ps(row + full, e);  // within the strip's row: ls is a whole number of panels
    }
    l[r] = l[r] * corr + _mm512_reduce_add_ps(vsum);
    m[r] = m_new;
    if (!first && corr != 1.0f) {
      const __m512 vc = _mm512_set1_ps(corr);
      float* orow = o + r * hd;
      for (int64_t j = 0; j < hd; j += 16) _mm512_storeu_ps(orow + j, _mm512_mul_ps(_mm512_loadu_ps(orow + j), vc));
    }
  }
}

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

}  // namespace

void attention(const float* q, int64_t bq, int64_t ldq, const float* k, const float* v, int64_t nk, int64_t hd,
               float scale, const float* bias, int64_t bias_from, float* o) {
  std::memset(o, 0, size_t(bq * hd) * 4);
  if (bq <= 0 || nk <= 0) return;
  // Keys per block: the block's packed keys and its values (2 · kBk · hd floats, 64 KiB at hd =
  // 64) stay in L2 while every strip runs over them; a strip's scores (kMr · kBk floats, 6 KiB)
  // and its O rows stay in L1 from Q·Kᵀ through the softmax to P·V.
  constexpr int64_t kBk = 128;
  const int64_t bk_max = std::min(kBk, (nk + kNp - 1) / kNp * kNp);
  thread_local std::unique_ptr<float, AlignedFree> kp_buf, s_buf;
  thread_local size_t kp_cap = 0, s_cap = 0;
  thread_local std::vector<float> m, l;
  float* kp = thread_buffer(kp_buf, kp_cap, size_t(bk_max * hd));
  float* s = thread_buffer(s_buf, s_cap, size_t(kMr * bk_max));
  m.assign(size_t(bq), -INFINITY);
  l.assign(size_t(bq), 0.0f);
  const float inv_scale = 1.0f / scale;
  for (int64_t k0 = 0; k0 < nk; k0 += kBk) {
    const int64_t bk = std::min(kBk, nk - k0), np = (bk + kNp - 1) / kNp, ls = np * kNp;
    for (int64_t p = 0; p < np; ++p) avx2::pack_panel(k + k0 * hd, DType::f32, hd, bk, hd, p, kp + p * kNp * hd);
    for (int64_t ir = 0; ir < bq; ir += kMr) {
      const int mr = int(std::min<int64_t>(kMr, bq - ir));
      // S[mr, ls] = Q[ir .. ir + mr) · K[k0 .. k0 + bk)ᵀ, two panels (32 keys) a pass.
      for (int64_t p = 0; p < np; p += 2) {
        const float* p0 = kp + p * kNp * hd;
        rows(mr, p + 1 < np ? 2 : 1, q + ir * ldq, ldq, p0, p0 + kNp * hd, kNp, hd, s + p * kNp, ls, true);
      }
      if (bias && k0 + bk > bias_from) {
        const int64_t j0 = std::max<int64_t>(0, bias_from - k0);
        for (int r = 0; r < mr; ++r)
          for (int64_t j = j0; j < bk; ++j) s[r * ls + j] += bias[k0 + j] * inv_scale;
      }
      softmax_strip(s, mr, ls, bk, scale, m.data() + ir, l.data() + ir, o + ir * hd, hd, k0 == 0);
      // O[ir .. ir + mr) += P · V[k0 .. k0 + bk): 32 columns of V at a time, read where they lie.
      for (int64_t c = 0; c < hd; c += 32) {
        const float* vc = v + k0 * hd + c;
        rows(mr, c + 16 < hd ? 2 : 1, s, ls, vc, vc + 16, hd, bk, o + ir * hd + c, hd, false);
      }
    }
  }
  for (int64_t i = 0; i < bq; ++i) {
    const __m512 inv = _mm512_set1_ps(1.0f / l[size_t(i)]);
    for (int64_t j = 0; j < hd; j += 16) _mm512_storeu_ps(o + i * hd + j, _mm512_mul_ps(_mm512_loadu_ps(o + i * hd + j), inv));
  }
}

double fma_peak_gflops(int threads, double seconds) {
  double total = 0;
#pragma omp parallel num_threads(std::max(1, threads)) reduction(+ : total)
  {
    // Twelve independent chains in named registers (FMA latency 4 × 2 pipes needs ≥ 8).
    __m512 c0 = _mm512_set1_ps(0.0f), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0,
           c10 = c0, c11 = c0;
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    int64_t iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      for (int rep = 0; rep < 4096; ++rep) {
        c0 = _mm512_fmadd_ps(c0, x, y), c1 = _mm512_fmadd_ps(c1, x, y), c2 = _mm512_fmadd_ps(c2, x, y);
        c3 = _mm512_fmadd_ps(c3, x, y), c4 = _mm512_fmadd_ps(c4, x, y), c5 = _mm512_fmadd_ps(c5, x, y);
        c6 = _mm512_fmadd_ps(c6, x, y), c7 = _mm512_fmadd_ps(c7, x, y), c8 = _mm512_fmadd_ps(c8, x, y);
        c9 = _mm512_fmadd_ps(c9, x, y), c10 = _mm512_fmadd_ps(c10, x, y), c11 = _mm512_fmadd_ps(c11, x, y);
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7), "+v"(c8),
                         "+v"(c9), "+v"(c10), "+v"(c11));
      }
      iters += 4096;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < seconds);
    total += double(iters) * 12 * 16 * 2 / el / 1e9;
  }
  return total;
}

}  // namespace fovea::encoder_detail::avx512
