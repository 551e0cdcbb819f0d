// The AMX kernels of amx.hpp. This translation unit alone is compiled with -mamx-tile
// -mamx-bf16 and AVX-512 flags (src/encoder/CMakeLists.txt); its functions run only after
// amx::usable() (amx.cpp, plain flags) said yes.
//
// Layout. W [N, K] is cut into panels of 32 output columns; a panel holds K/32 steps of two
// 1 KiB B tiles (columns 0-15 and 16-31), each 16 rows of 16 (k, k+1) bf16 pairs, TDPBF16PS's
// VNNI order: element (r, c, e) of step s = W[n0 + c][32 s + 2 r + e]. A is read by the tile
// loads where it lies (row stride lda); the last M % 32 rows are copied into a zero-padded
// block first, so every tile is a full 16 × 32.
//
// Schedule. Each thread owns a contiguous range of panels (packs them, when asked, then reads
// only those: no barrier between packing and use), and walks A in chunks of rows that fit in
// L2 (≤ ~1 MiB), computing 32 × 32 output blocks with a 2 × 2 tile register block: per K step
// two A tiles, two B tiles, four TDPBF16PS. A block's accumulators go through a 4 KiB buffer to
// the epilogue (bias, activation, accumulate, f32 or bf16 store) in AVX-512.
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
#include <memory>
#include <vector>

#include "encoder/amx.hpp"
#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail::amx {

namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: accumulators (16 × 16 f32); 4, 5: A (16 rows × 32 bf16); 6, 7: B (16 pairs × 16).
void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
}

constexpr int64_t kStepElems = 1024;  // one K step of a panel: two 16 × 32 bf16 tiles

// ---- packing ------------------------------------------------------------------------------

// 32 consecutive k of row `row` as 16 (k, k+1) bf16 pairs.
inline __m512i pairs_of(const void* w, DType dt, int64_t ldw, int64_t row, int64_t k0) {
  if (dt == DType::bf16) return _mm512_loadu_si512(static_cast<const uint16_t*>(w) + row * ldw + k0);
  const float* p = static_cast<const float*>(w) + row * ldw + k0;
  // cvtne2ps_pbh(hi, lo): lo's 16 values first; rounds to nearest even, as f32_to_bf16.
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

void pack_panel(const void* w, DType dt, int64_t ldw, int64_t k, int64_t n0, uint16_t* dst) {
  const __m512i lanes = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  const int64_t steps = k / 32;
  for (int64_t c = 0; c < 32; ++c) {
    // Pair r of column c lands at dword r·16 + (c % 16) of its tile.
    int* base = reinterpret_cast<int*>(dst + (c / 16) * 512) + (c % 16);
    for (int64_t s = 0; s < steps; ++s)
      _mm512_i32scatter_epi32(base + s * (kStepElems / 2), lanes, pairs_of(w, dt, ldw, n0 + c, s * 32), 4);
  }
}

// ---- epilogue -----------------------------------------------------------------------------

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

// erf(x): Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7).
inline __m512 erf_ps(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), ax, _mm512_set1_ps(1.0f)));
  __m512 p = _mm512_set1_ps(1.061405429f);
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
  p = _mm512_mul_ps(p, t);
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(ax, ax)));
  const __m512 y = _mm512_fnmadd_ps(p, e, _mm512_set1_ps(1.0f));
  // sign of x back; a NaN x gives a NaN y through the arithmetic above.
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y),
                                             _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)))));
}

inline __m512 activate(__m512 v, Post post) {
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f);
  switch (post) {
    case Post::none: return v;
    case Post::quick_gelu: {  // v·sigmoid(1.702 v)
      const __m512 e = exp_ps(_mm512_mul_ps(v, _mm512_set1_ps(-1.702f)));
      return _mm512_div_ps(v, _mm512_add_ps(one, e));
    }
    case Post::gelu_tanh: {  // 0.5 v (1 + tanh(√(2/π)(v + 0.044715 v³))), tanh y = 1 − 2 / (e^{2y} + 1)
      const __m512 v3 = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
      const __m512 y = _mm512_mul_ps(_mm512_set1_ps(0.7978845608028654f), _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), v3, v));
      const __m512 e = exp_ps(_mm512_add_ps(y, y));
      const __m512 th = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
      return _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, th));
    }
    case Post::gelu_erf: {  // 0.5 v (1 + erf(v / √2))
      const __m512 er = erf_ps(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f)));
      return _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, er));
    }
  }
  return v;
}

