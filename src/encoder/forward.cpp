// The ViT forward pass over a batch of foveated tokens.
//
// Schedule: every GEMM is one oneDNN matmul over all tokens (bias, GELU and the residual add
// fused as post-ops); LayerNorm is a Highway row kernel; attention is attention.cpp's.
// Kernels::reference runs the same algorithm with the scalar kernels.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>

#include "encoder/attention.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"

namespace fovea {

using namespace encoder_detail;

namespace {

size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }

struct Buffer {
  std::unique_ptr<std::byte[], AlignedFree> p;
  Buffer() = default;
  explicit Buffer(size_t bytes) : p(aligned_alloc_bytes(bytes)) {}
  template <typename T> T* as() { return reinterpret_cast<T*>(p.get()); }
  std::byte* get() { return p.get(); }
};

using Ops = LayerOps;

}  // namespace

namespace encoder_detail {

LayerOps LayerOps::for_context(EncoderContext::Impl& ctx, const VitModel::Impl& m, const Executor& exec) {
  LayerOps ops;
  ops.ref = exec.reference();
  ops.threads = std::max(1, exec.threads());
  if (!ops.ref) ops.gemm = &bind_gemm(ctx, m, ops.threads);
  return ops;
}

void LayerOps::layer_norm(const float* x, int64_t rows, int64_t n, const Tensor& w, const Tensor& b, float eps,
                          void* out, DType out_dt) const {
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

void LayerOps::attention_out(const VitLayer& l, const std::byte* A, int64_t rows, float* x, DType dt) const {
  GemmArgs o = linear_args(A, dt, rows, l.out_w, &l.out_b, x, DType::f32);
  o.accumulate = true;
  linear(o);
}

void LayerOps::mlp(const VitLayer& l, const VitConfig& c, const float* x, int64_t rows, std::byte* H, std::byte* Hm,
                   DType dt, float* out, bool accumulate) const {
  layer_norm(x, rows, c.hidden, l.ln2_w, l.ln2_b, c.ln_eps, H, dt);
  GemmArgs f1 = linear_args(H, dt, rows, l.fc1_w, &l.fc1_b, Hm, dt);
  f1.post = post_for(c.act);
  linear(f1);
  GemmArgs f2 = linear_args(Hm, dt, rows, l.fc2_w, &l.fc2_b, out, DType::f32);
  if (c.act == Activation::swiglu) {
    // Row r of Hm is [x1 | x2] (2·mlp wide): silu(x1)·x2 overwrites x1 in place, and fc2 reads
    // those first halves (row stride 2·mlp).
    const int64_t h = c.mlp;
    const size_t es = esize(dt);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      std::byte* row = Hm + size_t(r * 2 * h) * es;
      auto silu = [](float a) { return a / (1.0f + std::exp(-a)); };
      if (dt == DType::f32) {
        float* v = reinterpret_cast<float*>(row);
        for (int64_t j = 0; j < h; ++j) v[j] = silu(v[j]) * v[h + j];
      } else {
        uint16_t* v = reinterpret_cast<uint16_t*>(row);
        for (int64_t j = 0; j < h; ++j) v[j] = f32_to_bf16(silu(bf16_to_f32(v[j])) * bf16_to_f32(v[h + j]));
      }
    }
    f2.lda = 2 * h;
  }
  f2.accumulate = accumulate;
  linear(f2);
}

void LayerOps::attention_out_and_mlp(const VitLayer& l, const VitConfig& c, const std::byte* A, int64_t rows, float* x,
                                     std::byte* H, std::byte* Hm, DType dt) const {
  attention_out(l, A, rows, x, dt);
  mlp(l, c, x, rows, H, Hm, dt, x, true);
}

}  // namespace encoder_detail

