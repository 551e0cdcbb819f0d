// The incremental ViT (fovea/incremental_encoder.hpp): patch-embedding reuse (exact) and
// Eventful-Transformers token gating per layer (approximate).
//
// One layer for the set R of recomputed tokens (R = all tokens on a full pass):
//   XR = x[R]; H = LN1(XR); QKV_R = H·Wqkvᵀ; K, V of R written into the layer's K|V cache;
//   A_R = softmax(Q_R·Kᵀ/√d)·V over every token's keys and values (flash-style, as forward.cpp);
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

using Buf = ScratchBuf;

using Ops = LayerOps;

// Per-layer cache, rows in token order (class token first when the model has one).
struct LayerCache {
  Tensor ref_in;  // [T, D] f32: each token's input when it was last recomputed (the reference)
  // [2, heads, T, hd] dt: K and V as of that recomputation, head-major (attention reads them
  // as they are; a recomputed row is written in `heads` pieces).
  Tensor kv;
};

int64_t round_up(int64_t r, int64_t b) { return (r + b - 1) / b * b; }

// Shapes one frame must have for the model; returns N.
int64_t check_frame(const IncrementalFrame& f, const VitConfig& c, const std::string& what) {
  if (!f.patches || !f.positions) throw bad(what + ": patches and positions are required");
  const Tensor& patches = *f.patches;
  const Tensor& positions = *f.positions;
  if (patches.rank() != 4 || patches.dim(0) < 1) throw bad(what + ": patches must be [N, C, P, P], N >= 1");
  if (patches.dtype() != DType::f32 && patches.dtype() != DType::f16)
    throw bad(what + ": patches must be float32 or float16, normalised as the model expects");
  if (patches.dim(1) != c.channels || patches.dim(2) != c.patch_px || patches.dim(3) != c.patch_px)
    throw bad(what + ": patches are not " + std::to_string(c.channels) + "x" + std::to_string(c.patch_px) + "x" +
              std::to_string(c.patch_px) + " as the model takes");
  const int64_t N = patches.dim(0);
  if (positions.dtype() != DType::f32 || positions.rank() != 2 || positions.dim(0) != N || positions.dim(1) < 2)
    throw bad(what + ": positions must be [N, 4] float32 with N = " + std::to_string(N));
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, what + ": more than 2^20 tokens");
  if (!f.prev_row.empty() && int64_t(f.prev_row.size()) != N) throw bad(what + ": prev_row must have N entries");
  if (!f.patch_dirty.empty() && int64_t(f.patch_dirty.size()) != N)
    throw bad(what + ": patch_dirty must have N entries");
  const float* pos = positions.data<float>();
  for (int64_t i = 0; i < N; ++i)
    if (!std::isfinite(pos[i * positions.dim(1)]) || !std::isfinite(pos[i * positions.dim(1) + 1]))
      throw bad(what + ": token " + std::to_string(i) + " has a non-finite position");
  return N;
}

bool is_identity(std::span<const int64_t> prev_row) {
  for (size_t i = 0; i < prev_row.size(); ++i)
    if (prev_row[i] != int64_t(i)) return false;
  return true;
}

// One frame of a run, as the layer loop sees it.
struct FrameWork {
  const IncrementalFrame* in = nullptr;
  IncrementalResult* res = nullptr;
  int64_t N = 0, T = 0;
  bool have_prev = false;        // prev_row refers to a previous frame's rows
  bool gate = false;             // cached layer states may be reused (else every row is recomputed)
  bool remap = false;            // the run's first frame only: the caches move to this frame's rows
  std::vector<int64_t> prev_t;   // [T] when gated: the row in the previous caches, -1 for a new token
  // This layer's candidates: rows whose input may differ from the frame before; their inputs
  // are rows in_off.. of IN. After the selection, the recomputed rows and their place in XR.
  std::vector<int64_t> cand, sel;
  int64_t in_off = 0, xr_off = 0;
  double work = 0, full_work = 0;
};

}  // namespace

