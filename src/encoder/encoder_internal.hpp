// Private to src/encoder: the weights of a loaded ViT and the kernels the forward pass uses.
#pragma once

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tensor.hpp"

namespace fovea {

namespace encoder_detail {
class Gemm;
struct AttentionWorkspace;
namespace int8 {
struct Layers;
}
// Optional weights are "present" when they have a shape and elements (a default Tensor is
// empty; a rank-0 tensor would be a scalar, which no weight is).
inline bool present(const Tensor& t) { return t.rank() > 0 && t.numel() > 0; }

// The calling thread's OpenMP team size (what oneDNN's primitives and a `#pragma omp parallel`
// without num_threads use) set to `threads` for a scope, and the caller's value put back when
// it ends, exceptions included. The value is the calling thread's own (OpenMP keeps it per
// thread), so concurrent calls from different threads do not see each other's.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) : saved_(omp_get_max_threads()) {
    if (threads != saved_) omp_set_num_threads(threads);
  }
  ~OmpThreadsScope() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int saved_;
};

// Constant weights packed for the kernels (gemm.cpp): bf16 conversions, oneDNN's blocked
// layouts, fovea's AMX and AVX2 panels. One per model, shared by every context that encodes with
// it, so a copy is made once, by whichever GEMM needs it first. Thread-safe: the index of
// weights takes a mutex on a weight's first lookup by a context, each weight its own mutex
// while one of its copies is made; a context keeps what it looked up (Gemm), so later reads
// take no lock. Copies are never changed or freed before the model.
class PackedWeights {
 public:
  PackedWeights();
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;
  // Bytes of packed copies held, and how many (a weight packed into two layouts counts twice).
  struct Stats {
    size_t bytes = 0;
    int weights = 0;
  };
  Stats stats() const;
  // No weight was ever used (counted or packed) through this cache.
  bool untouched() const;
  struct State;
  State& state() const { return *s_; }

 private:
  std::unique_ptr<State> s_;
};

// The contexts of the calls that bring none (encode(model, ...)): a call takes a free one, or a
// new one, and gives it back when it returns, so such calls run in parallel too and each keeps
// warm primitives and buffers. Holds as many contexts as calls ever ran at once. Thread-safe.
class ContextPool {
 public:
  class Lease {
   public:
    explicit Lease(ContextPool& pool);
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    EncoderContext& context() { return *ctx_; }

   private:
    ContextPool& pool_;
    std::unique_ptr<EncoderContext> ctx_;
  };
  Lease take() { return Lease(*this); }
  size_t size() const;  // contexts made so far (tests)

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<EncoderContext>> free_;
  size_t made_ = 0;
};
}

// ggml's Q8_0 as a weight type: blocks of 32 values, each one little-endian f16 scale d and 32
// int8 q (34 bytes; value = d·q). Only WeightMatrix and GemmArgs carry it (no Tensor holds it,
// dtype_size knows nothing of it), and only for matrices whose rows are whole blocks (cols % 32
// == 0): their rows are read with weight_row_f32, whose decoding is the one load_f32 uses.
inline constexpr DType kWeightQ8_0 = static_cast<DType>(0x80);
inline constexpr int64_t kQ8_0Block = 32, kQ8_0BlockBytes = 34;
// Bytes of n values of a weight row of type dt (f32, bf16, f16, or kWeightQ8_0 with n % 32 == 0).
inline size_t weight_bytes(DType dt, int64_t n) {
  return dt == kWeightQ8_0 ? size_t(n / kQ8_0Block) * size_t(kQ8_0BlockBytes) : size_t(n) * dtype_size(dt);
}

// A weight matrix [rows, cols], row-major (PyTorch's [out, in]), stored as f32, bf16, f16 or Q8_0:
// where it lies in the checkpoint's mapping (the model keeps the file mapped), or in `owned` when
// the file's type or layout needs a conversion (Q4_K..., Q8_0 rows that are not whole blocks,
// stacked q|k|v). The GEMMs read it as a
// constant operand and convert / reorder it themselves, once (gemm.cpp), so no f32, bf16 and
// reordered copies of a checkpoint exist side by side: an F16 or Q8_0 matrix reaches the kernels
// decoded to f32 (exactly as load_f32 decodes it) as they read it, never as a copy made at load. Move-only, like Tensor.
struct WeightMatrix {
  const void* data = nullptr;
  DType dtype = DType::f32;  // f32, bf16, f16 or kWeightQ8_0
  int64_t rows = 0, cols = 0;
  Tensor owned;              // the storage when not mapped; empty when `data` points into a file

