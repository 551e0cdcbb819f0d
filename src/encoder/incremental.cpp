// The incremental ViT (fovea/incremental_encoder.hpp): patch-embedding reuse (exact) and
// Eventful-Transformers token gating per layer (approximate).
//
// One layer for the set R of recomputed tokens (R = all tokens on a full pass):
//   XR = x[R]; H = LN1(XR); QKV_R = H·Wqkvᵀ; K, V of R written into the layer's K|V cache;
//   A_R = softmax(Q_R·Kᵀ/√d)·V over every token's keys and values (attention.cpp, as forward.cpp);
//   XR += A_R·Woᵀ; XR += MLP(LN2(XR)); x_out[R] = XR, x_out[¬R] = the cached outputs.
// The schedule follows forward.cpp: every GEMM through oneDNN (encoder_detail::Gemm) with
// bias, GELU and residual fused, row kernels for LayerNorm and softmax; the small helpers
// (positional interpolation, the linear-layer arguments) are the same arithmetic as there.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "encoder/attention.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"
#include "fovea/incremental_encoder.hpp"

namespace fovea {

using namespace encoder_detail;

namespace {

Error bad(const std::string& m) { return Error(Errc::invalid_argument, m); }
constexpr int64_t kRowBucket = 16;
size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }

// A growable 64-byte aligned scratch buffer.
struct Buf {
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

struct Ops {
  bool ref = false;
  int threads = 1;
  Gemm* gemm = nullptr;
  void linear(const GemmArgs& a) const {
    if (ref) gemm_reference(a);
    else gemm->run(a);
  }
  void layer_norm(const float* x, int64_t rows, int64_t n, const Tensor& w, const Tensor& b, float eps, void* out,
                  DType out_dt) const {
    const float* pw = w.data<float>();
    const float* pb = b.data<float>();
    const size_t es = esize(out_dt);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      void* o = static_cast<std::byte*>(out) + size_t(r * n) * es;
      if (ref) layer_norm_row_ref(x + r * n, pw, pb, eps, n, o, out_dt);
      else layer_norm_row(x + r * n, pw, pb, eps, n, o, out_dt);
    }
  }
};

// PyTorch's cubic convolution (A = −0.75), taps clamped: as forward.cpp.
void cubic_weights(float t, float w[4]) {
  constexpr float A = -0.75f;
  auto c1 = [](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto c2 = [](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  w[0] = c2(t + 1);
  w[1] = c1(t);
  w[2] = c1(1 - t);
  w[3] = c2(2 - t);
}
void add_bicubic(const float* grid, int G, int64_t D, double u, double v, float* out) {
  const double fu = std::floor(u), fv = std::floor(v);
  float wx[4], wy[4];
  cubic_weights(float(u - fu), wx);
  cubic_weights(float(v - fv), wy);
  const int ix = int(fu), iy = int(fv);
  auto clampi = [G](int i) { return i < 0 ? 0 : (i >= G ? G - 1 : i); };
  for (int j = 0; j < 4; ++j) {
    const int y = clampi(iy - 1 + j);
    const float* r[4];
    for (int i = 0; i < 4; ++i) r[i] = grid + (int64_t(y) * G + clampi(ix - 1 + i)) * D;
    for (int64_t d = 0; d < D; ++d)
      out[d] += wy[j] * (r[0][d] * wx[0] + r[1][d] * wx[1] + r[2][d] * wx[2] + r[3][d] * wx[3]);
  }
}

// Per-layer cache, rows in token order (class token first when the model has one).
struct LayerCache {
  Tensor ref_in;  // [T, D] f32: each token's input when it was last recomputed
  Tensor kv;      // [T, 2D] dt: K | V
  Tensor out;     // [T, D] f32: the layer's output
};

}  // namespace

struct IncrementalEncoder::State {
  VitModel model;
  bool valid = false;
  bool layers_valid = false;
  int64_t n = 0;  // patch tokens of the previous call
  int width = 0, height = 0;
  Precision precision = Precision::fp32;
  Tensor patch_emb;  // [n, D] f32, before positions
  std::vector<LayerCache> layers;  // the previous call's
  std::vector<LayerCache> next;    // this call's (swapped with layers at the end: no allocation per frame)
  Buf XR, H, QKV, A, Hm, Pt;
  explicit State(const VitModel& m) : model(m) {}
};

IncrementalEncoder::IncrementalEncoder(const VitModel& model) : s_(std::make_unique<State>(model)) {}
IncrementalEncoder::~IncrementalEncoder() = default;
void IncrementalEncoder::reset() {
  s_->valid = false;
  s_->layers_valid = false;
  s_->patch_emb = Tensor();
  s_->n = 0;
}

IncrementalResult IncrementalEncoder::encode(const Tensor& patches, const Tensor& positions,
                                             std::span<const int64_t> prev_row, std::span<const uint8_t> patch_dirty,
                                             const IncrementalParams& params, Executor& exec) {
  const auto t_start = std::chrono::steady_clock::now();
  State& st = *s_;
  VitModel::Impl& m = const_cast<VitModel::Impl&>(st.model.impl());
  const VitConfig& c = m.config;
  // ---- validate ---------------------------------------------------------------------------
  if (patches.rank() != 4 || patches.dim(0) < 1) throw bad("incremental encode: patches must be [N, C, P, P], N >= 1");
  if (patches.dtype() != DType::f32 && patches.dtype() != DType::f16)
    throw bad("incremental encode: patches must be float32 or float16, normalised as the model expects");
  if (patches.dim(1) != c.channels || patches.dim(2) != c.patch_px || patches.dim(3) != c.patch_px)
    throw bad("incremental encode: patches are not " + std::to_string(c.channels) + "x" + std::to_string(c.patch_px) +
              "x" + std::to_string(c.patch_px) + " as the model takes");
  const int64_t N = patches.dim(0);
  if (positions.dtype() != DType::f32 || positions.rank() != 2 || positions.dim(0) != N || positions.dim(1) < 2)
    throw bad("incremental encode: positions must be [N, 4] float32 with N = " + std::to_string(N));
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, "incremental encode: more than 2^20 tokens");
  if (params.image_width < 1 || params.image_height < 1) throw bad("incremental encode: the image size must be positive");
  if (!(params.token_threshold >= 0)) throw bad("incremental encode: the token threshold must be >= 0");
  if (!prev_row.empty() && int64_t(prev_row.size()) != N) throw bad("incremental encode: prev_row must have N entries");
  if (!patch_dirty.empty() && int64_t(patch_dirty.size()) != N)
    throw bad("incremental encode: patch_dirty must have N entries");
  const float* pos = positions.data<float>();
  for (int64_t i = 0; i < N; ++i)
    if (!std::isfinite(pos[i * positions.dim(1)]) || !std::isfinite(pos[i * positions.dim(1) + 1]))
      throw bad("incremental encode: token " + std::to_string(i) + " has a non-finite position");

  if (st.valid && (st.width != params.image_width || st.height != params.image_height ||
                   st.precision != params.precision))
    reset();
  const bool have_prev = st.valid && !prev_row.empty();
  if (have_prev) {
    std::vector<uint8_t> used(size_t(st.n), 0);
    for (int64_t i = 0; i < N; ++i) {
      const int64_t p = prev_row[size_t(i)];
      if (p < -1 || p >= st.n) throw bad("incremental encode: prev_row[" + std::to_string(i) + "] is out of range");
      if (p >= 0 && used[size_t(p)]++) throw bad("incremental encode: previous row " + std::to_string(p) + " used twice");
    }
  }

  std::lock_guard<std::mutex> lock(m.mutex);
  Ops ops;
  ops.ref = exec.reference();
  ops.threads = std::max(1, exec.threads());
  const OmpThreadsScope team(ops.threads);  // oneDNN's team size, the caller's restored on return
  if (!ops.ref && !m.gemm) m.gemm = std::make_unique<Gemm>();
  if (m.gemm) m.gemm->reserve_threads(ops.threads);
  ops.gemm = m.gemm.get();
  const bool bf16 = params.precision == Precision::bf16;
  const DType dt = bf16 ? DType::bf16 : DType::f32;
  const size_t es = esize(dt);
  const int64_t D = c.hidden, Mh = c.mlp, cls = c.class_token ? 1 : 0, T = N + cls;
  const int64_t K = int64_t(c.channels) * c.patch_px * c.patch_px;

  IncrementalResult res;
  res.recomputed.assign(size_t(N), 0);

  // ---- patch embeddings: only new or changed patches go through the GEMM ------------------
  Tensor emb(DType::f32, {N, D});
  {
    std::vector<int64_t> todo;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t p = have_prev ? prev_row[size_t(i)] : -1;
      const bool dirty = p < 0 || (!patch_dirty.empty() && patch_dirty[size_t(i)]);
      if (dirty) todo.push_back(i), res.recomputed[size_t(i)] = 1;
      else std::memcpy(emb.data<float>() + i * D, st.patch_emb.data<float>() + p * D, size_t(D) * 4);
    }
    const int64_t r = int64_t(todo.size());
    res.patch_embeddings_computed = r;
    if (r > 0) {
      const int64_t rmax = have_prev ? std::min<int64_t>(N, (r + kRowBucket - 1) / kRowBucket * kRowBucket) : r;
      st.Pt.ensure(size_t(rmax * K) * 4);
      float* src = st.Pt.as<float>();
      for (int64_t j = 0; j < r; ++j) {
        const int64_t i = todo[size_t(j)];
        if (patches.dtype() == DType::f32) {
          std::memcpy(src + j * K, patches.data<float>() + i * K, size_t(K) * 4);
        } else {
          const uint16_t* h = patches.data<uint16_t>() + i * K;
          for (int64_t k = 0; k < K; ++k) src[j * K + k] = f16_to_f32(h[k]);
        }
      }
      const int64_t rg = have_prev ? std::min<int64_t>(N, (r + kRowBucket - 1) / kRowBucket * kRowBucket) : r;
      if (rg > r) {  // bucketed rows, as in the layers below
        st.Pt.ensure(size_t(rg * K) * 4);
        src = st.Pt.as<float>();
        std::memset(src + r * K, 0, size_t((rg - r) * K) * 4);
      }
      st.XR.ensure(size_t(rg * D) * 4);
      ops.linear(linear_args(src, DType::f32, rg, m.patch_w, &m.patch_b, st.XR.get(), DType::f32));
      for (int64_t j = 0; j < r; ++j)
        std::memcpy(emb.data<float>() + todo[size_t(j)] * D, st.XR.as<float>() + j * D, size_t(D) * 4);
    }
  }

