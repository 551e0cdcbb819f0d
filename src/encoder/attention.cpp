// Multi-head attention (attention.hpp).
//
// Schedule. Q, K and V are first copied head-major ([heads, rows, hd], dense), because oneDNN 2.6
// runs a matmul whose operands have row strides other than their width (the per-head views into
// the [T, 3D] q|k|v buffer) on its generic `gemm:jit` path, and dense ones on brgemm
// (`brg:avx512_core_amx_bf16` / `brg:avx512_core` / `brg:avx2`..., chosen at run time). The copy
// is 3·T·D elements, a few percent of one QKV GEMM's traffic. Then (head, query block) tasks run
// in parallel, each walking balanced key blocks with an online softmax (scale, max, exp, sum and
// the bf16 P in one Highway pass per row; the 1/sum normalisation at the end), so no T×T matrix
// exists: the working set per thread is a Bq×Bk score block. Each task's GEMMs run on its own
// thread (single-threaded primitives, per-thread scratchpads: gemm.cpp).
//
// Hierarchical (AttentionParams::Mode::hierarchical): the rows are permuted into spatial blocks
// (HierarchicalPlan) during the same head-major copy; per head, every block's mean key and
// value and its keys' per-dimension bounds are computed; a query block ranks the key blocks by
// the attention its queries could give them (score upper bounds from the key bounds), gathers
// the keys and values of its top-K blocks plus the pooled rows of the others (bias log count),
// and runs the same block kernel over that short key list.
//
// The reference (AttentionExec::reference) runs the same algorithm with the scalar kernels, the
// reference GEMM and a single query and key block (plain softmax attention).
#include "encoder/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "encoder/amx.hpp"
#include "encoder/avx2.hpp"
#include "encoder/avx512bf16.hpp"
#include "encoder/int8_attention.hpp"
#include "fovea/error.hpp"

namespace fovea {

AttentionParams parse_attention(std::string_view spec) {
  auto fail = [&] {
    return Error(Errc::invalid_argument, "--attention '" + std::string(spec) +
                                             "': expected exact, hierarchical, hierarchical:K or hierarchical:K:B "
                                             "(K >= 1 key blocks, B >= 1 tokens per block)");
  };
  AttentionParams a;
  if (spec == "exact") return a;
  const std::string_view h = "hierarchical";
  if (spec.substr(0, h.size()) != h) throw fail();
  a.mode = AttentionParams::Mode::hierarchical;
  std::string_view rest = spec.substr(h.size());
  if (rest.empty()) return a;
  auto number = [&](std::string_view s) {
    int v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 1 || v > (1 << 20)) throw fail();
    return v;
  };
  if (rest[0] != ':') throw fail();
  rest.remove_prefix(1);
  const size_t colon = rest.find(':');
  a.top_k = number(rest.substr(0, colon));
  if (colon != std::string_view::npos) a.block_tokens = number(rest.substr(colon + 1));
  return a;
}

std::string to_string(const AttentionParams& a) {
  if (a.mode == AttentionParams::Mode::exact) return "exact";
  return "hierarchical:" + std::to_string(a.top_k) + ":" + std::to_string(a.block_tokens);
}