  WeightMatrix() = default;
  // Takes a rank-2 f32, bf16 or f16 tensor.
  explicit WeightMatrix(Tensor t);
  // Points at rows·cols values of type dt that outlive the matrix (a mapped checkpoint).
  static WeightMatrix view(const void* p, DType dt, int64_t rows, int64_t cols);
  WeightMatrix(WeightMatrix&&) noexcept = default;
  WeightMatrix& operator=(WeightMatrix&&) noexcept = default;

  int64_t dim(size_t i) const { return i == 0 ? rows : cols; }
  bool mapped() const { return data && owned.empty(); }
  size_t size_bytes() const { return weight_bytes(dtype, rows * cols); }
  // Element (r, c) as float (reference code, small matrices).
  float at(int64_t r, int64_t c) const;
};
namespace encoder_detail {
inline bool present(const WeightMatrix& w) { return w.data && w.rows > 0 && w.cols > 0; }
}  // namespace encoder_detail

// One transformer block. Linear weights are [out, in] row-major (PyTorch's layout); q, k and v
// are stacked into one [3D, D] matrix (torchvision and SigLIP's head already store them so).
struct VitLayer {
  Tensor ln1_w, ln1_b;          // [D]
  WeightMatrix qkv_w;           // [3D, D]
  Tensor qkv_b;                 // [3D]
  WeightMatrix out_w;           // [D, D]
  Tensor out_b;                 // [D]
  Tensor ln2_w, ln2_b;          // [D]
  WeightMatrix fc1_w;           // [M, D]
  Tensor fc1_b;                 // [M]
  WeightMatrix fc2_w;           // [D, M]
  Tensor fc2_b;                 // [D]
};

struct VitModel::Impl {
  VitConfig config;
  std::string source;
  bool random = false;
  int tensors_used = 0, tensors_ignored = 0;

  Tensor patch_w;     // [D, C·P·P] (the conv kernel flattened)
  Tensor patch_b;     // [D] or empty
  Tensor class_emb;   // [D] or empty
  Tensor class_pos;   // [D] position embedding of the class token, or empty
  Tensor registers;   // [R, D] register tokens (config.registers = R), or empty
  Tensor pos_grid;    // [G·G, D] raster order
  Tensor pre_w, pre_b;      // CLIP pre_layrnorm, or empty
  Tensor post_w, post_b;    // CLIP post_layernorm / SigLIP post_layernorm / torchvision encoder.ln
  Tensor proj_w;            // [E, D] CLIP visual_projection, or empty
  Tensor head_w, head_b;    // torchvision heads.head / HF ViT classifier / timm head [K, D], [K]
  Tensor pooler_w, pooler_b;  // HF ViTModel pooler.dense [D, D], [D] (pooled = tanh(·)), or empty
  // SigLIP attention-pooling head.
  Tensor pool_probe;        // [D]
  Tensor pool_in_w, pool_in_b;    // [3D, D], [3D]
  Tensor pool_out_w, pool_out_b;  // [D, D], [D]
  Tensor pool_ln_w, pool_ln_b;    // [D]
  Tensor pool_fc1_w, pool_fc1_b, pool_fc2_w, pool_fc2_b;
  // LLaVA MLP projector (ProjectorType::mlp): mm.0 [E1, D], [E1]; mm.2 [E, E1], [E] or empty.
  // PaliGemma (ProjectorType::linear): mm.0 only, its 1/√H folded in. Qwen's patch merger too.
  WeightMatrix mm0_w, mm2_w;
  Tensor mm0_b, mm2_b;
  std::vector<VitLayer> layers;
  // Qwen3-VL's DeepStack mergers (config.native.deepstack_blocks): LayerNorm over the merge unit's
  // concatenated tokens [4D], linear_fc1 [4D, 4D], GELU, linear_fc2 [E, 4D].
  struct NativeMerger {
    Tensor norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  std::vector<NativeMerger> deepstack;

  // What the mapped WeightMatrix views point into (the checkpoint's files, mapped read-only);
  // null for random models and when every matrix is owned.
  std::shared_ptr<const void> mapping;

