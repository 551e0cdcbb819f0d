// Private to src/encoder: exact attention with both products in int8 (vpdpbusd): the attention
// of Precision::int8 on CPUs with AVX512-VNNI and AVX512-BF16 (Zen 4, Zen 5, Cooper Lake;
// elsewhere int8 encodes run bf16 attention).
//
// Numerics. Per head, the keys are first smoothed: the mean key over all T keys is subtracted
// (every query's scores change by one constant, q·mean, which the softmax removes), so channels
// that are large in every key (as trained towers have them) do not set every key's scale. Then
// each key j is quantized symmetrically, k_j ≈ ks_j·kq_j with kq in [-127, 127]. Each query row
// i is quantized asymmetrically per head as the int8 GEMM quantizes activations (int8.hpp):
// q_i ≈ sq_i·(u_i − zq_i), u in [0, 255]. Then
//   q_i·k_j ≈ sq_i·ks_j·(Σ_d u_id·kq_jd − zq_i·Σ_d kq_jd),
// an exact int32 sum. The softmax runs in f32 as the AVX512-BF16 kernel's (avx512bf16.hpp), with
// the same layout: strips of 16 queries, one query per vector lane. The values are smoothed the
// same way (their mean over the keys is added back at the end: the weights of a row sum to one)
// and quantized per column d over the keys, v_jd ≈ vs_d·vq_jd; P = 2^(s − max) ∈ [0, 1] is
// rounded to uint8 steps of 1/255, and the row's normaliser is the sum of those rounded P, so
// O = Σ_j P_j·v_j / Σ_j P_j holds for the rounded weights exactly as it does in float. Keys
// whose weight is below 1/510 of the row's largest drop out.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fovea::encoder_detail::int8attn {

// The CPU runs the kernel (AVX512-VNNI as int8::available(vnni512) and avx512bf16::usable()),
// this build has it, and FOVEA_INT8_ATTENTION is not 0. Asked once.
bool usable();
// Head widths the kernel takes: whole 32-column steps, at most 128.
inline bool fits(int64_t hd) { return hd > 0 && hd % 32 == 0 && hd <= 128; }
// Scratch (bytes, 64-byte aligned) attention() needs, whatever nk.
constexpr size_t kScratchBytes = 64 * 1024;

// One head's keys k [nk, hd] bf16 dense → kq [nk, hd] int8, ks [nk] and ksum [nk] = Σ_d kq[j, d]
// (see above). A key with a non-finite value gets ks NaN (its scores are NaN, as in float).
void quantize_keys(const uint16_t* k, int64_t nk, int64_t hd, int8_t* kq, float* ks, int32_t* ksum);

// One head's values v [nk, hd] bf16 dense → vq (values_bytes(nk, hd): per 4 consecutive keys
// and column d, their 4 int8 values in one dword at ((j / 4)·hd + d)·4) and vs [2·hd]: the
// columns' steps, then their means. A non-finite value makes its column's step NaN.
inline size_t values_bytes(int64_t nk, int64_t hd) { return size_t((nk + 3) / 4 * hd * 4); }
void quantize_values(const uint16_t* v, int64_t nk, int64_t hd, int8_t* vq, float* vs);

// O[bq, hd] (f32, normalised, row stride hd) = softmax(Q·Kᵀ·scale)·V for one head: Q [bq, hd]
// bf16 (row stride ldq); the keys and values as quantize_keys and quantize_values wrote them.
// Single-threaded. Call only when usable() and fits(hd).
void attention(const uint16_t* q, int64_t bq, int64_t ldq, const int8_t* kq, const float* ks, const int32_t* ksum,
               const int8_t* vq, const float* vs, int64_t nk, int64_t hd, float scale, std::byte* scratch, float* o);

}  // namespace fovea::encoder_detail::int8attn
