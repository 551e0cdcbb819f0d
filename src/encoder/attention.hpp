// Private to src/encoder: multi-head softmax attention, the one implementation that the forward
// pass (forward.cpp) and the incremental encoder (incremental.cpp) call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail {

// How attention runs: the scalar reference (plain softmax, one key block) or the fast kernels on
// `threads` OpenMP threads with `gemm`'s cached oneDNN primitives.
struct AttentionExec {
  bool reference = false;
  int threads = 1;
  Gemm* gemm = nullptr;  // required unless reference
};

// out[r, D] (dense, dtype dt) = softmax(Q·Kᵀ/√hd)·V per head, for r query rows against T key and
// value rows. q: r rows of row stride ldq elements, head h at columns [h·hd, (h+1)·hd);
// kv: T rows of row stride ldkv, K at column 0 and V at column D (same head layout). All of dt
// (f32 or bf16); scores and accumulation in f32. The forward pass passes its [T, 3D] q|k|v
// buffer as q = qkv, kv = qkv + D (ldq = ldkv = 3D).
void attention_rows(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r, const std::byte* kv,
                    int64_t ldkv, int64_t T, int64_t D, int heads, DType dt, std::byte* out);

}  // namespace fovea::encoder_detail