  // What encodes fill in as they go, not part of what the model is: each is synchronised inside
  // (see their classes), so a const Impl stays safe to share and its outputs never depend on
  // which encode came first (every packed copy gives the bits the weight as it lies gives).
  mutable encoder_detail::PackedWeights packed;  // shared by every context encoding this model
  mutable encoder_detail::ContextPool contexts;  // for the calls without a context
  // The layers' matrices quantized for Precision::int8 (int8.hpp): by the loader when the
  // checkpoint holds them so, else by the first int8 encode (int8_layers()); null until then.
  mutable std::shared_ptr<const encoder_detail::int8::Layers> int8_layers;
};

// The per-call state (fovea::EncoderContext): one call at a time (ContextUse).
struct EncoderContext::Impl {
  EncoderContextParams params;
  // oneDNN engine, primitive cache and per-thread scratchpads, created on first use; bound to
  // the model of each call (its packed weights) by bind_gemm().
  std::unique_ptr<encoder_detail::Gemm> gemm;
  // attention.hpp's buffers, kept from one encode to the next (fresh pages cost a zeroing fault).
  std::shared_ptr<encoder_detail::AttentionWorkspace> attention_ws;
  // Benchmarks only (bench/bench_encode.cpp --entropy): called by encode() with each layer's
  // q|k|v rows [T, 3D] (dtype dt) before attention. Empty in the library's own use.
  std::function<void(int layer, const std::byte* qkv, DType dt, int64_t T)> attention_probe;
  std::atomic<bool> busy{false};  // a call is running on this context
};

namespace encoder_detail {

// Marks a context in use for a scope: throws Error(invalid_argument) when it already is (two
// threads on one context). The exchange also orders one call's writes before the next call's
// reads when a context moves between threads. FOVEA_INTERNAL like the EncoderContext::Impl it
// holds: the library compiles both hidden anyway, and a program built without hidden visibility
// that includes this header (the tests) would otherwise give it default visibility over a hidden
// field (-Wattributes).
class FOVEA_INTERNAL ContextUse {
 public:
  explicit ContextUse(EncoderContext::Impl& ctx);
  ~ContextUse() { ctx_.busy.store(false, std::memory_order_release); }
  ContextUse(const ContextUse&) = delete;
  ContextUse& operator=(const ContextUse&) = delete;

