// The native-resolution towers' forward pass (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the Conv3d patch
// embedding as one GEMM, Qwen3-VL's learned table, 2-D rotary positions applied to q and k,
// attention within each image's frame (Qwen2.5-VL: within windows, in the window order, except in
// the full-attention blocks), the 2×2 patch merger and the DeepStack mergers. The linear layers
// are the ViT forward pass's GEMMs (oneDNN, fovea's kernels), over every image's rows at once.
// run_tower (native_tower.hpp) runs any layout of patches: encode_native's images here,
// encode_native_mixed's merge units of mixed levels (native_mixed.cpp).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string_view>

#include "encoder/attention.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"
#include "fovea/native.hpp"
#include "encoder/native_tower.hpp"

namespace fovea {

using namespace encoder_detail;
using namespace native_detail;

namespace {

size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }

struct Buffer {
  std::unique_ptr<std::byte[], AlignedFree> p;
  Buffer() = default;
  explicit Buffer(size_t bytes) : p(aligned_alloc_bytes(std::max<size_t>(bytes, 64))) {}
  template <typename T> T* as() { return reinterpret_cast<T*>(p.get()); }
  std::byte* get() { return p.get(); }
};

void store(void* out, DType dt, int64_t i, float v) {
  if (dt == DType::f32) static_cast<float*>(out)[i] = v;
  else static_cast<uint16_t*>(out)[i] = f32_to_bf16(v);
}
float load(const void* in, DType dt, int64_t i) {
  return dt == DType::f32 ? static_cast<const float*>(in)[i] : bf16_to_f32(static_cast<const uint16_t*>(in)[i]);
}

// out[r] = RMSNorm(x[r]) = w ⊙ x / √(mean(x²) + eps) (Qwen2RMSNorm), or LayerNorm with bias b.
void norm_rows(const LayerOps& ops, const NativeConfig& nc, const float* x, int64_t rows, int64_t n, const Tensor& w,
               const Tensor& b, float eps, void* out, DType dt) {
  if (!nc.rms_norm) {
    ops.layer_norm(x, rows, n, w, b, eps, out, dt);
    return;
  }
  const float* pw = w.data<float>();
#pragma omp parallel for num_threads(ops.threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += double(xr[j]) * xr[j];
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t j = 0; j < n; ++j) store(out, dt, r * n + j, pw[j] * (xr[j] * inv));
  }
}

// Row r of the residual stream holds patch order[r] (of all images' patches, image after image):
// Qwen2.5-VL's window order (get_window_index: merge units window by window), else the
// processor's. `full` gets each frame's rows, `windowed` each window's (window attention only).
void tower_order(std::span<const NativeInput> images, const NativeConfig& nc, int P, int64_t N,
                 std::vector<int64_t>& order, std::vector<Segment>& full, std::vector<Segment>& windowed) {
  const int mg = nc.merge, unit = mg * mg;
  order.assign(static_cast<size_t>(N), 0);
  int64_t base = 0;
  for (const NativeInput& in : images) {
    const NativeGrid& g = in.grid;
    for (int t = 0; t < g.t; ++t) full.push_back({base + int64_t(t) * g.h * g.w, base + int64_t(t + 1) * g.h * g.w});
    base += g.patches();
  }
  if (nc.window_px > 0) {
    const int vws = std::max(1, nc.window_px / mg / P);  // merge units per window side
    int64_t row = 0, unit0 = 0;
    for (const NativeInput& in : images) {
      const NativeGrid& g = in.grid;
      const int lh = g.h / mg, lw = g.w / mg;
      for (int t = 0; t < g.t; ++t)
        for (int wy = 0; wy < lh; wy += vws)
          for (int wx = 0; wx < lw; wx += vws) {
            const int64_t begin = row;
            for (int y = wy; y < std::min(wy + vws, lh); ++y)
              for (int x = wx; x < std::min(wx + vws, lw); ++x) {
                const int64_t u = unit0 + (int64_t(t) * lh + y) * lw + x;
                for (int k = 0; k < unit; ++k) order[size_t(row++)] = u * unit + k;
              }
            windowed.push_back({begin, row});
          }
      unit0 += g.merged(mg);
    }
  } else {
    std::iota(order.begin(), order.end(), int64_t(0));
  }
}

