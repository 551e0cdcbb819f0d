// The AVX512-BF16 attention kernel of avx512bf16.hpp. This translation unit is compiled with
// AVX-512 and AVX512-BF16 flags (src/encoder/CMakeLists.txt); its functions run only after
// avx512bf16::usable() (avx512bf16.cpp, plain flags) said yes.
//
// Layout. Every vector holds one value per query of a 16-query strip (lane i = query i), so the
// softmax's max, sum and rescale are lane-wise and the two products need no packed keys:
//   Sᵀ[key]  (+)= K[key]'s pair r, broadcast  ·  Qᵀ[r]  (query i's pair r in lane i);
//   Oᵀ[d]    (+)= V's pair (2p, 2p+1) at column d, broadcast  ·  Pᵀ[p]  (query i's pair in lane i).
// VDPBF16PS multiplies bf16 pairs and adds both products into an f32 lane: Qᵀ is the strip's Q
// gathered once (one dword per query and pair), K is read where it lies (a key's dword r is the
// broadcast), Pᵀ is interleaved into key pairs as it is rounded to bf16, and V is read in
// amx::pack_values' order (per 32-key step and 16-column tile, a row of 16 column pairs: the
// broadcasts of one key pair walk one 64-byte line).
//
// Register blocks: 16 keys × 16 queries for Sᵀ, 16 columns × 16 queries for Oᵀ (16
// accumulators, one vector load and 16 broadcast loads per 16 VDPBF16PS).
#if defined(__GNUC__) && !defined(__clang__)
// gcc 12's own AVX-512 intrinsics (roundscale, scalef: _mm512_undefined_ps) trip it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "encoder/attention_strip.hpp"
#include "encoder/avx512bf16.hpp"

namespace fovea::encoder_detail::avx512bf16 {

namespace {

constexpr int64_t kBk = 256;  // keys per block: the strip's Sᵀ is 16 KiB, its Pᵀ 8 KiB

inline __m512bh bh(__m512i x) { return (__m512bh)x; }

using attention_strip::exp2_nonpositive;
inline __m512 widen(__m256i bf16) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16)); }

// s[j, lane] = log2(e) · (scale · K[key0 + j]·Q[lane] (+ bias[key0 + j] from bias_from on)) for
// 16 keys: scores in log2 units, so the softmax's exponentials are powers of two.
// kTail: some of the 16 keys are past nk; their rows are the last key's (read, never used).
template <int HD, bool kTail>
inline void scores16(const uint32_t* qt, const uint16_t* k, int64_t key0, int64_t nk, float scale, const float* bias,
                     int64_t bias_from, float* s) {
  constexpr int R = HD / 2;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  if constexpr (!kTail) {
    const uint32_t* kr = reinterpret_cast<const uint32_t*>(k + key0 * HD);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = bh(_mm512_load_si512(qt + r * 16));
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], qv, bh(_mm512_set1_epi32(int(kr[j * R + r]))));
    }
  } else {
    const uint32_t* kr[16];
    for (int j = 0; j < 16; ++j) kr[j] = reinterpret_cast<const uint32_t*>(k + std::min<int64_t>(key0 + j, nk - 1) * HD);
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = bh(_mm512_load_si512(qt + r * 16));
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], qv, bh(_mm512_set1_epi32(int(kr[j][r]))));
    }
  }
  constexpr float kLog2e = 1.44269504088896341f;
  const __m512 vs = _mm512_set1_ps(scale * kLog2e);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    __m512 x = _mm512_mul_ps(acc[j], vs);
    const int64_t key = key0 + j;
    if (bias && key >= bias_from && key < nk) x = _mm512_add_ps(x, _mm512_set1_ps(bias[key] * kLog2e));
    _mm512_store_ps(s + j * 16, x);
  }
}

