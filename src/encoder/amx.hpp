// Private to src/encoder: bf16 linear layers and attention on Intel AMX tiles (f32 accumulation).
//
// Why our own kernels: on a 2-core Xeon with AMX (2026-12-01), Debian's oneDNN 2.6 ran a bare
// bf16 matmul (4096×768×3072) at ~0.55 TFLOP/s and the ViT-B/16 linear layers inside an encode at
// M = 274 at 0.33-0.42 TFLOP/s (its residual `sum` post-op cost the most), and the attention
// blocks at ~0.1 TFLOP/s (~30 µs a call), while the tiles do ~1.6-1.9 TFLOP/s per core (a
// TDPBF16PS loop on registers: the "ceiling" line of bench_encode --peak). docs/explanation/encoder.md
// ("Kernels and dispatch"); bench/results/encode/ has the runs.
//
// Only runs where amx::usable() says so (run-time dispatch: the kernels' translation unit is
// the only one compiled with AMX / AVX-512 flags, and nothing in it runs unless the CPU and
// the kernel allow AMX). Shapes: K and N multiples of 32, any M; W [N, K] row-major f32 or
// bf16 (a model weight, PyTorch's [out, in]); A bf16 [M, K]; C f32 or bf16.
//
// Numerics: each output is one f32 accumulation over K in 32-element steps (TDPBF16PS), the
// same whichever thread computes it and however many threads run, so a weight packed once for
// good and one packed on the fly give the same bits (the panels are the same bytes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "fovea/tensor.hpp"

namespace fovea::encoder_detail {
enum class Post : uint8_t;
}

namespace fovea::encoder_detail::amx {

// The CPU has AMX-BF16 and AVX512-BF16, the OS lets this process use the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM), and neither FOVEA_AMX=0 nor an ONEDNN_MAX_CPU_ISA below
// AMX asks otherwise (tests cap oneDNN's ISA to act as an older CPU; fovea follows). Asked once.
bool usable();

// Shapes the kernel takes.
inline bool fits(int64_t n, int64_t k) { return n > 0 && k > 0 && n % 32 == 0 && k % 32 == 0; }

// Bytes of W [n, k] packed into the kernel's panels (bf16: n·k·2).
inline size_t packed_bytes(int64_t n, int64_t k) { return size_t(n) * size_t(k) * 2; }

struct GemmArgs {
  const uint16_t* a = nullptr;  // bf16 [m, k], row stride lda
  int64_t lda = 0;
  const void* w = nullptr;      // [n, k] row stride ldw, f32 or bf16: read when packing
  int64_t ldw = 0;
  DType w_dt = DType::f32;
  uint16_t* packed = nullptr;   // packed_bytes(n, k): the panels
  bool pack = true;             // pack W into `packed` first (each thread its own panels), or read them as they are
  const float* bias = nullptr;  // [n] or null
  void* c = nullptr;            // [m, n] row stride ldc
  int64_t ldc = 0;
  DType c_dt = DType::f32;
  int64_t m = 0, n = 0, k = 0;
  Post post{};
  bool accumulate = false;      // C += result (post-op first)
  int threads = 1;
};

// C (+)= post(A·Wᵀ + bias). Call only when usable() and fits(n, k).
void gemm(const GemmArgs& g);

// W [n, k] packed into `dst` (packed_bytes(n, k)) on `threads` threads: the same bytes
// gemm(pack = true) writes.
void pack(const void* w, DType w_dt, int64_t ldw, int64_t n, int64_t k, uint16_t* dst, int threads);

// ---- attention (one head) ------------------------------------------------------------------
// Head widths the attention kernel takes (the output's hd / 16 accumulator tiles must fit).
inline bool attention_fits(int64_t hd) { return hd == 32 || hd == 64; }
// Keys or values of one head, nk rows: packed sizes in bf16 elements (nk rounded up to 32).
inline int64_t padded_keys(int64_t nk) { return (nk + 31) / 32 * 32; }
inline size_t packed_kv_elems(int64_t nk, int64_t hd) { return size_t(padded_keys(nk) * hd); }
// K [nk, hd] (dense bf16) into the B-tile panels of Q·Kᵀ (keys beyond nk are zero).
void pack_keys(const uint16_t* k, int64_t nk, int64_t hd, uint16_t* dst);
// V [nk, hd] (dense bf16) into the B tiles of P·V: pairs of consecutive keys per column.
void pack_values(const uint16_t* v, int64_t nk, int64_t hd, uint16_t* dst);
// The same with row k of V at rows[k] (hd bf16 values each): a gathered key list packed
// straight from where its rows lie.
void pack_values_rows(const uint16_t* const* rows, int64_t nk, int64_t hd, uint16_t* dst);
// Scratch (bytes) attention() needs for nk keys.
inline size_t attention_scratch_bytes(int64_t nk) { return size_t(16 * padded_keys(nk)) * 6 + 64 * 64 * 4; }
// O[bq, hd] (f32, normalised) = softmax(Q·Kᵀ·scale + bias)·V for one head: Q [bq, hd] bf16, row
// stride ldq; kp, vp packed by pack_keys / pack_values; bias (score units, after the scale) for
// keys j >= bias_from, or null. Single-threaded (the caller runs heads and query blocks in
// parallel). Call only when usable() and attention_fits(hd).
void attention(const uint16_t* q, int64_t bq, int64_t ldq, const uint16_t* kp, const uint16_t* vp, int64_t nk,
               int64_t hd, float scale, const float* bias, int64_t bias_from, std::byte* scratch, float* o);

// A TDPBF16PS loop on registers only, `threads` threads for about `seconds`: the tiles' own
// rate in GFLOP/s (benchmarks: the machine's bf16 ceiling, whatever any GEMM library reaches).
double tile_peak_gflops(int threads, double seconds);

}  // namespace fovea::encoder_detail::amx
