// The incremental ViT (fovea/incremental_encoder.hpp): patch-embedding reuse (exact) and
// Eventful-Transformers token gating per layer (approximate).
//
// One layer for the set R of recomputed tokens (R = all tokens on a full pass):
//   XR = x[R]; H = LN1(XR); QKV_R = H·Wqkvᵀ; K, V of R written into the layer's K|V cache;
//   A_R = softmax(Q_R·Kᵀ/√d)·V over every token's keys and values (flash-style, as forward.cpp);
//   XR += A_R·Woᵀ; XR += MLP(LN2(XR)); x_out[R] = XR, x_out[¬R] = the cached outputs.
// With the attention bound the kept tokens' attention outputs are then brought up to date for
// the keys and values R changed (AttentionTrack), and the tokens whose output would move by
// more than the threshold join the output projection and MLP with their kept input (set S):
//   XR[S] = ref_in[S]; A_S = their current attention; x_out[S] = XR[S] after the same GEMMs.
// The schedule follows forward.cpp: every GEMM through oneDNN (encoder_detail::Gemm) with
// bias, GELU and residual fused, row kernels for LayerNorm and softmax; the small functions
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
  // The attention bound (IncrementalParams::bound_attention), per token: its query as of its
  // last QKV, and its attention as the current keys and values give it.
  Tensor q;         // [heads·T + 16, hd] dt: head h's rows at h·T (the last 16 rows padding)
  Tensor lse;       // [heads, T] f32: log Σ_j exp(q·k_j/√hd) over the current keys
  Tensor att;       // [T, D] f32: softmax(q·Kᵀ/√hd)·V, the heads side by side (as A)
  Tensor att_used;  // [T, D] f32: the attention its cached layer output was computed from
  std::vector<float> ref_norm2;  // [T] ‖ref_in‖₂²
  // The carry: a kept token's output is its current input plus its residual branches' update
  // (attention + MLP) as of its last recomputation, so a change of its input below the
  // threshold still reaches the layers above along the residual stream.
  Tensor in_cur;  // [T, D] f32: each token's current input
  Tensor upd;     // [T, D] f32: output − input at its last recomputation
  // The MLP gate (IncrementalParams::mlp_threshold): per token, the MLP's input (the residual
  // stream after attention) as of the MLP's last recomputation, its norm, and the MLP's output
  // then (without the residual), which a token whose MLP input moved less keeps.
  Tensor mid_ref;                 // [T, D] f32
  std::vector<float> mid_norm2;   // [T] ‖mid_ref‖₂²
  Tensor mlp_out;                 // [T, D] f32
  std::vector<float> resid;  // [T] relative input change left unapplied (below the threshold)
  std::vector<float> drift;  // [T] ‖W_o‖₂ ‖att − att_used‖₂ / ‖ref_in‖₂, left unapplied
};

// ‖W‖₂ (the largest singular value) by power iteration on WᵀW: the most a change of a token's
// attention output can move its residual stream through the output projection. One pass over W
// per iteration: each row r gives u_r = row·v (four partial sums: a single one waited on each
// add, and this ran 0.24 s for ViT-B's 12 layers at the first frame) and adds u_r·row to WᵀW v.
float spectral_norm(const WeightMatrix& w) {
  const int64_t R = w.rows, C = w.cols;
  std::vector<float> a(size_t(R * C));
  for (int64_t r = 0; r < R; ++r) weight_row_f32(w.data, w.dtype, C, r, C, a.data() + r * C);  // f32, bf16 or f16
  std::vector<double> v(static_cast<size_t>(C)), next_v(static_cast<size_t>(C));
  for (int64_t j = 0; j < C; ++j) v[size_t(j)] = 1.0 + 0.01 * double(j % 7);  // not orthogonal to the top vector
  double sigma = 0;
  for (int it = 0; it < 30; ++it) {
    double vv = 0;
    for (double x : v) vv += x * x;
    const double inv = 1.0 / std::sqrt(std::max(vv, 1e-300));
    for (double& x : v) x *= inv;
    double uu = 0;
    std::fill(next_v.begin(), next_v.end(), 0.0);
    const double* vp = v.data();
    double* nv = next_v.data();
    for (int64_t r = 0; r < R; ++r) {
      const float* row = a.data() + r * C;
      double acc[4] = {0, 0, 0, 0};
      int64_t j = 0;
      for (; j + 4 <= C; j += 4)
        for (int k = 0; k < 4; ++k) acc[k] += double(row[j + k]) * vp[j + k];
      for (; j < C; ++j) acc[0] += double(row[j]) * vp[j];
      const double u = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      uu += u * u;
      for (j = 0; j < C; ++j) nv[j] += double(row[j]) * u;
    }
    v.swap(next_v);
    const double next = std::sqrt(uu);  // ‖W v‖ with ‖v‖ = 1: increases towards σ
    if (it > 3 && next - sigma <= 1e-4 * next) return float(next);
    sigma = next;
  }
  return float(sigma);
}

// Buffers of the attention bound, kept from frame to frame: one set per OpenMP thread (each
// task of a parallel loop runs its GEMMs single-threaded on them).
struct TrackScratch {
  ScratchBuf qg, s, p, pf, o;
  std::vector<float> corr, den, mx, sums;
  std::vector<int64_t> sums_at;  // delta_block: the kept rows (f32) whose sums are still to make
};
struct AttentionTrack {
  ScratchBuf kc, vc;  // the changed rows' keys and values, [heads, ncp, hd] each
  std::vector<TrackScratch> scratch;
  std::vector<uint8_t> bad;  // [heads, T]: the update of (head, row) lost its digits
  std::vector<float> dd;     // [heads, T]: ‖att − att_used‖² over the head's columns
  std::vector<float> row_dd;  // [T]: the same over every column
};