// Per row of the tower's order: cos and sin of its rotary angles, [N, half]. Frequency j < half/2
// turns with the patch's row, j >= half/2 with its column.
void rotary_tables(const LayerOps& ops, const NativeConfig& nc, const TowerInput& in, int64_t half,
                   std::vector<float>& cosv, std::vector<float>& sinv) {
  const int64_t N = in.size(), quarter = half / 2;
  cosv.assign(size_t(N * half), 0.0f), sinv.assign(size_t(N * half), 0.0f);
  std::vector<double> inv(static_cast<size_t>(quarter));
  for (int64_t i = 0; i < quarter; ++i) inv[size_t(i)] = 1.0 / std::pow(nc.rope_theta, double(2 * i) / double(half));
#pragma omp parallel for num_threads(ops.threads) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const size_t p = size_t(in.order[size_t(i)]);
    for (int64_t j = 0; j < half; ++j) {
      const double a = (j < quarter ? in.row[p] : in.col[p]) * inv[size_t(j % quarter)];
      cosv[size_t(i * half + j)] = float(std::cos(a));
      sinv[size_t(i * half + j)] = float(std::sin(a));
    }
  }
}

// q and k of every row of qkv ([N, 3D], f32 or bf16) rotated in place by the rows' angles.
void rotate_qk(const LayerOps& ops, std::byte* qkv, int64_t N, int64_t D, int64_t heads, int64_t hd, DType dt,
               const std::vector<float>& cosv, const std::vector<float>& sinv) {
  const size_t es = esize(dt);
  const int64_t half = hd / 2;
#pragma omp parallel for num_threads(ops.threads) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* cs = &cosv[size_t(i * half)];
    const float* sn = &sinv[size_t(i * half)];
    thread_local std::vector<float> row;
    row.resize(size_t(2 * D));
    float* qk = row.data();  // this row's q | k as f32
    std::byte* src = qkv + size_t(i * 3 * D) * es;
    if (dt == DType::f32) std::memcpy(qk, src, size_t(2 * D) * 4);
    else from_bf16_row(reinterpret_cast<const uint16_t*>(src), qk, 2 * D);
    for (int64_t h = 0; h < 2 * heads; ++h) {
      float* v = qk + h * hd;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * cs[j] - b * sn[j];
        v[j + half] = b * cs[j] + a * sn[j];
      }
    }
    if (dt == DType::f32) std::memcpy(src, qk, size_t(2 * D) * 4);
    else to_bf16_row(qk, reinterpret_cast<uint16_t*>(src), 2 * D);
  }
}

// Attention within each window (Qwen2.5-VL's are small: 64 patches): every (window, head) pair is
// one task of one parallel region, softmax(q·kᵀ/√hd)·v in f32 on the thread's own buffers, rather
// than several parallel regions and GEMM calls per window. out: [N, D] in dt.
void window_attention(const LayerOps& ops, const std::byte* qkv, const std::vector<Segment>& windowed, int64_t D,
                      int64_t heads, int64_t hd, DType dt, std::byte* out) {
  const size_t es = esize(dt);
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int64_t tasks = int64_t(windowed.size()) * heads;
#pragma omp parallel num_threads(ops.threads)
  {
    std::vector<float> q, k, v, p, o;
    std::vector<float> row(static_cast<size_t>(3 * D));
#pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < tasks; ++task) {
      const Segment& s = windowed[size_t(task / heads)];
      const int64_t h = task % heads, T = s.end - s.begin;
      if (T < 1) continue;
      q.resize(size_t(T * hd)), k.resize(size_t(T * hd)), v.resize(size_t(T * hd));
      p.resize(size_t(T)), o.resize(size_t(hd));
      for (int64_t t = 0; t < T; ++t) {
        const std::byte* r = qkv + size_t((s.begin + t) * 3 * D) * es;
        for (int part = 0; part < 3; ++part) {
          float* dst = (part == 0 ? q : part == 1 ? k : v).data() + t * hd;
          const int64_t off = part * D + h * hd;
          if (dt == DType::f32) std::memcpy(dst, reinterpret_cast<const float*>(r) + off, size_t(hd) * 4);
          else from_bf16_row(reinterpret_cast<const uint16_t*>(r) + off, dst, hd);
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = q.data() + i * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          const float* kj = k.data() + j * hd;
          float acc = 0;
          for (int64_t d = 0; d < hd; ++d) acc += qi[d] * kj[d];
          p[size_t(j)] = acc * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        float sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        std::fill(o.begin(), o.end(), 0.0f);
        for (int64_t j = 0; j < T; ++j) {
          const float w = p[size_t(j)] / sum;
          const float* vj = v.data() + j * hd;
          for (int64_t d = 0; d < hd; ++d) o[size_t(d)] += w * vj[d];
        }
        std::byte* dst = out + size_t((s.begin + i) * D + h * hd) * es;
        if (dt == DType::f32) std::memcpy(dst, o.data(), size_t(hd) * 4);
        else to_bf16_row(o.data(), reinterpret_cast<uint16_t*>(dst), hd);
      }
    }
  }
}

