// Private to src/encoder: multi-head softmax attention, the one implementation that the forward
// pass (forward.cpp) and the incremental encoder (incremental.cpp) call. Exact attention, and the
// coarse-to-fine (hierarchical) approximation of AttentionParams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "encoder/encoder_internal.hpp"

namespace fovea::encoder_detail {

// How attention runs: the scalar reference (plain softmax, one key block, reference GEMMs) or
// the fast kernels on `threads` OpenMP threads with `gemm`'s cached oneDNN primitives.
struct AttentionExec {
  bool reference = false;
  int threads = 1;
  Gemm* gemm = nullptr;  // required unless reference
  // Precision::int8: exact attention in int8 where the CPU runs int8attn's kernel
  // (int8_attention.hpp), bf16 attention elsewhere.
  bool int8 = false;
};

// A growable 64-byte aligned buffer (contents undefined after growth).
struct ScratchBuf {
  std::unique_ptr<std::byte[], AlignedFree> p;
  size_t bytes = 0;
  void ensure(size_t n) {
    if (n > bytes) {
      p = aligned_alloc_bytes(std::max<size_t>(n, 64));
      bytes = std::max<size_t>(n, 64);
    }
  }
  std::byte* get() { return p.get(); }
  template <typename T> T* as() { return reinterpret_cast<T*>(p.get()); }
};

// Buffers attention reuses from call to call (one per encode, reused by every layer): the
// head-major copies of Q, K and V, the pooled block keys and values and the bounds of each
// block's keys (hierarchical), per-thread scratch.
struct AttentionWorkspace {
  ScratchBuf q, k, v, kp, vp, kbound;  // kbound: per head and block, its keys' [max | min] per dimension
  ScratchBuf k_tiles, v_tiles;  // every head's K and V packed for the AMX kernel (amx.hpp), exact attention
  ScratchBuf k_int8, k_scale, k_sum, v_int8, v_scale;  // every head's K and V quantized for the int8 kernel (int8_attention.hpp)
  std::vector<ScratchBuf> thread_scratch;
};

// The hierarchical blocks of one token set, built once per encode from the tokens' positions.
// Attention rows are permuted so that each block is a contiguous run: row p of the permuted
// order is token row order[p]. The first n_global rows (the class token) are not in a block.
struct HierarchicalPlan {
  int top_k = 8;
  int64_t n_global = 0;
  std::vector<int32_t> order;        // [T]
  std::vector<int64_t> block_start;  // [blocks + 1], offsets into the permuted order
  int64_t blocks() const { return int64_t(block_start.size()) - 1; }
};

// Rows 0..n_global-1 are global; row n_global + i is token i at centre (pos[i·stride],
// pos[i·stride + 1]). Tokens are sorted by the Morton code of their centres (a quadtree walk of
// the bounding box) and cut into consecutive blocks of params.block_tokens.
HierarchicalPlan plan_hierarchical(const AttentionParams& params, int64_t n_global, const float* pos,
                                   int64_t pos_stride, int64_t n);

// out[r, D] (dense, dtype dt) = softmax(Q·Kᵀ/√hd)·V per head, for r query rows against T key and
// value rows. q: r rows of row stride ldq elements, head h at columns [h·hd, (h+1)·hd);
// kv: T rows of row stride ldkv, K at column 0 and V at column D (same head layout). All of dt
// (f32 or bf16); scores and accumulation in f32. The forward pass passes its [T, 3D] q|k|v
// buffer as q = qkv, kv = qkv + D (ldq = ldkv = 3D).
// `plan` non-null: hierarchical self-attention (r == T, the query rows are the key rows).
// `ws` null: buffers are allocated for the call.
void attention_rows(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r, const std::byte* kv,
                    int64_t ldkv, int64_t T, int64_t D, int heads, DType dt, std::byte* out,
                    const HierarchicalPlan* plan = nullptr, AttentionWorkspace* ws = nullptr);

// Exact attention_rows with the keys and values already head-major, as the incremental
// encoder's per-layer cache keeps them (updated row by row, so no copy per call): k and v
// [heads, T, hd] dense each, dtype dt (token t of head h at (h·T + t)·hd). attention_rows copies
// its interleaved K|V into this layout and runs the same code: equal results bit for bit.
void attention_rows_kv_head_major(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r,
                                  const std::byte* k, const std::byte* v, int64_t T, int64_t D, int heads, DType dt,
                                  std::byte* out, AttentionWorkspace* ws = nullptr);

}  // namespace fovea::encoder_detail