namespace {

Tensor row_copy(const float* src, int64_t d) {
  Tensor t(DType::f32, {1, d});
  std::memcpy(t.bytes(), src, size_t(d) * 4);
  return t;
}

// y[n] = W[n, k]·x[k] + b (fp32, small: heads and pooling).
std::vector<float> matvec(const Tensor& w, const Tensor* b, const float* x) {
  const int64_t n = w.dim(0), k = w.dim(1);
  std::vector<float> y(n);
  const float* pw = w.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < k; ++j) acc += double(pw[i * k + j]) * x[j];
    y[i] = float(acc) + (b && present(*b) ? b->data<float>()[i] : 0.0f);
  }
  return y;
}

// SigLIP's MultiheadAttentionPoolingHead over the (post-normed) hidden states x [T, D].
std::vector<float> siglip_pool(const Ops& ops, const VitModel::Impl& m, const float* x, int64_t T) {
  const VitConfig& c = m.config;
  const int64_t D = c.hidden, hd = c.head_dim();
  // q from the probe; k, v for every token (one GEMM against the k|v rows of in_proj).
  std::vector<float> q(D);
  const float* w = m.pool_in_w.data<float>();
  const float* b = m.pool_in_b.data<float>();
  const float* probe = m.pool_probe.data<float>();
  for (int64_t i = 0; i < D; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < D; ++j) acc += double(w[i * D + j]) * probe[j];
    q[i] = float(acc) + b[i];
  }
  Buffer kv(size_t(T * 2 * D) * 4);
  GemmArgs g{};
  g.a = x, g.lda = D, g.a_dt = DType::f32;
  g.w = w + D * D, g.ldw = D, g.w_dt = DType::f32;
  g.bias = b + D;
  g.c = kv.get(), g.ldc = 2 * D, g.c_dt = DType::f32;
  g.m = T, g.n = 2 * D, g.k = D;
  ops.linear(g);
  const float* K = kv.as<float>();
  std::vector<float> o(D, 0.0f), s(T);
  const double scale = 1.0 / std::sqrt(double(hd));
  for (int h = 0; h < c.heads; ++h) {
    double mx = -INFINITY;
    for (int64_t t = 0; t < T; ++t) {
      double acc = 0;
      for (int64_t j = 0; j < hd; ++j) acc += double(q[h * hd + j]) * K[t * 2 * D + h * hd + j];
      s[t] = float(acc * scale);
      mx = std::max(mx, double(s[t]));
    }
    double sum = 0;
    std::vector<double> acc(hd, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const double e = std::exp(double(s[t]) - mx);
      sum += e;
      for (int64_t j = 0; j < hd; ++j) acc[j] += e * K[t * 2 * D + D + h * hd + j];
    }
    for (int64_t j = 0; j < hd; ++j) o[h * hd + j] = float(acc[j] / sum);
  }
  std::vector<float> a = matvec(m.pool_out_w, &m.pool_out_b, o.data());
  std::vector<float> n(D);
  layer_norm_row_ref(a.data(), m.pool_ln_w.data<float>(), m.pool_ln_b.data<float>(), c.ln_eps, D, n.data(), DType::f32);
  std::vector<float> hmid = matvec(m.pool_fc1_w, &m.pool_fc1_b, n.data());
  for (float& v : hmid) v = activation_ref(c.act, v);
  std::vector<float> out = matvec(m.pool_fc2_w, &m.pool_fc2_b, hmid.data());
  for (int64_t i = 0; i < D; ++i) out[i] += a[i];
  return out;
}