// Runs fn(task, scratch) for tasks 0..n-1 on `threads` OpenMP threads, one parallel region
// (a region per head and frame cost more than the work on a small tower); the first exception
// is rethrown after the loop.
template <typename Fn>
void track_tasks(AttentionTrack& tr, int threads, int64_t n, Fn&& fn) {
  if (tr.scratch.size() < size_t(threads)) tr.scratch.resize(size_t(threads));
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(threads) if (n > 1)
  {
    TrackScratch& sc = tr.scratch[size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n; ++task) {
      try {
        fn(task, sc);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

int64_t round_up(int64_t r, int64_t b) { return (r + b - 1) / b * b; }

// GEMM rows of an incremental frame come in chunks of at most kChunk (each rounded up to
// kRowBucket): oneDNN makes a primitive per shape (several ms of JIT each), and the row counts
// of recomputed tokens change every frame, so whole-count GEMMs made a new primitive almost
// every call (measured: 200 primitives in a 48-frame clip, most of an incremental frame's time
// until the clip ended). In chunks every linear layer has at most kChunk / kRowBucket shapes.
// Full passes (every row) keep one GEMM over all rows: their count is the frame's tokens.
constexpr int64_t kChunk = 64;
// The attention bound's changed keys and values in pieces of at most this many columns: twice a
// row chunk, so that the usual frame (tens of recomputed rows, new and old) updates each block of
// kept rows with one GEMM for the scores and one for the values instead of two each. Every call
// has a fixed cost: on the pretrained ViT-Ti (static_away, 48 frames) 64 took 17.3 ms of CPU
// per frame, 128 took 16.3 ms. At most 2 · kDeltaChunk / kRowBucket shapes.
constexpr int64_t kDeltaChunk = 2 * kChunk;
template <typename Fn>
void for_row_chunks(int64_t rows, bool chunked, Fn&& fn) {
  if (rows <= 0) return;
  if (!chunked) return fn(int64_t(0), round_up(rows, kRowBucket));
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) fn(r0, std::min(kChunk, round_up(rows - r0, kRowBucket)));
}

// The rows of a chunk for `rows` rows on `threads` threads: the size (a multiple of kRowBucket, at
// most kChunk) whose chunks, handed out in order to the first free thread, finish first, each
// chunk counted as its rows plus kTaskRows (a GEMM call's fixed cost; so, of two sizes as good,
// the larger). 64-row chunks of a group's usual 176 rows made 64 + 48 rows on one thread and 64
// on the other; 48-row chunks make 96 and 80.
constexpr int64_t kTaskRows = 8;
int64_t balanced_chunk(int64_t rows, int threads) {
  const int64_t nt = std::max(threads, 1);
  int64_t best = kChunk, best_span = -1;
  std::vector<int64_t> load(static_cast<size_t>(nt));
  for (int64_t cs = kChunk; cs >= kRowBucket; cs -= kRowBucket) {
    std::fill(load.begin(), load.end(), int64_t(0));
    for (int64_t r0 = 0; r0 < rows; r0 += cs) {
      auto it = std::min_element(load.begin(), load.end());
      *it += std::min(cs, round_up(rows - r0, kRowBucket)) + kTaskRows;
    }
    const int64_t span = *std::max_element(load.begin(), load.end());
    if (best_span < 0 || span < best_span) best = cs, best_span = span;
  }
  return best;
}

// The same chunks shared out between `threads` OpenMP threads in one parallel region, each
// chunk's GEMMs single-threaded (oneDNN runs sequentially inside a region): one region per
// layer step instead of one per GEMM and chunk (each a wake-up of the other threads, which on a
// loaded machine cost more than the small GEMMs). Chunks are sized so that the threads finish
// together (balanced_chunk). The first exception is rethrown after the region.
template <typename Fn>
void parallel_row_chunks(int64_t rows, int threads, Fn&& fn) {
  if (rows <= 0) return;
  const int64_t cs = balanced_chunk(rows, threads);
  const int64_t n = (rows + cs - 1) / cs;
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (n > 1)
  for (int64_t task = 0; task < n; ++task) {
    try {
      const int64_t r0 = task * cs;
      fn(r0, std::min(cs, round_up(rows - r0, kRowBucket)));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

// Shapes one frame must have for the model; returns N.
int64_t check_frame(const IncrementalFrame& f, const VitConfig& c, const std::string& what) {
  if (!f.patches || !f.positions) throw invalid_argument(what + ": patches and positions are required");
  const Tensor& patches = *f.patches;
  const Tensor& positions = *f.positions;
  if (patches.rank() != 4 || patches.dim(0) < 1) throw invalid_argument(what + ": patches must be [N, C, P, P], N >= 1");
  if (patches.dtype() != DType::f32 && patches.dtype() != DType::f16)
    throw invalid_argument(what + ": patches must be float32 or float16, normalised as the model expects");
  if (patches.dim(1) != c.channels || patches.dim(2) != c.patch_px || patches.dim(3) != c.patch_px)
    throw invalid_argument(what + ": patches are not " + std::to_string(c.channels) + "x" + std::to_string(c.patch_px) + "x" +
              std::to_string(c.patch_px) + " as the model takes");
  const int64_t N = patches.dim(0);
  if (positions.dtype() != DType::f32 || positions.rank() != 2 || positions.dim(0) != N || positions.dim(1) < 2)
    throw invalid_argument(what + ": positions must be [N, 4] float32 with N = " + std::to_string(N));
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, what + ": more than 2^20 tokens");
  if (!f.prev_row.empty() && int64_t(f.prev_row.size()) != N) throw invalid_argument(what + ": prev_row must have N entries");
  if (!f.patch_dirty.empty() && int64_t(f.patch_dirty.size()) != N)
    throw invalid_argument(what + ": patch_dirty must have N entries");
  const float* pos = positions.data<float>();
  for (int64_t i = 0; i < N; ++i)
    if (!std::isfinite(pos[i * positions.dim(1)]) || !std::isfinite(pos[i * positions.dim(1) + 1]))
      throw invalid_argument(what + ": token " + std::to_string(i) + " has a non-finite position");
  return N;
}

bool is_identity(std::span<const int64_t> prev_row) {
  for (size_t i = 0; i < prev_row.size(); ++i)
    if (prev_row[i] != int64_t(i)) return false;
  return true;
}

// Sums over the elements of a row, in order (a sequential float or double sum: its rounding
// decides thresholds, so it is the one every build computes), for up to 4 rows at once: each
// row's sum is the chain of additions a row at a time gives, bit for bit, and the chains of
// different rows overlap in the CPU instead of each waiting on its own previous addition.
// Σ (a − b)² and Σ b² in double: a token's input change against its reference.
void change_sums(const float* const* a, const float* const* b, int rows, int64_t D, double* dd, double* bb) {
  const float* a4[4], *b4[4];
  for (int r = 0; r < 4; ++r) a4[r] = a[r < rows ? r : 0], b4[r] = b[r < rows ? r : 0];
  double d0 = 0, d1 = 0, d2 = 0, d3 = 0, s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t d = 0; d < D; ++d) {
    const double e0 = double(a4[0][d]) - b4[0][d], e1 = double(a4[1][d]) - b4[1][d];
    const double e2 = double(a4[2][d]) - b4[2][d], e3 = double(a4[3][d]) - b4[3][d];
    d0 += e0 * e0, s0 += double(b4[0][d]) * b4[0][d];
    d1 += e1 * e1, s1 += double(b4[1][d]) * b4[1][d];
    d2 += e2 * e2, s2 += double(b4[2][d]) * b4[2][d];
    d3 += e3 * e3, s3 += double(b4[3][d]) * b4[3][d];
  }
  const double dv[4] = {d0, d1, d2, d3}, sv[4] = {s0, s1, s2, s3};
  for (int r = 0; r < rows; ++r) dd[r] = dv[r], bb[r] = sv[r];
}
// Σ x² in float: a reference's squared norm.
void square_sums(const float* const* x, int rows, int64_t D, float* out) {
  const float* x4[4];
  for (int r = 0; r < 4; ++r) x4[r] = x[r < rows ? r : 0];
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t d = 0; d < D; ++d)
    s0 += x4[0][d] * x4[0][d], s1 += x4[1][d] * x4[1][d], s2 += x4[2][d] * x4[2][d], s3 += x4[3][d] * x4[3][d];
  const float sv[4] = {s0, s1, s2, s3};
  for (int r = 0; r < rows; ++r) out[r] = sv[r];
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
  // This layer's candidates: rows whose input may differ from the frame before, and where
  // their inputs are in IN. After the selection, the rows recomputed from their input (sel,
  // rows xr_off.. of XR) and, with the attention bound, those recomputed for their attention
  // (att, at att_row in XR).
  std::vector<int64_t> cand, cand_row, sel, att, att_row;
  // What this frame's selection overwrote, for the frames before it in the group (their step 3
  // needs the values their kept tokens were computed with): per token, its index in the
  // layer's saved reference norms (ref_before) and saved current inputs (cur_before), or -1.
  // Dense [T] (a lookup per kept token and later frame); empty for a group's first frame.
  std::vector<int64_t> ref_before, cur_before;
  // With the attention bound, the candidates not recomputed: carried (their rows in IN), then
  // their output rows in XR.
  std::vector<int64_t> carry, carry_in, carry_row;
  int64_t in_off = 0, xr_off = 0;
  double work = 0, full_work = 0;
  std::vector<float> est;  // [T] per token, Σ over layers of the changes left unapplied
  // As a FrameWork{} (every field above), its vectors' capacity kept for the next run.
  void renew() {
    in = nullptr, res = nullptr;
    N = T = 0;
    have_prev = gate = remap = false;
    for (std::vector<int64_t>* v : {&prev_t, &cand, &cand_row, &sel, &att, &att_row, &ref_before, &cur_before, &carry,
                                    &carry_in, &carry_row})
      v->clear();
    in_off = xr_off = 0;
    work = full_work = 0;
    est.clear();
  }
};

}  // namespace

struct IncrementalEncoder::State {
  VitModel model;
  EncoderContext ctx;  // the session's own: GEMM primitives, scratchpads, attention buffers
  bool valid = false;
  bool layers_valid = false;
  bool tracked = false;  // the layer caches hold the attention bound's state too
  bool mlp_gated = false;  // and the MLP gate's
  int64_t n = 0;  // patch tokens of the previous frame
  int width = 0, height = 0;
  Precision precision = Precision::fp32;
  Tensor patch_emb;                // [n, D] f32, before positions
  std::vector<float> centers;      // [n, 2] the previous frame's token centres
  std::vector<LayerCache> layers;  // as the previous frame left them
  LayerCache spare;                // where a layout change moves a layer's rows (then swapped in)
  Tensor fin;                      // [n + pre, D] f32: the last hidden state (final norm applied)
  Tensor fin_proj;                 // [n + pre, E] f32: the projector's output of fin's rows
  Buf IN, XR, XB, H, QKV, A, Hm, Pt, gone_kv, XM, MO;
  AttentionTrack bound;  // the attention bound's buffers
  std::vector<float> wo_norm;  // per layer ‖W_o‖₂, made at the first tracked frame
  // Per-layer scratch of run(), kept from call to call (their capacity: no allocation per frame).
  std::vector<FrameWork> frame_work;   // the last run's (Pass::fw), for their vectors' capacity
  std::vector<int64_t> old_rows;      // gather_changed_kv: the recomputed rows that had keys and values
  std::vector<const float*> sel_src;  // per selected row, where its input is
  std::vector<double> cand_dd, cand_bb;  // per candidate: Σ (input − reference)², Σ reference²
  std::vector<float> sel_norm2;          // per selected row: its new reference's ‖·‖₂²
  std::vector<float> saved_norm2;     // reference norms overwritten by later frames of the group (ref_before)
  std::vector<float> saved_cur;       // current inputs overwritten by later frames (cur_before)
  std::vector<uint8_t> in_att;        // [T] the token is recomputed for its attention this frame
  std::vector<uint8_t> keep;
  std::vector<int64_t> order;
  // The MLP gate's rows of a layer in frame order: (row in XR, token, row in XM or -1: kept).
  struct MlpRow {
    int64_t row, t, j;
  };
  std::vector<MlpRow> mlp_rows;
  State(const VitModel& m, EncoderContext c) : model(m), ctx(std::move(c)) {}
  struct Pass;  // one run's shared values (run() and its steps)
  void frame_roles(Pass& ps, const int64_t* Ns, IncrementalResult* out);
  void embed_patches(Pass& ps);
  void layer0_inputs(Pass& ps);
  void prepare_layers(Pass& ps);
  void ensure_cache(const Pass& ps, LayerCache& lc, int64_t T);
  void enter_layer(Pass& ps, LayerCache& C);
  void select_rows(Pass& ps, LayerCache& C);
  void compute_rows(Pass& ps, size_t li, const VitLayer& l, LayerCache& C);
  void attend_frame(Pass& ps, size_t li, LayerCache& C, size_t f);
  struct ChangedKv {
    int64_t n_old = 0, ncp = 0;  // old rows (after the r new ones); columns, rounded up
  };
  ChangedKv gather_changed_kv(Pass& ps, const LayerCache& C, size_t f);
  void store_kv_rows(Pass& ps, LayerCache& C, const FrameWork& w);
  void stage_by_bound(Pass& ps, size_t li, LayerCache& C, size_t f);
  void carry_rows(Pass& ps, LayerCache& C);
  void gated_mlp(Pass& ps, const VitLayer& l, LayerCache& C, int64_t total);
  void next_candidates(Pass& ps);
  void write_outputs(Pass& ps);
  void keep_state(Pass& ps);
  void run(std::span<const IncrementalFrame> frames, const int64_t* Ns, const IncrementalParams& params,
           const Ops& ops, IncrementalResult* out);
  void attend_block(LayerCache& C, const int64_t* rows, int64_t nb, int64_t T, int64_t D, int heads, int h, DType dt,
                    const Ops& ops, std::byte* a_out, TrackScratch& sc);
  void delta_block(LayerCache& C, const std::vector<uint8_t>& keep, int64_t r0, int64_t nb, int64_t T, int64_t n_new,
                   int64_t n_old, int64_t D, int heads, int h, DType dt, const Ops& ops, TrackScratch& sc);
  void attend(LayerCache& C, std::span<const int64_t> rows, int64_t T, int64_t D, int heads, DType dt, const Ops& ops,
              std::byte* a_out);
  void track_frame(LayerCache& C, std::span<const int64_t> sel, std::byte* a_out, const std::vector<uint8_t>& keep,
                   int64_t T, int64_t n_new, int64_t n_old, int64_t D, int heads, DType dt, const Ops& ops);
};

// Exact attention of up to 64 token rows (their queries in C.q) over every key and value of
// head h in C.kv: their C.att and C.lse for the head, and row j of a_out (dt, D wide: the
// layer's A) when given. S = Q·Kᵀ (oneDNN, single-threaded inside a task), the softmax row
// kernel (P and the normaliser), O = P·V.
void IncrementalEncoder::State::attend_block(LayerCache& C, const int64_t* rows, int64_t nb, int64_t T, int64_t D,
                                             int heads, int h, DType dt, const Ops& ops, std::byte* a_out,
                                             TrackScratch& sc) {
  const int64_t hd = D / heads, mb = round_up(nb, kRowBucket);
  const size_t es = esize(dt);
  const float scale = float(1.0 / std::sqrt(double(hd)));
  sc.qg.ensure(size_t(mb * hd) * es), sc.s.ensure(size_t(mb * T) * 4), sc.p.ensure(size_t(mb * T) * es);
  sc.o.ensure(size_t(mb * hd) * 4);
  sc.mx.resize(size_t(mb)), sc.sums.resize(size_t(mb));
  const std::byte* qh = C.q.bytes() + size_t(h * T * hd) * es;
  for (int64_t j = 0; j < nb; ++j)
    std::memcpy(sc.qg.get() + size_t(j * hd) * es, qh + size_t(rows[j] * hd) * es, size_t(hd) * es);
  std::memset(sc.qg.get() + size_t(nb * hd) * es, 0, size_t((mb - nb) * hd) * es);
  GemmArgs sg{};
  sg.a = sc.qg.get(), sg.lda = hd, sg.a_dt = dt;
  sg.w = C.kv.bytes() + size_t(h * T * hd) * es, sg.ldw = hd, sg.w_dt = dt;
  sg.c = sc.s.get(), sg.ldc = T, sg.c_dt = DType::f32;
  sg.m = mb, sg.n = T, sg.k = hd;
  ops.linear(sg);
  for (int64_t j = 0; j < mb; ++j) {
    std::byte* prow = sc.p.get() + size_t(j * T) * es;
    if (j >= nb) {
      std::memset(prow, 0, size_t(T) * es);
      continue;
    }
    float m = -INFINITY, l = 0;
    if (ops.ref) softmax_step_row_ref(sc.s.as<float>() + j * T, T, scale, &m, &l, prow, dt);
    else softmax_step_row(sc.s.as<float>() + j * T, T, scale, &m, &l, prow, dt);
    sc.mx[size_t(j)] = m, sc.sums[size_t(j)] = l;
  }
  GemmArgs pv{};
  pv.a = sc.p.get(), pv.lda = T, pv.a_dt = dt;
  pv.w = C.kv.bytes() + size_t((heads + h) * T * hd) * es, pv.ldw = hd, pv.w_dt = dt, pv.w_is_kn = true;
  pv.c = sc.o.get(), pv.ldc = hd, pv.c_dt = DType::f32;
  pv.m = mb, pv.n = hd, pv.k = T;
  ops.linear(pv);
  for (int64_t j = 0; j < nb; ++j) {
    const int64_t t = rows[j];
    const float inv = 1.0f / sc.sums[size_t(j)];
    float* att = C.att.data<float>() + t * D + h * hd;
    const float* o = sc.o.as<float>() + j * hd;
    for (int64_t d = 0; d < hd; ++d) att[d] = o[d] * inv;
    C.lse.data<float>()[h * T + t] = sc.mx[size_t(j)] + std::log(sc.sums[size_t(j)]);
    if (a_out) {
      std::byte* dst = a_out + size_t(j * D + h * hd) * es;
      if (dt == DType::f32) std::memcpy(dst, att, size_t(hd) * 4);
      else to_bf16_row(att, reinterpret_cast<uint16_t*>(dst), hd);
    }
  }
}

// Rows r0..r0+nb of head h, those kept (keep[t]): their attention brought up to date for keys
// and values that changed: the first n_new rows of bound.kc / bound.vc ([heads, ncp, hd] dt)
// are added, the n_old after them taken away (header, "the attention bound"). S = Q·Kcᵀ; per
// kept row, with m = max(lse, max s/√hd): P = e^(s/√hd − m), c = e^(lse − m), the normaliser
// den = c + ΣP_new − ΣP_old; O = [P_new | −P_old]·Vc; att ← (c·att + O)/den, lse ← m + log den.
// Where den cancels to nearly nothing (the keys that held the attention went away) the update
// loses its digits: bound.bad marks the row (attend() then computes it from scratch). Also
// bound.dd[h·T + t] = ‖att − att_used‖² over the head's columns.
void IncrementalEncoder::State::delta_block(LayerCache& C, const std::vector<uint8_t>& keep, int64_t r0, int64_t nb,
                                            int64_t T, int64_t n_new, int64_t n_old, int64_t D, int heads, int h,
                                            DType dt, const Ops& ops, TrackScratch& sc) {
  const int64_t hd = D / heads, nc = n_new + n_old, ncp = round_up(std::max<int64_t>(nc, 1), kRowBucket);
  const int64_t mb = round_up(nb, kRowBucket);
  const size_t es = esize(dt);
  const float scale = float(1.0 / std::sqrt(double(hd)));
  AttentionTrack& tr = bound;
  sc.s.ensure(size_t(mb * ncp) * 4), sc.pf.ensure(size_t(ncp) * 4), sc.p.ensure(size_t(mb * ncp) * es);
  sc.o.ensure(size_t(mb * hd) * 4);
  sc.corr.resize(size_t(mb)), sc.den.resize(size_t(mb)), sc.mx.resize(size_t(mb));
  sc.sums_at.clear();
  // Rows past T (the last block rounded up) read the padding after C.q's last head, or the
  // next head's rows: their results are not used.
  // The changed rows at most kDeltaChunk at a time: a few GEMM shapes whatever their number.
  for (int64_t k0 = 0; k0 < ncp; k0 += kDeltaChunk) {
    GemmArgs sg{};
    sg.a = C.q.bytes() + size_t((h * T + r0) * hd) * es, sg.lda = hd, sg.a_dt = dt;
    sg.w = tr.kc.get() + size_t((h * ncp + k0) * hd) * es, sg.ldw = hd, sg.w_dt = dt;
    sg.c = sc.s.as<float>() + k0, sg.ldc = ncp, sg.c_dt = DType::f32;
    sg.m = mb, sg.n = std::min(kDeltaChunk, ncp - k0), sg.k = hd;
    ops.linear(sg);
  }
  const float* lse = C.lse.data<float>() + h * T;
  float* pf = sc.pf.as<float>();
  for (int64_t j = 0; j < mb; ++j) {
    const int64_t t = r0 + j;
    std::byte* prow = sc.p.get() + size_t(j * ncp) * es;
    if (j >= nb || !keep[size_t(t)]) {
      std::memset(prow, 0, size_t(ncp) * es);
      continue;
    }
    float m = lse[t], l = 0;
    float* srow = sc.s.as<float>() + j * ncp;
    // The padding columns (zero keys) scored −∞: e^(−∞) = 0 there, so the row kernel runs over
    // whole vectors (ncp is a multiple of 16) instead of finishing each row with scalar exps.
    float* pr = dt == DType::f32 ? reinterpret_cast<float*>(prow) : pf;
    float corr;
    if (ops.ref) {
      corr = softmax_step_row_ref(srow, nc, scale, &m, &l, pr, DType::f32);
      std::fill(pr + nc, pr + ncp, 0.0f);
    } else {
      std::fill(srow + nc, srow + ncp, -INFINITY);
      corr = softmax_step_row(srow, ncp, scale, &m, &l, pr, DType::f32);
    }
    sc.corr[size_t(j)] = corr, sc.mx[size_t(j)] = m;
    if (dt == DType::f32) {  // the sums below, four rows at a time
      sc.sums_at.push_back(j);
      continue;
    }
    float added = 0, removed = 0;
    for (int64_t k = 0; k < n_new; ++k) added += pr[k];
    for (int64_t k = n_new; k < nc; ++k) removed += pr[k], pr[k] = -pr[k];
    to_bf16_row(pf, reinterpret_cast<uint16_t*>(prow), ncp);
    const float den = corr + added - removed;
    sc.den[size_t(j)] = den;
    if (!(den > 1e-3f * (corr + added + removed))) tr.bad[size_t(h * T + t)] = 1;
  }
  // f32: per kept row, the added and the removed columns' weights summed in order (as above),
  // the removed ones negated; four rows' sums at once, each bit for bit its own chain.
  for (size_t q = 0; q < sc.sums_at.size(); q += 4) {
    const int nr = int(std::min<size_t>(4, sc.sums_at.size() - q));
    float* p4[4];
    for (int r = 0; r < 4; ++r) p4[r] = sc.p.as<float>() + sc.sums_at[q + size_t(r < nr ? r : 0)] * ncp;
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0, e0 = 0, e1 = 0, e2 = 0, e3 = 0;
    for (int64_t k = 0; k < n_new; ++k) a0 += p4[0][k], a1 += p4[1][k], a2 += p4[2][k], a3 += p4[3][k];
    for (int64_t k = n_new; k < nc; ++k) e0 += p4[0][k], e1 += p4[1][k], e2 += p4[2][k], e3 += p4[3][k];
    const float added[4] = {a0, a1, a2, a3}, removed[4] = {e0, e1, e2, e3};
    for (int r = 0; r < nr; ++r) {
      const int64_t j = sc.sums_at[q + size_t(r)], t = r0 + j;
      for (int64_t k = n_new; k < nc; ++k) p4[r][k] = -p4[r][k];
      const float corr = sc.corr[size_t(j)];
      const float den = corr + added[r] - removed[r];
      sc.den[size_t(j)] = den;
      if (!(den > 1e-3f * (corr + added[r] + removed[r]))) tr.bad[size_t(h * T + t)] = 1;
    }
  }
  for (int64_t k0 = 0; k0 < ncp; k0 += kDeltaChunk) {
    GemmArgs pv{};
    pv.a = sc.p.get() + size_t(k0) * es, pv.lda = ncp, pv.a_dt = dt;
    pv.w = tr.vc.get() + size_t((h * ncp + k0) * hd) * es, pv.ldw = hd, pv.w_dt = dt, pv.w_is_kn = true;
    pv.c = sc.o.get(), pv.ldc = hd, pv.c_dt = DType::f32;
    pv.m = mb, pv.n = hd, pv.k = std::min(kDeltaChunk, ncp - k0);
    pv.accumulate = k0 > 0;
    ops.linear(pv);
  }
  float* lse_w = C.lse.data<float>() + h * T;
  for (int64_t j = 0; j < nb; ++j) {
    const int64_t t = r0 + j;
    if (!keep[size_t(t)] || tr.bad[size_t(h * T + t)]) continue;
    const float c = sc.corr[size_t(j)], inv = 1.0f / sc.den[size_t(j)];
    float* att = C.att.data<float>() + t * D + h * hd;
    const float* used = C.att_used.data<float>() + t * D + h * hd;
    const float* o = sc.o.as<float>() + j * hd;
    float dd = 0;
#pragma omp simd reduction(+ : dd)
    for (int64_t d = 0; d < hd; ++d) {
      att[d] = (c * att[d] + o[d]) * inv;
      dd += (att[d] - used[d]) * (att[d] - used[d]);
    }
    tr.dd[size_t(h * T + t)] = dd;
    lse_w[t] = sc.mx[size_t(j)] + std::log(sc.den[size_t(j)]);
  }
}

// Exact attention (attend_block) of the rows `rows`, a task per head and block of 64.
void IncrementalEncoder::State::attend(LayerCache& C, std::span<const int64_t> rows, int64_t T, int64_t D, int heads,
                                       DType dt, const Ops& ops, std::byte* a_out) {
  const int64_t n = int64_t(rows.size()), blocks = (n + 63) / 64;
  const size_t es = esize(dt);
  track_tasks(bound, ops.threads, blocks * heads, [&](int64_t task, TrackScratch& sc) {
    const int64_t b0 = (task / heads) * 64;
    attend_block(C, rows.data() + b0, std::min<int64_t>(64, n - b0), T, D, heads, int(task % heads), dt, ops,
                 a_out ? a_out + size_t(b0 * D) * es : nullptr, sc);
  });
}

// One frame's attention work at a layer, in one parallel region: the recomputed rows `sel`
// attend exactly (into a_out), and the kept rows' attention is brought up to date for the
// changed keys and values (delta_block). Rows whose update lost its digits are then computed
// from scratch. Returns per row ‖att − att_used‖² in bound.row_dd (kept rows only).
void IncrementalEncoder::State::track_frame(LayerCache& C, std::span<const int64_t> sel, std::byte* a_out,
                                            const std::vector<uint8_t>& keep, int64_t T, int64_t n_new, int64_t n_old,
                                            int64_t D, int heads, DType dt, const Ops& ops) {
  const int64_t n = int64_t(sel.size()), sel_blocks = (n + 63) / 64;
  const size_t es = esize(dt);
  // Kept-row blocks: with the recomputed rows' tasks, enough tasks to give every thread two, but
  // no smaller than 32 rows. Each block is at least two GEMM calls per head, each with a fixed
  // cost besides its work, so the recomputed rows' tasks count towards the two per thread (on
  // ViT-Ti, 3 heads on 2 threads: one block per head instead of two, 207 oneDNN calls per frame
  // instead of 285 on a static clip).
  const int64_t want =
      std::max<int64_t>(1, (2 * ops.threads - sel_blocks * heads + heads - 1) / std::max(heads, 1));
  const int64_t kblock = round_up(std::max<int64_t>(32, (T + want - 1) / want), kRowBucket);
  const bool any_kept = std::find(keep.begin(), keep.end(), uint8_t(1)) != keep.end();
  const int64_t keep_blocks = any_kept ? (T + kblock - 1) / kblock : 0;
  AttentionTrack& tr = bound;
  tr.bad.assign(size_t(heads * T), 0);
  tr.dd.assign(size_t(heads * T), 0.0f);
  track_tasks(tr, ops.threads, (sel_blocks + keep_blocks) * heads, [&](int64_t task, TrackScratch& sc) {
    const int h = int(task % heads);
    const int64_t b = task / heads;
    if (b < sel_blocks) {
      attend_block(C, sel.data() + b * 64, std::min<int64_t>(64, n - b * 64), T, D, heads, h, dt, ops,
                   a_out + size_t(b * 64 * D) * es, sc);
    } else {
      const int64_t r0 = (b - sel_blocks) * kblock;
      delta_block(C, keep, r0, std::min(kblock, T - r0), T, n_new, n_old, D, heads, h, dt, ops, sc);
    }
  });
  std::vector<int64_t> redo;
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < heads; ++h)
      if (tr.bad[size_t(h * T + t)]) {
        redo.push_back(t);
        break;
      }
  attend(C, redo, T, D, heads, dt, ops, nullptr);
  tr.row_dd.assign(size_t(T), 0.0f);
  const int64_t hd = D / heads;
  for (int64_t t = 0; t < T; ++t) {
    if (!keep[size_t(t)]) continue;
    float dd = 0;
    for (int h = 0; h < heads; ++h) dd += tr.dd[size_t(h * T + t)];
    tr.row_dd[size_t(t)] = dd;
  }
  for (int64_t t : redo) {
    const float* a = C.att.data<float>() + t * D;
    const float* u = C.att_used.data<float>() + t * D;
    float dd = 0;
    for (int64_t d = 0; d < heads * hd; ++d) dd += (a[d] - u[d]) * (a[d] - u[d]);
    tr.row_dd[size_t(t)] = dd;
  }
}

// Every frame runs the model: its weights are packed at the first frame, not again at the second.
IncrementalEncoder::IncrementalEncoder(const VitModel& model)
    : IncrementalEncoder(model, EncoderContext(EncoderContextParams{.expect_reuse = true, .max_primitives = 256})) {}
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
  if (params.image_width < 1 || params.image_height < 1) throw invalid_argument("incremental encode: the image size must be positive");
  if (!(params.token_threshold >= 0)) throw invalid_argument("incremental encode: the token threshold must be >= 0");
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
          if (p < -1 || p >= prev_n) throw invalid_argument(at + "prev_row[" + std::to_string(i) + "] is out of range");
          if (p >= 0 && used[size_t(p)]++) throw invalid_argument(at + "previous row " + std::to_string(p) + " used twice");
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

// One run of frames (State::run): the model's sizes and the thresholds, every frame's work, and
// the current layer's rows in XR.
struct IncrementalEncoder::State::Pass {
  Pass(State& st, std::span<const IncrementalFrame> frames_, const IncrementalParams& params_, const Ops& ops_)
      : frames(frames_), params(params_), ops(ops_), m(st.model.impl()), c(m.config), attn_ws(workspace(st.ctx)),
        dt(runnable_precision(params.precision) == Precision::bf16 ? DType::bf16 : DType::f32),  // bf16 needs bf16 kernels
        es(esize(dt)), D(c.hidden), Mh(c.mlp), pre(prefix_tokens(c)), hd(D / c.heads),
        K(int64_t(c.channels) * c.patch_px * c.patch_px), L(m.layers.size()), F(frames.size()), rowb(size_t(D) * 4),
        track(params.reuse_layers && params.bound_attention),
        per_token(double(3 * D * D + D * D + D * fc1_width(c) + D * Mh)),
        per_token_att(double(D * D + D * fc1_width(c) + D * Mh)),
        thr2(double(params.token_threshold) * double(params.token_threshold)),
        thr_att(params.attention_bound_threshold()),
        thr_mlp2(params.mlp_gate_threshold() < 0 ? -1.0
                                                 : double(params.mlp_gate_threshold()) * params.mlp_gate_threshold()),
        mlp_work(double(D * fc1_width(c) + D * Mh)),
        budget(std::max(0, params.refresh_tokens)) {}
  static AttentionWorkspace& workspace(EncoderContext& ctx) {
    if (!ctx.impl().attention_ws) ctx.impl().attention_ws = std::make_shared<AttentionWorkspace>();
    return *ctx.impl().attention_ws;
  }
  std::span<const IncrementalFrame> frames;
  const IncrementalParams& params;
  const Ops& ops;
  const VitModel::Impl& m;
  const VitConfig& c;
  AttentionWorkspace& attn_ws;  // reused by every layer and frame
  const DType dt;
  const size_t es;
  const int64_t D, Mh, pre, hd, K;
  const size_t L, F, rowb;
  const bool track;  // the attention bound's state is kept
  // Multiply-adds of a token's layer (linear layers); of its output projection and MLP.
  const double per_token, per_token_att;
  const double thr2, thr_att;  // token_threshold², the attention bound's threshold
  const double thr_mlp2;       // the MLP gate's threshold², < 0: no gate (every MLP recomputed)
  const double mlp_work;       // multiply-adds of a token's MLP
  const int64_t budget;        // refresh_tokens
  std::vector<FrameWork> fw;
  bool chunked = false;  // some frame recomputes only some rows: GEMMs in chunks (for_row_chunks)
  bool split = false;    // the chunks shared between threads (parallel_row_chunks)
  std::vector<std::pair<size_t, int64_t>> todo;  // (frame, token): patch embeddings computed, in XR
  int64_t in_rows = 0;   // the current layer's input rows in IN
  int64_t sum_t = 0;     // Σ tokens over the frames
  std::vector<int64_t> gone;  // rows of the previous layout the head frame drops
  // The current layer's rows in XR: recomputed from their input (rows), then recomputed for
  // their attention (staged), then carried (carried).
  int64_t rows = 0, staged = 0, carried = 0;
};


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
  Pass ps(*this, frames, params, ops);
  frame_roles(ps, Ns, out);
  embed_patches(ps);
  layer0_inputs(ps);
  prepare_layers(ps);
  for (size_t li = 0; li < ps.L; ++li) {
    const VitLayer& l = ps.m.layers[li];
    LayerCache& C = layers[li];
    enter_layer(ps, C);
    select_rows(ps, C);
    compute_rows(ps, li, l, C);
    carry_rows(ps, C);
    next_candidates(ps);
  }
  write_outputs(ps);
  keep_state(ps);
  frame_work.swap(ps.fw);
}