inline __m256i to_bf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
inline __m512 from_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// Rows [0, rows) of a 32 × 32 accumulator block (row stride 32) into C at (i0, n0).
void epilogue(const GemmArgs& g, const float* acc, int64_t i0, int64_t rows, int64_t n0) {
  const __m512 b0 = g.bias ? _mm512_loadu_ps(g.bias + n0) : _mm512_setzero_ps();
  const __m512 b1 = g.bias ? _mm512_loadu_ps(g.bias + n0 + 16) : _mm512_setzero_ps();
  for (int64_t i = 0; i < rows; ++i) {
    __m512 v0 = activate(_mm512_add_ps(_mm512_load_ps(acc + i * 32), b0), g.post);
    __m512 v1 = activate(_mm512_add_ps(_mm512_load_ps(acc + i * 32 + 16), b1), g.post);
    if (g.c_dt == DType::f32) {
      float* c = static_cast<float*>(g.c) + (i0 + i) * g.ldc + n0;
      if (g.accumulate) v0 = _mm512_add_ps(v0, _mm512_loadu_ps(c)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(c + 16));
      _mm512_storeu_ps(c, v0), _mm512_storeu_ps(c + 16, v1);
    } else {
      uint16_t* c = static_cast<uint16_t*>(g.c) + (i0 + i) * g.ldc + n0;
      if (g.accumulate) v0 = _mm512_add_ps(v0, from_bf16(c)), v1 = _mm512_add_ps(v1, from_bf16(c + 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c), to_bf16(v0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 16), to_bf16(v1));
    }
  }
}

// ---- the 32 × 32 block --------------------------------------------------------------------

// acc[32, 32] = A rows a0 (16) and a1 (16) × the panel's steps.
inline void block(const uint16_t* a0, const uint16_t* a1, int64_t lda_bytes, const uint16_t* panel, int64_t steps,
                  float* acc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    if (s + 1 < steps) {  // the next step's A rows and B tiles, into L1 while the tiles compute
      const char* na0 = reinterpret_cast<const char*>(a0 + (s + 1) * 32);
      const char* na1 = reinterpret_cast<const char*>(a1 + (s + 1) * 32);
      const char* nb = reinterpret_cast<const char*>(panel + (s + 1) * kStepElems);
      for (int r = 0; r < 16; ++r) {
        _mm_prefetch(na0 + r * lda_bytes, _MM_HINT_T0);
        _mm_prefetch(na1 + r * lda_bytes, _MM_HINT_T0);
        _mm_prefetch(nb + r * 128, _MM_HINT_T0);
        _mm_prefetch(nb + r * 128 + 64, _MM_HINT_T0);
      }
    }
    _tile_loadd(4, a0 + s * 32, lda_bytes);
    _tile_loadd(6, panel + s * kStepElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, panel + s * kStepElems + 512, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + s * 32, lda_bytes);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, acc, 128);
  _tile_stored(1, acc + 16, 128);
  _tile_stored(2, acc + 16 * 32, 128);
  _tile_stored(3, acc + 16 * 32 + 16, 128);
}

struct AlignedFreeU16 {
  void operator()(uint16_t* p) const { std::free(p); }
};

}  // namespace

void pack(const void* w, DType w_dt, int64_t ldw, int64_t n, int64_t k, uint16_t* dst, int threads) {
  const int64_t panels = n / 32;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t p = 0; p < panels; ++p) pack_panel(w, w_dt, ldw, k, p * 32, dst + p * 32 * k);
}

