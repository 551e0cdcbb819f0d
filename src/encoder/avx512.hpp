// Private to src/encoder: f32 attention on AVX-512, for CPUs that have it (Skylake-SP and later
// Xeons, AMD Zen 4 and later).
//
// Why our own kernel: there, oneDNN's f32 matmuls run on brgemm, but attention goes through it
// as two small GEMMs per block of keys (Q·Kᵀ with K = the head width, 64, then P·V) with the
// scores written out and read back between them and the softmax. On an Ice Lake Xeon those
// GEMMs ran at 80-107 GFLOP/s a core, ~150 GFLOP/s for an exact N = 4096 attention on two
// cores. This kernel is the AVX2 one's (avx2.hpp) on 512-bit registers: per block of 128 keys
// and strip of 12 query rows, Q·Kᵀ, the online-softmax step and P·V back to back, the scores
// in L1. docs/encoder.md, "An AVX-512 attention kernel".
//
// Only runs where avx512::usable() says so (run-time dispatch: the kernel's translation unit is
// the only one compiled with -mavx512f). f32 only; bf16 attention stays on oneDNN or AMX.
#pragma once
#include <cstdint>

namespace fovea::encoder_detail::avx512 {

// The CPU has AVX-512 F, the OS saves the ZMM and opmask state, and neither FOVEA_AVX512=0 nor
// an ONEDNN_MAX_CPU_ISA below AVX-512 (SSE41, AVX, AVX2, AVX2_VNNI, AVX2_VNNI_2) asks otherwise.
// Asked once.
bool usable();

// Head widths the kernel takes: whole 16-float vectors of V and O.
inline bool attention_fits(int64_t hd) { return hd > 0 && hd % 16 == 0 && hd <= 512; }

// O[bq, hd] (f32, normalised, row stride hd) = softmax(Q·Kᵀ·scale + bias)·V for one head, as
// avx2::attention: Q [bq, hd] f32 (row stride ldq); K and V [nk, hd] f32, dense; bias (score
// units, after the scale) for keys j >= bias_from, or null. The exp is Cephes' (|relative
// error| ≲ 2e-7). Each row's output depends on that row alone (its bits too). Single-threaded.
// Call only when usable() and attention_fits(hd).
void attention(const float* q, int64_t bq, int64_t ldq, const float* k, const float* v, int64_t nk, int64_t hd,
               float scale, const float* bias, int64_t bias_from, float* o);

// The FMA units' own f32 rate on 512-bit registers (registers only), `threads` threads for
// about `seconds`, in GFLOP/s: the ceiling bench_encode --attention-kernel prints beside it.
double fma_peak_gflops(int threads, double seconds);

}  // namespace fovea::encoder_detail::avx512