  // ---- layer-0 input: embeddings + interpolated positions (+ class token, pre-norm) ---------
  Tensor x(DType::f32, {T, D});
  float* xp = x.data<float>();
  std::memcpy(xp + cls * D, emb.data<float>(), size_t(N * D) * 4);
  if (cls) {
    const float* ce = m.class_emb.data<float>();
    const float* cp = m.class_pos.data<float>();
    for (int64_t d = 0; d < D; ++d) xp[d] = ce[d] + cp[d];
  }
  {
    const float* grid = m.pos_grid.data<float>();
    const int G = c.grid;
    const double sx = double(G) / params.image_width, sy = double(G) / params.image_height;
    const int64_t pst = positions.dim(1);
#pragma omp parallel for num_threads(ops.threads) schedule(static)
    for (int64_t i = 0; i < N; ++i)
      add_bicubic(grid, G, D, pos[i * pst] * sx - 0.5, pos[i * pst + 1] * sy - 0.5, xp + (cls + i) * D);
  }
  if (c.pre_norm) ops.layer_norm(xp, T, D, m.pre_w, m.pre_b, c.ln_eps, xp, DType::f32);

  // Row t of this call ↔ row prev_t[t] of the cache (-1: none).
  std::vector<int64_t> prev_t(size_t(T), -1);
  const bool gate = have_prev && params.reuse_layers && st.layers_valid && st.layers.size() == m.layers.size();
  if (gate) {
    if (cls) prev_t[0] = 0;
    for (int64_t i = 0; i < N; ++i)
      if (prev_row[size_t(i)] >= 0) prev_t[size_t(cls + i)] = cls + prev_row[size_t(i)];
  }