// One strip of `rows` ≤ 16 queries (q: row stride ldq) against all nk keys; o: rows × HD.
template <int HD>
void strip(const uint16_t* q, int64_t ldq, int64_t rows, const uint16_t* k, const uint16_t* vp, int64_t nk,
           float scale, const float* bias, int64_t bias_from, std::byte* scratch, float* o) {
  constexpr int R = HD / 2, C = HD / 16;
  float* S = reinterpret_cast<float*>(scratch);                // Sᵀ [kBk][16]
  uint32_t* pt = reinterpret_cast<uint32_t*>(S + kBk * 16);    // Pᵀ in key pairs [kBk / 2][16]
  float* ot = reinterpret_cast<float*>(pt + kBk / 2 * 16);     // Oᵀ [HD][16]
  uint32_t* qt = reinterpret_cast<uint32_t*>(ot + HD * 16);    // Qᵀ in pairs [R][16]
  static_assert((kBk * 16 + kBk / 2 * 16 + 128 * 16 + 64 * 16) * 4 <= kScratchBytes);

  // Qᵀ: dword r of each query row (lanes past `rows` zero, never read).
  const __mmask16 live = rows >= 16 ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
  const __m512i qrow = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(int(ldq / 2)));
  const int* qd = reinterpret_cast<const int*>(q);
  for (int r = 0; r < R; ++r)
    _mm512_store_si512(qt + r * 16, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, qrow, qd + r, 4));
  for (int d = 0; d < HD; ++d) _mm512_store_ps(ot + d * 16, _mm512_setzero_ps());

  // Word 2i of a key pair's vector = key 2p's bf16 for query i, word 2i + 1 = key 2p + 1's.
  const __m512i pair_idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                            21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __m512 m = _mm512_set1_ps(-INFINITY), l = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < nk; k0 += kBk) {
    const int64_t bk = std::min(kBk, nk - k0), np = (bk + 1) / 2;
    for (int64_t j0 = 0; j0 < bk; j0 += 16) {
      if (k0 + j0 + 16 <= nk) scores16<HD, false>(qt, k, k0 + j0, nk, scale, bias, bias_from, S + j0 * 16);
      else scores16<HD, true>(qt, k, k0 + j0, nk, scale, bias, bias_from, S + j0 * 16);
    }
    // The online softmax step, lane-wise: the new max m, the old sum and Oᵀ rescaled.
    l = _mm512_mul_ps(l, attention_strip::rescale_to_block_max<HD>(S, bk, k0, m, ot));
    const __m512 mx = m;
    // P = 2^(s − max) in bf16, two keys per vector; the sum is of the rounded P that P·V reads.
    for (int64_t p = 0; p < np; ++p) {
      const __m512 e0 = exp2_nonpositive(_mm512_sub_ps(_mm512_load_ps(S + 2 * p * 16), mx));
      const __m512 e1 = 2 * p + 1 < bk ? exp2_nonpositive(_mm512_sub_ps(_mm512_load_ps(S + (2 * p + 1) * 16), mx))
                                       : _mm512_setzero_ps();
      const __m512i pb = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);  // words 0-15: e0, 16-31: e1
      l = _mm512_add_ps(l, _mm512_add_ps(widen(_mm512_castsi512_si256(pb)), widen(_mm512_extracti64x4_epi64(pb, 1))));
      _mm512_store_si512(pt + p * 16, _mm512_permutexvar_epi16(pair_idx, pb));
    }
    // Oᵀ += Vᵀ·Pᵀ, 16 columns at a time. k0 is a multiple of 32: the block starts a step of vp.
    for (int c = 0; c < C; ++c) {
      __m512 acc[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_load_ps(ot + (c * 16 + i) * 16);
      for (int64_t p0 = 0; p0 < np; p0 += 16) {
        const uint16_t* tile = vp + ((k0 / 2 + p0) / 16) * C * 512 + c * 512;
        const int64_t n = std::min<int64_t>(16, np - p0);
        for (int64_t r = 0; r < n; ++r) {
          const uint32_t* vrow = reinterpret_cast<const uint32_t*>(tile + r * 32);
          const __m512bh pv = bh(_mm512_load_si512(pt + (p0 + r) * 16));
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], pv, bh(_mm512_set1_epi32(int(vrow[i]))));
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) _mm512_store_ps(ot + (c * 16 + i) * 16, acc[i]);
    }
  }
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), l);
  alignas(64) float w[16];
  for (int d = 0; d < HD; ++d) {
    _mm512_store_ps(w, _mm512_mul_ps(_mm512_load_ps(ot + d * 16), inv));
    for (int64_t i = 0; i < rows; ++i) o[i * HD + d] = w[i];
  }
}

}  // namespace

void attention(const uint16_t* q, int64_t bq, int64_t ldq, const uint16_t* k, const uint16_t* vp, int64_t nk,
               int64_t hd, float scale, const float* bias, int64_t bias_from, std::byte* scratch, float* o) {
  if (bq <= 0) return;
  if (nk <= 0) {
    std::memset(o, 0, size_t(bq * hd) * 4);
    return;
  }
  attention_strip::for_each_strip(q, bq, ldq, hd, o, [&](auto width, const uint16_t* qs, int64_t rows, float* os) {
    strip<decltype(width)::value>(qs, ldq, rows, k, vp, nk, scale, bias, bias_from, scratch, os);
  });
}

double dpbf16_peak_gflops(int threads, double seconds) {
  double total = 0;
#pragma omp parallel num_threads(std::max(1, threads)) reduction(+ : total)
  {
    // Twelve independent chains (latency ~6 × up to 2 per cycle), in named registers, as
    // avx2::fma_peak_gflops.
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0,
           c10 = c0, c11 = c0;
    const __m512bh x = bh(_mm512_set1_epi16(0x3c00)), y = bh(_mm512_set1_epi16(0x3c00));  // bf16 0.0078125
    int64_t iters = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double el = 0;
    do {
      for (int rep = 0; rep < 4096; ++rep) {
        c0 = _mm512_dpbf16_ps(c0, x, y), c1 = _mm512_dpbf16_ps(c1, x, y), c2 = _mm512_dpbf16_ps(c2, x, y);
        c3 = _mm512_dpbf16_ps(c3, x, y), c4 = _mm512_dpbf16_ps(c4, x, y), c5 = _mm512_dpbf16_ps(c5, x, y);
        c6 = _mm512_dpbf16_ps(c6, x, y), c7 = _mm512_dpbf16_ps(c7, x, y), c8 = _mm512_dpbf16_ps(c8, x, y);
        c9 = _mm512_dpbf16_ps(c9, x, y), c10 = _mm512_dpbf16_ps(c10, x, y), c11 = _mm512_dpbf16_ps(c11, x, y);
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7), "+v"(c8),
                         "+v"(c9), "+v"(c10), "+v"(c11));
      }
      iters += 4096;
      el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (el < seconds);
    total += double(iters) * 12 * 16 * 4 / el / 1e9;  // 16 lanes × 2 products × 2 FLOP
  }
  return total;
}

}  // namespace fovea::encoder_detail::avx512bf16
