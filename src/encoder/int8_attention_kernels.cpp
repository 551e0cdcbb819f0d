// The int8 attention kernel of int8_attention.hpp. This translation unit is compiled with
// AVX-512 (F, DQ, BW, VL), AVX512-VNNI and AVX512-BF16 flags (src/encoder/CMakeLists.txt); its
// functions run only after int8attn::usable() (int8_attention.cpp, plain flags) said yes.
//
// The schedule is avx512bf16_kernels.cpp's: a strip of 16 queries, one per vector lane; per
// block of 256 keys, Sᵀ[key, 16 queries], an online softmax step down the columns, Pᵀ as uint8
// in key quads (byte t of lane i's dword p: query i's weight of key 4p + t), and Oᵀ[hd, 16] +=
// Vᵀ·Pᵀ. Both products run on vpdpbusd, 4 products per lane and instruction where VDPBF16PS
// has 2: Sᵀ from a key's dword r (4 int8 values, broadcast) against the strip's dword r of its
// quantized queries (4 uint8 per lane); Oᵀ from a value quad (column d's int8 values of 4
// consecutive keys, broadcast) against the Pᵀ quad.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "encoder/attention_strip.hpp"
#include "encoder/int8_attention.hpp"

namespace fovea::encoder_detail::int8attn {

namespace {

constexpr int64_t kBk = 256;  // keys per block

inline float bf16f(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

using attention_strip::exp2_nonpositive;

// s[j, lane] = log2(e)·scale·q_lane·k_(key0 + j) for 16 keys (see int8_attention.hpp), from the
// strip's quantized queries qt (dword r of lane i's u8 row at qt[r·16 + i]), their scales
// (sq · log2(e) · scale) and zero points (as floats). kTail: some keys are past nk; their rows
// are the last key's (read, never used).
template <int HD, bool kTail>
inline void scores16(const int32_t* qt, __m512 sq, __m512 zq, const int8_t* kq, const float* ks, const int32_t* ksum,
                     int64_t key0, int64_t nk, float* s) {
  constexpr int R = HD / 4;
  __m512i acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_si512();
  int64_t key[16];
  for (int j = 0; j < 16; ++j) key[j] = kTail ? std::min<int64_t>(key0 + j, nk - 1) : key0 + j;
  if constexpr (!kTail) {
    const int32_t* kr = reinterpret_cast<const int32_t*>(kq + key0 * HD);
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
      const __m512i qv = _mm512_load_si512(qt + r * 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], qv, _mm512_set1_epi32(kr[j * R + r]));
    }
  } else {
    const int32_t* kr[16];
    for (int j = 0; j < 16; ++j) kr[j] = reinterpret_cast<const int32_t*>(kq + key[j] * HD);
    for (int r = 0; r < R; ++r) {
      const __m512i qv = _mm512_load_si512(qt + r * 16);
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], qv, _mm512_set1_epi32(kr[j][r]));
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    // (Σ u·kq − zq·Σ kq): both terms are integers below 2^24, exact in f32.
    const __m512 d = _mm512_fnmadd_ps(zq, _mm512_set1_ps(float(ksum[key[j]])), _mm512_cvtepi32_ps(acc[j]));
    _mm512_store_ps(s + j * 16, _mm512_mul_ps(d, _mm512_mul_ps(sq, _mm512_set1_ps(ks[key[j]]))));
  }
}

// The strip's queries quantized per row (int8.hpp's activation quantization: the range [min,
// max] with 0 in it over the row's hd values, 255 steps), gathered into dwords per lane.
template <int HD>
void quantize_queries(const uint16_t* q, int64_t ldq, int64_t rows, float scale_log2e, int32_t* qt, float* sq,
                      float* zq) {
  alignas(64) uint8_t u[16][HD];
  for (int64_t i = 0; i < 16; ++i) {
    if (i >= rows) {
      std::memset(u[i], 0, HD);
      sq[i] = 0, zq[i] = 0;
      continue;
    }
    float x[HD];
    float lo = 0, hi = 0;
    bool finite = true;
    for (int d = 0; d < HD; ++d) {
      x[d] = bf16f(q[i * ldq + d]);
      lo = std::min(lo, x[d]), hi = std::max(hi, x[d]);
      finite = finite && std::isfinite(x[d]);
    }
    float s = (hi - lo) / 255.0f;
    if (!(s > 0) || !std::isfinite(s)) s = 1.0f;
    const float inv = finite ? 1.0f / s : 0.0f;
    const int32_t z = std::clamp(int32_t(std::nearbyint(-lo * inv)), 0, 255);
    for (int d = 0; d < HD; ++d) u[i][d] = uint8_t(std::clamp(int32_t(std::nearbyint(x[d] * inv)) + z, 0, 255));
    sq[i] = finite ? s * scale_log2e : NAN;  // a non-finite query makes its row NaN, as in float
    zq[i] = float(z);
  }
  for (int r = 0; r < HD / 4; ++r)
    for (int i = 0; i < 16; ++i) std::memcpy(qt + r * 16 + i, &u[i][4 * r], 4);
}