// The frames' roles: which reuse the caches (gate), the head frame's rows in the previous caches.
void IncrementalEncoder::State::frame_roles(Pass& ps, const int64_t* Ns, IncrementalResult* out) {
  // The FrameWorks of the last run, renewed: their vectors grow once, not in every run.
  ps.fw.swap(frame_work);
  if (ps.fw.size() > ps.F) ps.fw.resize(ps.F);
  for (FrameWork& w : ps.fw) w.renew();
  ps.fw.resize(ps.F);
  for (size_t f = 0; f < ps.F; ++f) {
    FrameWork& w = ps.fw[f];
    w.in = &ps.frames[f];
    w.res = &out[f];
    w.N = Ns[f], w.T = w.N + ps.pre;
    w.have_prev = f > 0 || (valid && !ps.frames[f].prev_row.empty());
    w.gate = f > 0 || (w.have_prev && ps.params.reuse_layers && layers_valid && layers.size() == ps.L &&
                       tracked == (ps.params.reuse_layers && ps.params.bound_attention) &&
                       mlp_gated == (ps.track && ps.thr_mlp2 >= 0));
    w.res->recomputed.assign(size_t(w.N), 0);
  }
  FrameWork& head = ps.fw[0];
  bool& chunked = ps.chunked;  // some frame recomputes only some rows: GEMMs in chunks (for_row_chunks)
  for (const FrameWork& w : ps.fw) chunked = chunked || w.gate;
  // The linear layers' chunks shared between threads (parallel_row_chunks); not with the
  // reference kernels, nor int8 (its kernels take the whole team).
  ps.split = chunked && !ps.ops.ref && !ps.ops.int8;
  if (head.gate) {
    head.prev_t.assign(size_t(head.T), -1);
    for (int64_t t = 0; t < ps.pre; ++t) head.prev_t[size_t(t)] = t;  // class token, registers
    for (int64_t i = 0; i < head.N; ++i) {
      const int64_t p = head.in->prev_row[size_t(i)];
      if (p >= 0) head.prev_t[size_t(ps.pre + i)] = ps.pre + p;
    }
    head.remap = ps.L == 0 || layers[0].ref_in.dim(0) != head.T || !is_identity(head.prev_t);
  }
}