// Qwen3-VL's learned positions added to x [N, D] (rows in the tower's order): the G×G table
// sampled bilinearly at each patch's table point.
void add_grid_positions(const LayerOps& ops, const Tensor& table, int G, int64_t D, const TowerInput& in, float* x) {
  const float* tab = table.data<float>();
  const int64_t N = in.size();
#pragma omp parallel for num_threads(ops.threads) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const size_t p = size_t(in.order[size_t(i)]);
    auto axis = [G](double v, int& lo, int& hi, double& f) {
      v = std::clamp(v, 0.0, double(G - 1));
      lo = std::min(int(v), G - 1), hi = std::min(lo + 1, G - 1), f = v - lo;
    };
    int y0, y1, x0, x1;
    double fy, fx;
    axis(in.table_y[p], y0, y1, fy);
    axis(in.table_x[p], x0, x1, fx);
    const float* a = tab + (int64_t(y0) * G + x0) * D;
    const float* b = tab + (int64_t(y0) * G + x1) * D;
    const float* cc = tab + (int64_t(y1) * G + x0) * D;
    const float* d = tab + (int64_t(y1) * G + x1) * D;
    const float wa = float((1 - fy) * (1 - fx)), wb = float((1 - fy) * fx), wc = float(fy * (1 - fx)), wd = float(fy * fx);
    float* xr = x + i * D;
    for (int64_t j = 0; j < D; ++j) xr[j] += wa * a[j] + wb * b[j] + wc * cc[j] + wd * d[j];
  }
}

// A DeepStack merger over x's merge units ([M, U] in the tower's order, norm after the shuffle):
// [M, E] f32 in the processor's order.
Tensor deepstack_merge(const LayerOps& ops, const VitModel::Impl::NativeMerger& dm, const float* x, int64_t M,
                       int64_t U, int64_t E, int unit, const std::vector<int64_t>& order, DType dt) {
  const size_t es = esize(dt);
  Buffer Zn(size_t(M * U) * es), Zh(size_t(M * U) * es), Zo(size_t(M * E) * 4);
  ops.layer_norm(x, M, U, dm.norm_w, dm.norm_b, 1e-6f, Zn.get(), dt);
  GemmArgs z1 = linear_args(Zn.get(), dt, M, dm.fc1_w, &dm.fc1_b, Zh.get(), dt);
  z1.post = Post::gelu_erf;
  ops.linear(z1);
  ops.linear(linear_args(Zh.get(), dt, M, dm.fc2_w, &dm.fc2_b, Zo.get(), DType::f32));
  Tensor t(DType::f32, {M, E});
  for (int64_t u = 0; u < M; ++u)
    std::memcpy(t.data<float>() + (order[size_t(u * unit)] / unit) * E, Zo.as<float>() + u * E, size_t(E) * 4);
  return t;
}