 private:
  EncoderContext::Impl& ctx_;
};

// The weights of a model for editing, for code that builds or alters a model before anyone
// else can see it (benchmarks: bench_encode --qk-scale; tests: a BF16 copy of random weights).
struct ModelAccess {
  // Throws Error(invalid_argument) unless `model` is the only handle on its weights and no
  // encode has used them yet (a packed copy would go stale).
  static VitModel::Impl& unshared(VitModel& model);
};

// The rows before the patch tokens: the class token (when the model has one), then the register
// tokens. The patch tokens' rows start at prefix_tokens(c).
// fc1's output width: the MLP's hidden width, twice it for a gated (swiglu) MLP.
inline int64_t fc1_width(const VitConfig& c) { return c.act == Activation::swiglu ? 2 * int64_t(c.mlp) : c.mlp; }
inline int64_t prefix_tokens(const VitConfig& c) { return (c.class_token ? 1 : 0) + c.registers; }
// Writes prefix row t (0 <= t < prefix_tokens): class embedding + its position, or register t − cls.
inline void prefix_row(const VitModel::Impl& m, int64_t t, float* out) {
  const int64_t D = m.config.hidden;
  if (m.config.class_token && t == 0) {
    const float* ce = m.class_emb.data<float>();
    const float* cp = m.class_pos.data<float>();
    for (int64_t d = 0; d < D; ++d) out[d] = ce[d] + cp[d];
  } else {
    std::memcpy(out, m.registers.data<float>() + (t - (m.config.class_token ? 1 : 0)) * D, size_t(D) * 4);
  }
}

// ---- GEMM through oneDNN --------------------------------------------------------------------
enum class Post : uint8_t { none, quick_gelu, gelu_tanh, gelu_erf };
Post post_for(Activation a);

// C[M, N] (+)= post(A[M, K] · W[N, K]ᵀ + bias[N]). A, W and C have row strides lda, ldw, ldc
// (in elements). A is f32 or bf16 and the product is computed in A's type (f32 accumulation);
// W is stored as w_dt, which must be A's type unless W is constant (a model weight, converted
// once: f32 weights for a bf16 GEMM; f16 and Q8_0 weights, decoded to f32 as they are read). C f32 or bf16. `accumulate` adds into C (then post must
// be none). bias may be null. Primitives are cached per shape.
struct GemmArgs {
  const void* a; int64_t lda; DType a_dt;
  const void* w; int64_t ldw; DType w_dt;
  const float* bias;
  void* c; int64_t ldc; DType c_dt;
  int64_t m, n, k;
  Post post = Post::none;
  bool accumulate = false;
  // Multiply A·Wᵀ by alpha before the bias (attention scores).
  float alpha = 1.0f;
  // W given as [K, N] (row stride ldw) instead of [N, K]: C = A·W (attention P·V).
  bool w_is_kn = false;
  // W is a model weight that never changes (keyed by the pointer w). Its first use reads an
  // f32 W where it lies (a mapped checkpoint: no copy); a bf16 W, or one whose type must change
  // (f32 → bf16), is reordered into a buffer every layer reuses. From its second use on, it is
  // reordered once (converting its type in the same pass) into the layout oneDNN's kernel
  // prefers, and that packed copy is reused. Every use gives the same bits.
  bool constant_w = false;
};

// The GEMM of a linear layer over m rows of A (type adt, contiguous [m, w.cols]) into C
// (contiguous [m, w.rows], type cdt): C = A·Wᵀ + b.
GemmArgs linear_args(const void* a, DType adt, int64_t m, const WeightMatrix& w, const Tensor* b, void* c, DType cdt);
// The same for a weight held in an f32 Tensor [n, k] (patch embedding, projector).
GemmArgs linear_args(const void* a, DType adt, int64_t m, const Tensor& w, const Tensor* b, void* c, DType cdt);

// One context's GEMM engine: oneDNN primitives per shape and team size, a scratchpad and stream
// per OpenMP thread number, the buffer a first use converts a weight into. Constant weights'
// packed copies are not here but in the PackedWeights it is bound to (a model's, shared with
// other contexts), of which it remembers what it looked up. One caller at a time, except that
// run() may be called from the threads of that caller's OpenMP parallel region.
class Gemm {
 public:
  // Bound to packed weights of its own until bind() (tests and benchmarks that run GEMMs
  // outside a model).
  Gemm();
  ~Gemm();
  // Reads and packs constant weights through `weights` (a model's) from now on. `weights` must
  // outlive the calls that follow; binding another cache forgets what this one looked up.
  void bind(PackedWeights& weights);
  // Runs on the calling thread's OpenMP team size; called from inside an OpenMP parallel
  // region it runs single-threaded with a per-thread scratchpad.
  void run(const GemmArgs& args);
  // Makes room for OpenMP thread numbers 0..threads-1 calling run() concurrently. Not
  // thread-safe: call before the parallel region.
  void reserve_threads(int threads);
  // Cached primitives per OpenMP team size they were made for (tests: the thread count is the
  // call's, so a call with another count gets its own primitives).
  std::map<int, int> primitives_per_team_size() const;
  // Keeps at most this many primitives, the least recently used dropped first (>= 1).
  void set_capacity(size_t primitives);
  size_t primitives() const;
  // The bound cache's packed copies (PackedWeights::stats).
  using PackedStats = PackedWeights::Stats;
  PackedStats packed_stats() const;
  // Whether constant weights get a packed copy for good (from their second use) when kernels
  // compute in `kernel_dt`: oneDNN's brgemm's blocked layouts (AVX-512 / AMX), fovea's AMX
  // panels, or fovea's AVX2 f32 panels (avx2.hpp: where oneDNN has no f32 brgemm). Without any
  // of these (oneDNN's gemm:jit, which runs as fast or faster on the weights as they lie), f32
  // weights are never copied and a weight of another type is converted into the plain layout.
  bool packs_weights(DType kernel_dt);
  // Whether fovea's AVX2 kernel runs the f32 linear layers (avx2.hpp): the CPU has AVX2 and FMA
  // and oneDNN has no f32 brgemm for it.
  static bool avx2_takes_f32();
  // Whether this engine's uses pack a constant weight for good at its first use. By default
  // (false) the first use of a weight (counted per model, over every context) converts into a
  // reused buffer and the second packs: right for a one-shot process, where a packed copy is
  // never read again, but a video session then converts every weight twice (~0.15 s for
  // ViT-B/16 bf16 on Zen 5). EncoderContextParams::expect_reuse.
  void pack_on_first_use(bool yes = true);