// Patch embeddings: every frame's new or changed patches through one GEMM (into XR, in todo's order).
void IncrementalEncoder::State::embed_patches(Pass& ps) {
  ps.todo.clear();
  for (size_t f = 0; f < ps.F; ++f) {
    const FrameWork& w = ps.fw[f];
    for (int64_t i = 0; i < w.N; ++i) {
      const bool dirty = !w.have_prev || w.in->prev_row[size_t(i)] < 0 ||
                         (!w.in->patch_dirty.empty() && w.in->patch_dirty[size_t(i)]);
      if (dirty) ps.todo.emplace_back(f, i), w.res->recomputed[size_t(i)] = 1, ++w.res->patch_embeddings_computed;
    }
  }
  if (!ps.todo.empty()) {
    // GEMM rows rounded up to a bucket (zero rows as padding): oneDNN primitives are made and
    // cached per shape, and a new shape every frame would cost more than the padding.
    const int64_t r = int64_t(ps.todo.size()), rg = round_up(r, kRowBucket);
    Pt.ensure(size_t(rg * ps.K) * 4);
    float* src = Pt.as<float>();
    for (int64_t j = 0; j < r; ++j) {
      const auto [f, i] = ps.todo[size_t(j)];
      const Tensor& patches = *ps.frames[f].patches;
      if (patches.dtype() == DType::f32) {
        std::memcpy(src + j * ps.K, patches.data<float>() + i * ps.K, size_t(ps.K) * 4);
      } else {
        const uint16_t* h = patches.data<uint16_t>() + i * ps.K;
        for (int64_t k = 0; k < ps.K; ++k) src[j * ps.K + k] = f16_to_f32(h[k]);
      }
    }
    std::memset(src + r * ps.K, 0, size_t((rg - r) * ps.K) * 4);
    XR.ensure(size_t(rg) * ps.rowb);
    for_row_chunks(r, ps.chunked, [&](int64_t r0, int64_t mc) {
      ps.ops.linear(linear_args(src + r0 * ps.K, DType::f32, mc, ps.m.patch_w, &ps.m.patch_b, XR.as<float>() + r0 * ps.D,
                                DType::f32));
    });
  }
}