// One block: attention (rotary q and k; full or windowed) then the MLP, on the residual stream x.
struct BlockBuffers {
  Buffer H, QKV, A, Hm;
};
void run_block(const LayerOps& ops, const VitModel::Impl& m, const VitLayer& l, bool full_block, const TowerInput& in,
               const std::vector<float>& cosv, const std::vector<float>& sinv, DType dt, BlockBuffers& b,
               AttentionWorkspace* ws, float* x, std::chrono::steady_clock::duration& attention_time) {
  const VitConfig& c = m.config;
  const NativeConfig& nc = c.native;
  const int64_t N = in.size(), D = c.hidden, hd = c.head_dim();
  const size_t es = esize(dt);
  norm_rows(ops, nc, x, N, D, l.ln1_w, l.ln1_b, c.ln_eps, b.H.get(), dt);
  ops.linear(linear_args(b.H.get(), dt, N, l.qkv_w, &l.qkv_b, b.QKV.get(), dt));
  std::byte* qkv = b.QKV.get();
  rotate_qk(ops, qkv, N, D, c.heads, hd, dt, cosv, sinv);  // q and k rotated in place
  const auto t_att = std::chrono::steady_clock::now();
  auto attend = [&](const Segment& s) {
    const int64_t T = s.end - s.begin;
    if (T < 1) return;
    const std::byte* q = qkv + size_t(s.begin * 3 * D) * es;
    attention_rows({ops.ref, ops.threads, ops.gemm}, q, 3 * D, T, q + size_t(D) * es, 3 * D, T, D, c.heads, dt,
                   b.A.get() + size_t(s.begin * D) * es, nullptr, ws);
  };
  if (full_block || ops.ref) {
    for (const Segment& s : full_block ? in.full : in.windowed) attend(s);
  } else {
    window_attention(ops, qkv, in.windowed, D, c.heads, hd, dt, b.A.get());
  }
  attention_time += std::chrono::steady_clock::now() - t_att;
  GemmArgs o = linear_args(b.A.get(), dt, N, l.out_w, &l.out_b, x, DType::f32);
  o.accumulate = true;
  ops.linear(o);
  norm_rows(ops, nc, x, N, D, l.ln2_w, l.ln2_b, c.ln_eps, b.H.get(), dt);
  GemmArgs f1 = linear_args(b.H.get(), dt, N, l.fc1_w, &l.fc1_b, b.Hm.get(), dt);
  f1.post = post_for(c.act);
  ops.linear(f1);
  GemmArgs f2 = linear_args(b.Hm.get(), dt, N, l.fc2_w, &l.fc2_b, x, DType::f32);
  if (c.act == Activation::swiglu) {
    // fc1 is gate_proj | up_proj: silu(gate)·up over the first half, which down_proj reads.
    const int64_t h = c.mlp;
    std::byte* hm = b.Hm.get();
#pragma omp parallel for num_threads(ops.threads) schedule(static)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < h; ++j) {
        const float g = load(hm, dt, r * 2 * h + j), u = load(hm, dt, r * 2 * h + h + j);
        store(hm, dt, r * 2 * h + j, g / (1.0f + std::exp(-g)) * u);
      }
    f2.lda = 2 * h;
  }
  f2.accumulate = true;
  ops.linear(f2);
}