  // ---- transformer ------------------------------------------------------------------------
  // When every token keeps its row (the layout did not change), the caches are updated in
  // place and a layer costs O(recomputed tokens); otherwise the kept rows move to new caches.
  bool in_place = gate && st.layers[0].ref_in.dim(0) == T;
  for (int64_t t = 0; in_place && t < T; ++t) in_place = prev_t[size_t(t)] == t;
  st.next.resize(m.layers.size());
  std::vector<int64_t> R;
  R.reserve(size_t(T));
  std::vector<uint8_t> sel(size_t(T), 0);
  double work = 0, full_work = 0;
  const double per_token = double(3 * D * D + D * D + 2 * D * Mh);
  const float* in = xp;  // this layer's input rows [T, D]
  for (int li = 0; li < int(m.layers.size()); ++li) {  // every block encode() runs
    const VitLayer& l = m.layers[size_t(li)];
    LayerCache& nc = in_place ? st.layers[size_t(li)] : st.next[size_t(li)];
    if (nc.ref_in.rank() != 2 || nc.ref_in.dim(0) != T || nc.kv.dtype() != dt) {
      nc.ref_in = Tensor(DType::f32, {T, D});
      nc.kv = Tensor(dt, {T, 2 * D});
      nc.out = Tensor(DType::f32, {T, D});
    }
    // Which tokens to recompute.
    R.clear();
    if (!gate) {
      for (int64_t t = 0; t < T; ++t) R.push_back(t);
    } else {
      const LayerCache& oc = st.layers[size_t(li)];
      const double thr = double(params.token_threshold);
#pragma omp parallel for num_threads(ops.threads) schedule(static)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = prev_t[size_t(t)];
        if (p < 0 || t < cls) {
          sel[size_t(t)] = 1;
          continue;
        }
        const float* a = in + t * D;
        const float* b = oc.ref_in.data<float>() + p * D;
        double dd = 0, bb = 0;
        for (int64_t d = 0; d < D; ++d) {
          const double e = double(a[d]) - b[d];
          dd += e * e, bb += double(b[d]) * b[d];
        }
        sel[size_t(t)] = dd > thr * thr * bb ? 1 : 0;
        if (!sel[size_t(t)] && !in_place) {  // kept: carry the reference, K|V and output over
          std::memcpy(nc.ref_in.data<float>() + t * D, b, size_t(D) * 4);
          std::memcpy(nc.kv.bytes() + size_t(t * 2 * D) * es, oc.kv.bytes() + size_t(p * 2 * D) * es,
                      size_t(2 * D) * es);
          std::memcpy(nc.out.data<float>() + t * D, oc.out.data<float>() + p * D, size_t(D) * 4);
        }
      }
      for (int64_t t = 0; t < T; ++t)
        if (sel[size_t(t)]) R.push_back(t);
    }
    const int64_t r = int64_t(R.size());
    for (int64_t t : R)
      if (t >= cls) res.recomputed[size_t(t - cls)] = 1;
    res.layer_tokens.push_back(r - std::min<int64_t>(cls, r));
    work += double(r) * per_token + 4.0 * double(r) * T * D;
    full_work += double(T) * per_token + 4.0 * double(T) * T * D;