// Layer 0's candidates (new, changed or moved tokens, the class token) and their inputs in IN:
// the patch-embedding cache brought up to date, positions added, the pre-norm.
void IncrementalEncoder::State::layer0_inputs(Pass& ps) {
  const int64_t D = ps.D;
  ps.in_rows = 0;
  int64_t& sum_t = ps.sum_t;
  sum_t = 0;
  for (size_t f = 0; f < ps.F; ++f) {
    FrameWork& w = ps.fw[f];
    w.in_off = ps.in_rows;
    sum_t += w.T;
    if (!w.gate) {
      for (int64_t t = 0; t < w.T; ++t) w.cand.push_back(t);
    } else {
      for (int64_t t = 0; t < ps.pre; ++t) w.cand.push_back(t);
      const Tensor& pos = *w.in->positions;
      const float* prev_c = f == 0 ? centers.data() : nullptr;
      const Tensor* prev_pos = f == 0 ? nullptr : ps.frames[f - 1].positions;
      for (int64_t i = 0; i < w.N; ++i) {
        const int64_t p = w.in->prev_row[size_t(i)];
        bool cand = p < 0 || w.res->recomputed[size_t(i)];
        if (!cand) {
          const float x = pos.data<float>()[i * pos.dim(1)], y = pos.data<float>()[i * pos.dim(1) + 1];
          const float px = prev_c ? prev_c[2 * p] : prev_pos->data<float>()[p * prev_pos->dim(1)];
          const float py = prev_c ? prev_c[2 * p + 1] : prev_pos->data<float>()[p * prev_pos->dim(1) + 1];
          cand = x != px || y != py;
        }
        if (cand) w.cand.push_back(ps.pre + i);
      }
    }
    for (size_t k = 0; k < w.cand.size(); ++k) w.cand_row.push_back(ps.in_rows + int64_t(k));
    ps.in_rows += int64_t(w.cand.size());
    if (ps.track && w.gate) w.est.assign(size_t(w.T), 0.0f);
  }
  IN.ensure(size_t(std::max<int64_t>(ps.in_rows, 1)) * ps.rowb);
  // ---- per frame in order: the patch-embedding cache, the candidates' layer-0 inputs --------
  {
    size_t j = 0;
    for (size_t f = 0; f < ps.F; ++f) {
      FrameWork& w = ps.fw[f];
      const std::span<const int64_t> pr = w.in->prev_row;
      if (f == 0 && !(w.have_prev && w.N == n && is_identity(pr) && patch_emb.rank() == 2)) {
        Tensor pe(DType::f32, {w.N, D});
        if (w.have_prev)
          for (int64_t i = 0; i < w.N; ++i)
            if (!w.res->recomputed[size_t(i)])
              std::memcpy(pe.data<float>() + i * D, patch_emb.data<float>() + pr[size_t(i)] * D, ps.rowb);
        patch_emb = std::move(pe);
      }
      for (; j < ps.todo.size() && ps.todo[j].first == f; ++j)
        std::memcpy(patch_emb.data<float>() + ps.todo[j].second * D, XR.as<float>() + int64_t(j) * D, ps.rowb);
      const int64_t rows = int64_t(w.cand.size());
      float* x = IN.as<float>() + w.in_off * D;
      const Tensor& positions = *w.in->positions;
      const float* pos = positions.data<float>();
      const int64_t pst = positions.dim(1);
      const PositionSampler sampler(ps.c, ps.m.pos_grid.data<float>(), ps.params.image_width, ps.params.image_height,
                                    pos, positions.dim(0), pst);
#pragma omp parallel for num_threads(ps.ops.threads) schedule(static) if (rows > 32)
      for (int64_t k = 0; k < rows; ++k) {
        const int64_t t = w.cand[size_t(k)];
        float* xr = x + k * D;
        if (t < ps.pre) {
          prefix_row(ps.m, t, xr);
        } else {
          const int64_t i = t - ps.pre;
          std::memcpy(xr, patch_emb.data<float>() + i * D, ps.rowb);
          sampler.add(pos + i * pst, pst, xr);
        }
      }
      if (ps.c.pre_norm && rows > 0) ps.ops.layer_norm(x, rows, D, ps.m.pre_w, ps.m.pre_b, ps.c.ln_eps, x, DType::f32);
    }
  }
}