// The merger (ln_q, merge units concatenated, mlp.0, GELU, mlp.2) over x (tower order); out's
// embeddings and projected in the caller's order.
void merge_out(const LayerOps& ops, const VitModel::Impl& m, const TowerInput& in, const float* x, DType dt, Buffer& H,
               NativeEncoding& out) {
  const VitConfig& c = m.config;
  const int unit = c.native.merge * c.native.merge;
  const int64_t N = in.size(), M = N / unit, D = c.hidden, E = c.projector_dim, U = D * unit;
  const size_t es = esize(dt);
  norm_rows(ops, c.native, x, N, D, m.post_w, m.post_b, c.ln_eps, H.get(), dt);  // rows of a unit are consecutive
  Buffer Y(size_t(M * U) * es), Z(size_t(M * E) * 4);
  GemmArgs g0 = linear_args(H.get(), dt, M, m.mm0_w, &m.mm0_b, Y.get(), dt);
  g0.post = Post::gelu_erf;
  ops.linear(g0);
  ops.linear(linear_args(Y.get(), dt, M, m.mm2_w, &m.mm2_b, Z.get(), DType::f32));
  out.projected = Tensor(DType::f32, {M, E});
  out.embeddings = Tensor(DType::f32, {N, D});
  float* pe = out.embeddings.data<float>();
  float* pp = out.projected.data<float>();
#pragma omp parallel for num_threads(ops.threads) schedule(static)
  for (int64_t i = 0; i < N; ++i) std::memcpy(pe + in.order[size_t(i)] * D, x + i * D, size_t(D) * 4);
  for (int64_t u = 0; u < M; ++u)
    std::memcpy(pp + (in.order[size_t(u * unit)] / unit) * E, Z.as<float>() + u * E, size_t(E) * 4);
}

// The processor's native images (t = 1 each: a video's frame pairs are split into frames of their
// own by encode_native, which is exact: attention, rotary and learned positions never cross a
// frame) as the tower reads them: each patch's row and column in its image, Qwen3-VL's table
// sampled at linspace(0, G−1, h) × linspace(0, G−1, w) (fast_pos_embed_interpolate: corners
// aligned), Qwen2.5-VL's window order.
TowerInput frames_input(const VitConfig& c, std::span<const NativeInput> images) {
  const NativeConfig& nc = c.native;
  const int P = c.patch_px, mg = nc.merge, G = c.grid;
  const int64_t K = int64_t(c.channels) * nc.temporal_patch * P * P;
  int64_t N = 0;
  for (const NativeInput& in : images) {
    const NativeGrid& g = in.grid;
    if (g.t < 1 || g.h < mg || g.w < mg || g.h % mg || g.w % mg || g.h > 65536 || g.w > 65536)
      throw invalid_argument("encode_native: a grid (t " + std::to_string(g.t) + ", h " + std::to_string(g.h) + ", w " +
                             std::to_string(g.w) + ") needs t >= 1 and sides that are positive multiples of " +
                             std::to_string(mg));
    if (in.patches.dtype() != DType::f32 || in.patches.rank() != 2 || in.patches.dim(1) != K ||
        in.patches.dim(0) != g.patches())
      throw invalid_argument("encode_native: an image's patches must be [t·h·w = " + std::to_string(g.patches()) + ", " +
                             std::to_string(K) + "] float32 (native_input)");
    N += g.patches();
    if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, "encode_native: more than 2^20 patches");
  }
  TowerInput t;
  tower_order(images, nc, P, N, t.order, t.full, t.windowed);
  t.patch.reserve(size_t(N));
  t.row.reserve(size_t(N)), t.col.reserve(size_t(N)), t.table_y.reserve(size_t(N)), t.table_x.reserve(size_t(N));
  auto table = [G](int k, int n) { return n > 1 ? double(k) * double(G - 1) / double(n - 1) : 0.0; };
  for (const NativeInput& in : images) {
    const NativeGrid& g = in.grid;
    const float* p = in.patches.data<float>();
    for (int f = 0; f < g.t; ++f)
      for (int by = 0; by < g.h / mg; ++by)
        for (int bx = 0; bx < g.w / mg; ++bx)
          for (int my = 0; my < mg; ++my)
            for (int mx = 0; mx < mg; ++mx, p += K) {
              const int r = by * mg + my, cl = bx * mg + mx;
              t.patch.push_back(p);
              t.row.push_back(r), t.col.push_back(cl);
              t.table_y.push_back(table(r, g.h)), t.table_x.push_back(table(cl, g.w));
            }
  }
  return t;
}

