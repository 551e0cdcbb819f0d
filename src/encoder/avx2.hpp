// Private to src/encoder: f32 linear layers on AVX2 + FMA, for CPUs where oneDNN has no brgemm.
//
// Why our own kernel: on AVX2-only CPUs (no AVX-512) Debian's oneDNN 2.6 runs f32 matmuls on
// gemm:jit, whose kernels are generated at the first call of each shape and which reached ~79
// GFLOP/s a core on a 2-core Zen 3 EPYC (the bare 4096×768×3072 GEMM of bench_encode --peak).
// A one-shot fp32 ViT-B/16 encode there is ~94 % linear layers, so the encode's speed is that
// GEMM's. docs/explanation/encoder.md ("Kernels and dispatch"); bench/results/encode/ has the runs.
//
// Only runs where avx2::usable() says so (run-time dispatch: the kernel's translation unit is
// the only one compiled with -mavx2 -mfma). Any M, N, K; W [N, K] row-major, f32 or bf16 (a
// model weight, PyTorch's [out, in]); A f32 [M, K]; C f32.
//
// Numerics: each output is one f32 accumulation over k in order, in blocks of kKc (partial sums
// kept in f32 between blocks), the same whichever thread computes it and however many threads
// run, so a weight packed once for good and one packed on the fly give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fovea/tensor.hpp"

namespace fovea::encoder_detail {
enum class Post : uint8_t;
}

namespace fovea::encoder_detail::avx2 {

// The CPU has AVX2 and FMA, the OS saves the YMM state, and neither FOVEA_AVX2=0 nor an
// ONEDNN_MAX_CPU_ISA below AVX2 asks otherwise. Asked once.
bool usable();

// W [n, k] is packed into panels of 16 output columns: panel p holds k rows of 16 floats,
// element (kk, j) = W[16 p + j][kk] (zero past n).
constexpr int64_t kNr = 16;
inline int64_t panels(int64_t n) { return (n + kNr - 1) / kNr; }
inline size_t packed_floats(int64_t n, int64_t k) { return size_t(panels(n)) * size_t(kNr) * size_t(k); }

struct GemmArgs {
  const float* a = nullptr;     // [m, k], row stride lda
  int64_t lda = 0;
  const void* w = nullptr;      // [n, k], row stride ldw, f32 or bf16: read when packing
  int64_t ldw = 0;
  DType w_dt = DType::f32;
  const float* packed = nullptr;  // pack()'s panels, or null: each thread packs its own on the fly
  const float* bias = nullptr;  // [n] or null
  float* c = nullptr;           // [m, n], row stride ldc
  int64_t ldc = 0;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f;           // C = post(alpha·A·Wᵀ + bias)
  Post post{};
  bool accumulate = false;      // C += result (post-op first)
  int threads = 1;
};

// C (+)= post(alpha·A·Wᵀ + bias). Call only when usable().
void gemm(const GemmArgs& g);

// W [n, k] packed into `dst` (packed_floats(n, k)) on `threads` threads: the bytes gemm()
// packs on the fly.
void pack(const void* w, DType w_dt, int64_t ldw, int64_t n, int64_t k, float* dst, int threads);

// ---- attention (one head, f32) -------------------------------------------------------------
// Head widths the attention kernel takes (whole 16-column blocks of V and O).
inline bool attention_fits(int64_t hd) { return hd > 0 && hd % kNr == 0 && hd <= 512; }
// O[bq, hd] (f32, normalised, row stride hd) = softmax(Q·Kᵀ·scale + bias)·V for one head: Q
// [bq, hd] f32 (row stride ldq); K and V [nk, hd] f32, dense; bias (score units, after the
// scale) for keys j >= bias_from, or null. Keys in blocks of 128 with an online softmax (no
// bq × nk matrix), each block's keys packed into panels, V read where it lies; per block, each
// strip of 6 query rows runs Q·Kᵀ, the softmax step and P·V back to back, its scores in L1
// (the Cephes exp of the GEMM epilogue: |relative error| ≲ 2e-7). Single-threaded
// (the caller runs heads and query blocks in parallel). Call only when usable() and
// attention_fits(hd).
void attention(const float* q, int64_t bq, int64_t ldq, const float* k, const float* v, int64_t nk, int64_t hd,
               float scale, const float* bias, int64_t bias_from, float* o);

// An FMA loop on registers only, `threads` threads for about `seconds`: the FMA units' own f32
// rate in GFLOP/s (benchmarks: the machine's f32 ceiling, whatever any GEMM library reaches).
double fma_peak_gflops(int threads, double seconds);

}  // namespace fovea::encoder_detail::avx2
