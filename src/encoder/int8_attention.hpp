// Private to src/encoder: exact attention with Q·Kᵀ in int8 (vpdpbusd) and P·V in bf16
// (VDPBF16PS): the attention of Precision::int8 on CPUs with AVX512-VNNI and AVX512-BF16 (Zen 4,
// Zen 5, Cooper Lake; elsewhere int8 encodes run bf16 attention).
//
// Numerics. Per head, the keys are first smoothed: the mean key over all T keys is subtracted
// (every query's scores change by one constant, q·mean, which the softmax removes), so channels
// that are large in every key (as trained towers have them) do not set every key's scale. Then
// each key j is quantized symmetrically, k_j ≈ ks_j·kq_j with kq in [-127, 127]. Each query row
// i is quantized asymmetrically per head as the int8 GEMM quantizes activations (int8.hpp):
// q_i ≈ sq_i·(u_i − zq_i), u in [0, 255]. Then
//   q_i·k_j ≈ sq_i·ks_j·(Σ_d u_id·kq_jd − zq_i·Σ_d kq_jd),
// an exact int32 sum. The softmax, P (rounded to bf16) and P·V are the AVX512-BF16 kernel's
// (avx512bf16.hpp), as is the layout: strips of 16 queries, one query per vector lane.
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

// O[bq, hd] (f32, normalised, row stride hd) = softmax(Q·Kᵀ·scale)·V for one head: Q [bq, hd]
// bf16 (row stride ldq); the keys as quantize_keys wrote them; vp: V packed by amx::pack_values.
// Single-threaded. Call only when usable() and fits(hd).
void attention(const uint16_t* q, int64_t bq, int64_t ldq, const int8_t* kq, const float* ks, const int32_t* ksum,
               const uint16_t* vp, int64_t nk, int64_t hd, float scale, std::byte* scratch, float* o);

}  // namespace fovea::encoder_detail::int8attn