void gemm(const GemmArgs& g) {
  const int64_t panels = g.n / 32, steps = g.k / 32, full = g.m / 32, tail = g.m % 32;
  // The last rows, zero-padded to a 32-row block (tile loads read 16 whole rows).
  std::unique_ptr<uint16_t, AlignedFreeU16> padded;
  if (tail) {
    padded.reset(static_cast<uint16_t*>(std::aligned_alloc(64, size_t(32 * g.k) * 2)));
    if (!padded) throw std::bad_alloc();
    std::memset(padded.get(), 0, size_t(32 * g.k) * 2);
    for (int64_t i = 0; i < tail; ++i)
      std::memcpy(padded.get() + i * g.k, g.a + (full * 32 + i) * g.lda, size_t(g.k) * 2);
  }
  // Rows per chunk of A: about 1 MiB of it, so a chunk stays in L2 while every panel passes.
  const int64_t chunk = std::max<int64_t>(32, ((int64_t(1) << 20) / (g.k * 2)) / 32 * 32);
  const int threads = int(std::clamp<int64_t>(g.threads, 1, panels));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_num_threads() > 1 ? omp_get_thread_num() : 0, nt = omp_get_num_threads();
    const int64_t p0 = panels * t / nt, p1 = panels * (t + 1) / nt;
    configure_tiles();
    if (g.pack)
      for (int64_t p = p0; p < p1; ++p) pack_panel(g.w, g.w_dt, g.ldw, g.k, p * 32, g.packed + p * 32 * g.k);
    alignas(64) float acc[32 * 32];
    const int64_t lda_bytes = g.lda * 2;
    for (int64_t r0 = 0; r0 < g.m; r0 += chunk) {
      const int64_t r1 = std::min(g.m, r0 + chunk);
      for (int64_t p = p0; p < p1; ++p) {
        const uint16_t* panel = g.packed + p * 32 * g.k;
        for (int64_t i0 = r0; i0 < r1; i0 += 32) {
          if (i0 < full * 32) {
            block(g.a + i0 * g.lda, g.a + (i0 + 16) * g.lda, lda_bytes, panel, steps, acc);
            epilogue(g, acc, i0, 32, p * 32);
          } else {
            block(padded.get(), padded.get() + 16 * g.k, g.k * 2, panel, steps, acc);
            epilogue(g, acc, i0, tail, p * 32);
          }
        }
      }
    }
    _tile_release();
  }
}

// ---- attention -----------------------------------------------------------------------------

void pack_keys(const uint16_t* k, int64_t nk, int64_t hd, uint16_t* dst) {
  // Panels of 32 keys (the B operand of Q·Kᵀ: key = column, hd = the reduced dimension), as
  // pack_panel lays out a weight [n = keys, k = hd]; the last panel's missing keys are zero.
  const int64_t full = nk / 32;
  for (int64_t p = 0; p < full; ++p) pack_panel(k, DType::bf16, hd, hd, p * 32, dst + p * 32 * hd);
  if (nk % 32) {
    alignas(64) uint16_t tail[32 * 64] = {};
    std::memcpy(tail, k + full * 32 * hd, size_t((nk % 32) * hd) * 2);
    pack_panel(tail, DType::bf16, hd, hd, 0, dst + full * 32 * hd);
  }
}

namespace {

// pack_values with row k of V at row(k) (a pointer to hd bf16 values).
template <typename Row>
void pack_values_from(Row row, int64_t nk, int64_t hd, uint16_t* dst) {
  // Per step of 32 keys, hd / 16 tiles of 16 key pairs × 16 columns: element (j, r, c, e) =
  // V[32 s + 2 r + e][16 j + c]. Two rows of V interleaved 16 bits at a time.
  const int64_t steps = padded_keys(nk) / 32, tiles = hd / 16;
  alignas(64) static const uint16_t kInterleave[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i lo_idx = _mm512_load_si512(kInterleave);
  const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t k0 = s * 32 + 2 * r;
      const uint16_t* ra = k0 < nk ? row(k0) : nullptr;
      const uint16_t* rb = k0 + 1 < nk ? row(k0 + 1) : nullptr;
      for (int64_t c0 = 0; c0 < hd; c0 += 32) {  // 32 columns: two tiles' rows r
        const __m512i a = ra ? _mm512_loadu_si512(ra + c0) : _mm512_setzero_si512();
        const __m512i b = rb ? _mm512_loadu_si512(rb + c0) : _mm512_setzero_si512();
        uint16_t* t = dst + s * tiles * 512 + (c0 / 16) * 512 + r * 32;
        _mm512_storeu_si512(t, _mm512_permutex2var_epi16(a, lo_idx, b));         // columns c0 .. c0+15
        _mm512_storeu_si512(t + 512, _mm512_permutex2var_epi16(a, hi_idx, b));   // c0+16 .. c0+31
      }
    }
}

}  // namespace