// Before the first layer: a cache per layer, ‖W_o‖₂ per layer, the rows the head frame's layout drops.
void IncrementalEncoder::State::prepare_layers(Pass& ps) {
  FrameWork& head = ps.fw[0];
  if (layers.size() != ps.L) layers.resize(ps.L);
  if (ps.track && wo_norm.size() != ps.L) {
    wo_norm.resize(ps.L);
    // A layer per task (independent: the same values on any number of threads).
    std::exception_ptr error;
    std::mutex error_mutex;
#pragma omp parallel for num_threads(ps.ops.threads) schedule(dynamic, 1) if (ps.L > 1)
    for (int64_t li = 0; li < int64_t(ps.L); ++li) {
      try {
        wo_norm[size_t(li)] = spectral_norm(ps.m.layers[size_t(li)].out_w);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    if (error) {
      wo_norm.clear();
      std::rethrow_exception(error);
    }
  }
  // The rows of the previous layout that the head frame drops (their keys and values leave
  // every kept token's attention).
  ps.gone.clear();
  if (ps.track && head.gate && head.remap && ps.L > 0) {
    std::vector<uint8_t> kept(size_t(layers[0].kv.dim(2)), 0);
    for (int64_t p : head.prev_t)
      if (p >= 0) kept[size_t(p)] = 1;
    for (size_t p = 0; p < kept.size(); ++p)
      if (!kept[p]) ps.gone.push_back(int64_t(p));
  }
}

// A layer cache sized for T rows (what it holds is undefined after a resize).
void IncrementalEncoder::State::ensure_cache(const Pass& ps, LayerCache& lc, int64_t T) {
  const int64_t D = ps.D, hd = ps.hd;
  if (lc.ref_in.rank() != 2 || lc.ref_in.dim(0) != T || lc.kv.dtype() != ps.dt || lc.kv.rank() != 4) {
    lc.ref_in = Tensor(DType::f32, {T, D});
    lc.kv = Tensor(ps.dt, {2, int64_t(ps.c.heads), T, hd});
  }
  if (ps.track && (lc.q.rank() != 2 || lc.q.dim(0) != ps.c.heads * T + kRowBucket || lc.q.dtype() != ps.dt)) {
    // A bucket of rows after the last head's: apply_kv_change reads its row blocks rounded up.
    lc.q = Tensor(ps.dt, {int64_t(ps.c.heads) * T + kRowBucket, hd});
    std::memset(lc.q.bytes(), 0, lc.q.size_bytes());
    lc.lse = Tensor(DType::f32, {int64_t(ps.c.heads), T});
    lc.att = Tensor(DType::f32, {T, D});
    lc.att_used = Tensor(DType::f32, {T, D});
    lc.in_cur = Tensor(DType::f32, {T, D});
    lc.upd = Tensor(DType::f32, {T, D});
  }
  if (ps.track) lc.resid.resize(size_t(T)), lc.drift.resize(size_t(T)), lc.ref_norm2.resize(size_t(T));
  if (ps.track && ps.thr_mlp2 >= 0 && (lc.mid_ref.rank() != 2 || lc.mid_ref.dim(0) != T)) {
    lc.mid_ref = Tensor(DType::f32, {T, D});
    lc.mlp_out = Tensor(DType::f32, {T, D});
    lc.mid_norm2.resize(size_t(T));
  }
}

// A layer's cache for the head frame: made on a full pass; on a layout change, every kept token's
// reference, K|V and tracking state moved to its new row (the dropped rows' keys and values kept
// in gone_kv for the kept tokens' update).
void IncrementalEncoder::State::enter_layer(Pass& ps, LayerCache& C) {
  const int64_t D = ps.D, hd = ps.hd;
  const size_t es = ps.es;
  FrameWork& head = ps.fw[0];
  if (!head.gate) {
    ensure_cache(ps, C, head.T);
  } else if (head.remap) {  // kept tokens carry their reference and K|V to their new rows
    const int64_t told = C.kv.dim(2);
    if (ps.track) {  // the dropped rows' keys and values, before they are overwritten
      gone_kv.ensure(std::max<size_t>(1, size_t(2 * ps.c.heads * int64_t(ps.gone.size()) * hd) * es));
      for (int64_t kh = 0; kh < 2 * ps.c.heads; ++kh)
        for (size_t g = 0; g < ps.gone.size(); ++g)
          std::memcpy(gone_kv.get() + size_t((kh * int64_t(ps.gone.size()) + int64_t(g)) * hd) * es,
                      C.kv.bytes() + size_t((kh * told + ps.gone[g]) * hd) * es, size_t(hd) * es);
    }
    ensure_cache(ps, spare, head.T);
    for (int64_t t = 0; t < head.T; ++t) {
      const int64_t p = head.prev_t[size_t(t)];
      if (p < 0) continue;
      std::memcpy(spare.ref_in.data<float>() + t * D, C.ref_in.data<float>() + p * D, ps.rowb);
      for (int64_t kh = 0; kh < 2 * ps.c.heads; ++kh)  // K and V of every head
        std::memcpy(spare.kv.bytes() + size_t((kh * head.T + t) * hd) * es,
                    C.kv.bytes() + size_t((kh * told + p) * hd) * es, size_t(hd) * es);
      if (ps.track) {
        for (int64_t h = 0; h < ps.c.heads; ++h) {
          std::memcpy(spare.q.bytes() + size_t((h * head.T + t) * hd) * es,
                      C.q.bytes() + size_t((h * told + p) * hd) * es, size_t(hd) * es);
          spare.lse.data<float>()[h * head.T + t] = C.lse.data<float>()[h * told + p];
        }
        std::memcpy(spare.att.data<float>() + t * D, C.att.data<float>() + p * D, ps.rowb);
        std::memcpy(spare.att_used.data<float>() + t * D, C.att_used.data<float>() + p * D, ps.rowb);
        std::memcpy(spare.in_cur.data<float>() + t * D, C.in_cur.data<float>() + p * D, ps.rowb);
        std::memcpy(spare.upd.data<float>() + t * D, C.upd.data<float>() + p * D, ps.rowb);
        if (ps.thr_mlp2 >= 0) {
          std::memcpy(spare.mid_ref.data<float>() + t * D, C.mid_ref.data<float>() + p * D, ps.rowb);
          std::memcpy(spare.mlp_out.data<float>() + t * D, C.mlp_out.data<float>() + p * D, ps.rowb);
          spare.mid_norm2[size_t(t)] = C.mid_norm2[size_t(p)];
        }
        spare.resid[size_t(t)] = C.resid[size_t(p)], spare.drift[size_t(t)] = C.drift[size_t(p)];
        spare.ref_norm2[size_t(t)] = C.ref_norm2[size_t(p)];
      }
    }
    std::swap(C, spare);
  }
}

// Step 1 of a layer: which rows to recompute, frame by frame (each frame's references are the ones
// the frames before it left); their inputs into XR, frame after frame.
void IncrementalEncoder::State::select_rows(Pass& ps, LayerCache& C) {
  const int64_t D = ps.D;
  // 1. Which rows to recompute, frame by frame (each frame's references are the ones the
  //    frames before it left).
  XR.ensure(size_t(2 * ps.sum_t + 2 * kRowBucket) * ps.rowb);
  ps.rows = 0;
  saved_norm2.clear(), saved_cur.clear();
  for (size_t f = 0; f < ps.F; ++f) {
    FrameWork& w = ps.fw[f];
    w.sel.clear();
    sel_src.clear();
    w.xr_off = ps.rows;
    const bool tracking = ps.track && w.gate;
    w.cur_before.clear(), w.ref_before.clear();
    if (ps.track && f > 0) w.cur_before.assign(size_t(w.T), -1), w.ref_before.assign(size_t(w.T), -1);
    w.carry.clear(), w.carry_in.clear(), w.carry_row.clear();
    // The gated candidates' change against their references, four rows at a time (the loop
    // below writes neither the inputs nor the references it reads).
    cand_dd.resize(w.cand.size()), cand_bb.resize(w.cand.size());
    {
      const float* ra[4];
      const float* rb[4];
      size_t at[4];
      int nr = 0;
      auto flush = [&] {
        double dd[4], bb[4];
        change_sums(ra, rb, nr, D, dd, bb);
        for (int r = 0; r < nr; ++r) cand_dd[at[r]] = dd[r], cand_bb[at[r]] = bb[r];
        nr = 0;
      };
      for (size_t k = 0; k < w.cand.size(); ++k) {
        const int64_t t = w.cand[k];
        if (!w.gate || t < ps.pre || (w.remap && w.prev_t[size_t(t)] < 0)) continue;
        ra[nr] = IN.as<float>() + w.cand_row[k] * D, rb[nr] = C.ref_in.data<float>() + t * D, at[nr] = k;
        if (++nr == 4) flush();
      }
      if (nr > 0) flush();
    }
    for (size_t k = 0; k < w.cand.size(); ++k) {
      const int64_t t = w.cand[k];
      const float* a = IN.as<float>() + w.cand_row[k] * D;
      if (ps.track) {  // its current input
        if (f > 0) {
          w.cur_before[size_t(t)] = int64_t(saved_cur.size()) / D;
          saved_cur.insert(saved_cur.end(), C.in_cur.data<float>() + t * D, C.in_cur.data<float>() + (t + 1) * D);
        }
        std::memcpy(C.in_cur.data<float>() + t * D, a, ps.rowb);
      }
      bool s = !w.gate || t < ps.pre || (w.remap && w.prev_t[size_t(t)] < 0);
      if (!s) {
        const double dd = cand_dd[k], bb = cand_bb[k];
        s = dd > ps.thr2 * bb;
        if (tracking && !s) C.resid[size_t(t)] = bb > 0 ? float(std::sqrt(dd / bb)) : 0.0f;
      }
      if (s) w.sel.push_back(t), sel_src.push_back(a);
      else if (tracking) w.carry.push_back(t), w.carry_in.push_back(w.cand_row[k]);
    }
    if (tracking && ps.budget > 0) {
      // The refresh budget, input side: the kept tokens whose input moved most since they
      // were last recomputed (their reference holds the input they were computed from; a
      // candidate's input is in IN, a token's that was no candidate is its input of a frame
      // before, which only a candidate row could have changed: ref_in + the recorded change
      // is not kept, so only candidates qualify here).
      order.clear();
      for (size_t k = 0; k < w.cand.size(); ++k) {
        const int64_t t = w.cand[k];
        if (t >= ps.pre && C.resid[size_t(t)] > 0 &&
            (w.sel.empty() || std::find(w.sel.begin(), w.sel.end(), t) == w.sel.end()))
          order.push_back(int64_t(k));
      }
      const size_t take = std::min(order.size(), size_t(ps.budget));
      std::partial_sort(order.begin(), order.begin() + int64_t(take), order.end(), [&](int64_t x, int64_t y) {
        return C.resid[size_t(w.cand[size_t(x)])] > C.resid[size_t(w.cand[size_t(y)])];
      });
      for (size_t j = 0; j < take; ++j)
        w.sel.push_back(w.cand[size_t(order[j])]), sel_src.push_back(IN.as<float>() + w.cand_row[size_t(order[j])] * D);
    }
    if (ps.track) {  // the new references' squared norms, four rows at a time
      sel_norm2.resize(w.sel.size());
      for (size_t j = 0; j < w.sel.size(); j += 4)
        square_sums(sel_src.data() + j, int(std::min<size_t>(4, w.sel.size() - j)), D, sel_norm2.data() + j);
    }
    for (size_t j = 0; j < w.sel.size(); ++j) {
      if (ps.track && f > 0) {
        w.ref_before[size_t(w.sel[j])] = int64_t(saved_norm2.size());
        saved_norm2.push_back(C.ref_norm2[size_t(w.sel[j])]);
      }
      std::memcpy(C.ref_in.data<float>() + w.sel[j] * D, sel_src[j], ps.rowb);
      if (ps.track) C.ref_norm2[size_t(w.sel[j])] = sel_norm2[j];
      std::memcpy(XR.as<float>() + (ps.rows + int64_t(j)) * D, sel_src[j], ps.rowb);
      if (ps.track) C.resid[size_t(w.sel[j])] = 0;
    }
    if (tracking)
      for (int64_t t = 0; t < w.T; ++t) w.est[size_t(t)] += C.resid[size_t(t)];
    ps.rows += int64_t(w.sel.size());
    const int64_t r = int64_t(w.sel.size());
    for (int64_t t : w.sel)
      if (t >= ps.pre) w.res->recomputed[size_t(t - ps.pre)] = 1;
    w.res->layer_tokens.push_back(r - std::min<int64_t>(ps.pre, r));
    // Multiply-adds: the linear layers, and attention's Q·Kᵀ and P·V.
    w.work += double(r) * ps.per_token + 2.0 * double(r) * w.T * D;
    w.full_work += double(w.T) * ps.per_token + 2.0 * double(w.T) * w.T * D;
  }
}

// Steps 2-4 of a layer: LayerNorm + QKV over every frame's rows in one GEMM, each frame's
// attention in order (attend_frame), then the output projection and the MLP over every row.
void IncrementalEncoder::State::compute_rows(Pass& ps, size_t li, const VitLayer& l, LayerCache& C) {
  const int64_t D = ps.D;
  const size_t es = ps.es;
  FrameWork& head = ps.fw[0];
  // Room for every frame's rows twice: recomputed from their input, then for their attention.
  const int64_t cap = round_up(2 * ps.sum_t, kRowBucket) + 2 * kRowBucket;
  A.ensure(size_t(cap * D) * es);
  ps.staged = 0;  // rows recomputed for their attention, after the `rows` ones in XR and A
  // Without recomputed rows, only a layout change (the rows it dropped) moves attention.
  if (ps.rows > 0 || (ps.track && head.gate && head.remap && !ps.gone.empty())) {
    // Every frame's rows in one GEMM each (rows rounded up to a bucket, zero rows as padding).
    // The slack bucket after them lets each frame's attention run on a rounded row count too.
    const int64_t rg = round_up(ps.rows, kRowBucket), qcap = rg + kRowBucket;
    H.ensure(size_t(qcap * D) * es), QKV.ensure(size_t(qcap * 3 * D) * es);
    float* xr = XR.as<float>();
    std::memset(xr + ps.rows * D, 0, size_t((rg - ps.rows) * D) * 4);
    auto ln_qkv = [&](int64_t r0, int64_t mc) {
      ps.ops.layer_norm(xr + r0 * D, mc, D, l.ln1_w, l.ln1_b, ps.c.ln_eps, H.get() + size_t(r0 * D) * es, ps.dt);
      ps.ops.linear(linear_args(H.get() + size_t(r0 * D) * es, ps.dt, mc, l.qkv_w, &l.qkv_b,
                             QKV.get() + size_t(r0 * 3 * D) * es, ps.dt));
    };
    if (ps.rows > 0 && ps.split) parallel_row_chunks(ps.rows, ps.ops.threads, ln_qkv);
    else if (ps.rows > 0) ln_qkv(0, rg);
    std::memset(QKV.get() + size_t(rg * 3 * D) * es, 0, size_t(kRowBucket * 3 * D) * es);
    for (size_t f = 0; f < ps.F; ++f) attend_frame(ps, li, C, f);  // 3. in frame order
    const int64_t total = ps.rows + ps.staged, rt = round_up(total, kRowBucket);
    if (total > 0) {
      std::memset(xr + total * D, 0, size_t((rt - total) * D) * 4);
      if (ps.track) {
        std::memset(A.get() + size_t(total * D) * es, 0, size_t((rt - total) * D) * es);
        XB.ensure(size_t(total) * ps.rowb);
        std::memcpy(XB.get(), xr, size_t(total) * ps.rowb);
      }
      if (ps.track && ps.thr_mlp2 >= 0) return gated_mlp(ps, l, C, total);
      H.ensure(size_t(rt * D) * es), Hm.ensure(size_t(rt * fc1_width(ps.c)) * es);
      const int64_t fw1 = fc1_width(ps.c);
      auto mlp = [&](int64_t r0, int64_t mc) {
        ps.ops.attention_out_and_mlp(l, ps.c, A.get() + size_t(r0 * D) * es, mc, xr + r0 * D,
                                     H.get() + size_t(r0 * D) * es, Hm.get() + size_t(r0 * fw1) * es, ps.dt);
      };
      if (ps.split) parallel_row_chunks(total, ps.ops.threads, mlp);
      else mlp(0, rt);
    }
  }
}

// Step 4 with the attention bound: the output projection over every frame's rows, then the MLP
// gate frame by frame in order (each frame's references are the ones the frames before it
// left): a row's MLP is recomputed when its input (the residual stream after attention) moved
// from the one the token's MLP last saw by more than the MLP threshold, else it keeps the MLP's
// output of then. The recomputed rows' MLPs run in one pass, and their outputs are added in
// frame order (a kept row takes the MLP output its token had at its frame).
void IncrementalEncoder::State::gated_mlp(Pass& ps, const VitLayer& l, LayerCache& C, int64_t total) {
  const int64_t D = ps.D;
  const size_t es = ps.es;
  float* xr = XR.as<float>();
  auto out_proj = [&](int64_t r0, int64_t mc) {
    ps.ops.attention_out(l, A.get() + size_t(r0 * D) * es, mc, xr + r0 * D, ps.dt);
  };
  if (ps.split) parallel_row_chunks(total, ps.ops.threads, out_proj);
  else out_proj(0, round_up(total, kRowBucket));
  // The gate, in frame order.
  mlp_rows.clear();
  int64_t nm = 0;
  for (FrameWork& w : ps.fw) {
    auto gate = [&](int64_t row, int64_t t) {
      const float* x = xr + row * D;
      const float* ref = C.mid_ref.data<float>() + t * D;
      double dd = 0, xx = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double e = double(x[d]) - ref[d];
        dd += e * e, xx += double(x[d]) * x[d];
      }
      const bool fresh = !w.gate || t < ps.pre || (w.remap && w.prev_t[size_t(t)] < 0);
      const double bb = C.mid_norm2[size_t(t)];
      if (!fresh && ps.thr_mlp2 >= 0 && dd <= ps.thr_mlp2 * bb) {
        mlp_rows.push_back({row, t, -1});
        w.work -= ps.mlp_work;
        if (!w.est.empty() && bb > 0) w.est[size_t(t)] += float(std::sqrt(dd / bb));
        return;
      }
      std::memcpy(C.mid_ref.data<float>() + t * D, x, ps.rowb);
      C.mid_norm2[size_t(t)] = float(xx);
      mlp_rows.push_back({row, t, nm++});
    };
    for (size_t j = 0; j < w.sel.size(); ++j) gate(w.xr_off + int64_t(j), w.sel[j]);
    for (size_t j = 0; j < w.att.size(); ++j) gate(w.att_row[j], w.att[j]);
  }
  if (nm > 0) {
    const int64_t mg = round_up(nm, kRowBucket), fw1 = fc1_width(ps.c);
    XM.ensure(size_t(mg) * ps.rowb), MO.ensure(size_t(mg) * ps.rowb);
    H.ensure(size_t(mg * D) * es), Hm.ensure(size_t(mg * fw1) * es);
    for (const MlpRow& m : mlp_rows)
      if (m.j >= 0) std::memcpy(XM.as<float>() + m.j * D, xr + m.row * D, ps.rowb);
    std::memset(XM.as<float>() + nm * D, 0, size_t(mg - nm) * ps.rowb);
    auto mlp = [&](int64_t r0, int64_t mc) {
      ps.ops.mlp(l, ps.c, XM.as<float>() + r0 * D, mc, H.get() + size_t(r0 * D) * es, Hm.get() + size_t(r0 * fw1) * es,
                 ps.dt, MO.as<float>() + r0 * D, false);
    };
    if (ps.split) parallel_row_chunks(nm, ps.ops.threads, mlp);
    else mlp(0, mg);
  }
  // The MLP outputs, in frame order.
  for (const MlpRow& m : mlp_rows) {
    float* o = C.mlp_out.data<float>() + m.t * D;
    if (m.j >= 0) std::memcpy(o, MO.as<float>() + m.j * D, ps.rowb);
    float* x = xr + m.row * D;
    for (int64_t d = 0; d < D; ++d) x[d] += o[d];
  }
}

// Step 3 for frame f: its K|V rows into the cache, its recomputed rows' attention; with the
// attention bound, the kept rows' attention brought up to date and the rows whose output would
// move by more than the threshold staged for the output projection and MLP (after XR's `rows`).
void IncrementalEncoder::State::attend_frame(Pass& ps, size_t li, LayerCache& C, size_t f) {
  const int64_t D = ps.D;
  const size_t es = ps.es;
  FrameWork& w = ps.fw[f];
  const int64_t r = int64_t(w.sel.size());
  w.att.clear(), w.att_row.clear();
  if (r == 0 && !(ps.track && w.gate && w.remap && !ps.gone.empty())) return;
  const bool delta = ps.track && w.gate;
  const ChangedKv changed = delta ? gather_changed_kv(ps, C, f) : ChangedKv{};
  store_kv_rows(ps, C, w);
  if (!ps.track) {
    // Rows past this frame's are the next frames' (rewritten when their turn comes) or slack.
    const AttentionExec aex{ps.ops.ref, ps.ops.threads, ps.ops.gemm};
    auto attend_rows = [&](int64_t r0, int64_t ra) {
      encoder_detail::attention_rows_kv_head_major(
          aex, QKV.get() + size_t((w.xr_off + r0) * 3 * D) * es, 3 * D, ra, C.kv.bytes(),
          C.kv.bytes() + size_t(ps.c.heads * w.T * ps.hd) * es, w.T, D, ps.c.heads, ps.dt,
          A.get() + size_t((w.xr_off + r0) * D) * es, &ps.attn_ws);
    };
    if (ps.ops.ref) attend_rows(0, r);
    else for_row_chunks(r, ps.chunked, attend_rows);
    return;
  }
  // The recomputed rows attend exactly, keeping their normaliser; the kept rows'
  // attention is brought up to date with this frame's keys and values.
  keep.assign(size_t(w.T), delta ? 1 : 0);
  for (int64_t t : w.sel) keep[size_t(t)] = 0;
  track_frame(C, w.sel, A.get() + size_t(w.xr_off * D) * es, keep, w.T, r, changed.n_old, D, ps.c.heads, ps.dt,
              ps.ops);
  for (int64_t t : w.sel) {
    std::memcpy(C.att_used.data<float>() + t * D, C.att.data<float>() + t * D, ps.rowb);
    C.drift[size_t(t)] = 0;
  }
  if (!delta) return;
  w.work += 2.0 * double(w.T) * double(changed.ncp) * D;  // the kept rows' update (delta_block)
  stage_by_bound(ps, li, C, f);
}

// The changed rows' keys and values for frame f's kept tokens' update, into bound.kc / bound.vc
// ([heads, ncp, hd] each): the new ones first (QKV), then the old ones (the recomputed rows' as
// the cache still holds them, and the rows the layout dropped).
IncrementalEncoder::State::ChangedKv IncrementalEncoder::State::gather_changed_kv(Pass& ps, const LayerCache& C,
                                                                                 size_t f) {
  const int64_t D = ps.D, hd = ps.hd;
  const size_t es = ps.es;
  const FrameWork& w = ps.fw[f];
  const int64_t r = int64_t(w.sel.size());
  old_rows.clear();
  for (int64_t t : w.sel)
    if (!(w.remap && w.prev_t[size_t(t)] < 0)) old_rows.push_back(t);
  const int64_t ng = f == 0 && w.remap ? int64_t(ps.gone.size()) : 0;
  const int64_t n_old = int64_t(old_rows.size()) + ng;
  const int64_t ncp = round_up(std::max<int64_t>(r + n_old, 1), kRowBucket);
  bound.kc.ensure(size_t(ps.c.heads * ncp * hd) * es), bound.vc.ensure(size_t(ps.c.heads * ncp * hd) * es);
  const int64_t nc = r + n_old;
  for (int64_t h = 0; h < ps.c.heads; ++h)
    for (int kv = 0; kv < 2; ++kv) {
      std::byte* dst = (kv ? bound.vc : bound.kc).get() + size_t(h * ncp * hd) * es;
      std::memset(dst + size_t(nc * hd) * es, 0, size_t((ncp - nc) * hd) * es);  // only the padding rows
      const std::byte* cache = C.kv.bytes() + size_t(((kv * ps.c.heads + h) * w.T) * hd) * es;
      for (int64_t j = 0; j < r; ++j)
        std::memcpy(dst + size_t(j * hd) * es,
                    QKV.get() + size_t((w.xr_off + j) * 3 * D + (1 + kv) * D + h * hd) * es, size_t(hd) * es);
      for (size_t j = 0; j < old_rows.size(); ++j)
        std::memcpy(dst + size_t((r + int64_t(j)) * hd) * es, cache + size_t(old_rows[j] * hd) * es,
                    size_t(hd) * es);
      for (int64_t g = 0; g < ng; ++g)
        std::memcpy(dst + size_t((r + int64_t(old_rows.size()) + g) * hd) * es,
                    gone_kv.get() + size_t(((kv * ps.c.heads + h) * ng + g) * hd) * es, size_t(hd) * es);
    }
  return {n_old, ncp};
}

// Frame f's recomputed rows' K|V (and, with the bound, their queries) into the layer's cache.
void IncrementalEncoder::State::store_kv_rows(Pass& ps, LayerCache& C, const FrameWork& w) {
  const int64_t D = ps.D, hd = ps.hd;
  const size_t es = ps.es;
  for (size_t j = 0; j < w.sel.size(); ++j) {
    const int64_t row = w.xr_off + int64_t(j), t = w.sel[j];
    const std::byte* kv_row = QKV.get() + size_t(row * 3 * D + D) * es;  // K | V, head by head
    for (int64_t kh = 0; kh < 2 * ps.c.heads; ++kh)
      std::memcpy(C.kv.bytes() + size_t((kh * w.T + t) * hd) * es, kv_row + size_t(kh * hd) * es, size_t(hd) * es);
    if (ps.track)
      for (int64_t h = 0; h < ps.c.heads; ++h)
        std::memcpy(C.q.bytes() + size_t((h * w.T + t) * hd) * es, QKV.get() + size_t(row * 3 * D + h * hd) * es,
                    size_t(hd) * es);
  }
}

// The bound for frame f, once its kept rows' attention is up to date: recompute (output
// projection and MLP, from the kept input) the tokens whose output would move by more than the
// threshold; then, within the budget, those whose unapplied change is largest. They are staged
// after XR's recomputed rows (w.att, w.att_row).
void IncrementalEncoder::State::stage_by_bound(Pass& ps, size_t li, LayerCache& C, size_t f) {
  const int64_t D = ps.D;
  const size_t es = ps.es;
  FrameWork& w = ps.fw[f];
  const float gain = wo_norm[li];
  // A kept token's current input and the norm of its reference as of this frame, unless
  // a later frame of the group has already replaced them.
  auto cur_of = [&](int64_t t) {
    for (size_t g = f + 1; g < ps.F; ++g)
      if (const int64_t i = ps.fw[g].cur_before[size_t(t)]; i >= 0)
        return static_cast<const float*>(saved_cur.data() + i * D);
    return static_cast<const float*>(C.in_cur.data<float>() + t * D);
  };
  auto ref_norm2_of = [&](int64_t t) {
    for (size_t g = f + 1; g < ps.F; ++g)
      if (const int64_t i = ps.fw[g].ref_before[size_t(t)]; i >= 0) return saved_norm2[size_t(i)];
    return C.ref_norm2[size_t(t)];
  };
  order.clear();
  for (int64_t t = 0; t < w.T; ++t) {
    if (!keep[size_t(t)]) continue;
    const float xx = ref_norm2_of(t);
    const float est = xx > 0 ? gain * std::sqrt(bound.row_dd[size_t(t)] / xx) : 0.0f;
    C.drift[size_t(t)] = est;
    if (est > ps.thr_att) w.att.push_back(t);
    else if (ps.budget > 0 && est > 0) order.push_back(t);
  }
  const size_t take = std::min(order.size(), size_t(ps.budget));
  std::partial_sort(order.begin(), order.begin() + int64_t(take), order.end(),
                    [&](int64_t x, int64_t y) { return C.drift[size_t(x)] > C.drift[size_t(y)]; });
  for (size_t j = 0; j < take; ++j) w.att.push_back(order[j]);
  for (int64_t t : w.att) {
    const int64_t row = ps.rows + ps.staged++;
    w.att_row.push_back(row);
    std::memcpy(XR.as<float>() + row * D, cur_of(t), ps.rowb);
    const float* a = C.att.data<float>() + t * D;
    std::byte* dst = A.get() + size_t(row * D) * es;
    if (ps.dt == DType::f32) std::memcpy(dst, a, ps.rowb);
    else to_bf16_row(a, reinterpret_cast<uint16_t*>(dst), D);
    std::memcpy(C.att_used.data<float>() + t * D, a, ps.rowb);
    C.drift[size_t(t)] = 0;
    if (t >= ps.pre) w.res->recomputed[size_t(t - ps.pre)] = 1, ++w.res->attention_tokens;
  }
  int64_t att_patch = 0;
  for (int64_t t : w.att) att_patch += t >= ps.pre;
  w.res->layer_tokens.back() += att_patch;
  w.work += double(w.att.size()) * ps.per_token_att;
  for (int64_t t = 0; t < w.T; ++t) w.est[size_t(t)] += C.drift[size_t(t)];
}

// The carried rows of every frame (tracking only), after the recomputed and staged ones in XR.
void IncrementalEncoder::State::carry_rows(Pass& ps, LayerCache& C) {
  const int64_t D = ps.D;
  // The carry, frame by frame in order (each frame's carried rows take the updates as the
  // frame before left them): a carried token's output is its input plus its kept update; a
  // recomputed token's update is its output minus its input.
  ps.carried = 0;
  if (ps.track) {
    const int64_t total = ps.rows + ps.staged;
    float* xr = XR.as<float>();
    for (FrameWork& w : ps.fw) {
      in_att.assign(size_t(w.T), 0);
      for (int64_t t : w.att) in_att[size_t(t)] = 1;
      for (int64_t t : w.sel) in_att[size_t(t)] = 1;  // the refresh budget took it
      for (size_t k = 0; k < w.carry.size(); ++k) {
        const int64_t t = w.carry[k];
        if (in_att[size_t(t)]) continue;
        const int64_t row = total + ps.carried++;
        const float* x = IN.as<float>() + w.carry_in[k] * D;
        const float* u = C.upd.data<float>() + t * D;
        float* o = xr + row * D;
        for (int64_t d = 0; d < D; ++d) o[d] = x[d] + u[d];
        w.carry_row.push_back(row);
        in_att[size_t(t)] = 2;
      }
      auto keep_update = [&](int64_t t, int64_t r) {
        const float* o = xr + r * D;
        const float* x = XB.as<float>() + r * D;
        float* u = C.upd.data<float>() + t * D;
        for (int64_t d = 0; d < D; ++d) u[d] = o[d] - x[d];
      };
      for (size_t j = 0; j < w.sel.size(); ++j) keep_update(w.sel[j], w.xr_off + int64_t(j));
      for (size_t j = 0; j < w.att.size(); ++j) keep_update(w.att[j], w.att_row[j]);
      // Only the carried tokens stay in the list.
      size_t kept = 0;
      for (size_t k = 0; k < w.carry.size(); ++k)
        if (in_att[size_t(w.carry[k])] == 2) w.carry[kept++] = w.carry[k];
      w.carry.resize(kept);
    }
  }
}

// The layer's output rows become the next layer's inputs (IN) and candidates.
void IncrementalEncoder::State::next_candidates(Pass& ps) {
  // The recomputed and carried rows' outputs are the next layer's candidates.
  std::swap(IN, XR);
  ps.in_rows = ps.rows + ps.staged + ps.carried;
  for (FrameWork& w : ps.fw) {
    w.cand.swap(w.sel);
    w.cand_row.clear();
    for (size_t j = 0; j < w.cand.size(); ++j) w.cand_row.push_back(w.xr_off + int64_t(j));
    w.cand.insert(w.cand.end(), w.att.begin(), w.att.end());
    w.cand_row.insert(w.cand_row.end(), w.att_row.begin(), w.att_row.end());
    w.cand.insert(w.cand.end(), w.carry.begin(), w.carry.end());
    w.cand_row.insert(w.cand_row.end(), w.carry_row.begin(), w.carry_row.end());
  }
}

// The last hidden state (and projection) of every frame: the recomputed rows over the kept ones.
void IncrementalEncoder::State::write_outputs(Pass& ps) {
  const int64_t D = ps.D;
  FrameWork& head = ps.fw[0];
  if (ps.c.final_norm == FinalNorm::all_tokens && ps.in_rows > 0)
    ps.ops.layer_norm(IN.as<float>(), ps.in_rows, D, ps.m.post_w, ps.m.post_b, ps.c.ln_eps, IN.get(), DType::f32);
  if (!head.gate) {
    if (fin.rank() != 2 || fin.dim(0) != head.T) fin = Tensor(DType::f32, {head.T, D});
  } else if (head.remap) {
    Tensor nf(DType::f32, {head.T, D});
    for (int64_t t = 0; t < head.T; ++t)
      if (head.prev_t[size_t(t)] >= 0)
        std::memcpy(nf.data<float>() + t * D, fin.data<float>() + head.prev_t[size_t(t)] * D, ps.rowb);
    fin = std::move(nf);
  }
  // The projector (LLaVA's MLP) is per token: only the rows whose last hidden state was
  // recomputed go through it, every frame's in one pass; the others keep their projection.
  Tensor proj;
  int64_t E = 0;
  const bool project = ps.c.projector != ProjectorType::none;
  if (project) {
    const int64_t rg = round_up(std::max<int64_t>(ps.in_rows, 1), kRowBucket);
    Pt.ensure(size_t(rg) * ps.rowb);
    if (ps.in_rows > 0) std::memcpy(Pt.get(), IN.get(), size_t(ps.in_rows) * ps.rowb);
    std::memset(Pt.as<float>() + ps.in_rows * D, 0, size_t(rg - ps.in_rows) * ps.rowb);
    proj = run_projector(ps.m, Pt.as<float>(), rg, ps.ops.ref ? nullptr : ps.ops.gemm);
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
  for (FrameWork& w : ps.fw) {
    for (size_t k = 0; k < w.cand.size(); ++k) {
      std::memcpy(fin.data<float>() + w.cand[k] * D, IN.as<float>() + w.cand_row[k] * D, ps.rowb);
      if (project)
        std::memcpy(fin_proj.data<float>() + w.cand[k] * E, proj.data<float>() + w.cand_row[k] * E, size_t(E) * 4);
    }
    IncrementalResult& r = *w.res;
    r.embeddings = Tensor(DType::f32, {w.N, D});
    std::memcpy(r.embeddings.bytes(), fin.data<float>() + ps.pre * D, size_t(w.N) * ps.rowb);
    if (project) {
      r.projected = Tensor(DType::f32, {w.N, E});
      std::memcpy(r.projected.bytes(), fin_proj.data<float>() + ps.pre * E, size_t(w.N * E) * 4);
    }
    r.approximate = w.gate;
    r.flops_fraction = w.full_work > 0 ? w.work / w.full_work : 1;
    if (!w.est.empty() && w.N > 0) {
      double sum = 0, mx = 0;
      for (int64_t t = ps.pre; t < w.T; ++t) sum += w.est[size_t(t)], mx = std::max(mx, double(w.est[size_t(t)]));
      r.drift_estimate = sum / double(w.N), r.drift_estimate_max = mx;
    }
  }

}

// What the next call starts from: the last frame's token centres, whether the caches can gate.
void IncrementalEncoder::State::keep_state(Pass& ps) {
  const FrameWork& last = ps.fw.back();
  const Tensor& lp = *last.in->positions;
  centers.resize(size_t(2 * last.N));
  for (int64_t i = 0; i < last.N; ++i) {
    centers[size_t(2 * i)] = lp.data<float>()[i * lp.dim(1)];
    centers[size_t(2 * i + 1)] = lp.data<float>()[i * lp.dim(1) + 1];
  }
  layers_valid = ps.params.reuse_layers;  // an exact call's caches are not kept up to date for gating
  tracked = ps.track;
  mlp_gated = ps.track && ps.thr_mlp2 >= 0;
  n = last.N;
  valid = true;
}


}  // namespace fovea