// Throws unless patches, positions, images and params make a batch m encodes.
void check_batch(const VitModel::Impl& m, const TensorView& patches, const TensorView& positions,
                 std::span<const ImageSpan> images, const EncodeParams& params) {
  const VitConfig& c = m.config;
  if (c.native.enabled())
    throw invalid_argument("encode: '" + m.source + "' is a native-resolution tower (" + std::string(to_string(c.family)) +
                           "): it encodes native images (encode_native, fovea/native.hpp), not a token batch");
  if (patches.rank() != 4 || patches.dim(0) < 1)
    throw invalid_argument("encode: patches must be [N, C, P, P] with N >= 1");
  if (patches.dtype() != DType::f32 && patches.dtype() != DType::f16)
    throw invalid_argument("encode: patches must be float32 or float16, normalised as the model expects (tokenize with "
              "--dtype f32 or f16; u8 patches are not normalised)");
  if (patches.dim(1) != c.channels || patches.dim(2) != c.patch_px || patches.dim(3) != c.patch_px)
    throw invalid_argument("encode: patches are [N, " + std::to_string(patches.dim(1)) + ", " + std::to_string(patches.dim(2)) +
              ", " + std::to_string(patches.dim(3)) + "] but the model takes " + std::to_string(c.channels) + "×" +
              std::to_string(c.patch_px) + "×" + std::to_string(c.patch_px) + " patches (use --patch " +
              std::to_string(c.patch_px) + ")");
  const int64_t N = patches.dim(0);
  if (positions.dtype() != DType::f32 || positions.rank() != 2 || positions.dim(0) != N || positions.dim(1) < 2)
    throw invalid_argument("encode: positions must be [N, 4] float32 with N = " + std::to_string(N));
  if (N > (int64_t(1) << 20)) throw Error(Errc::limit_exceeded, "encode: more than 2^20 tokens");
  if (images.empty()) throw invalid_argument("encode: no image to encode");
  int64_t sum = 0;
  for (const ImageSpan& im : images) {
    if (im.tokens < 1) throw invalid_argument("encode: every image needs at least one token");
    if (im.image_width < 1 || im.image_height < 1) throw invalid_argument("encode: the image size must be positive");
    sum += im.tokens;
    if (sum > N) break;
  }
  if (sum != N)
    throw invalid_argument("encode: the images' tokens add up to " + std::to_string(sum) + ", not the " + std::to_string(N) +
              " rows of patches");
  if (params.attention.top_k < 1 || params.attention.block_tokens < 1)
    throw invalid_argument("encode: hierarchical attention needs top_k >= 1 and block_tokens >= 1");
  const float* pos = positions.data<float>();
  const int64_t pst = positions.dim(1);
  for (int64_t i = 0; i < N; ++i)
    if (!std::isfinite(pos[i * pst]) || !std::isfinite(pos[i * pst + 1]))
      throw invalid_argument("encode: token " + std::to_string(i) + " has a non-finite position");
}

// Where a checked batch's rows lie. Image i's rows of the residual stream: [row0[i], row0[i] +
// pre + n_i), its prefix rows (the class token's row first: the pooled outputs read it) before
// its patch tokens; its patches are rows [tok0[i], tok0[i] + n_i) of the input.
struct BatchRows {
  std::span<const ImageSpan> images;
  int64_t N, D, pre, B, T;  // tokens, width, prefix rows per image, images, residual stream rows
  const float* pos;         // positions [N, pst]
  int64_t pst;
  std::vector<int64_t> row0, tok0;  // [B + 1]

  BatchRows(const VitConfig& c, const TensorView& positions, std::span<const ImageSpan> images)
      : images(images), N(positions.dim(0)), D(c.hidden), pre(prefix_tokens(c)), B(int64_t(images.size())),
        T(N + B * pre), pos(positions.data<float>()), pst(positions.dim(1)), row0(size_t(B + 1)), tok0(size_t(B + 1)) {
    for (int64_t i = 0; i < B; ++i) {
      row0[size_t(i + 1)] = row0[size_t(i)] + pre + images[size_t(i)].tokens;
      tok0[size_t(i + 1)] = tok0[size_t(i)] + images[size_t(i)].tokens;
    }
  }
  int64_t tokens(int64_t i) const { return images[size_t(i)].tokens; }
  const float* positions(int64_t i) const { return pos + tok0[size_t(i)] * pst; }
};