void pack_values(const uint16_t* v, int64_t nk, int64_t hd, uint16_t* dst) {
  pack_values_from([=](int64_t k) { return v + k * hd; }, nk, hd, dst);
}

void pack_values_rows(const uint16_t* const* rows, int64_t nk, int64_t hd, uint16_t* dst) {
  pack_values_from([=](int64_t k) { return rows[k]; }, nk, hd, dst);
}

namespace {

// One 16-row block of queries (q: 16 rows, stride ldq; missing rows already zero).
template <int HD>
void attention16(const uint16_t* q, int64_t ldq, int64_t rows, const uint16_t* kp, const uint16_t* vp, int64_t nk,
                 float scale, const float* bias, int64_t bias_from, float* S, uint16_t* P, float* obuf, float* o) {
  constexpr int steps_hd = HD / 32, tiles = HD / 16;
  const int64_t nkp = padded_keys(nk), panels = nkp / 32;
  // S[16, nkp] = Q·Kᵀ: Q stays in tiles 4 (and 5), two S tiles per 32 keys.
  _tile_loadd(4, q, ldq * 2);
  if constexpr (steps_hd == 2) _tile_loadd(5, q + 32, ldq * 2);
  for (int64_t p = 0; p < panels; ++p) {
    const uint16_t* kpan = kp + p * 32 * HD;
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(6, kpan, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, kpan + 512, 64);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (steps_hd == 2) {
      _tile_loadd(6, kpan + kStepElems, 64);
      _tile_dpbf16ps(0, 5, 6);
      _tile_loadd(7, kpan + kStepElems + 512, 64);
      _tile_dpbf16ps(1, 5, 7);
    }
    _tile_stored(0, S + p * 32, nkp * 4);
    _tile_stored(1, S + p * 32 + 16, nkp * 4);
  }
  // Softmax per row in f32 (scale, bias, max, exp, sum), P in bf16; padded keys get 0.
  float sum[16];
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < rows; ++i) {
    float* s = S + i * nkp;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= nk; j += 16) {
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + j), vscale);
      if (bias && j + 16 > bias_from) {
        const __mmask16 m = j >= bias_from ? __mmask16(0xffff) : __mmask16(0xffffu << (bias_from - j));
        x = _mm512_mask_add_ps(x, m, x, _mm512_maskz_loadu_ps(m, bias + j));
      }
      _mm512_storeu_ps(s + j, x);
      mx = _mm512_max_ps(mx, x);
    }
    if (j < nk) {
      const __mmask16 live = __mmask16((1u << (nk - j)) - 1);
      __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, s + j), vscale);
      if (bias && nk > bias_from) {
        const __mmask16 m = live & (j >= bias_from ? __mmask16(0xffff) : __mmask16(0xffffu << (bias_from - j)));
        x = _mm512_mask_add_ps(x, m, x, _mm512_maskz_loadu_ps(m, bias + j));
      }
      x = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), x);
      _mm512_storeu_ps(s + j, x);
      mx = _mm512_max_ps(mx, x);
      j += 16;
    }
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 acc = _mm512_setzero_ps();
    uint16_t* prow = P + i * nkp;
    for (int64_t jj = 0; jj < nkp; jj += 32) {
      __m512 e0 = _mm512_setzero_ps(), e1 = _mm512_setzero_ps();
      if (jj < j) e0 = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(s + jj), vmax));
      if (jj + 16 < j) e1 = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(s + jj + 16), vmax));
      // exp(-inf) of the padding is 0 through the clamp's scalef underflow: force it.
      if (jj + 16 > nk) e0 = _mm512_maskz_mov_ps(__mmask16(nk > jj ? (nk - jj >= 16 ? 0xffff : (1u << (nk - jj)) - 1) : 0), e0);
      if (jj + 32 > nk) e1 = _mm512_maskz_mov_ps(__mmask16(nk > jj + 16 ? (nk - jj - 16 >= 16 ? 0xffff : (1u << (nk - jj - 16)) - 1) : 0), e1);
      // The sum is of the bf16-rounded P that P·V reads, so the weights sum to exactly 1.
      const __m512i pb = (__m512i)_mm512_cvtne2ps_pbh(e1, e0);
      _mm512_storeu_si512(prow + jj, pb);
      acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(pb)), 16)));
      acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(pb, 1)), 16)));
    }
    sum[i] = _mm512_reduce_add_ps(acc);
  }
  for (int64_t i = rows; i < 16; ++i) std::memset(P + i * nkp, 0, size_t(nkp) * 2);
  // O[16, HD] = P·V: tiles 0 .. tiles-1 accumulate, P in tile 4, V in 6 / 7.
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (tiles == 4) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t st = 0; st < panels; ++st) {
    const uint16_t* vs = vp + st * tiles * 512;
    _tile_loadd(4, P + st * 32, nkp * 2);
    _tile_loadd(6, vs, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, vs + 512, 64);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (tiles == 4) {
      _tile_loadd(6, vs + 1024, 64);
      _tile_dpbf16ps(2, 4, 6);
      _tile_loadd(7, vs + 1536, 64);
      _tile_dpbf16ps(3, 4, 7);
    }
  }
  _tile_stored(0, obuf, HD * 4);
  _tile_stored(1, obuf + 16, HD * 4);
  if constexpr (tiles == 4) {
    _tile_stored(2, obuf + 32, HD * 4);
    _tile_stored(3, obuf + 48, HD * 4);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const __m512 inv = _mm512_set1_ps(1.0f / sum[i]);
    for (int c = 0; c < HD; c += 16) _mm512_storeu_ps(o + i * HD + c, _mm512_mul_ps(_mm512_loadu_ps(obuf + i * HD + c), inv));
  }
}

}  // namespace

