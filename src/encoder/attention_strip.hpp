// What the two 16-query-strip attention kernels share (avx512bf16_kernels.cpp: bf16 Q·Kᵀ and
// P·V on VDPBF16PS; int8_attention_kernels.cpp: both products on vpdpbusd): the exponential
// of the online softmax, its per-block step, and the cutting of a head's queries into strips.
//
// Include only from a translation unit compiled with AVX-512 (F, DQ, BW, VL) flags, whose
// functions run only after a run-time check of the CPU. Everything here has internal linkage,
// so each of those units keeps its own copy, compiled for its own flags (an inline function
// with external linkage could be merged across units built for different instruction sets).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace fovea::encoder_detail::attention_strip {
namespace {

// 2^t for t <= 0 (scores in log2 units, less their max), relative error ≲ 3e-6: P is rounded to
// bf16 (2^-9) or to 8 bits next. n = round(t), 2^(t − n) by its degree-5 Taylor polynomial on
// [-1/2, 1/2], scaled by 2^n. t = -inf (or below -150) gives 0; NaN stays NaN (max returns its
// second operand). Cheaper than the AMX kernels' exp_ps (amx_kernels.cpp): no ln 2 split, one
// fewer FMA, no upper clamp; measured, the kernel ran 4-5 % faster with it
// (bench_encode --attention-kernel).
inline __m512 exp2_nonpositive(__m512 t) {
  t = _mm512_max_ps(_mm512_set1_ps(-150.0f), t);
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.3333558e-3f);                 // ln2^5 / 120
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));  // ln2^4 / 24
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));  // ln2^3 / 6
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));  // ln2^2 / 2
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));  // ln2
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The online softmax step for a block of bk score rows Sᵀ[bk][16] (one query per lane), lane-wise:
// m becomes the running max over this block too, and the accumulated Oᵀ[HD][16] is rescaled to it
// (not on the first block, k0 == 0, where it is still zero). Returns the factor
// 2^(old max − new max), by which the caller rescales its sums (0 on the first block: 2^-inf).
template <int HD>
inline __m512 rescale_to_block_max(const float* S, int64_t bk, int64_t k0, __m512& m, float* ot) {
  __m512 mx = m;
  for (int64_t j = 0; j < bk; ++j) mx = _mm512_max_ps(mx, _mm512_load_ps(S + j * 16));
  const __m512 corr = exp2_nonpositive(_mm512_sub_ps(m, mx));
  if (k0 > 0)
    for (int d = 0; d < HD; ++d) _mm512_store_ps(ot + d * 16, _mm512_mul_ps(_mm512_load_ps(ot + d * 16), corr));
  m = mx;
  return corr;
}

// Calls strip(std::integral_constant<int, HD>{}, q rows, rows, o rows) for each strip of 16 of
// the bq query rows of q (row stride ldq) and their output rows of o ([bq, hd] f32), with HD the
// head width hd: 32, 64 or 96, else 128 (the kernels' fits() admits multiples of 32 up to 128).
template <class Strip>
inline void for_each_strip(const uint16_t* q, int64_t bq, int64_t ldq, int64_t hd, float* o, Strip&& strip) {
  for (int64_t i0 = 0; i0 < bq; i0 += 16) {
    const int64_t rows = std::min<int64_t>(16, bq - i0);
    const uint16_t* qs = q + i0 * ldq;
    float* os = o + i0 * hd;
    switch (hd) {
      case 32: strip(std::integral_constant<int, 32>{}, qs, rows, os); break;
      case 64: strip(std::integral_constant<int, 64>{}, qs, rows, os); break;
      case 96: strip(std::integral_constant<int, 96>{}, qs, rows, os); break;
      default: strip(std::integral_constant<int, 128>{}, qs, rows, os); break;
    }
  }
}

}  // namespace
}  // namespace fovea::encoder_detail::attention_strip