// The residual stream x [T, D] before the first layer: every image's patch embeddings (one GEMM)
// after its prefix rows, plus its position embeddings; pre-normed where the model says so.
void embed(const Ops& ops, const VitModel::Impl& m, const TensorView& patches, const BatchRows& r, float* x) {
  const VitConfig& c = m.config;
  const int64_t N = r.N, D = r.D, pre = r.pre, B = r.B;
  const int64_t K = int64_t(c.channels) * c.patch_px * c.patch_px;
  {
    const float* src = nullptr;
    Buffer tmp;
    if (patches.dtype() == DType::f32) {
      src = patches.data<float>();
    } else {
      tmp = Buffer(size_t(N * K) * 4);
      const uint16_t* h = patches.data<uint16_t>();
      float* t = tmp.as<float>();
      for (int64_t i = 0; i < N * K; ++i) t[i] = f16_to_f32(h[i]);
      src = t;
    }
    if (B == 1) {
      ops.linear(linear_args(src, DType::f32, N, m.patch_w, &m.patch_b, x + pre * D, DType::f32));
    } else {
      // One GEMM over every image's patches, then each image's rows after its prefix rows.
      Buffer e(size_t(N * D) * 4);
      ops.linear(linear_args(src, DType::f32, N, m.patch_w, &m.patch_b, e.as<float>(), DType::f32));
      for (int64_t i = 0; i < B; ++i)
        std::memcpy(x + (r.row0[size_t(i)] + pre) * D, e.as<float>() + r.tok0[size_t(i)] * D,
                    size_t(r.tokens(i) * D) * 4);
    }
  }
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t t = 0; t < pre; ++t) prefix_row(m, t, x + (r.row0[size_t(i)] + t) * D);
    const ImageSpan& im = r.images[size_t(i)];
    const float* ip = r.positions(i);
    float* xi = x + (r.row0[size_t(i)] + pre) * D;
    const int64_t pst = r.pst;
    const PositionSampler sampler(c, m.pos_grid.data<float>(), im.image_width, im.image_height, ip, im.tokens, pst);
#pragma omp parallel for num_threads(ops.threads) schedule(static)
    for (int64_t j = 0; j < im.tokens; ++j) sampler.add(ip + j * pst, pst, xi + j * D);
  }
  if (c.pre_norm) ops.layer_norm(x, r.T, D, m.pre_w, m.pre_b, c.ln_eps, x, DType::f32);
}

// The transformer layers over the residual stream x, in dt: the linear layers over every
// image's rows at once, attention within each image. Returns the time spent in attention.
std::chrono::steady_clock::duration run_layers(const Ops& ops, EncoderContext::Impl& cx, const VitModel::Impl& m,
                                               const BatchRows& r, const AttentionParams& attention, DType dt, float* x) {
  const VitConfig& c = m.config;
  const int64_t D = r.D, T = r.T, B = r.B;
  const size_t es = esize(dt);
  Buffer H(size_t(T * D) * es), QKV(size_t(T * 3 * D) * es), A(size_t(T * D) * es), Hm(size_t(T * fc1_width(c)) * es);
  if (!cx.attention_ws) cx.attention_ws = std::make_shared<AttentionWorkspace>();
  std::vector<HierarchicalPlan> plans;
  const bool hier = attention.mode == AttentionParams::Mode::hierarchical;
  if (hier)
    for (int64_t i = 0; i < B; ++i) plans.push_back(plan_hierarchical(attention, r.pre, r.positions(i), r.pst, r.tokens(i)));
  std::chrono::steady_clock::duration attention_time{};
  for (const VitLayer& l : m.layers) {
    ops.layer_norm(x, T, D, l.ln1_w, l.ln1_b, c.ln_eps, H.get(), dt);
    ops.linear(linear_args(H.get(), dt, T, l.qkv_w, &l.qkv_b, QKV.get(), dt));
    const auto t_att = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < B; ++i) {
      const int64_t r0 = r.row0[size_t(i)], Ti = r.row0[size_t(i + 1)] - r0;
      const std::byte* qkv = QKV.get() + size_t(r0 * 3 * D) * es;
      if (cx.attention_probe) cx.attention_probe(int(&l - m.layers.data()), qkv, dt, Ti);
      attention_rows({ops.ref, ops.threads, ops.gemm, ops.int8 != nullptr}, qkv, 3 * D, Ti, qkv + size_t(D) * es, 3 * D, Ti, D, c.heads, dt,
                     A.get() + size_t(r0 * D) * es, hier ? &plans[size_t(i)] : nullptr, cx.attention_ws.get());
    }
    attention_time += std::chrono::steady_clock::now() - t_att;
    ops.attention_out_and_mlp(l, c, A.get(), T, x, H.get(), Hm.get(), dt);
  }
  if (c.final_norm == FinalNorm::all_tokens) ops.layer_norm(x, T, D, m.post_w, m.post_b, c.ln_eps, x, DType::f32);
  return attention_time;
}

