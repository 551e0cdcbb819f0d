// Private to src/encoder: bf16 attention on AVX512-BF16 (VDPBF16PS), for CPUs that have the
// instruction but no AMX tiles (Zen 4, Zen 5, Cooper Lake), or whose tiles are off.
//
// Why our own kernel: there, oneDNN 2.6 runs attention as two small brgemm calls per query and
// key block with fovea's softmax pass between them through memory: exact attention at N = 4096
// ran at ~250 GFLOP/s on a 2-core Zen 4, ~56 % of the bare bf16 GEMM's 443 (this kernel: ~330). docs/explanation/encoder.md ("Kernels and dispatch") says why; bench/results/attention/ has the runs.
//
// Only runs where usable() says so (run-time dispatch: the kernel's translation unit is the
// only one besides amx_kernels.cpp compiled with AVX-512 flags).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fovea::encoder_detail::avx512bf16 {

// The CPU has AVX-512 (F, DQ, BW, VL) and AVX512-BF16, the OS saves the ZMM and opmask state,
// and neither FOVEA_AVX512BF16=0 nor an ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 asks
// otherwise (tests cap oneDNN's ISA to act as an older CPU; fovea follows). Asked once.
bool usable();

// Head widths the kernel takes: whole 32-column steps, at most 128.
inline bool attention_fits(int64_t hd) { return hd > 0 && hd % 32 == 0 && hd <= 128; }
// Scratch (bytes, 64-byte aligned) attention() needs, whatever nk.
constexpr size_t kScratchBytes = 64 * 1024;

// O[bq, hd] (f32, normalised, row stride hd) = softmax(Q·Kᵀ·scale + bias)·V for one head: Q
// [bq, hd] bf16 (row stride ldq, even); K [nk, hd] dense bf16, read where it lies; vp: V packed
// by amx::pack_values (pairs of consecutive keys per column, the VNNI order VDPBF16PS reads);
// bias (score units, after the scale) for keys j >= bias_from, or null. Single-threaded (the
// caller runs heads and query blocks in parallel). Call only when usable() and
// attention_fits(hd).
//
// Schedule: strips of 16 queries, each query a vector lane throughout. Per block of 256 keys,
// Sᵀ[key, 16 queries] = K·Qᵀ (one key's pair broadcast against 16 queries' pairs), an online
// softmax step down the columns (the max, the sum and the rescale are lane-wise: no horizontal
// reduction), the bf16 P interleaved into key pairs, and Oᵀ[hd, 16] += Vᵀ·Pᵀ (a value pair
// broadcast against 16 queries' P pairs). The strip's scores (16 KiB) and Oᵀ stay in L1.
void attention(const uint16_t* q, int64_t bq, int64_t ldq, const uint16_t* k, const uint16_t* vp, int64_t nk,
               int64_t hd, float scale, const float* bias, int64_t bias_from, std::byte* scratch, float* o);

// A VDPBF16PS loop on registers only, `threads` threads for about `seconds`: the instruction's
// own rate in GFLOP/s (benchmarks: the ceiling the kernel is measured against).
double dpbf16_peak_gflops(int threads, double seconds);

}  // namespace fovea::encoder_detail::avx512bf16