struct IncrementalEncoder::State {
  VitModel model;
  EncoderContext ctx;  // the session's own: GEMM primitives, scratchpads, attention buffers
  bool valid = false;
  bool layers_valid = false;
  int64_t n = 0;  // patch tokens of the previous frame
  int width = 0, height = 0;
  Precision precision = Precision::fp32;
  Tensor patch_emb;                // [n, D] f32, before positions
  std::vector<float> centers;      // [n, 2] the previous frame's token centres
  std::vector<LayerCache> layers;  // as the previous frame left them
  LayerCache spare;                // where a layout change moves a layer's rows (then swapped in)
  Tensor fin;                      // [n + pre, D] f32: the last hidden state (final norm applied)
  Tensor fin_proj;                 // [n + pre, E] f32: the projector's output of fin's rows
  Buf IN, XR, H, QKV, A, Hm, Pt;
  State(const VitModel& m, EncoderContext c) : model(m), ctx(std::move(c)) {}
  void run(std::span<const IncrementalFrame> frames, const int64_t* Ns, const IncrementalParams& params,
           const Ops& ops, IncrementalResult* out);
};

// Every frame runs the model: its weights are packed at the first frame, not again at the second.
IncrementalEncoder::IncrementalEncoder(const VitModel& model)
    : IncrementalEncoder(model, EncoderContext(EncoderContextParams{.expect_reuse = true})) {}
IncrementalEncoder::IncrementalEncoder(const VitModel& model, EncoderContext context)
    : s_(std::make_unique<State>(model, std::move(context))) {
  if (model.config().native.enabled())
    throw invalid_argument("incremental encoder: '" + model.source() + "' is a native-resolution tower (encode_native)");
}
IncrementalEncoder::~IncrementalEncoder() = default;
EncoderContext& IncrementalEncoder::context() { return s_->ctx; }
void IncrementalEncoder::reset() {
  s_->valid = false;
  s_->layers_valid = false;
  s_->patch_emb = Tensor();
  s_->n = 0;
}

IncrementalResult IncrementalEncoder::encode(const Tensor& patches, const Tensor& positions,
                                             std::span<const int64_t> prev_row, std::span<const uint8_t> patch_dirty,
                                             const IncrementalParams& params, Executor& exec) {
  const IncrementalFrame f{.patches = &patches, .positions = &positions, .prev_row = prev_row,
                           .patch_dirty = patch_dirty};
  std::vector<IncrementalResult> r = encode_group(std::span<const IncrementalFrame>(&f, 1), params, exec);
  return std::move(r[0]);
}