void attention(const uint16_t* q, int64_t bq, int64_t ldq, const uint16_t* kp, const uint16_t* vp, int64_t nk,
               int64_t hd, float scale, const float* bias, int64_t bias_from, std::byte* scratch, float* o) {
  const int64_t nkp = padded_keys(nk);
  float* S = reinterpret_cast<float*>(scratch);
  uint16_t* P = reinterpret_cast<uint16_t*>(scratch + size_t(16 * nkp) * 4);
  float* obuf = reinterpret_cast<float*>(scratch + size_t(16 * nkp) * 6);  // 16 × 64 f32 (+ 16 padded Q rows)
  uint16_t* qpad = reinterpret_cast<uint16_t*>(obuf + 16 * 64);
  configure_tiles();
  for (int64_t i0 = 0; i0 < bq; i0 += 16) {
    const int64_t rows = std::min<int64_t>(16, bq - i0);
    const uint16_t* qb = q + i0 * ldq;
    int64_t ld = ldq;
    if (rows < 16) {  // tile loads read 16 whole rows
      std::memset(qpad, 0, size_t(16 * hd) * 2);
      for (int64_t i = 0; i < rows; ++i) std::memcpy(qpad + i * hd, qb + i * ldq, size_t(hd) * 2);
      qb = qpad, ld = hd;
    }
    if (hd == 64) attention16<64>(qb, ld, rows, kp, vp, nk, scale, bias, bias_from, S, P, obuf, o + i0 * hd);
    else attention16<32>(qb, ld, rows, kp, vp, nk, scale, bias, bias_from, S, P, obuf, o + i0 * hd);
  }
  _tile_release();
}

double tile_peak_gflops(int threads, double seconds) {
  double total = 0;
#pragma omp parallel num_threads(std::max(1, threads)) reduction(+ : total)
  {
    configure_tiles();
    alignas(64) uint16_t buf[16 * 32];
    for (uint16_t& v : buf) v = 0x3c00;  // bf16 0.0078125: sums stay finite
    _tile_loadd(4, buf, 64);
    _tile_loadd(5, buf, 64);
    _tile_loadd(6, buf, 64);
    _tile_loadd(7, buf, 64);
    _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    int64_t iters = 0;
    double elapsed = 0;
    do {
      for (int i = 0; i < 4096; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      iters += 4096;
      elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    } while (elapsed < seconds);
    alignas(64) float sink[16 * 16];
    _tile_stored(0, sink, 64);  // the loop's result is used: it cannot be dropped
    _tile_release();
    volatile float keep = sink[0];
    (void)keep;
    total = double(iters) * 4 * 16 * 16 * 32 * 2 / elapsed / 1e9;
  }
  return total;
}

}  // namespace fovea::encoder_detail::amx