// encode_native for frames (t = 1 each): the tower, image_rows and grid_thw. encode_native, its
// only caller, has checked that the tower is native and `images` not empty.
NativeEncoding encode_frames(EncoderContext& ctx, const VitModel& model, std::span<const NativeInput> images,
                             const EncodeParams& params, Executor& exec) {
  const VitConfig& c = model.config();
  NativeEncoding out = run_tower(ctx, model, frames_input(c, images), params, exec);
  const int64_t B = int64_t(images.size());
  out.grid_thw = Tensor(DType::i32, {B, 3});
  out.image_rows.push_back(0);
  for (int64_t i = 0; i < B; ++i) {
    const NativeGrid& g = images[size_t(i)].grid;
    int32_t* gp = out.grid_thw.data<int32_t>() + i * 3;
    gp[0] = g.t, gp[1] = g.h, gp[2] = g.w;
    out.image_rows.push_back(out.image_rows.back() + g.merged(c.native.merge));
  }
  return out;
}

}  // namespace

NativeEncoding native_detail::run_tower(EncoderContext& ctx, const VitModel& model, const TowerInput& in,
                                        const EncodeParams& params, Executor& exec) {
  const auto t_start = std::chrono::steady_clock::now();
  const VitModel::Impl& m = model.impl();
  const VitConfig& c = m.config;
  const NativeConfig& nc = c.native;
  const int unit = nc.merge * nc.merge;
  const int64_t N = in.size(), K = int64_t(c.channels) * nc.temporal_patch * c.patch_px * c.patch_px, D = c.hidden;
  if (N < 1 || N % unit || N > (int64_t(1) << 20) || int64_t(in.order.size()) != N)
    throw invalid_argument("encode_native: " + std::to_string(N) + " patches: needs 1..2^20 whole merge units");
  const int64_t M = N / unit;
  EncoderContext::Impl& cx = ctx.impl();
  const ContextUse in_use(cx);
  const OmpThreadsScope team(std::max(1, exec.threads()));
  const LayerOps ops = LayerOps::for_context(cx, m, exec);
  const Precision precision = runnable_precision(params.precision);
  const DType dt = precision == Precision::bf16 ? DType::bf16 : DType::f32;
  const size_t es = esize(dt);
  std::vector<bool> full_block(c.layers, nc.window_px <= 0);
  for (int i : nc.full_attention_blocks)
    if (i >= 0 && i < c.layers) full_block[size_t(i)] = true;

  // Patch embedding: one GEMM over every patch, rows in the tower's order; Qwen3-VL's table.
  Buffer X(size_t(N * D) * 4);
  float* x = X.as<float>();
  {
    Buffer src(size_t(N * K) * 4);
#pragma omp parallel for num_threads(ops.threads) schedule(static)
    for (int64_t i = 0; i < N; ++i) std::memcpy(src.as<float>() + i * K, in.patch[size_t(in.order[size_t(i)])], size_t(K) * 4);
    ops.linear(linear_args(src.get(), DType::f32, N, m.patch_w, &m.patch_b, x, DType::f32));
  }
  if (present(m.pos_grid)) add_grid_positions(ops, m.pos_grid, c.grid, D, in, x);
  // Rotary angles: [N, hd/2] cos and sin per row (inv_freq[i] = θ^(−4i/hd), i < hd/4; q[j] and
  // q[j + hd/2] rotate together).
  const int64_t half = c.head_dim() / 2;
  std::vector<float> cosv, sinv;
  rotary_tables(ops, nc, in, half, cosv, sinv);

  BlockBuffers b{Buffer(size_t(N * D) * es), Buffer(size_t(N * 3 * D) * es), Buffer(size_t(N * D) * es),
                 Buffer(size_t(N * fc1_width(c)) * es)};
  if (!cx.attention_ws) cx.attention_ws = std::make_shared<AttentionWorkspace>();
  std::chrono::steady_clock::duration attention_time{};
  NativeEncoding out;
  for (size_t li = 0; li < m.layers.size(); ++li) {
    run_block(ops, m, m.layers[li], full_block[li], in, cosv, sinv, dt, b, cx.attention_ws.get(), x, attention_time);
    // Qwen3-VL DeepStack: this block's hidden state through its own merger (norm after the shuffle).
    for (size_t k = 0; k < nc.deepstack_blocks.size() && k < m.deepstack.size(); ++k) {
      if (nc.deepstack_blocks[k] != int(li)) continue;
      if (out.deepstack.size() <= k) out.deepstack.resize(k + 1);
      out.deepstack[k] = deepstack_merge(ops, m.deepstack[k], x, M, D * unit, c.projector_dim, unit, in.order, dt);
    }
  }
  merge_out(ops, m, in, x, dt, b.H, out);
  out.precision = precision;
  out.encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  out.attention_ms = std::chrono::duration<double, std::milli>(attention_time).count();
  return out;
}