    if (r > 0) {
      // The GEMMs run on rg >= r rows, r rounded up to a bucket, zero rows as padding: oneDNN
      // primitives are made (and cached) per shape, and a new shape every frame would cost
      // more than the padding rows' arithmetic.
      const int64_t rg = gate ? std::min<int64_t>(T, (r + kRowBucket - 1) / kRowBucket * kRowBucket) : r;
      st.XR.ensure(size_t(rg * D) * 4), st.H.ensure(size_t(rg * D) * es), st.QKV.ensure(size_t(rg * 3 * D) * es);
      st.A.ensure(size_t(rg * D) * es), st.Hm.ensure(size_t(rg * Mh) * es);
      float* xr = st.XR.as<float>();
      for (int64_t j = 0; j < r; ++j) {
        std::memcpy(xr + j * D, in + R[size_t(j)] * D, size_t(D) * 4);
        std::memcpy(nc.ref_in.data<float>() + R[size_t(j)] * D, in + R[size_t(j)] * D, size_t(D) * 4);
      }
      if (rg > r) std::memset(xr + r * D, 0, size_t((rg - r) * D) * 4);
      ops.layer_norm(xr, rg, D, l.ln1_w, l.ln1_b, c.ln_eps, st.H.get(), dt);
      ops.linear(linear_args(st.H.get(), dt, rg, l.qkv_w, &l.qkv_b, st.QKV.get(), dt));
      for (int64_t j = 0; j < r; ++j)
        std::memcpy(nc.kv.bytes() + size_t(R[size_t(j)] * 2 * D) * es, st.QKV.get() + size_t(j * 3 * D + D) * es,
                    size_t(2 * D) * es);
      attention_rows({ops.ref, ops.threads, ops.gemm}, st.QKV.get(), 3 * D, rg, nc.kv.bytes(), 2 * D, T, D, c.heads, dt,
                     st.A.get());
      GemmArgs o = linear_args(st.A.get(), dt, rg, l.out_w, &l.out_b, xr, DType::f32);
      o.accumulate = true;
      ops.linear(o);
      ops.layer_norm(xr, rg, D, l.ln2_w, l.ln2_b, c.ln_eps, st.H.get(), dt);
      GemmArgs f1 = linear_args(st.H.get(), dt, rg, l.fc1_w, &l.fc1_b, st.Hm.get(), dt);
      f1.post = post_for(c.act);
      ops.linear(f1);
      GemmArgs f2 = linear_args(st.Hm.get(), dt, rg, l.fc2_w, &l.fc2_b, xr, DType::f32);
      f2.accumulate = true;
      ops.linear(f2);
      for (int64_t j = 0; j < r; ++j) std::memcpy(nc.out.data<float>() + R[size_t(j)] * D, xr + j * D, size_t(D) * 4);
    }
    in = nc.out.data<float>();  // the next layer's input
  }
  res.approximate = gate;
  res.flops_fraction = full_work > 0 ? work / full_work : 1;

  // ---- output -----------------------------------------------------------------------------
  res.embeddings = Tensor(DType::f32, {N, D});
  if (c.final_norm == FinalNorm::all_tokens)
    ops.layer_norm(in + cls * D, N, D, m.post_w, m.post_b, c.ln_eps, res.embeddings.data<float>(), DType::f32);
  else
    std::memcpy(res.embeddings.bytes(), in + cls * D, size_t(N * D) * 4);

  // ---- keep the state ---------------------------------------------------------------------
  st.patch_emb = std::move(emb);
  if (!in_place) std::swap(st.layers, st.next);
  st.layers_valid = params.reuse_layers;  // an exact call's caches are not kept up to date for gating
  st.n = N;
  st.width = params.image_width, st.height = params.image_height;
  st.precision = params.precision;
  st.valid = true;
  res.encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  return res;
}

}  // namespace fovea