// One image's outputs from its rows xi [pre + n, D] of the final residual stream: its token
// embeddings, class token, pooled output and what the model's heads make of them.
Encoding image_outputs(const Ops& ops, const VitModel::Impl& m, PooledSource source, const float* xi, int64_t n,
                       int64_t pre) {
  const VitConfig& c = m.config;
  const int64_t D = c.hidden, Ti = n + pre;
  Encoding e;
  e.embeddings = Tensor(DType::f32, {n, D});
  std::memcpy(e.embeddings.bytes(), xi + pre * D, size_t(n * D) * 4);
  if (c.class_token) e.class_token = row_copy(xi, D);
  std::vector<float> pooled;
  switch (source) {
    case PooledSource::none: break;
    case PooledSource::post_layernorm:
    case PooledSource::post_layernorm_again:
      pooled.resize(size_t(D));
      layer_norm_row_ref(xi, m.post_w.data<float>(), m.post_b.data<float>(), c.ln_eps, D, pooled.data(), DType::f32);
      break;
    case PooledSource::class_token: pooled.assign(xi, xi + D); break;
    case PooledSource::pooler:
      pooled = matvec(m.pooler_w, &m.pooler_b, xi);
      for (float& v : pooled) v = std::tanh(v);
      break;
    case PooledSource::attention_pool: pooled = siglip_pool(ops, m, xi, Ti); break;
  }
  if (!pooled.empty()) e.pooled = row_copy(pooled.data(), D);
  // CLIP's visual_projection reads the pooled output.
  if (c.family == VitFamily::clip && !pooled.empty() && present(m.proj_w)) {
    const std::vector<float> y = matvec(m.proj_w, nullptr, pooled.data());
    e.image_embeds = row_copy(y.data(), int64_t(y.size()));
  }
  // The classifier reads the normed class token, as HF's ViTForImageClassification, torchvision
  // and timm's head do, or the attention pool's output (timm's head after global_pool='map').
  if (present(m.head_w)) {
    const bool from_pool = source == PooledSource::attention_pool;
    if (from_pool || c.family == VitFamily::torchvision || c.family == VitFamily::vit ||
        c.family == VitFamily::dinov2) {
      const std::vector<float> y = matvec(m.head_w, &m.head_b, from_pool ? pooled.data() : xi);
      e.logits = row_copy(y.data(), int64_t(y.size()));
    }
  }
  if (c.projector != ProjectorType::none) e.projected = run_projector(m, xi + pre * D, n, ops.ref ? nullptr : ops.gemm);
  return e;
}

}  // namespace