Tensor native_mrope_positions(const VitModel& model, std::span<const NativeInput> images) {
  const VitConfig& c = model.config();
  if (!c.native.enabled()) throw invalid_argument("native_mrope_positions: '" + model.source() + "' is not a native-resolution tower");
  const int mg = c.native.merge;
  int64_t M = 0;
  for (const NativeInput& in : images) {
    if (!(in.fps > 0) || !std::isfinite(in.fps)) throw invalid_argument("native_mrope_positions: fps must be positive");
    M += in.grid.merged(mg);
  }
  Tensor out(DType::i32, {M, 3});
  int32_t* p = out.data<int32_t>();
  int64_t start = 0;
  auto append = [&](const NativeGrid& g, double step) {
    const Tensor t = native_mrope_positions({&g, 1}, mg, step);
    const int32_t* q = t.data<int32_t>();
    int64_t largest = -1;
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = int32_t(q[i] + start);
      largest = std::max(largest, int64_t(q[i]));
    }
    p += t.numel();
    start += largest + 1;
  };
  for (const NativeInput& in : images) {
    const NativeGrid& g = in.grid;
    if (c.family == VitFamily::qwen3_vl) {
      // get_rope_index splits a video's grid into frame pairs of t = 1 (timestamps go between).
      for (int t = 0; t < g.t; ++t) append({1, g.h, g.w}, 1.0);
    } else {
      // Qwen2.5-VL: tokens_per_second · second_per_grid_t (temporal_patch / fps) per frame pair;
      // Qwen2-VL: the frame pair's index.
      const double step =
          c.native.tokens_per_second > 0 ? double(c.native.tokens_per_second) * c.native.temporal_patch / in.fps : 1.0;
      append(g, step);
    }
  }
  return out;
}