std::vector<IncrementalResult> IncrementalEncoder::encode_group(std::span<const IncrementalFrame> frames,
                                                                const IncrementalParams& params, Executor& exec) {
  const auto t_start = std::chrono::steady_clock::now();
  State& st = *s_;
  EncoderContext::Impl& cx = st.ctx.impl();
  const ContextUse in_use(cx);  // one call at a time per session; other sessions run alongside
  const VitModel::Impl& m = st.model.impl();
  const VitConfig& c = m.config;
  // ---- validate everything before any state changes ---------------------------------------
  if (frames.empty()) return {};
  if (params.image_width < 1 || params.image_height < 1) throw bad("incremental encode: the image size must be positive");
  if (!(params.token_threshold >= 0)) throw bad("incremental encode: the token threshold must be >= 0");
  const size_t F = frames.size();
  std::vector<int64_t> Ns(F);
  for (size_t f = 0; f < F; ++f)
    Ns[f] = check_frame(frames[f], c,
                        F == 1 ? std::string("incremental encode")
                               : "incremental encode, frame " + std::to_string(f) + " of the group");
  const bool changed = st.valid && (st.width != params.image_width || st.height != params.image_height ||
                                    st.precision != runnable_precision(params.precision));
  {  // prev_row: rows of the frame before (the previous call's for the first), each used once
    bool prev = st.valid && !changed;
    int64_t prev_n = st.n;
    for (size_t f = 0; f < F; ++f) {
      const std::span<const int64_t> pr = frames[f].prev_row;
      if (prev && !pr.empty()) {
        std::vector<uint8_t> used(size_t(prev_n), 0);
        for (size_t i = 0; i < pr.size(); ++i) {
          const int64_t p = pr[i];
          const std::string at = "incremental encode: " + (F > 1 ? "frame " + std::to_string(f) + ": " : std::string());
          if (p < -1 || p >= prev_n) throw bad(at + "prev_row[" + std::to_string(i) + "] is out of range");
          if (p >= 0 && used[size_t(p)]++) throw bad(at + "previous row " + std::to_string(p) + " used twice");
        }
      }
      prev = true;
      prev_n = Ns[f];
    }
  }
  if (changed) reset();

  const OmpThreadsScope team(std::max(1, exec.threads()));  // oneDNN's team size, the caller's restored on return
  const Ops ops = LayerOps::for_context(cx, m, exec);

  // Runs: a frame joins the one before when it reuses the layer caches with the same rows (the
  // layout did not change); a layout change or a frame without reuse starts a new run.
  std::vector<IncrementalResult> out(F);
  try {
    for (size_t a = 0; a < F;) {
      size_t b = a + 1;
      while (b < F && params.reuse_layers && !frames[b].prev_row.empty() && Ns[b] == Ns[b - 1] &&
             is_identity(frames[b].prev_row))
        ++b;
      st.run(frames.subspan(a, b - a), Ns.data() + a, params, ops, out.data() + a);
      st.width = params.image_width, st.height = params.image_height;
      st.precision = runnable_precision(params.precision);
      a = b;
    }
  } catch (...) {
    reset();  // the caches may be half updated: the next call starts from scratch
    throw;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  for (IncrementalResult& r : out) r.encode_ms = ms / double(F);
  return out;
}

// One run of frames, layer-major. Frame f at layer l needs only its own layer-l inputs and the
// layer-l caches as frame f−1 left them, so each layer handles the whole run before the next:
//   1. per frame in order, the candidates are compared with the references (which the frame
//      then updates for the rows it recomputes);
//   2. the recomputed rows of every frame go through one LayerNorm + QKV GEMM;
//   3. per frame in order, its K|V rows are written into the cache and its rows attend to
//      the cache (every token's keys and values as of this frame);
//   4. one output-projection GEMM and one MLP over every frame's rows.
// A token's layer input can only differ from the frame before when the token was recomputed
// in the layer below (or is new, or its patch or place changed): otherwise it is the cached
// output, bit for bit, and the comparison would give the same answer as the frame before (a
// token recomputed then has a reference equal to its input). So only those candidates are
// compared, and their inputs are exactly the rows the layer below computed. The results equal
// running the frames one by one; only the row counts of the GEMMs differ.
void IncrementalEncoder::State::run(std::span<const IncrementalFrame> frames, const int64_t* Ns,
                                    const IncrementalParams& params, const Ops& ops, IncrementalResult* out) {
  const VitModel::Impl& m = model.impl();
  const VitConfig& c = m.config;
  if (!ctx.impl().attention_ws) ctx.impl().attention_ws = std::make_shared<AttentionWorkspace>();
  AttentionWorkspace& attn_ws = *ctx.impl().attention_ws;  // reused by every layer and frame
  const bool bf16 = runnable_precision(params.precision) == Precision::bf16;  // bf16 needs bf16 kernels
  const DType dt = bf16 ? DType::bf16 : DType::f32;
  const size_t es = esize(dt);
  const int64_t D = c.hidden, Mh = c.mlp, pre = prefix_tokens(c), hd = D / c.heads;
  const int64_t K = int64_t(c.channels) * c.patch_px * c.patch_px;
  const size_t L = m.layers.size();
  const size_t F = frames.size();
  const size_t rowb = size_t(D) * 4;

  // ---- the frames' roles --------------------------------------------------------------------
  std::vector<FrameWork> fw(F);
  for (size_t f = 0; f < F; ++f) {
    FrameWork& w = fw[f];
    w.in = &frames[f];
    w.res = &out[f];
    w.N = Ns[f], w.T = w.N + pre;
    w.have_prev = f > 0 || (valid && !frames[f].prev_row.empty());
    w.gate = f > 0 || (w.have_prev && params.reuse_layers && layers_valid && layers.size() == L);
    w.res->recomputed.assign(size_t(w.N), 0);
  }
  FrameWork& head = fw[0];
  if (head.gate) {
    head.prev_t.assign(size_t(head.T), -1);
    for (int64_t t = 0; t < pre; ++t) head.prev_t[size_t(t)] = t;  // class token, registers
    for (int64_t i = 0; i < head.N; ++i) {
      const int64_t p = head.in->prev_row[size_t(i)];
      if (p >= 0) head.prev_t[size_t(pre + i)] = pre + p;
    }
    head.remap = L == 0 || layers[0].ref_in.dim(0) != head.T || !is_identity(head.prev_t);
  }

  // ---- patch embeddings: every frame's new or changed patches through one GEMM --------------
  std::vector<std::pair<size_t, int64_t>> todo;  // (frame, token)
  for (size_t f = 0; f < F; ++f) {
    const FrameWork& w = fw[f];
    for (int64_t i = 0; i < w.N; ++i) {
      const bool dirty = !w.have_prev || w.in->prev_row[size_t(i)] < 0 ||
                         (!w.in->patch_dirty.empty() && w.in->patch_dirty[size_t(i)]);
      if (dirty) todo.emplace_back(f, i), w.res->recomputed[size_t(i)] = 1, ++w.res->patch_embeddings_computed;
    }
  }
  if (!todo.empty()) {
    // GEMM rows rounded up to a bucket (zero rows as padding): oneDNN primitives are made and
    // cached per shape, and a new shape every frame would cost more than the padding.
    const int64_t r = int64_t(todo.size()), rg = round_up(r, kRowBucket);
    Pt.ensure(size_t(rg * K) * 4);
    float* src = Pt.as<float>();
    for (int64_t j = 0; j < r; ++j) {
      const auto [f, i] = todo[size_t(j)];
      const Tensor& patches = *frames[f].patches;
      if (patches.dtype() == DType::f32) {
        std::memcpy(src + j * K, patches.data<float>() + i * K, size_t(K) * 4);
      } else {
        const uint16_t* h = patches.data<uint16_t>() + i * K;
        for (int64_t k = 0; k < K; ++k) src[j * K + k] = f16_to_f32(h[k]);
      }
    }
    std::memset(src + r * K, 0, size_t((rg - r) * K) * 4);
    XR.ensure(size_t(rg) * rowb);
    ops.linear(linear_args(src, DType::f32, rg, m.patch_w, &m.patch_b, XR.get(), DType::f32));
  }

  // ---- layer-0 candidates --------------------------------------------------------------------
  int64_t in_rows = 0;
  for (size_t f = 0; f < F; ++f) {
    FrameWork& w = fw[f];
    w.in_off = in_rows;
    if (!w.gate) {
      for (int64_t t = 0; t < w.T; ++t) w.cand.push_back(t);
    } else {
      for (int64_t t = 0; t < pre; ++t) w.cand.push_back(t);
      const Tensor& pos = *w.in->positions;
      const float* prev_c = f == 0 ? centers.data() : nullptr;
      const Tensor* prev_pos = f == 0 ? nullptr : frames[f - 1].positions;
      for (int64_t i = 0; i < w.N; ++i) {
        const int64_t p = w.in->prev_row[size_t(i)];
        bool cand = p < 0 || w.res->recomputed[size_t(i)];
        if (!cand) {
          const float x = pos.data<float>()[i * pos.dim(1)], y = pos.data<float>()[i * pos.dim(1) + 1];
          const float px = prev_c ? prev_c[2 * p] : prev_pos->data<float>()[p * prev_pos->dim(1)];
          const float py = prev_c ? prev_c[2 * p + 1] : prev_pos->data<float>()[p * prev_pos->dim(1) + 1];
          cand = x != px || y != py;
        }
        if (cand) w.cand.push_back(pre + i);
      }
    }
    in_rows += int64_t(w.cand.size());
  }
  IN.ensure(size_t(std::max<int64_t>(in_rows, 1)) * rowb);

  // ---- per frame in order: the patch-embedding cache, the candidates' layer-0 inputs --------
  {
    size_t j = 0;
    for (size_t f = 0; f < F; ++f) {
      FrameWork& w = fw[f];
      const std::span<const int64_t> pr = w.in->prev_row;
      if (f == 0 && !(w.have_prev && w.N == n && is_identity(pr) && patch_emb.rank() == 2)) {
        Tensor pe(DType::f32, {w.N, D});
        if (w.have_prev)
          for (int64_t i = 0; i < w.N; ++i)
            if (!w.res->recomputed[size_t(i)])
              std::memcpy(pe.data<float>() + i * D, patch_emb.data<float>() + pr[size_t(i)] * D, rowb);
        patch_emb = std::move(pe);
      }
      for (; j < todo.size() && todo[j].first == f; ++j)
        std::memcpy(patch_emb.data<float>() + todo[j].second * D, XR.as<float>() + int64_t(j) * D, rowb);
      const int64_t rows = int64_t(w.cand.size());
      float* x = IN.as<float>() + w.in_off * D;
      const Tensor& positions = *w.in->positions;
      const float* pos = positions.data<float>();
      const int64_t pst = positions.dim(1);
      const PositionSampler sampler(c, m.pos_grid.data<float>(), params.image_width, params.image_height, pos,
                                    positions.dim(0), pst);
#pragma omp parallel for num_threads(ops.threads) schedule(static) if (rows > 32)
      for (int64_t k = 0; k < rows; ++k) {
        const int64_t t = w.cand[size_t(k)];
        float* xr = x + k * D;
        if (t < pre) {
          prefix_row(m, t, xr);
        } else {
          const int64_t i = t - pre;
          std::memcpy(xr, patch_emb.data<float>() + i * D, rowb);
          sampler.add(pos + i * pst, pst, xr);
        }
      }
      if (c.pre_norm && rows > 0) ops.layer_norm(x, rows, D, m.pre_w, m.pre_b, c.ln_eps, x, DType::f32);
    }
  }

  // ---- transformer, layer-major ----------------------------------------------------------------
  if (layers.size() != L) layers.resize(L);
  const double per_token = double(3 * D * D + D * D + D * fc1_width(c) + D * Mh);
  auto ensure_cache = [&](LayerCache& lc, int64_t T) {
    if (lc.ref_in.rank() != 2 || lc.ref_in.dim(0) != T || lc.kv.dtype() != dt || lc.kv.rank() != 4) {
      lc.ref_in = Tensor(DType::f32, {T, D});
      lc.kv = Tensor(dt, {2, int64_t(c.heads), T, hd});
    }
  };
  const double thr2 = double(params.token_threshold) * double(params.token_threshold);
  std::vector<int64_t> sel_in;  // per selected row, its row in IN
  for (size_t li = 0; li < L; ++li) {
    const VitLayer& l = m.layers[li];
    LayerCache& C = layers[li];
    if (!head.gate) {
      ensure_cache(C, head.T);
    } else if (head.remap) {  // kept tokens carry their reference and K|V to their new rows
      const int64_t told = C.kv.dim(2);
      ensure_cache(spare, head.T);
      for (int64_t t = 0; t < head.T; ++t) {
        const int64_t p = head.prev_t[size_t(t)];
        if (p < 0) continue;
        std::memcpy(spare.ref_in.data<float>() + t * D, C.ref_in.data<float>() + p * D, rowb);
        for (int64_t kh = 0; kh < 2 * c.heads; ++kh)  // K and V of every head
          std::memcpy(spare.kv.bytes() + size_t((kh * head.T + t) * hd) * es,
                      C.kv.bytes() + size_t((kh * told + p) * hd) * es, size_t(hd) * es);
      }
      std::swap(C, spare);
    }
    // 1. Which rows to recompute, frame by frame (each frame's references are the ones the
    //    frames before it left).
    XR.ensure(size_t(in_rows + kRowBucket) * rowb);
    int64_t rows = 0;
    sel_in.clear();
    for (size_t f = 0; f < F; ++f) {
      FrameWork& w = fw[f];
      w.sel.clear();
      w.xr_off = rows;
      const float* x = IN.as<float>() + w.in_off * D;
      for (size_t k = 0; k < w.cand.size(); ++k) {
        const int64_t t = w.cand[k];
        bool s = !w.gate || t < pre || (w.remap && w.prev_t[size_t(t)] < 0);
        if (!s) {
          const float* a = x + int64_t(k) * D;
          const float* b = C.ref_in.data<float>() + t * D;
          double dd = 0, bb = 0;
          for (int64_t d = 0; d < D; ++d) {
            const double e = double(a[d]) - b[d];
            dd += e * e, bb += double(b[d]) * b[d];
          }
          s = dd > thr2 * bb;
        }
        if (s) w.sel.push_back(t), sel_in.push_back(w.in_off + int64_t(k));
      }
      for (size_t j = 0; j < w.sel.size(); ++j) {
        const float* src = IN.as<float>() + sel_in[size_t(rows) + j] * D;
        std::memcpy(C.ref_in.data<float>() + w.sel[j] * D, src, rowb);
        std::memcpy(XR.as<float>() + (rows + int64_t(j)) * D, src, rowb);
      }
      rows += int64_t(w.sel.size());
      const int64_t r = int64_t(w.sel.size());
      for (int64_t t : w.sel)
        if (t >= pre) w.res->recomputed[size_t(t - pre)] = 1;
      w.res->layer_tokens.push_back(r - std::min<int64_t>(pre, r));
      w.work += double(r) * per_token + 4.0 * double(r) * w.T * D;
      w.full_work += double(w.T) * per_token + 4.0 * double(w.T) * w.T * D;
    }
    if (rows > 0) {
      // Every frame's rows in one GEMM each (rows rounded up to a bucket, zero rows as padding).
      // The slack bucket after them lets each frame's attention run on a rounded row count too.
      const int64_t rg = round_up(rows, kRowBucket), cap = rg + kRowBucket;
      H.ensure(size_t(cap * D) * es), QKV.ensure(size_t(cap * 3 * D) * es), A.ensure(size_t(cap * D) * es);
      Hm.ensure(size_t(rg * fc1_width(c)) * es);
      float* xr = XR.as<float>();
      std::memset(xr + rows * D, 0, size_t((rg - rows) * D) * 4);
      ops.layer_norm(xr, rg, D, l.ln1_w, l.ln1_b, c.ln_eps, H.get(), dt);
      ops.linear(linear_args(H.get(), dt, rg, l.qkv_w, &l.qkv_b, QKV.get(), dt));
      std::memset(QKV.get() + size_t(rg * 3 * D) * es, 0, size_t(kRowBucket * 3 * D) * es);
      for (size_t f = 0; f < F; ++f) {  // 3. in frame order: K|V into the cache, then attention
        const FrameWork& w = fw[f];
        const int64_t r = int64_t(w.sel.size());
        if (r == 0) continue;
        for (int64_t j = 0; j < r; ++j) {
          const std::byte* kv_row = QKV.get() + size_t((w.xr_off + j) * 3 * D + D) * es;  // K | V, head by head
          for (int64_t kh = 0; kh < 2 * c.heads; ++kh)
            std::memcpy(C.kv.bytes() + size_t((kh * w.T + w.sel[size_t(j)]) * hd) * es, kv_row + size_t(kh * hd) * es,
                        size_t(hd) * es);
        }
        // Rows past this frame's are the next frames' (rewritten when their turn comes) or slack.
        const int64_t ra = ops.ref ? r : round_up(r, kRowBucket);
        const AttentionExec aex{ops.ref, ops.threads, ops.gemm};
        encoder_detail::attention_rows_kv_head_major(
            aex, QKV.get() + size_t(w.xr_off * 3 * D) * es, 3 * D, ra, C.kv.bytes(),
            C.kv.bytes() + size_t(c.heads * w.T * hd) * es, w.T, D, c.heads, dt, A.get() + size_t(w.xr_off * D) * es,
            &attn_ws);
      }
      ops.attention_out_and_mlp(l, c, A.get(), rg, xr, H.get(), Hm.get(), dt);
    }
    // The recomputed rows' outputs are the next layer's candidates.
    std::swap(IN, XR);
    in_rows = rows;
    for (FrameWork& w : fw) w.cand.swap(w.sel), w.in_off = w.xr_off;
  }

  // ---- output, frame by frame ----------------------------------------------------------------
  if (c.final_norm == FinalNorm::all_tokens && in_rows > 0)
    ops.layer_norm(IN.as<float>(), in_rows, D, m.post_w, m.post_b, c.ln_eps, IN.get(), DType::f32);
  if (!head.gate) {
    if (fin.rank() != 2 || fin.dim(0) != head.T) fin = Tensor(DType::f32, {head.T, D});
  } else if (head.remap) {
    Tensor nf(DType::f32, {head.T, D});
    for (int64_t t = 0; t < head.T; ++t)
      if (head.prev_t[size_t(t)] >= 0)
        std::memcpy(nf.data<float>() + t * D, fin.data<float>() + head.prev_t[size_t(t)] * D, rowb);
    fin = std::move(nf);
  }
  // The projector (LLaVA's MLP) is per token: only the rows whose last hidden state was
  // recomputed go through it, every frame's in one pass; the others keep their projection.
  Tensor proj;
  int64_t E = 0;
  const bool project = c.projector != ProjectorType::none;
  if (project) {
    const int64_t rg = round_up(std::max<int64_t>(in_rows, 1), kRowBucket);
    Pt.ensure(size_t(rg) * rowb);
    if (in_rows > 0) std::memcpy(Pt.get(), IN.get(), size_t(in_rows) * rowb);
    std::memset(Pt.as<float>() + in_rows * D, 0, size_t(rg - in_rows) * rowb);
    proj = run_projector(m, Pt.as<float>(), rg, ops.ref ? nullptr : ops.gemm);
    E = proj.dim(1);
    if (!head.gate) {
      if (fin_proj.rank() != 2 || fin_proj.dim(0) != head.T || fin_proj.dim(1) != E)
        fin_proj = Tensor(DType::f32, {head.T, E});
    } else if (head.remap) {
      Tensor np(DType::f32, {head.T, E});
      for (int64_t t = 0; t < head.T; ++t)
        if (head.prev_t[size_t(t)] >= 0)
          std::memcpy(np.data<float>() + t * E, fin_proj.data<float>() + head.prev_t[size_t(t)] * E, size_t(E) * 4);
      fin_proj = std::move(np);
    }
  }
  for (FrameWork& w : fw) {
    for (size_t k = 0; k < w.cand.size(); ++k) {
      std::memcpy(fin.data<float>() + w.cand[k] * D, IN.as<float>() + (w.in_off + int64_t(k)) * D, rowb);
      if (project)
        std::memcpy(fin_proj.data<float>() + w.cand[k] * E, proj.data<float>() + (w.in_off + int64_t(k)) * E,
                    size_t(E) * 4);
    }
    IncrementalResult& r = *w.res;
    r.embeddings = Tensor(DType::f32, {w.N, D});
    std::memcpy(r.embeddings.bytes(), fin.data<float>() + pre * D, size_t(w.N) * rowb);
    if (project) {
      r.projected = Tensor(DType::f32, {w.N, E});
      std::memcpy(r.projected.bytes(), fin_proj.data<float>() + pre * E, size_t(w.N * E) * 4);
    }
    r.approximate = w.gate;
    r.flops_fraction = w.full_work > 0 ? w.work / w.full_work : 1;
  }

  // ---- keep the state ---------------------------------------------------------------------
  const FrameWork& last = fw.back();
  const Tensor& lp = *last.in->positions;
  centers.resize(size_t(2 * last.N));
  for (int64_t i = 0; i < last.N; ++i) {
    centers[size_t(2 * i)] = lp.data<float>()[i * lp.dim(1)];
    centers[size_t(2 * i + 1)] = lp.data<float>()[i * lp.dim(1) + 1];
  }
  layers_valid = params.reuse_layers;  // an exact call's caches are not kept up to date for gating
  n = last.N;
  valid = true;
}

}  // namespace fovea