std::vector<Encoding> encode_batch(EncoderContext& ctx, const VitModel& model, const TensorView& patches,
                                   const TensorView& positions, std::span<const ImageSpan> images,
                                   const EncodeParams& params, Executor& exec) {
  const auto t_start = std::chrono::steady_clock::now();
  const VitModel::Impl& m = model.impl();
  check_batch(m, patches, positions, images, params);

  EncoderContext::Impl& cx = ctx.impl();
  const ContextUse in_use(cx);  // one call at a time per context; other contexts run alongside
  const OmpThreadsScope team(std::max(1, exec.threads()));  // oneDNN's team size, the caller's restored on return
  Ops ops = LayerOps::for_context(cx, m, exec);
  const Precision precision = runnable_precision(params.precision);  // bf16 needs bf16 kernels
  // int8 runs everything but the layers' linear maps as bf16 does (fp32 without bf16 kernels).
  if (precision == Precision::int8) ops.int8 = &int8_layers(m);
  const bool bf16 = precision == Precision::bf16 || (precision == Precision::int8 && bf16_supported());
  const DType dt = bf16 ? DType::bf16 : DType::f32;

  const BatchRows r(m.config, positions, images);
  Buffer X(size_t(r.T * r.D) * 4);
  float* x = X.as<float>();
  embed(ops, m, patches, r, x);
  const std::chrono::steady_clock::duration attention_time = run_layers(ops, cx, m, r, params.attention, dt, x);

  std::vector<Encoding> out;
  out.reserve(size_t(r.B));
  const PooledSource source = pooled_source(m);  // pooled_output() names it from the same decision
  for (int64_t i = 0; i < r.B; ++i) {
    out.push_back(image_outputs(ops, m, source, x + r.row0[size_t(i)] * r.D, r.tokens(i), r.pre));
    out.back().precision = precision;
  }
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  const double att_ms = std::chrono::duration<double, std::milli>(attention_time).count();
  for (Encoding& e : out) e.encode_ms = total_ms, e.attention_ms = att_ms;
  return out;
}

std::vector<Encoding> encode_batch(const VitModel& model, const TensorView& patches, const TensorView& positions,
                                   std::span<const ImageSpan> images, const EncodeParams& params, Executor& exec) {
  ContextPool::Lease lease = model.impl().contexts.take();
  return encode_batch(lease.context(), model, patches, positions, images, params, exec);
}

Encoding encode(EncoderContext& ctx, const VitModel& model, const TensorView& patches, const TensorView& positions,
                const EncodeParams& params, Executor& exec) {
  const ImageSpan one{patches.rank() == 4 ? patches.dim(0) : 0, params.image_width, params.image_height};
  if (patches.rank() != 4 || patches.dim(0) < 1) throw invalid_argument("encode: patches must be [N, C, P, P] with N >= 1");
  std::vector<Encoding> e =
      encode_batch(ctx, model, patches, positions, std::span<const ImageSpan>(&one, 1), params, exec);
  return std::move(e.front());
}

Encoding encode(const VitModel& model, const TensorView& patches, const TensorView& positions, const EncodeParams& params,
                Executor& exec) {
  ContextPool::Lease lease = model.impl().contexts.take();
  return encode(lease.context(), model, patches, positions, params, exec);
}

double cosine_similarity(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32 || a.numel() != b.numel())
    throw invalid_argument("cosine_similarity: tensors must be float32 of equal size");
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  double xy = 0, xx = 0, yy = 0;
  for (int64_t i = 0; i < a.numel(); ++i) xy += double(x[i]) * y[i], xx += double(x[i]) * x[i], yy += double(y[i]) * y[i];
  return xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : (xx == yy ? 1.0 : 0.0);
}

double mean_row_cosine(const Tensor& a, const Tensor& b) {
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32 || a.shape() != b.shape() || a.rank() != 2)
    throw invalid_argument("mean_row_cosine: tensors must be [N, D] float32 of equal shape");
  const int64_t n = a.dim(0), d = a.dim(1);
  if (n == 0) return 1.0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = a.data<float>() + i * d;
    const float* y = b.data<float>() + i * d;
    double xy = 0, xx = 0, yy = 0;
    for (int64_t j = 0; j < d; ++j) xy += double(x[j]) * y[j], xx += double(x[j]) * x[j], yy += double(y[j]) * y[j];
    total += xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : 1.0;
  }
  return total / double(n);
}

}  // namespace fovea
