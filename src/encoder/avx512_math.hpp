// Private to src/encoder: AVX-512 math shared by the kernels compiled with AVX-512 flags
// (amx_kernels.cpp, avx512bf16_kernels.cpp). Include it only from such a translation unit.
#pragma once

#include <immintrin.h>

namespace fovea::encoder_detail {

// exp(x) for x in float range: n = round(x·log2 e), x − n·ln 2 into a degree-6 polynomial,
// scaled by 2^n (scalef: underflows to 0, no overflow after the clamp). NaN stays NaN: with
// x86's max/min, a NaN second operand is returned.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.37f), _mm512_max_ps(_mm512_set1_ps(-103.0f), x));
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
  return _mm512_scalef_ps(p, n);
}

}  // namespace fovea::encoder_detail