namespace {

// Mean per-token cosine to exact attention on a real pretrained tower: a ViT-Ti/16 classifier,
// N = 4096 (five photos upscaled to 1024², uniform), fp32 and bf16; the range over the photos,
// rounded outwards (bench/hierarchical_real.py, bench/results/hierarchical/, 2026-12-06;
// docs/explanation/encoder.md, "Hierarchical attention (experimental)").
struct RealTowerCosine {
  int top_k, block_tokens;
  double lo, hi;
};
constexpr RealTowerCosine kRealTower[] = {
    {4, 64, 0.758, 0.860},
    {8, 64, 0.818, 0.918},
    {16, 64, 0.886, 0.965},
    {32, 64, 0.970, 0.996},
};

std::string three_places(double v) {
  char b[16];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

}  // namespace

AttentionCaveat attention_caveat(const AttentionParams& a) {
  AttentionCaveat c;
  if (a.mode == AttentionParams::Mode::exact) return c;
  c.experimental = true;
  c.cosine_lo = 1, c.cosine_hi = 0;
  for (const RealTowerCosine& m : kRealTower)
    if (m.top_k == a.top_k && m.block_tokens == a.block_tokens) c.cosine_lo = m.lo, c.cosine_hi = m.hi;
  if (c.cosine_hi > 0) {
    c.measured = to_string(a);
  } else {  // not measured: the range over every configuration that was
    for (const RealTowerCosine& m : kRealTower) c.cosine_lo = std::min(c.cosine_lo, m.lo), c.cosine_hi = std::max(c.cosine_hi, m.hi);
    c.measured = "hierarchical:4:64 to hierarchical:32:64";
  }
  c.text = "experimental: mean per-token cosine to exact attention " + three_places(c.cosine_lo) + "-" +
           three_places(c.cosine_hi) + " on a real pretrained ViT-Ti/16 at N=4096 (" + c.measured + ")";
  return c;
}

namespace encoder_detail {

namespace {

size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }

constexpr int64_t kMaxBq = 128;   // query rows per exact task
constexpr int64_t kMaxBk = 1024;  // keys per score block

// n items cut into ceil(n / max) near-equal blocks, rounded up to 16 (AMX tile rows / a cache
// line of floats): fewer distinct GEMM shapes and no sliver of a last block.
int64_t balanced_block(int64_t n, int64_t max) {
  const int64_t blocks = (n + max - 1) / max;
  const int64_t b = (n + blocks - 1) / blocks;
  return std::min(n, (b + 15) / 16 * 16);
}

void linear(const AttentionExec& ex, const GemmArgs& a) {
  if (ex.reference) gemm_reference(a);
  else ex.gemm->run(a);
}

// Per-thread buffers of the block kernel and the hierarchical gather.
struct TaskBuffers {
  ScratchBuf *S, *P, *O, *Kg, *Vg, *Kt, *Vt;  // Kt, Vt: keys and values packed for the AMX kernel
  std::vector<float> m, l, bias, score;
  std::vector<int32_t> pick;
  std::vector<const uint16_t*> vrows;  // a gathered key list's value rows, where they lie
};

// bf16 attention on AMX tiles (amx.hpp: Q·Kᵀ, the softmax and P·V in one pass per 16 query rows,
// no oneDNN call per block) where the CPU has them and the head width fits.
bool amx_attention(const AttentionExec& ex, DType dt, int64_t hd) {
  return !ex.reference && dt == DType::bf16 && amx::attention_fits(hd) && amx::usable();
}

// bf16 attention on AVX512-BF16 (avx512bf16.hpp: the same fused pass, queries in vector lanes)
// where the CPU has VDPBF16PS and the AMX kernel does not run.
bool avx512bf16_attention(const AttentionExec& ex, DType dt, int64_t hd) {
  return !ex.reference && dt == DType::bf16 && avx512bf16::attention_fits(hd) && avx512bf16::usable() &&
         !amx_attention(ex, dt, hd);
}

// f32 attention on fovea's AVX2 kernel (avx2.hpp: the same blocks and online softmax, no oneDNN
// call per block) where the linear layers run on it too (AVX2-only CPUs).
bool avx2_attention(const AttentionExec& ex, DType dt, int64_t hd) {
  return !ex.reference && dt == DType::f32 && avx2::attention_fits(hd) && Gemm::avx2_takes_f32();
}

// Attention in int8 (int8_attention.hpp) for an int8 encode's exact attention where the CPU has
// the kernel and the AMX one does not run.
bool int8_attention(const AttentionExec& ex, DType dt, int64_t hd) {
  return !ex.reference && ex.int8 && dt == DType::bf16 && int8attn::fits(hd) && int8attn::usable() &&
         !amx_attention(ex, dt, hd);
}

// Whether block_attention packs V for its kernel (and so can take it as v_rows).
bool packs_values(const AttentionExec& ex, DType dt, int64_t hd) {
  return amx_attention(ex, dt, hd) || avx512bf16_attention(ex, dt, hd);
}

// O[bq, hd] (f32, normalised) = softmax(Q·Kᵀ·scale + bias)·V over nk keys. Q [bq, hd], K and V
// [nk, hd] dense, dtype dt. bias (score units, after scale) applies to keys >= bias_from.
// v_rows (only where packs_values): V's row j at v_rows[j] instead of dense at V.
void block_attention(const AttentionExec& ex, const std::byte* Q, int64_t bq, const std::byte* K, const std::byte* V,
                     const float* bias, int64_t bias_from, int64_t nk, int64_t hd, float scale, DType dt,
                     TaskBuffers& b, float* O, const uint16_t* const* v_rows = nullptr) {
  auto pack_v = [&](uint16_t* dst) {
    if (v_rows) amx::pack_values_rows(v_rows, nk, hd, dst);
    else amx::pack_values(reinterpret_cast<const uint16_t*>(V), nk, hd, dst);
  };
  if (amx_attention(ex, dt, hd)) {
    const size_t kv = amx::packed_kv_elems(nk, hd) * 2;
    b.Kt->ensure(kv), b.Vt->ensure(kv), b.S->ensure(amx::attention_scratch_bytes(nk));
    amx::pack_keys(reinterpret_cast<const uint16_t*>(K), nk, hd, b.Kt->as<uint16_t>());
    pack_v(b.Vt->as<uint16_t>());
    amx::attention(reinterpret_cast<const uint16_t*>(Q), bq, hd, b.Kt->as<uint16_t>(), b.Vt->as<uint16_t>(), nk, hd,
                   scale, bias, bias_from, b.S->get(), O);
    return;
  }
  if (avx512bf16_attention(ex, dt, hd)) {
    b.Vt->ensure(amx::packed_kv_elems(nk, hd) * 2), b.S->ensure(avx512bf16::kScratchBytes);
    pack_v(b.Vt->as<uint16_t>());
    avx512bf16::attention(reinterpret_cast<const uint16_t*>(Q), bq, hd, reinterpret_cast<const uint16_t*>(K),
                          b.Vt->as<uint16_t>(), nk, hd, scale, bias, bias_from, b.S->get(), O);
    return;
  }
  if (v_rows) throw Error(Errc::internal, "attention: value rows given to a kernel that reads V dense");
  if (avx2_attention(ex, dt, hd)) {
    avx2::attention(reinterpret_cast<const float*>(Q), bq, hd, reinterpret_cast<const float*>(K),
                    reinterpret_cast<const float*>(V), nk, hd, scale, bias, bias_from, O);
    return;
  }
  const size_t es = esize(dt);
  const int64_t Bk = ex.reference ? nk : balanced_block(nk, kMaxBk);
  b.S->ensure(size_t(bq * Bk) * 4);
  b.P->ensure(size_t(bq * Bk) * es);
  float* S = b.S->as<float>();
  std::byte* P = b.P->get();
  b.m.assign(size_t(bq), -INFINITY);
  b.l.assign(size_t(bq), 0.0f);
  std::memset(O, 0, size_t(bq * hd) * 4);
  const float inv_scale = 1.0f / scale;
  for (int64_t k0 = 0; k0 < nk; k0 += Bk) {
    const int64_t bk = std::min(Bk, nk - k0);
    GemmArgs s{};
    s.a = Q, s.lda = hd, s.a_dt = dt;
    s.w = K + size_t(k0 * hd) * es, s.ldw = hd, s.w_dt = dt;
    s.c = S, s.ldc = bk, s.c_dt = DType::f32;
    s.m = bq, s.n = bk, s.k = hd;
    linear(ex, s);
    if (bias && k0 + bk > bias_from) {
      const int64_t j0 = std::max<int64_t>(0, bias_from - k0);
      for (int64_t i = 0; i < bq; ++i)
        for (int64_t j = j0; j < bk; ++j) S[i * bk + j] += bias[k0 + j] * inv_scale;
    }
    for (int64_t i = 0; i < bq; ++i) {
      std::byte* prow = P + size_t(i * bk) * es;
      const float corr = ex.reference ? softmax_step_row_ref(S + i * bk, bk, scale, &b.m[i], &b.l[i], prow, dt)
                                      : softmax_step_row(S + i * bk, bk, scale, &b.m[i], &b.l[i], prow, dt);
      if (corr != 1.0f && k0 > 0) {
        float* o = O + i * hd;
        for (int64_t j = 0; j < hd; ++j) o[j] *= corr;
      }
    }
    GemmArgs pv{};
    pv.a = P, pv.lda = bk, pv.a_dt = dt;
    pv.w = V + size_t(k0 * hd) * es, pv.ldw = hd, pv.w_dt = dt, pv.w_is_kn = true;
    pv.c = O, pv.ldc = hd, pv.c_dt = DType::f32;
    pv.m = bq, pv.n = hd, pv.k = bk;
    pv.accumulate = k0 > 0;
    linear(ex, pv);
  }
  for (int64_t i = 0; i < bq; ++i) {
    const float inv = 1.0f / b.l[i];
    float* o = O + i * hd;
    for (int64_t j = 0; j < hd; ++j) o[j] *= inv;
  }
}

// dst[h, p, :] = src[row(p), h·hd : (h+1)·hd] for p < rows, row(p) = perm ? perm[p] : p.
void head_major(const AttentionExec& ex, const std::byte* src, int64_t ld, int64_t rows, int heads, int64_t hd,
                DType dt, const int32_t* perm, std::byte* dst) {
  const size_t es = esize(dt), row_bytes = size_t(hd) * es;
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (int64_t p = 0; p < rows; ++p) {
    const std::byte* s = src + size_t((perm ? perm[p] : p) * ld) * es;
    for (int h = 0; h < heads; ++h) std::memcpy(dst + (size_t(h) * rows + p) * row_bytes, s + h * row_bytes, row_bytes);
  }
}

// out[row, h·hd + j] = O[i, j] (dt), row = perm ? perm[p0 + i] : p0 + i.
void write_rows(const float* O, int64_t bq, int64_t hd, int h, int64_t D, DType dt, const int32_t* perm, int64_t p0,
                std::byte* out) {
  for (int64_t i = 0; i < bq; ++i) {
    const int64_t row = perm ? perm[p0 + i] : p0 + i;
    const float* o = O + i * hd;
    if (dt == DType::f32) std::memcpy(reinterpret_cast<float*>(out) + row * D + h * hd, o, size_t(hd) * 4);
    else to_bf16_row(o, reinterpret_cast<uint16_t*>(out) + row * D + h * hd, hd);
  }
}

// Runs fn(task, buffers) for tasks 0..n-1 on ex.threads OpenMP threads, the first exception
// rethrown after the loop.
template <typename Fn>
void parallel_tasks(const AttentionExec& ex, AttentionWorkspace& ws, int64_t n, Fn&& fn) {
  constexpr size_t kSlots = 7;
  if (ws.thread_scratch.size() < size_t(ex.threads) * kSlots) ws.thread_scratch.resize(size_t(ex.threads) * kSlots);
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(ex.threads)
  {
    ScratchBuf* slot = &ws.thread_scratch[size_t(omp_get_thread_num()) * kSlots];
    TaskBuffers b{&slot[0], &slot[1], &slot[2], &slot[3], &slot[4], &slot[5], &slot[6], {}, {}, {}, {}, {}, {}};
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n; ++task) {
      try {
        fn(task, b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// Exact attention with K and V already head-major ([heads, T, hd] each).
void exact_kv(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r, const std::byte* k,
              const std::byte* v, int64_t T, int64_t D, int heads, DType dt, std::byte* out, AttentionWorkspace& ws) {
  const int64_t hd = D / heads;
  const size_t es = esize(dt);
  const float scale = float(1.0 / std::sqrt(double(hd)));
  ws.q.ensure(size_t(r * D) * es);
  head_major(ex, q, ldq, r, heads, hd, dt, nullptr, ws.q.get());
  const int64_t Bq = ex.reference ? r : balanced_block(r, kMaxBq);
  const int64_t nqb = (r + Bq - 1) / Bq;
  if (amx_attention(ex, dt, hd)) {
    // Every head's K and V packed once (not per query block), then the fused kernel per task.
    const size_t per_head = amx::packed_kv_elems(T, hd);
    ws.k_tiles.ensure(per_head * heads * 2), ws.v_tiles.ensure(per_head * heads * 2);
    uint16_t* kt = ws.k_tiles.as<uint16_t>();
    uint16_t* vt = ws.v_tiles.as<uint16_t>();
#pragma omp parallel for num_threads(ex.threads) schedule(static)
    for (int64_t hv = 0; hv < 2 * heads; ++hv) {
      const int64_t h = hv / 2;
      const auto* src = reinterpret_cast<const uint16_t*>((hv % 2 ? v : k) + size_t(h * T * hd) * es);
      if (hv % 2) amx::pack_values(src, T, hd, vt + h * per_head);
      else amx::pack_keys(src, T, hd, kt + h * per_head);
    }
    parallel_tasks(ex, ws, nqb * heads, [&](int64_t task, TaskBuffers& b) {
      const int h = int(task % heads);
      const int64_t q0 = (task / heads) * Bq, bq = std::min(Bq, r - q0);
      b.O->ensure(size_t(bq * hd) * 4), b.S->ensure(amx::attention_scratch_bytes(T));
      amx::attention(reinterpret_cast<const uint16_t*>(ws.q.get() + size_t((h * r + q0) * hd) * es), bq, hd,
                     kt + h * per_head, vt + h * per_head, T, hd, scale, nullptr, 0, b.S->get(), b.O->as<float>());
      write_rows(b.O->as<float>(), bq, hd, h, D, dt, nullptr, q0, out);
    });
    return;
  }
  if (int8_attention(ex, dt, hd)) {
    // Every head's K and V quantized once, then the kernel per task.
    const size_t vb = int8attn::values_bytes(T, hd);
    ws.k_int8.ensure(size_t(heads * T * hd)), ws.k_scale.ensure(size_t(heads * T) * 4);
    ws.k_sum.ensure(size_t(heads * T) * 4), ws.v_int8.ensure(vb * size_t(heads));
    ws.v_scale.ensure(size_t(heads * 2 * hd) * 4);
    int8_t* kq = ws.k_int8.as<int8_t>();
    float* ks = ws.k_scale.as<float>();
    int32_t* ksum = ws.k_sum.as<int32_t>();
    int8_t* vq = ws.v_int8.as<int8_t>();
    float* vs = ws.v_scale.as<float>();
#pragma omp parallel for num_threads(ex.threads) schedule(static)
    for (int64_t hv = 0; hv < 2 * heads; ++hv) {
      const int64_t h = hv / 2;
      if (hv % 2)
        int8attn::quantize_values(reinterpret_cast<const uint16_t*>(v + size_t(h * T * hd) * es), T, hd, vq + h * vb,
                                  vs + h * 2 * hd);
      else
        int8attn::quantize_keys(reinterpret_cast<const uint16_t*>(k + size_t(h * T * hd) * es), T, hd, kq + h * T * hd,
                                ks + h * T, ksum + h * T);
    }
    parallel_tasks(ex, ws, nqb * heads, [&](int64_t task, TaskBuffers& b) {
      const int h = int(task % heads);
      const int64_t q0 = (task / heads) * Bq, bq = std::min(Bq, r - q0);
      b.O->ensure(size_t(bq * hd) * 4), b.S->ensure(int8attn::kScratchBytes);
      int8attn::attention(reinterpret_cast<const uint16_t*>(ws.q.get() + size_t((h * r + q0) * hd) * es), bq, hd,
                          kq + h * T * hd, ks + h * T, ksum + h * T, vq + h * vb, vs + h * 2 * hd, T, hd, scale,
                          b.S->get(), b.O->as<float>());
      write_rows(b.O->as<float>(), bq, hd, h, D, dt, nullptr, q0, out);
    });
    return;
  }
  if (avx512bf16_attention(ex, dt, hd)) {
    // Every head's V packed once; K is read where it lies.
    const size_t per_head = amx::packed_kv_elems(T, hd);
    ws.v_tiles.ensure(per_head * heads * 2);
    uint16_t* vt = ws.v_tiles.as<uint16_t>();
#pragma omp parallel for num_threads(ex.threads) schedule(static)
    for (int64_t h = 0; h < heads; ++h)
      amx::pack_values(reinterpret_cast<const uint16_t*>(v + size_t(h * T * hd) * es), T, hd, vt + h * per_head);
    parallel_tasks(ex, ws, nqb * heads, [&](int64_t task, TaskBuffers& b) {
      const int h = int(task % heads);
      const int64_t q0 = (task / heads) * Bq, bq = std::min(Bq, r - q0);
      b.O->ensure(size_t(bq * hd) * 4), b.S->ensure(avx512bf16::kScratchBytes);
      avx512bf16::attention(reinterpret_cast<const uint16_t*>(ws.q.get() + size_t((h * r + q0) * hd) * es), bq, hd,
                            reinterpret_cast<const uint16_t*>(k + size_t(h * T * hd) * es), vt + h * per_head, T, hd,
                            scale, nullptr, 0, b.S->get(), b.O->as<float>());
      write_rows(b.O->as<float>(), bq, hd, h, D, dt, nullptr, q0, out);
    });
    return;
  }
  parallel_tasks(ex, ws, nqb * heads, [&](int64_t task, TaskBuffers& b) {
    const int h = int(task % heads);
    const int64_t q0 = (task / heads) * Bq, bq = std::min(Bq, r - q0);
    b.O->ensure(size_t(bq * hd) * 4);
    block_attention(ex, ws.q.get() + size_t((h * r + q0) * hd) * es, bq, k + size_t(h * T * hd) * es,
                    v + size_t(h * T * hd) * es, nullptr, 0, T, hd, scale, dt, b, b.O->as<float>());
    write_rows(b.O->as<float>(), bq, hd, h, D, dt, nullptr, q0, out);
  });
}

void exact(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r, const std::byte* kv, int64_t ldkv,
           int64_t T, int64_t D, int heads, DType dt, std::byte* out, AttentionWorkspace& ws) {
  const int64_t hd = D / heads;
  const size_t es = esize(dt);
  ws.k.ensure(size_t(T * D) * es), ws.v.ensure(size_t(T * D) * es);
  head_major(ex, kv, ldkv, T, heads, hd, dt, nullptr, ws.k.get());
  head_major(ex, kv + size_t(D) * es, ldkv, T, heads, hd, dt, nullptr, ws.v.get());
  exact_kv(ex, q, ldq, r, ws.k.get(), ws.v.get(), T, D, heads, dt, out, ws);
}

// One hierarchical attention call: its plan and shapes, and Q, K and V head-major in the plan's
// row order, which every phase below reads.
struct Hierarchical {
  const AttentionExec& ex;
  const HierarchicalPlan& plan;
  int64_t T, D;
  int heads;
  DType dt;
  std::byte* out;
  AttentionWorkspace& ws;
  int64_t hd, nb, G;  // head width, blocks, global (class token) rows
  size_t es, row_bytes;
  float scale;
  const int32_t* perm;
  const std::byte *Qh = nullptr, *Kh = nullptr, *Vh = nullptr;  // [heads, T, hd] in dt
  std::vector<float> log_count;  // per block: log of its row count
  int64_t K = 0;                 // key blocks attended exactly (the others pooled)
  int64_t bpg = 1;               // query blocks per group (one task)
  bool vrows = false;            // the kernel packs the value rows from where they lie

  Hierarchical(const AttentionExec& ex, const HierarchicalPlan& plan, int64_t T, int64_t D, int heads, DType dt,
               std::byte* out, AttentionWorkspace& ws)
      : ex(ex), plan(plan), T(T), D(D), heads(heads), dt(dt), out(out), ws(ws), hd(D / heads), nb(plan.blocks()),
        G(plan.n_global), es(esize(dt)), row_bytes(size_t(hd) * es), scale(float(1.0 / std::sqrt(double(hd)))),
        perm(plan.order.data()) {}
  int64_t block_rows(int64_t c) const { return plan.block_start[c + 1] - plan.block_start[c]; }
};

// Pooled keys and values: the mean of each block's rows, per head (f32 sums, stored as dt); and
// the per-dimension max and min of its keys, which bound any query's scores on the block
// (stored as dt: a max or min of bf16 keys is a bf16 value, so bf16 loses nothing).
void pool_blocks(Hierarchical& a) {
  const int64_t hd = a.hd, nb = a.nb, T = a.T;
  const size_t es = a.es;
  const DType dt = a.dt;
  AttentionWorkspace& ws = a.ws;
  ws.kp.ensure(size_t(a.heads * nb * hd) * es), ws.vp.ensure(size_t(a.heads * nb * hd) * es);
  ws.kbound.ensure(size_t(a.heads * nb * 2 * hd) * es);
  a.log_count.assign(size_t(std::max<int64_t>(nb, 1)), 0.0f);
  for (int64_t c = 0; c < nb; ++c) a.log_count[size_t(c)] = std::log(float(a.block_rows(c)));
#pragma omp parallel for num_threads(a.ex.threads) schedule(static)
  for (int64_t hb = 0; hb < a.heads * nb; ++hb) {
    const int64_t h = hb / nb, c = hb % nb, b0 = a.plan.block_start[c], b1 = a.plan.block_start[c + 1];
    std::vector<float> sk(size_t(hd), 0.0f), sv(size_t(hd), 0.0f), row(static_cast<size_t>(hd));
    std::vector<float> bound(size_t(2 * hd));  // [max | min]: the ranking GEMM's one row for this block
    float* kmx = bound.data();
    float* kmn = kmx + hd;
    std::fill(kmx, kmx + hd, -INFINITY), std::fill(kmn, kmn + hd, INFINITY);
    auto add_row = [&](const std::byte* src, std::vector<float>& acc, bool bounds) {
      const float* x = reinterpret_cast<const float*>(src);
      if (dt == DType::bf16) from_bf16_row(reinterpret_cast<const uint16_t*>(src), row.data(), hd), x = row.data();
      for (int64_t j = 0; j < hd; ++j) acc[j] += x[j];
      if (bounds)
        for (int64_t j = 0; j < hd; ++j) kmx[j] = std::max(kmx[j], x[j]), kmn[j] = std::min(kmn[j], x[j]);
    };
    for (int64_t p = b0; p < b1; ++p) {
      add_row(a.Kh + size_t((h * T + p) * hd) * es, sk, true);
      add_row(a.Vh + size_t((h * T + p) * hd) * es, sv, false);
    }
    const float inv = 1.0f / float(b1 - b0);
    for (int64_t j = 0; j < hd; ++j) sk[j] *= inv, sv[j] *= inv;
    std::byte* kd = ws.kp.get() + size_t(hb * hd) * es;
    std::byte* vd = ws.vp.get() + size_t(hb * hd) * es;
    std::byte* bd = ws.kbound.get() + size_t(hb * 2 * hd) * es;
    if (dt == DType::f32) {
      std::memcpy(kd, sk.data(), size_t(hd) * 4), std::memcpy(vd, sv.data(), size_t(hd) * 4);
      std::memcpy(bd, bound.data(), size_t(2 * hd) * 4);
    } else {
      to_bf16_row(sk.data(), reinterpret_cast<uint16_t*>(kd), hd);
      to_bf16_row(sv.data(), reinterpret_cast<uint16_t*>(vd), hd);
      to_bf16_row(bound.data(), reinterpret_cast<uint16_t*>(bd), 2 * hd);
    }
  }
}

// Query blocks per group. Per head: the global query rows (one task, exact over all keys), then
// one task per group of consecutive query blocks. A group first ranks the key blocks for each of
// its query blocks (rank_blocks).
// A group holds up to ~1024 query rows, fewer when there are many key blocks, so its bounds
// (rows × blocks floats) stay within 4 Mi floats whatever N and the block size.
// (No ranking when every block is taken exactly: K >= nb.)
int64_t blocks_per_group(const Hierarchical& a) {
  int64_t max_block = 1;
  for (int64_t c = 0; c < a.nb; ++c) max_block = std::max(max_block, a.block_rows(c));
  if (a.K >= a.nb) return 1;
  const int64_t rows_cap = std::min<int64_t>(1024, (int64_t(1) << 22) / a.nb);
  return std::clamp<int64_t>(rows_cap / max_block, 1, a.nb);
}

// Row i of qs: [q⁺_i | q⁻_i] (dt) of Q's `rows` rows. In bf16, q⁺ and q⁻ are Q's own values split
// by their sign bit: exact.
void split_signs(const std::byte* Q, int64_t rows, int64_t hd, DType dt, std::byte* qs) {
  if (dt == DType::bf16) {
    const auto* q16 = reinterpret_cast<const uint16_t*>(Q);
    auto* s16 = reinterpret_cast<uint16_t*>(qs);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < hd; ++j) {
        const uint16_t x = q16[i * hd + j];
        const bool neg = x & 0x8000u;
        s16[i * 2 * hd + j] = neg ? uint16_t(0) : x, s16[i * 2 * hd + hd + j] = neg ? x : uint16_t(0);
      }
  } else {
    const auto* q32 = reinterpret_cast<const float*>(Q);
    auto* s32 = reinterpret_cast<float*>(qs);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < hd; ++j) {
        const float x = q32[i * hd + j];
        s32[i * 2 * hd + j] = std::max(x, 0.0f), s32[i * 2 * hd + hd + j] = std::min(x, 0.0f);
      }
  }
}

// b.score[(c − c0)·nb + k]: how much any query of query block c (of c0..c1, head h) could attend
// to key block k.
// Per query i and block c, an upper bound of its scores from the block's per-dimension key
// bounds (Quest, Tang et al. 2024): u_ic = Σ_j max(q_ij·kmax_cj, q_ij·kmin_cj) =
// q⁺_i·kmax_c + q⁻_i·kmin_c; p_i = softmax_c(u_ic·scale + log n_c) is where query i could put
// its attention, and a key block scores the most any query of the query block could give it:
// score_c = max_i p_ic. A block's mean key (the ranking before) hides one key a query attends
// to sharply; the bound does not (measured: bench/attention_bench.py, docs/explanation/encoder.md).
// The bounds are one GEMM over all the group's rows, Uᵀ = [kmax | kmin]·[q⁺ | q⁻]ᵀ (k = 2·hd,
// in dt): per query block, the 2 × heads × blocks small GEMM calls cost more than their
// arithmetic (~0.13 s of an N=4096 bf16 encode on Zen 5); two GEMMs of k = hd (one
// accumulating) cost more than one of 2·hd; and in f32 this GEMM took ~50 ms of a Zen 4's
// N=4096 hierarchical:8:64 bf16 encode (bench/results/attention/).
void rank_blocks(const Hierarchical& a, int h, int64_t c0, int64_t c1, TaskBuffers& b) {
  const int64_t hd = a.hd, nb = a.nb;
  const size_t es = a.es;
  const DType dt = a.dt;
  const HierarchicalPlan& plan = a.plan;
  const int64_t r0 = plan.block_start[c0], rows = plan.block_start[c1] - r0;
  // Both halves of u in one GEMM: the bf16 GEMM (f32 accumulation) computes the f32 one's
  // products at twice its rate, as kbound is exact too.
  b.Kt->ensure(size_t(rows * 2 * hd) * es);  // the AMX packing's buffer, free until block_attention
  std::byte* qs = b.Kt->get();
  split_signs(a.Qh + size_t((h * a.T + r0) * hd) * es, rows, hd, dt, qs);
  // Uᵀ[block k][query i], so the softmax over blocks runs down the columns: every step is a
  // row operation over the group's queries (one call per block, not one per query).
  b.S->ensure(size_t(rows * nb) * 4);
  float* Ut = b.S->as<float>();
  GemmArgs ub{};
  ub.a = a.ws.kbound.get() + size_t(h * nb * 2 * hd) * es, ub.lda = 2 * hd, ub.a_dt = dt;
  ub.w = qs, ub.ldw = 2 * hd, ub.w_dt = dt;
  ub.c = Ut, ub.ldc = rows, ub.c_dt = DType::f32;
  ub.m = nb, ub.n = rows, ub.k = 2 * hd;
  linear(a.ex, ub);
  // z = u·scale + log n_k; m[i] = max_k z; then z = exp(z − m), l[i] = Σ_k z.
  b.m.assign(size_t(rows), -INFINITY);
  b.l.assign(size_t(rows), 0.0f);
  float* mx = b.m.data();
  float* l = b.l.data();
  for (int64_t k = 0; k < nb; ++k) {
    float* z = Ut + k * rows;
    const float lc = a.log_count[size_t(k)];
    for (int64_t i = 0; i < rows; ++i) z[i] = z[i] * a.scale + lc, mx[i] = std::max(mx[i], z[i]);
  }
  for (int64_t k = 0; k < nb; ++k) {
    if (a.ex.reference) exp_shift_sum_row_ref(Ut + k * rows, mx, l, rows);
    else exp_shift_sum_row(Ut + k * rows, mx, l, rows);
  }
  for (int64_t i = 0; i < rows; ++i) l[i] = 1.0f / l[i];
  // score_c[k] = max over query block c's queries of p_ik. Non-finite activations give NaN
  // here: such a score becomes 0, so the ranking below always compares numbers.
  for (int64_t c = c0; c < c1; ++c) {
    float* sc = b.score.data() + (c - c0) * nb;
    const int64_t i0 = plan.block_start[c] - r0, n = a.block_rows(c);
    for (int64_t k = 0; k < nb; ++k) {
      const float v = a.ex.reference ? max_product_row_ref(Ut + k * rows + i0, l + i0, n)
                                     : max_product_row(Ut + k * rows + i0, l + i0, n);
      sc[k] = v >= 0.0f ? v : 0.0f;
    }
  }
}

// b.pick: the K best-scoring key blocks, then the others, each part in ascending block order
// (contiguous reads).
void pick_blocks(const Hierarchical& a, const float* score, TaskBuffers& b) {
  b.pick.resize(size_t(a.nb));
  std::iota(b.pick.begin(), b.pick.end(), 0);
  if (a.K < a.nb)
    std::nth_element(b.pick.begin(), b.pick.begin() + a.K, b.pick.end(),
                     [&](int32_t x, int32_t y) { return score[x] > score[y] || (score[x] == score[y] && x < y); });
  std::sort(b.pick.begin(), b.pick.begin() + a.K);
  std::sort(b.pick.begin() + a.K, b.pick.end());
}

// Head h's key list for the picked blocks, in b.Kg and b.Vg (or b.vrows) with the pooled rows'
// log counts in b.bias: global rows, the top-K blocks' rows, then one pooled row per other
// block. Returns the list's length; n_exact: its rows before the pooled ones.
int64_t gather_keys(const Hierarchical& a, int h, TaskBuffers& b, int64_t& n_exact) {
  const int64_t hd = a.hd, nb = a.nb, G = a.G, K = a.K;
  const size_t es = a.es, row_bytes = a.row_bytes;
  const HierarchicalPlan& plan = a.plan;
  const std::byte* Kall = a.Kh + size_t(h * a.T * hd) * es;
  const std::byte* Vall = a.Vh + size_t(h * a.T * hd) * es;
  int64_t rows = G;
  for (int64_t i = 0; i < K; ++i) rows += a.block_rows(b.pick[i]);
  n_exact = rows;
  const int64_t nk = rows + (nb - K);
  // Where the kernel packs V itself, it packs the value rows from where they lie (no V
  // copy); K is copied, as the kernels read it dense.
  b.Kg->ensure(size_t(nk) * row_bytes);
  if (a.vrows) b.vrows.resize(size_t(nk));
  else b.Vg->ensure(size_t(nk) * row_bytes);
  std::byte* kg = b.Kg->get();
  std::byte* vg = a.vrows ? nullptr : b.Vg->get();
  auto values = [&](int64_t at, const std::byte* src, int64_t n) {
    if (a.vrows)
      for (int64_t j = 0; j < n; ++j)
        b.vrows[size_t(at + j)] = reinterpret_cast<const uint16_t*>(src + size_t(j) * row_bytes);
    else
      std::memcpy(vg + size_t(at) * row_bytes, src, size_t(n) * row_bytes);
  };
  std::memcpy(kg, Kall, size_t(G) * row_bytes), values(0, Vall, G);
  int64_t at = G;
  for (int64_t i = 0; i < K; ++i) {
    const int64_t s0 = plan.block_start[b.pick[i]], n = plan.block_start[b.pick[i] + 1] - s0;
    std::memcpy(kg + size_t(at) * row_bytes, Kall + size_t(s0) * row_bytes, size_t(n) * row_bytes);
    values(at, Vall + size_t(s0) * row_bytes, n);
    at += n;
  }
  b.bias.resize(size_t(nk));
  const std::byte* kp = a.ws.kp.get() + size_t(h * nb * hd) * es;
  const std::byte* vp = a.ws.vp.get() + size_t(h * nb * hd) * es;
  for (int64_t i = K; i < nb; ++i, ++at) {
    std::memcpy(kg + size_t(at) * row_bytes, kp + size_t(b.pick[i]) * row_bytes, row_bytes);
    values(at, vp + size_t(b.pick[i]) * row_bytes, 1);
    b.bias[size_t(at)] = a.log_count[b.pick[i]];
  }
  return nk;
}

// Head h's global query rows (the class token): exact over all keys.
void attend_global(const Hierarchical& a, int h, TaskBuffers& b) {
  const int64_t hd = a.hd, G = a.G;
  const size_t head = size_t(h * a.T * hd) * a.es;
  b.O->ensure(size_t(G * hd) * 4);
  block_attention(a.ex, a.Qh + head, G, a.Kh + head, a.Vh + head, nullptr, 0, a.T, hd, a.scale, a.dt, b,
                  b.O->as<float>());
  write_rows(b.O->as<float>(), G, hd, h, a.D, a.dt, a.perm, 0, a.out);
}

// Head h's query blocks of group g: ranked, then each attends to its picked key list.
void attend_group(const Hierarchical& a, int h, int64_t g, TaskBuffers& b) {
  const int64_t hd = a.hd, nb = a.nb, K = a.K, T = a.T;
  const size_t es = a.es;
  const HierarchicalPlan& plan = a.plan;
  const std::byte* Kall = a.Kh + size_t(h * T * hd) * es;
  const std::byte* Vall = a.Vh + size_t(h * T * hd) * es;
  const int64_t c0 = g * a.bpg, c1 = std::min(nb, c0 + a.bpg);
  b.score.assign(size_t((c1 - c0) * nb), 0.0f);
  if (K < nb) rank_blocks(a, h, c0, c1, b);
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t q0 = plan.block_start[c], bq = plan.block_start[c + 1] - q0;
    const std::byte* Q = a.Qh + size_t((h * T + q0) * hd) * es;
    pick_blocks(a, b.score.data() + (c - c0) * nb, b);
    const std::byte *Kl = Kall, *Vl = Vall;
    int64_t nk = T, n_exact = T;
    if (K < nb) {
      nk = gather_keys(a, h, b, n_exact);
      Kl = b.Kg->get(), Vl = a.vrows ? nullptr : b.Vg->get();
    }
    b.O->ensure(size_t(bq * hd) * 4);
    block_attention(a.ex, Q, bq, Kl, Vl, b.bias.data(), n_exact, nk, hd, a.scale, a.dt, b, b.O->as<float>(),
                    a.vrows && K < nb ? b.vrows.data() : nullptr);
    write_rows(b.O->as<float>(), bq, hd, h, a.D, a.dt, a.perm, q0, a.out);
  }
}

void hierarchical(const AttentionExec& ex, const HierarchicalPlan& plan, const std::byte* qkv_q, int64_t ldq,
                  const std::byte* kv, int64_t ldkv, int64_t T, int64_t D, int heads, DType dt, std::byte* out,
                  AttentionWorkspace& ws) {
  Hierarchical a(ex, plan, T, D, heads, dt, out, ws);
  const int64_t hd = a.hd;
  const size_t es = a.es;
  ws.q.ensure(size_t(T * D) * es), ws.k.ensure(size_t(T * D) * es), ws.v.ensure(size_t(T * D) * es);
  head_major(ex, qkv_q, ldq, T, heads, hd, dt, a.perm, ws.q.get());
  head_major(ex, kv, ldkv, T, heads, hd, dt, a.perm, ws.k.get());
  head_major(ex, kv + size_t(D) * es, ldkv, T, heads, hd, dt, a.perm, ws.v.get());
  a.Qh = ws.q.get(), a.Kh = ws.k.get(), a.Vh = ws.v.get();
  pool_blocks(a);
  a.K = std::min<int64_t>(plan.top_k, a.nb);
  a.bpg = blocks_per_group(a);
  a.vrows = packs_values(ex, dt, hd);
  const int64_t groups = (a.nb + a.bpg - 1) / a.bpg;
  const int64_t per_head = groups + (a.G > 0 ? 1 : 0);
  parallel_tasks(ex, ws, per_head * heads, [&](int64_t task, TaskBuffers& b) {
    const int h = int(task / per_head);
    const int64_t g = task % per_head - (a.G > 0 ? 1 : 0);
    if (g < 0) attend_global(a, h, b);
    else attend_group(a, h, g, b);
  });
}

// Interleaves the low 16 bits of x and y (x in the even bits).
uint32_t morton(uint32_t x, uint32_t y) {
  auto spread = [](uint32_t v) {
    v &= 0xffff;
    v = (v | (v << 8)) & 0x00ff00ff;
    v = (v | (v << 4)) & 0x0f0f0f0f;
    v = (v | (v << 2)) & 0x33333333;
    v = (v | (v << 1)) & 0x55555555;
    return v;
  };
  return spread(x) | (spread(y) << 1);
}

}  // namespace

HierarchicalPlan plan_hierarchical(const AttentionParams& params, int64_t n_global, const float* pos,
                                   int64_t pos_stride, int64_t n) {
  if (params.top_k < 1 || params.block_tokens < 1)
    throw Error(Errc::invalid_argument, "hierarchical attention: top_k and block_tokens must be >= 1");
  HierarchicalPlan plan;
  plan.top_k = params.top_k;
  plan.n_global = n_global;
  float x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float x = pos[i * pos_stride], y = pos[i * pos_stride + 1];
    x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  }
  // One scale for both axes: quadtree cells stay square on a non-square image.
  const double extent = std::max({double(x1 - x0), double(y1 - y0), 1e-6});
  std::vector<std::pair<uint32_t, int32_t>> keys(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = (pos[i * pos_stride] - x0) / extent, v = (pos[i * pos_stride + 1] - y0) / extent;
    keys[size_t(i)] = {morton(uint32_t(std::lround(u * 65535.0)), uint32_t(std::lround(v * 65535.0))), int32_t(i)};
  }
  std::sort(keys.begin(), keys.end());
  plan.order.resize(size_t(n_global + n));
  for (int64_t g = 0; g < n_global; ++g) plan.order[size_t(g)] = int32_t(g);
  for (int64_t i = 0; i < n; ++i) plan.order[size_t(n_global + i)] = int32_t(n_global + keys[size_t(i)].second);
  // Blocks of B consecutive tokens; the remainder spread so no block is a sliver.
  const int64_t B = params.block_tokens, nb = std::max<int64_t>(1, (n + B - 1) / B);
  for (int64_t c = 0; c <= nb; ++c) plan.block_start.push_back(n_global + (n * c) / nb);
  return plan;
}

void attention_rows(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r, const std::byte* kv,
                    int64_t ldkv, int64_t T, int64_t D, int heads, DType dt, std::byte* out,
                    const HierarchicalPlan* plan, AttentionWorkspace* ws) {
  if (r == 0 || T == 0) return;
  AttentionWorkspace local;
  AttentionWorkspace& w = ws ? *ws : local;
  if (!ex.reference && !ex.gemm) throw Error(Errc::internal, "attention: no GEMM engine");
  if (plan) {
    if (r != T || int64_t(plan->order.size()) != T)
      throw Error(Errc::internal, "hierarchical attention: the plan does not match the rows");
    hierarchical(ex, *plan, q, ldq, kv, ldkv, T, D, heads, dt, out, w);
  } else {
    exact(ex, q, ldq, r, kv, ldkv, T, D, heads, dt, out, w);
  }
}

void attention_rows_kv_head_major(const AttentionExec& ex, const std::byte* q, int64_t ldq, int64_t r,
                                  const std::byte* k, const std::byte* v, int64_t T, int64_t D, int heads, DType dt,
                                  std::byte* out, AttentionWorkspace* ws) {
  if (r == 0 || T == 0) return;
  AttentionWorkspace local;
  if (!ex.reference && !ex.gemm) throw Error(Errc::internal, "attention: no GEMM engine");
  exact_kv(ex, q, ldq, r, k, v, T, D, heads, dt, out, ws ? *ws : local);
}

}  // namespace encoder_detail
}  // namespace fovea