NativeEncoding encode_native(EncoderContext& ctx, const VitModel& model, std::span<const NativeInput> images,
                             const EncodeParams& params, Executor& exec) {
  const VitConfig& c = model.config();
  if (!c.native.enabled())
    throw invalid_argument("encode_native: '" + model.source() + "' is not a native-resolution tower (Qwen2-VL, Qwen2.5-VL, Qwen3-VL)");
  if (images.empty()) throw invalid_argument("encode_native: no image to encode");
  const int64_t K = int64_t(c.channels) * c.native.temporal_patch * c.patch_px * c.patch_px;
  bool split = false;
  for (const NativeInput& in : images) split = split || in.grid.t > 1;
  if (!split) {
    NativeEncoding e = encode_frames(ctx, model, images, params, exec);
    e.mrope_positions = native_mrope_positions(model, images);
    return e;
  }
  // Video: every frame pair as a frame of its own; a frame pair whose patches equal an earlier
  // one's (same grid, same bytes) is encoded once and its rows copied.
  for (const NativeInput& in : images)
    if (in.grid.t < 1 || in.grid.t > 65536 || in.grid.h < 1 || in.grid.h > 65536 || in.grid.w < 1 ||
        in.grid.w > 65536 || in.patches.dtype() != DType::f32 || in.patches.rank() != 2 || in.patches.dim(1) != K ||
        in.patches.dim(0) != in.grid.patches())
      throw invalid_argument("encode_native: an image's patches must be [t·h·w, " + std::to_string(K) +
                             "] float32 (native_input)");
  struct Frame {
    const float* p;
    NativeGrid g;
    size_t hash;
  };
  std::vector<Frame> frames;       // every frame pair, image after image
  std::vector<size_t> source;      // frame i's rows come from unique frame source[i]
  std::vector<size_t> unique_of;   // unique frame j is frame unique_of[j]
  for (const NativeInput& in : images) {
    const int64_t n = int64_t(in.grid.h) * in.grid.w;
    for (int t = 0; t < in.grid.t; ++t) {
      const float* p = in.patches.data<float>() + int64_t(t) * n * K;
      const size_t h = std::hash<std::string_view>{}(std::string_view(reinterpret_cast<const char*>(p), size_t(n * K) * 4));
      frames.push_back({p, {1, in.grid.h, in.grid.w}, h});
      size_t src = unique_of.size();
      for (size_t j = 0; j < unique_of.size(); ++j) {
        const Frame& u = frames[unique_of[j]];
        if (u.hash == h && u.g == frames.back().g && std::memcmp(u.p, p, size_t(n * K) * 4) == 0) {
          src = j;
          break;
        }
      }
      if (src == unique_of.size()) unique_of.push_back(frames.size() - 1);
      source.push_back(src);
    }
  }
  std::vector<NativeInput> ins;
  for (size_t j : unique_of) {
    const Frame& f = frames[j];
    NativeInput in{Tensor(DType::f32, {f.g.patches(), K}), f.g};
    std::memcpy(in.patches.bytes(), f.p, size_t(f.g.patches() * K) * 4);
    ins.push_back(std::move(in));
  }
  NativeEncoding u = encode_frames(ctx, model, ins, params, exec);
  // Rows back in every frame's place.
  const int unit = c.native.merge * c.native.merge;
  const int64_t D = c.hidden, E = c.projector_dim;
  int64_t N = 0, M = 0;
  for (const Frame& f : frames) N += f.g.patches(), M += f.g.patches() / unit;
  NativeEncoding out;
  out.embeddings = Tensor(DType::f32, {N, D});
  out.projected = Tensor(DType::f32, {M, E});
  for (size_t k = 0; k < u.deepstack.size(); ++k) out.deepstack.emplace_back(DType::f32, std::vector<int64_t>{M, E});
  std::vector<int64_t> urow(unique_of.size() + 1, 0);
  for (size_t j = 0; j < unique_of.size(); ++j) urow[j + 1] = urow[j] + ins[j].grid.patches();
  int64_t row = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    const int64_t n = frames[i].g.patches(), r0 = urow[source[i]];
    std::memcpy(out.embeddings.data<float>() + row * D, u.embeddings.data<float>() + r0 * D, size_t(n * D) * 4);
    std::memcpy(out.projected.data<float>() + row / unit * E, u.projected.data<float>() + r0 / unit * E,
                size_t(n / unit * E) * 4);
    for (size_t k = 0; k < u.deepstack.size(); ++k)
      std::memcpy(out.deepstack[k].data<float>() + row / unit * E, u.deepstack[k].data<float>() + r0 / unit * E,
                  size_t(n / unit * E) * 4);
    row += n;
  }
  out.grid_thw = Tensor(DType::i32, {int64_t(images.size()), 3});
  out.image_rows.push_back(0);
  for (size_t i = 0; i < images.size(); ++i) {
    const NativeGrid& g = images[i].grid;
    int32_t* gp = out.grid_thw.data<int32_t>() + i * 3;
    gp[0] = g.t, gp[1] = g.h, gp[2] = g.w;
    out.image_rows.push_back(out.image_rows.back() + g.merged(c.native.merge));
  }
  out.mrope_positions = native_mrope_positions(model, images);
  out.frames_reused = int(frames.size() - unique_of.size());
  out.precision = u.precision;
  out.encode_ms = u.encode_ms, out.attention_ms = u.attention_ms;
  return out;
}

NativeEncoding encode_native(const VitModel& model, std::span<const NativeInput> images, const EncodeParams& params,
                             Executor& exec) {
  ContextPool::Lease lease = model.impl().contexts.take();
  return encode_native(lease.context(), model, images, params, exec);
}

}  // namespace fovea