 private:
  void run_unchecked(const GemmArgs& args);
  void run_amx(const GemmArgs& args, bool packed);
  void run_avx2(const GemmArgs& args, bool packed);
  struct State;
  std::unique_ptr<State> s_;
};

// The plain reference of Gemm::run (triple loop, double accumulation).
void gemm_reference(const GemmArgs& args);

// ---- row kernels (Highway, with scalar references) -----------------------------------------
// LayerNorm of one row of n floats into f32 (out_dt f32) or bf16 (uint16_t) output.
void layer_norm_row(const float* x, const float* w, const float* b, float eps, int64_t n,
                    void* out, DType out_dt);
void layer_norm_row_ref(const float* x, const float* w, const float* b, float eps, int64_t n,
                        void* out, DType out_dt);
// Column-wise softmax pieces (the hierarchical ranking, its queries in the row): x[i] =
// exp(x[i] − m[i]) and l[i] += x[i]; and max_i x[i]·y[i] (−inf for n = 0).
void exp_shift_sum_row(float* x, const float* m, float* l, int64_t n);
void exp_shift_sum_row_ref(float* x, const float* m, float* l, int64_t n);
float max_product_row(const float* x, const float* y, int64_t n);
float max_product_row_ref(const float* x, const float* y, int64_t n);
// Online-softmax step over one row of raw scores s[n]: scores are s·scale; updates the running
// max *m and sum *l, writes p = exp(s·scale − m_new) as f32 or bf16 to p, returns the factor
// exp(m_old − m_new) by which the row's accumulated output must be rescaled.
float softmax_step_row(const float* s, int64_t n, float scale, float* m, float* l, void* p, DType p_dt);
float softmax_step_row_ref(const float* s, int64_t n, float scale, float* m, float* l, void* p, DType p_dt);
// f32 → bf16 (round to nearest even) and back, n values.
void to_bf16_row(const float* x, uint16_t* out, int64_t n);
void from_bf16_row(const uint16_t* x, float* out, int64_t n);
// IEEE half → f32 (exact), n values.
void from_f16_row(const uint16_t* x, float* out, int64_t n);
// Row r of a weight matrix as n floats (exact for f32, bf16 and f16; Q8_0 decoded as load_f32
// decodes it). ldw in values; for Q8_0, ldw and n are multiples of 32.
void weight_row_f32(const void* w, DType dt, int64_t ldw, int64_t r, int64_t n, float* out);

float activation_ref(Activation a, float x);

// ---- one transformer layer's pieces, shared by encode() and the incremental encoder -----------
// The kernels a pass runs: the scalar references (ref) or the fast ones (gemm's cached oneDNN
// primitives, Highway row kernels) on `threads` OpenMP threads.
struct LayerOps {
  bool ref = false;
  int threads = 1;
  Gemm* gemm = nullptr;  // required unless ref
  // Precision::int8: the model's quantized layer matrices; a GEMM whose constant W is one of them
  // runs on the int8 kernel (the scalar one when ref), every other GEMM as before.
  const int8::Layers* int8 = nullptr;
  void linear(const GemmArgs& a) const {
    if (int8 && linear_int8(a)) return;
    if (ref) gemm_reference(a);
    else gemm->run(a);
  }
  bool linear_int8(const GemmArgs& a) const;  // int8_model.cpp: false when W is not quantized
  // out[r] = LayerNorm(x[r]) for rows r < rows of n floats, as f32 or bf16.
  void layer_norm(const float* x, int64_t rows, int64_t n, const Tensor& w, const Tensor& b, float eps, void* out,
                  DType out_dt) const;
  // The attention's output projection into `rows` rows of the residual stream x [rows, D] f32:
  // x += A·out_wᵀ + out_b, A [rows, D] of type dt.
  void attention_out(const VitLayer& l, const std::byte* A, int64_t rows, float* x, DType dt) const;
  // A pre-norm layer's MLP over `rows` rows x [rows, D] f32: H = LN2(x); Hm = act(H·fc1_wᵀ + fc1_b)
  // (SwiGLU: silu(x1)·x2 over x1 in place); out = Hm·fc2_wᵀ + fc2_b, or out += that when
  // `accumulate` (out may be x: the residual add). H [rows, D] and Hm [rows, fc1_width(c)] of
  // type dt, out [rows, D] f32.
  void mlp(const VitLayer& l, const VitConfig& c, const float* x, int64_t rows, std::byte* H, std::byte* Hm, DType dt,
           float* out, bool accumulate) const;
  // The rest of a pre-norm layer after attention: attention_out, then mlp added to x.
  void attention_out_and_mlp(const VitLayer& l, const VitConfig& c, const std::byte* A, int64_t rows, float* x,
                             std::byte* H, std::byte* Hm, DType dt) const;
  // The kernels `exec` asks for, on ctx's GEMM engine bound to model m (bind_gemm). Call
  // inside a ContextUse of ctx and an OmpThreadsScope of exec's threads.
  static LayerOps for_context(EncoderContext::Impl& ctx, const VitModel::Impl& m, const Executor& exec);
};

// ctx's GEMM engine (made on first use) bound to m's packed weights, with ctx's packing policy
// and room for `threads` OpenMP threads. Call inside a ContextUse of ctx.
Gemm& bind_gemm(EncoderContext::Impl& ctx, const VitModel::Impl& m, int threads);

// m's layer matrices quantized for Precision::int8 (int8_model.cpp): made once per model, by
// the first call, thread-safe.
const int8::Layers& int8_layers(const VitModel::Impl& m);
// matrix_kernels(Precision::int8).
const char* int8_matrix_kernels();
// The int8 layer matrices a converted checkpoint stores (fovea convert --dtype int8), attached to
// m as its int8_layers, their panels read where they lie in st's mapping (kept alive by `keep`).
// Returns the tensors used (0 when st has none); throws Error(corrupt_data) for malformed ones.
int attach_stored_int8(VitModel::Impl& m, const SafetensorsFile& st, std::shared_ptr<const void> keep);

// ---- outputs after the tower (contract.cpp) ---------------------------------------------------
// Where Encoding::pooled comes from: encode() computes it so and contract.cpp names it so
// (pooled_output(), model_heads()), from this one decision.
enum class PooledSource : uint8_t {
  none,                  // no pooled output (no class token, or a projector's tower)
  post_layernorm,        // HF CLIP: post_layernorm(class token), the one token it applies to
  class_token,           // the class token as it is: every token already normed (or no final norm)
  pooler,                // HF ViTModel: tanh(pooler.dense(normed class token))
  post_layernorm_again,  // BLIP / BLIP-2: post_layernorm applied again to the normed class token
  attention_pool,        // SigLIP / timm global_pool='map': the attention-pooling head
};
PooledSource pooled_source(const VitModel::Impl& m);

// ---- projector (projector.cpp) ---------------------------------------------------------------
// The model's projector over x [N, D] f32 rows: [N, E]. `gemm` null: the reference GEMM.
Tensor run_projector(const VitModel::Impl& m, const float* x, int64_t n, Gemm* gemm);

// ---- position embeddings (positions.cpp) ------------------------------------------------------
// A token's position embedding, as the model's own code gives it to a token of that size: its
// reference resizes the G×G table to the input's patch grid (F.interpolate, align_corners=False)
// and reads the token's cell. fovea reads the same cell of that resized table directly, at the
// token's centre, for a token `side` px wide (positions column 2) in an image_width × height image:
//  - bicubic, bilinear: a point sample at the centre (F.interpolate without antialias is one);
//  - bicubic_antialias, bilinear_antialias: PyTorch's anti-aliased kernel, widened to the token's
//    span in table cells when that is over one cell.
// On a uniform grid of P-px tokens this is exactly the resized table; a foveated token of side
// 2^l·P gets what a uniform grid of tokens of its size would give it. When the tokens are a full
// lattice (fovea's uniform mode: gx × gy cells, which need not be square), the kernel follows the
// lattice's spacing on each axis, as the reference's per-axis resize to (gy, gx) does.
class PositionSampler {
 public:
  // `pos` [n, cols]: the tokens the sampler will serve, read once to find a lattice.
  PositionSampler(const VitConfig& c, const float* grid, int image_width, int image_height, const float* pos,
                  int64_t n, int64_t cols);
  // out[D] += the position embedding of the token whose positions row is pos[0..cols): centre x,
  // centre y (px), side (px; optional).
  void add(const float* pos, int64_t cols, float* out) const;

 private:
  PositionSampling mode_;
  const float* grid_;
  int G_;
  int64_t D_;
  double sx_, sy_;            // table cells per image px
  double cell_w_ = 0, cell_h_ = 0;  // a lattice's spacing (px) on each axis, else 0
  int image_w_, image_h_;
};

}  // namespace encoder_detail

}  // namespace fovea