template <int HD>
void strip(const uint16_t* q, int64_t ldq, int64_t rows, const int8_t* kq, const float* ks, const int32_t* ksum,
           const int8_t* vq, const float* vs, int64_t nk, float scale, std::byte* scratch, float* o) {
  constexpr int C = HD / 16;
  float* S = reinterpret_cast<float*>(scratch);                // Sᵀ [kBk][16]
  int32_t* pt = reinterpret_cast<int32_t*>(S + kBk * 16);      // Pᵀ as uint8 key quads [kBk / 4][16]
  float* ot = reinterpret_cast<float*>(pt + kBk / 4 * 16);     // Oᵀ [HD][16]
  int32_t* qt = reinterpret_cast<int32_t*>(ot + HD * 16);      // quantized Qᵀ [HD / 4][16]
  static_assert((kBk * 16 + kBk / 4 * 16 + 128 * 16 + 32 * 16) * 4 <= kScratchBytes);

  constexpr float kLog2e = 1.44269504088896341f;
  alignas(64) float sqa[16], zqa[16];
  quantize_queries<HD>(q, ldq, rows, scale * kLog2e, qt, sqa, zqa);
  const __m512 sq = _mm512_load_ps(sqa), zq = _mm512_load_ps(zqa);
  for (int d = 0; d < HD; ++d) _mm512_store_ps(ot + d * 16, _mm512_setzero_ps());

  __m512 m = _mm512_set1_ps(-INFINITY), l = _mm512_setzero_ps(), pf = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < nk; k0 += kBk) {
    const int64_t bk = std::min(kBk, nk - k0), nq = (bk + 3) / 4;
    for (int64_t j0 = 0; j0 < bk; j0 += 16) {
      if (k0 + j0 + 16 <= nk) scores16<HD, false>(qt, sq, zq, kq, ks, ksum, k0 + j0, nk, S + j0 * 16);
      else scores16<HD, true>(qt, sq, zq, kq, ks, ksum, k0 + j0, nk, S + j0 * 16);
    }
    const __m512 corr = attention_strip::rescale_to_block_max<HD>(S, bk, k0, m, ot);
    l = _mm512_mul_ps(l, corr), pf = _mm512_mul_ps(pf, corr);
    const __m512 mx = m;
    // P = round(255·2^(s − max)) as uint8, four keys per lane (key 4p + t in byte t), the
    // sum of those integers (exact in f32: at most 255·nk); pf: the float P's sum, NaN when a
    // score was (a non-finite query or key), so the output row is NaN as in float attention.
    const __m512 k255 = _mm512_set1_ps(255.0f);
    for (int64_t p = 0; p < nq; ++p) {
      __m512i packed = _mm512_setzero_si512(), isum = _mm512_setzero_si512();
      for (int t = 0; t < 4; ++t) {
        const int64_t j = 4 * p + t;
        if (j >= bk) break;
        const __m512 e = exp2_nonpositive(_mm512_sub_ps(_mm512_load_ps(S + j * 16), mx));
        pf = _mm512_add_ps(pf, e);
        const __m512i u = _mm512_cvtps_epi32(_mm512_mul_ps(e, k255));  // in [0, 255]
        isum = _mm512_add_epi32(isum, u);
        packed = _mm512_or_si512(packed, _mm512_slli_epi32(u, 8 * t));
      }
      l = _mm512_add_ps(l, _mm512_cvtepi32_ps(isum));
      _mm512_store_si512(pt + p * 16, packed);
    }
    // Oᵀ += Vᵀ·Pᵀ: per 16 columns, int32 sums over the block (at most 256·255·127 < 2^24:
    // exact in f32), then scaled by each column's step.
    const int32_t* vb = reinterpret_cast<const int32_t*>(vq) + (k0 / 4) * HD;
    for (int c = 0; c < C; ++c) {
      __m512i acc[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_si512();
      for (int64_t p = 0; p < nq; ++p) {
        const __m512i pv = _mm512_load_si512(pt + p * 16);
        const int32_t* vrow = vb + p * HD + c * 16;
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], pv, _mm512_set1_epi32(vrow[i]));
      }
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        float* od = ot + (c * 16 + i) * 16;
        _mm512_store_ps(od, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), _mm512_set1_ps(vs[c * 16 + i]), _mm512_load_ps(od)));
      }
    }
  }
  // pf − pf is 0, or NaN where a score was.
  const __m512 inv = _mm512_add_ps(_mm512_div_ps(_mm512_set1_ps(1.0f), l), _mm512_sub_ps(pf, pf));
  alignas(64) float w[16];
  const float* mean = vs + HD;
  for (int d = 0; d < HD; ++d) {
    _mm512_store_ps(w, _mm512_fmadd_ps(_mm512_load_ps(ot + d * 16), inv, _mm512_set1_ps(mean[d])));
    for (int64_t i = 0; i < rows; ++i) o[i * HD + d] = w[i];
  }
}

}  // namespace

void quantize_keys(const uint16_t* k, int64_t nk, int64_t hd, int8_t* kq, float* ks, int32_t* ksum) {
  std::vector<float> mean(size_t(hd), 0.0f), x(size_t(hd), 0.0f);
  {
    std::vector<double> acc(size_t(hd), 0.0);
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t d = 0; d < hd; ++d) acc[size_t(d)] += bf16f(k[j * hd + d]);
    for (int64_t d = 0; d < hd; ++d) {
      const double mv = nk > 0 ? acc[size_t(d)] / double(nk) : 0.0;
      mean[size_t(d)] = std::isfinite(mv) ? float(mv) : 0.0f;
    }
  }
  for (int64_t j = 0; j < nk; ++j) {
    float amax = 0;
    bool finite = true;
    for (int64_t d = 0; d < hd; ++d) {
      const float v = bf16f(k[j * hd + d]);
      finite = finite && std::isfinite(v);
      x[size_t(d)] = v - mean[size_t(d)];
      amax = std::max(amax, std::fabs(x[size_t(d)]));
    }
    int8_t* row = kq + j * hd;
    if (!finite || !std::isfinite(amax)) {
      std::memset(row, 0, size_t(hd));
      ks[j] = NAN, ksum[j] = 0;
      continue;
    }
    const float s = amax > 0 ? amax / 127.0f : 0.0f;
    const float inv = s > 0 ? 1.0f / s : 0.0f;
    int32_t sum = 0;
    for (int64_t d = 0; d < hd; ++d) {
      const int32_t v = std::clamp(int32_t(std::nearbyint(x[size_t(d)] * inv)), -127, 127);
      row[d] = int8_t(v);
      sum += v;
    }
    ks[j] = s, ksum[j] = sum;
  }
}

void quantize_values(const uint16_t* v, int64_t nk, int64_t hd, int8_t* vq, float* vs) {
  float* mean = vs + hd;
  std::vector<double> acc(size_t(hd), 0.0);
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t d = 0; d < hd; ++d) acc[size_t(d)] += bf16f(v[j * hd + d]);
  std::vector<float> amax(size_t(hd), 0.0f);
  for (int64_t d = 0; d < hd; ++d) {
    const double mv = nk > 0 ? acc[size_t(d)] / double(nk) : 0.0;
    mean[d] = std::isfinite(mv) ? float(mv) : 0.0f;
  }
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t d = 0; d < hd; ++d) {
      const float x = bf16f(v[j * hd + d]) - mean[d];
      amax[size_t(d)] = std::isfinite(x) ? std::max(amax[size_t(d)], std::fabs(x)) : NAN;
    }
  std::vector<float> inv(static_cast<size_t>(hd));
  for (int64_t d = 0; d < hd; ++d) {
    const float a = amax[size_t(d)];
    vs[d] = std::isnan(a) ? NAN : a / 127.0f;  // a non-finite value makes its column NaN
    inv[size_t(d)] = a > 0 && std::isfinite(a) ? 127.0f / a : 0.0f;
  }
  const int64_t quads = (nk + 3) / 4;
  for (int64_t p = 0; p < quads; ++p)
    for (int64_t d = 0; d < hd; ++d)
      for (int64_t t = 0; t < 4; ++t) {
        const int64_t j = 4 * p + t;
        int32_t qv = 0;
        if (j < nk) {
          const float x = (bf16f(v[j * hd + d]) - mean[d]) * inv[size_t(d)];
          qv = std::isfinite(x) ? std::clamp(int32_t(std::nearbyint(x)), -127, 127) : 0;
        }
        vq[(p * hd + d) * 4 + t] = int8_t(qv);
      }
}

void attention(const uint16_t* q, int64_t bq, int64_t ldq, const int8_t* kq, const float* ks, const int32_t* ksum,
               const int8_t* vq, const float* vs, int64_t nk, int64_t hd, float scale, std::byte* scratch, float* o) {
  if (bq <= 0) return;
  if (nk <= 0) {
    std::memset(o, 0, size_t(bq * hd) * 4);
    return;
  }
  attention_strip::for_each_strip(q, bq, ldq, hd, o, [&](auto width, const uint16_t* qs, int64_t rows, float* os) {
    strip<decltype(width)::value>(qs, ldq, rows, kq, ks, ksum, vq, vs, nk, scale, scratch, os);
  });
}

}  // namespace fovea::encoder_detail::int8attn
