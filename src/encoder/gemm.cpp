// GEMMs through oneDNN's matmul primitive, cached per shape, strides and types.
//
// Constant weights (GemmArgs::constant_w) cost the one-shot CLI more than the GEMMs: a 346 MB
// ViT-B/16 checkpoint copied to f32, then to bf16, then reordered, is a gigabyte of fresh pages
// for the kernel to zero. So a weight is read where it lies (the mapped file) on its first use,
// and packed (reordered into the kernel's layout) only from its second use on, when the copy
// starts to pay for itself: at M = 32 a plain f32 weight runs ~7x slower than a packed one, at
// M = 272 the same; bf16 at M = 1024, 1.9x slower (oneDNN 2.6 on an AMX Xeon). A bf16 weight,
// or one whose type must change (f32 file, bf16 GEMM), is reordered on first use into a buffer
// that every layer reuses (in cache, no fresh pages), and packed for good from its second use.
// Both are the same reorder into the same layout, so first and later uses agree to the bit.
// Fresh pages are what a one-shot process pays most for: on this VM the kernel's clearing of
// new pages was ~45% of a one-shot encode.
//
// oneDNN here is built on OpenMP: a primitive run from the main thread uses the OpenMP team
// size (set for the call by encode()'s OmpThreadsScope); run from inside an OpenMP parallel
// region it runs on the calling thread alone. A primitive fixes its thread count (and its work
// split) when it is created, so the cache key includes the team size: a model used with 2
// threads and then with 1 gets a 1-thread primitive, not the 2-thread one. The attention blocks use the latter, so primitives run
// concurrently: each thread then brings its own scratchpad (scratchpad_mode::user), because
// the library-managed one is shared unless oneDNN was built for concurrent execution.
//
// Contexts. A Gemm is one EncoderContext's: its primitives, scratchpads and streams are used by
// one call at a time (and that call's OpenMP threads), so two contexts run the same shapes at
// once without sharing any of it. The packed weights are the model's (PackedWeights), shared by
// every context: a weight's use count and its copies live there, each copy made once under
// that weight's own mutex. A context remembers the copies it has read (Known), so from its
// second encode on it reaches them without a lock. oneDNN allows this: a primitive (and
// oneDNN's own primitive cache may hand two contexts the same one) may run on several threads
// at once when each brings its own scratchpad, and a packed copy is only read.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "encoder/amx.hpp"
#include "encoder/avx2.hpp"
#include "encoder/avx512bf16.hpp"
#include "encoder/encoder_internal.hpp"
#include "encoder/kernels.hpp"
#include "fovea/error.hpp"
#include "fovea/gguf.hpp"

namespace fovea::encoder_detail {

void from_f16_row(const uint16_t* x, float* out, int64_t n) {
  ggml_dequantize(uint32_t(GgmlType::f16), reinterpret_cast<const std::byte*>(x), n, out);  // vectorised, exact
}

void weight_row_f32(const void* w, DType dt, int64_t ldw, int64_t r, int64_t n, float* out) {
  const std::byte* row = static_cast<const std::byte*>(w) + weight_bytes(dt, r * ldw);
  if (dt == kWeightQ8_0) ggml_dequantize(uint32_t(GgmlType::q8_0), row, n, out);  // as load_f32 decodes it
  else if (dt == DType::f32) std::memcpy(out, row, size_t(n) * 4);
  else if (dt == DType::f16) from_f16_row(reinterpret_cast<const uint16_t*>(row), out, n);
  else from_bf16_row(reinterpret_cast<const uint16_t*>(row), out, n);
}

namespace {

// The stored weight types the GEMMs widen to f32 as they read them (F16, Q8_0).
bool widened_type(DType t) { return t == DType::f16 || t == kWeightQ8_0; }

dnnl::memory::data_type dt_of(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    default: throw Error(Errc::internal, "encoder GEMM: unsupported dtype");
  }
}

// The last field: the weights are packed (in the primitive's preferred layout) or plain.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int, bool,
                       float, bool, bool, int, bool>;

// The threads a primitive created now would use (oneDNN's own count: 1 inside a parallel region).
int team_size() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// How a GEMM reads W: as given; converted into a reused buffer (first use of a constant weight
// whose type changes); or from its persistent packed copy (constant weights from their second use).
enum class WeightUse { plain, transient, packed };

Key key_of(const GemmArgs& a, bool packed) {
  return Key{a.m, a.n, a.k, a.lda, a.ldw, a.ldc, int(a.a_dt), int(a.w_dt), int(a.c_dt), int(a.post),
             a.bias != nullptr, a.accumulate, a.alpha, a.w_is_kn, a.constant_w, team_size(), packed};
}

// Memory for packed weights: large anonymous mappings handed out by a bump pointer (few
// mappings, no heap fragmentation, untouched tails cost nothing). Deliberately without
// MADV_HUGEPAGE: on the AMX VM this was measured on (THP `madvise`, defrag `madvise`), packing
// ViT-B/16's 346 MB of f32 weights into huge pages cost 0.44-0.81 s of system time against
// 0.14-0.24 s with 4 KiB pages (98 K faults instead of 16 K, but no direct compaction).
class PackedArena {
 public:
  PackedArena() = default;
  PackedArena(const PackedArena&) = delete;
  PackedArena& operator=(const PackedArena&) = delete;
  ~PackedArena() {
    for (const Chunk& c : chunks_) ::munmap(c.base, c.size);
  }
  void* allocate(size_t bytes) {
    void* p = reserve(bytes);
    populate(p, bytes);
    return p;
  }
  // allocate() in two steps: the bump (under the owner's lock when shared) and the page mapping
  // (outside it: it takes a while for a large weight and touches only the caller's bytes).
  void* reserve(size_t bytes) {
    bytes = (bytes + 63) & ~size_t(63);
    if (chunks_.empty() || chunks_.back().used + bytes > chunks_.back().size) {
      constexpr size_t kPage = size_t(4) << 10, kChunk = size_t(32) << 20;
      const size_t size = std::max(kChunk, (bytes + kPage - 1) & ~(kPage - 1));
      void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw Error(Errc::out_of_memory, "cannot map " + std::to_string(size) + " bytes for packed weights");
      chunks_.push_back({static_cast<std::byte*>(p), size, 0});
    }
    Chunk& c = chunks_.back();
    void* p = c.base + c.used;
    c.used += bytes;
    allocated_ += bytes;
    return p;
  }
  static void populate([[maybe_unused]] void* p, [[maybe_unused]] size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    // Every byte handed out is written at once (packed): map its pages in one call instead of
    // one fault each. A first-touch fault cost ~8 µs on the Zen 5 VM this was measured on;
    // packing ViT-B/16's 173 MB of bf16 weights took 300-340 ms with faults against 160-180 ms
    // populated (a video's first frame group: 60 -> 37 ms a frame). Linux ≥ 5.14; elsewhere the
    // pages fault as before. (A hand-written packer into BA16a64b2a was tried instead of
    // oneDNN's reorder: same bytes, same time; the cost is the memory, not the kernel.)
    constexpr uintptr_t kPageMask = (uintptr_t(4) << 10) - 1;
    const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~kPageMask;
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes + kPageMask) & ~kPageMask;
    ::madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_WRITE);
#endif
  }
  size_t allocated() const { return allocated_; }

 private:
  struct Chunk {
    std::byte* base;
    size_t size, used;
  };
  std::vector<Chunk> chunks_;
  size_t allocated_ = 0;
};

}  // namespace

GemmArgs linear_args(const void* a, DType adt, int64_t m, const WeightMatrix& w, const Tensor* b, void* c, DType cdt) {
  GemmArgs g{};
  g.a = a, g.lda = w.cols, g.a_dt = adt;
  g.w = w.data, g.ldw = w.cols, g.w_dt = w.dtype;
  g.bias = b && present(*b) ? b->data<float>() : nullptr;
  g.c = c, g.ldc = w.rows, g.c_dt = cdt;
  g.m = m, g.n = w.rows, g.k = w.cols;
  g.constant_w = true;
  return g;
}

GemmArgs linear_args(const void* a, DType adt, int64_t m, const Tensor& w, const Tensor* b, void* c, DType cdt) {
  GemmArgs g{};
  g.a = a, g.lda = w.dim(1), g.a_dt = adt;
  g.w = w.data<float>(), g.ldw = w.dim(1), g.w_dt = DType::f32;
  g.bias = b && present(*b) ? b->data<float>() : nullptr;
  g.c = c, g.ldc = w.dim(0), g.c_dt = cdt;
  g.m = m, g.n = w.dim(0), g.k = w.dim(1);
  g.constant_w = true;
  return g;
}

Post post_for(Activation a) {
  switch (a) {
    case Activation::quick_gelu: return Post::quick_gelu;
    case Activation::gelu_tanh: return Post::gelu_tanh;
    case Activation::gelu_erf: return Post::gelu_erf;
    case Activation::swiglu: return Post::none;  // the gate runs after fc1 (LayerOps::mlp)
  }
  return Post::none;
}

namespace {
// Per kernel type: does oneDNN's preferred weight layout differ from the plain one (brgemm's
// blocked layouts), so that reordering a constant weight pays? On AVX2 oneDNN 2.6 picks
// gemm:jit, whose preferred ("any") layout is plain K×N, and that ran *slower* than W as it
// lies ([N, K], i.e. transposed): one core of an AMD EPYC (Zen 3), thread CPU time,
// M = 274, K = 768, N = 3072: 34-42 GFLOP/s against 52-70; M = 104: 35-39 against 57-66;
// the other ViT-B/16 shapes within noise. So there W is read as it lies (or fovea's AVX2
// kernel runs, avx2.hpp). A fact of the CPU and of ONEDNN_MAX_CPU_ISA: asked once per type.
bool ask_onednn_blocked(DType kernel_dt) {
  using md = dnnl::memory::desc;
  const dnnl::memory::data_type t = dt_of(kernel_dt);
  try {  // a ViT-B/16 MLP shape; the choice of implementation follows the ISA, not the shape
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(md({272, 768}, t, {768, 1}), md({768, 3072}, t, dnnl::memory::format_tag::any),
                           md({272, 3072}, t, {3072, 1})),
        engine);
    return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
  } catch (const dnnl::error&) {
    return false;  // no kernel for this type at all: the GEMM itself will say so
  }
}
bool onednn_packs_blocked(DType kernel_dt) {
  static const bool f32 = ask_onednn_blocked(DType::f32), bf16 = ask_onednn_blocked(DType::bf16);
  return kernel_dt == DType::f32 ? f32 : bf16;
}
}  // namespace

// ---- the model's packed weights ---------------------------------------------------------------
struct PackedWeights::State {
  // Tells caches apart for the contexts' memory of lookups: a later model's cache may get the
  // address of a freed one, never its id.
  const uint64_t id = [] {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }();
  // One constant weight, for one kernel type (A's): a bf16 encode does not make the first fp32
  // one a second use.
  struct Weight {
    std::atomic<int> uses{0};         // counted up to 2 (the second use packs)
    std::atomic<bool> packed{false};  // some copy exists: every later use reads one
    std::mutex fill;                  // held while a copy is made; guards `layouts`
    // oneDNN reorders, one per layout (different M may pick different blockings).
    struct Layout {
      dnnl::memory::desc md;
      void* data;
    };
    std::vector<Layout> layouts;
    std::atomic<uint16_t*> amx{nullptr};  // panels for amx::gemm, or null
    std::atomic<float*> avx2{nullptr};    // panels for avx2::gemm, or null
  };
  mutable std::mutex index_mutex;  // guards `index` (a context's first lookup of a weight)
  std::map<std::pair<const void*, DType>, std::unique_ptr<Weight>> index;
  mutable std::mutex arena_mutex;  // guards `arena`
  PackedArena arena;
  std::atomic<int> count{0};  // copies made

  Weight& weight(const void* w, DType kernel_dt) {
    std::lock_guard<std::mutex> lock(index_mutex);
    std::unique_ptr<Weight>& p = index[{w, kernel_dt}];
    if (!p) p = std::make_unique<Weight>();
    return *p;
  }
  void* allocate(size_t bytes) {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(arena_mutex);
      p = arena.reserve(bytes);
    }
    PackedArena::populate(p, bytes);
    return p;
  }
  // Counts a use: whether it reads a packed copy (the second use on, one made already, or a
  // context that packs at the first).
  static bool count_use(Weight& w, bool pack_first) {
    int uses = w.uses.load(std::memory_order_relaxed);
    if (uses < 2) uses = w.uses.fetch_add(1, std::memory_order_relaxed) + 1;
    return uses >= 2 || w.packed.load(std::memory_order_acquire) || pack_first;
  }
  // The copy of w in layout md, made by fill(dst) on first request. Concurrent requests for one
  // weight wait for the first; other weights are packed meanwhile.
  template <typename Fill>
  void* layout(Weight& w, const dnnl::memory::desc& md, Fill&& fill) {
    std::lock_guard<std::mutex> lock(w.fill);
    for (const Weight::Layout& l : w.layouts)
      if (l.md == md) return l.data;
    void* p = allocate(md.get_size());
    fill(p);
    w.layouts.push_back({md, p});
    made(w);
    return p;
  }
  // The panels in `slot` (w.amx or w.avx2), made by fill(dst) from `bytes` on first request.
  template <typename T, typename Fill>
  T* panels(Weight& w, std::atomic<T*>& slot, size_t bytes, Fill&& fill) {
    if (T* p = slot.load(std::memory_order_acquire)) return p;
    std::lock_guard<std::mutex> lock(w.fill);
    if (T* p = slot.load(std::memory_order_relaxed)) return p;
    T* p = static_cast<T*>(allocate(bytes));
    fill(p);
    slot.store(p, std::memory_order_release);
    made(w);
    return p;
  }
  void made(Weight& w) {
    w.packed.store(true, std::memory_order_release);
    count.fetch_add(1, std::memory_order_relaxed);
  }
};

PackedWeights::PackedWeights() : s_(std::make_unique<State>()) {}
PackedWeights::~PackedWeights() = default;

PackedWeights::Stats PackedWeights::stats() const {
  std::lock_guard<std::mutex> lock(s_->arena_mutex);
  return {s_->arena.allocated(), s_->count.load(std::memory_order_relaxed)};
}

bool PackedWeights::untouched() const {
  std::lock_guard<std::mutex> lock(s_->index_mutex);
  return s_->index.empty();
}

// ---- one context's engine ---------------------------------------------------------------------
struct Gemm::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;  // guards the cache and `known` (attention threads look primitives up concurrently)
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a_md, w_md, b_md, c_md;  // w_md: W as given (plain, its stored type)
    dnnl::memory::desc w_packed_md;  // packed constant weights: the layout and type the kernel wants
    bool blocked = false;            // w_packed_md is a blocked layout (else W's own, maybe retyped)
    size_t scratch_bytes = 0;
    uint64_t last_use = 0;           // `uses` when last looked up
  };
  // At most `capacity` primitives, the least recently used dropped first: every distinct row
  // count (an image's tokens) makes its own, ~0.35 MB of JIT code and descriptors each (ViT-B/16
  // in bf16), so a long-lived context that sees many sizes would otherwise grow without bound.
  // A dropped primitive is made again when its shape returns (the same bits).
  std::map<Key, std::shared_ptr<Entry>> cache;
  size_t capacity = 64;
  uint64_t uses = 0;
  // The packed weights this engine reads (a model's, or `own`), and what it has looked up
  // there, per weight and kernel type: reached from then on without the cache's locks.
  std::unique_ptr<PackedWeights> own;
  PackedWeights* weights = nullptr;
  uint64_t weights_id = 0;
  struct Known {
    PackedWeights::State::Weight* shared = nullptr;
    bool packed = false;  // this weight's uses read a packed copy (counted in the cache before)
    uint16_t* amx = nullptr;
    float* avx2 = nullptr;
    std::vector<std::pair<dnnl::memory::desc, void*>> layouts;  // per packed layout: its copy of W
  };
  std::map<std::pair<const void*, DType>, Known> known;
  bool pack_first = false;  // pack_on_first_use()
  // One scratchpad and stream per OpenMP thread number (regrown on demand).
  // Per thread, also the memory objects and argument map of the primitives it ran last, their
  // pointers set anew per call: a small GEMM (the video encoder runs hundreds per frame) spent
  // as much on making and freeing five dnnl::memory objects and a hash map as on its own setup.
  // Each holds its Entry, so an entry the cache drops meanwhile is not reused by another shape.
  struct Bound {
    std::shared_ptr<Entry> entry;
    dnnl::memory a, w, c, b, sp;
    std::unordered_map<int, dnnl::memory> args;
  };
  static constexpr size_t kBoundPerThread = 32;
  struct Scratch {
    std::unique_ptr<std::byte[], AlignedFree> data;
    size_t bytes = 0;
    std::vector<Bound> bound;  // most recently used last
  };
  std::vector<Scratch> scratch;
  std::vector<std::unique_ptr<dnnl::stream>> streams;

  bool packs_blocked(DType kernel_dt) const { return onednn_packs_blocked(kernel_dt); }

  // This engine's record of constant weights g.w for A's type (found in the bound cache on
  // the first request). Several threads of one parallel region may run linear layers on one
  // Gemm (the video encoder's row chunks): a Known's fields are read and written under `mutex`,
  // and the packing itself runs outside it, under the weight's own lock (PackedWeights::State).
  Known& known_of(const GemmArgs& g) {
    std::lock_guard<std::mutex> lock(mutex);
    Known& k = known[{g.w, g.a_dt}];
    if (!k.shared) k.shared = &weights->state().weight(g.w, g.a_dt);
    return k;
  }

  // Counts a use of constant weights g.w (unless they read a packed copy already): whether
  // this use reads the packed copy.
  bool reads_packed(const GemmArgs& g) {
    Known& k = known_of(g);
    std::lock_guard<std::mutex> lock(mutex);
    if (!k.packed) k.packed = PackedWeights::State::count_use(*k.shared, pack_first);
    return k.packed;
  }

  // How this use of W runs (counts the use of constant weights).
  WeightUse weight_use(const GemmArgs& g) {
    if (!g.constant_w) return WeightUse::plain;
    // No blocked layout (AVX2): W as it lies when its type is the kernel's; converted once (into
    // the plain layout) otherwise.
    if (!packs_blocked(g.a_dt) && g.w_dt == g.a_dt) return WeightUse::plain;
    if (reads_packed(g)) return WeightUse::packed;
    // In place only for f32: there the plain-layout kernel gives the packed one's bits (tested
    // at ViT-B/16's widths). A bf16 weight read in the plain layout gets another K blocking
    // (last-bit differences from the packed path: max 0.013 on ViT-B/16's embeddings), so it
    // is reordered into the reused buffer, as a conversion is, and every use agrees.
    return g.w_dt == g.a_dt && g.a_dt == DType::f32 ? WeightUse::plain : WeightUse::transient;
  }
  // The buffer a first-use conversion is reordered into: one, reused by every layer, so it stays
  // in cache and costs no fresh pages per weight. Its mutex is held from the reorder to the end
  // of the GEMM that reads it.
  std::mutex transient_mutex;
  std::unique_ptr<PackedArena> transient_arena;
  void* transient = nullptr;
  size_t transient_bytes = 0;
  // The reused buffer, grown to `bytes` (call with transient_mutex held).
  void* transient_buffer(size_t bytes) {
    if (transient_bytes < bytes) {
      transient_arena.reset();
      transient_arena = std::make_unique<PackedArena>();
      transient = transient_arena->allocate(bytes);
      transient_bytes = bytes;
    }
    return transient;
  }

  // F16 constant weights reach the kernels widened to f32 (exact: every half is a float), copied
  // densely into one reused buffer when a use reads W itself (a first use, or the making of a
  // packed copy), never when a packed copy exists. So an F16 file costs no f32 copy of itself at
  // load, and its first, in-place-like use gives the bits an F32 file of the same values gives.
  // widen_mutex is held from the widening to the end of the use of the buffer.
  std::mutex widen_mutex;
  std::unique_ptr<PackedArena> widen_arena;
  float* widened = nullptr;
  size_t widened_bytes = 0;
  // g as the kernels see a widened W: f32, dense (g itself unless W is F16).
  static GemmArgs as_f32(const GemmArgs& g) {
    GemmArgs w = g;
    if (widened_type(g.w_dt)) w.w_dt = DType::f32, w.ldw = g.w_is_kn ? g.n : g.k;
    return w;
  }
  // W of g (F16) widened into `dst` (as_f32(g)'s dense layout), on the calling thread's team.
  static void widen_into(const GemmArgs& g, float* dst) {
    const int64_t rows = g.w_is_kn ? g.k : g.n, cols = g.w_is_kn ? g.n : g.k;
    const int threads = team_size();
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t r = 0; r < rows; ++r) weight_row_f32(g.w, g.w_dt, g.ldw, r, cols, dst + r * cols);
  }
  // as_f32(g) with its W widened into the reused buffer (call with widen_mutex held).
  GemmArgs widen(const GemmArgs& g) {
    const size_t bytes = size_t(g.n * g.k) * sizeof(float);
    if (widened_bytes < bytes) {
      widen_arena.reset();
      widen_arena = std::make_unique<PackedArena>();
      widened = static_cast<float*>(widen_arena->allocate(bytes));
      widened_bytes = bytes;
    }
    widen_into(g, widened);
    GemmArgs w = as_f32(g);
    w.w = widened;
    return w;
  }

  std::shared_ptr<Entry> get(const GemmArgs& g, bool packed) {
    const bool blocked_layout = packed && packs_blocked(g.a_dt);  // before the lock: it takes it
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key_of(g, packed));
    if (it != cache.end()) {
      it->second->last_use = ++uses;
      return it->second;
    }
    while (!cache.empty() && cache.size() >= capacity) {
      auto oldest = cache.begin();
      for (auto c = cache.begin(); c != cache.end(); ++c)
        if (c->second->last_use < oldest->second->last_use) oldest = c;
      cache.erase(oldest);  // a call still running it holds its own reference
    }
    using md = dnnl::memory::desc;
    auto e = std::make_shared<Entry>();
    e->a_md = md({g.m, g.k}, dt_of(g.a_dt), {g.lda, 1});
    // Weights as the [K, N] operand: [N, K] row-major is K×N with strides {1, ldw}.
    e->w_md = g.w_is_kn ? md({g.k, g.n}, dt_of(g.w_dt), {g.ldw, 1}) : md({g.k, g.n}, dt_of(g.w_dt), {1, g.ldw});
    // The kernel computes in A's type: packed weights are converted to it by the reorder.
    const dnnl::memory::data_type kernel_w_dt = dt_of(g.a_dt);
    e->c_md = md({g.m, g.n}, dt_of(g.c_dt), {g.ldc, 1});
    if (g.bias) e->b_md = md({1, g.n}, dnnl::memory::data_type::f32, {g.n, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
    dnnl::post_ops po;
    if (g.accumulate) po.append_sum(1.0f);
    switch (g.post) {
      case Post::none: break;
      case Post::quick_gelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.702f, 0.0f); break;
      case Post::gelu_tanh: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
      case Post::gelu_erf: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
    }
    attr.set_post_ops(po);
    // Packed: the kernel's preferred (blocked) layout where there is one; otherwise W's own plain
    // layout in the kernel's type (a conversion only).
    const md w_any = !packed           ? e->w_md
                     : blocked_layout ? md({g.k, g.n}, kernel_w_dt, dnnl::memory::format_tag::any)
                     : g.w_is_kn      ? md({g.k, g.n}, kernel_w_dt, {g.n, 1})
                                      : md({g.k, g.n}, kernel_w_dt, {1, g.k});
    dnnl::matmul::desc d = g.bias ? dnnl::matmul::desc(e->a_md, w_any, e->b_md, e->c_md)
                                  : dnnl::matmul::desc(e->a_md, w_any, e->c_md);
    dnnl::matmul::primitive_desc pd(d, attr, engine);
    e->w_packed_md = pd.weights_desc();
    e->blocked = blocked_layout;
    e->scratch_bytes = pd.scratchpad_desc().get_size();
    e->prim = dnnl::matmul(pd);
    e->last_use = ++uses;
    cache.emplace(key_of(g, packed), e);
    return e;
  }

  // W copied into e's packed layout. A bf16 W going to f32 in its own dense plain layout (a BF16
  // checkpoint where there is no blocked layout: AVX2) is a Highway conversion: oneDNN 2.6's
  // reorder for it is its reference kernel there, ~5 s for ViT-B/16's 86 M weights (a one-shot
  // fp32 encode of a BF16 file took 6.8 s against 1.2 s for the F32 file). The same values
  // either way: bf16 → f32 is exact.
  // An F16 W is widened first: straight into dst when dst is W's own dense layout in f32, else
  // into the reused buffer, which is then reordered as an F32 W would be.
  void copy_weights(const GemmArgs& g, const Entry& e, const dnnl::engine& eng, void* dst_ptr, dnnl::stream& st) {
    if (widened_type(g.w_dt)) {
      if (!e.blocked && g.a_dt == DType::f32) {
        widen_into(g, static_cast<float*>(dst_ptr));
        return;
      }
      std::lock_guard<std::mutex> lock(widen_mutex);
      copy_weights(widen(g), e, eng, dst_ptr, st);
      return;
    }
    const bool dense = g.ldw == (g.w_is_kn ? g.n : g.k);
    if (!e.blocked && dense && g.w_dt == DType::bf16 && g.a_dt == DType::f32) {
      from_bf16_row(static_cast<const uint16_t*>(g.w), static_cast<float*>(dst_ptr), g.n * g.k);
      return;
    }
    dnnl::memory src(e.w_md, eng, const_cast<void*>(g.w));  // read only: oneDNN's handles are void*
    dnnl::memory dst(e.w_packed_md, eng, dst_ptr);
    dnnl::reorder(src, dst).execute(st, src, dst);
    st.wait();
  }

  // A kernel's panels of constant weights g.w, made on first use by whichever context needs them
  // first: `bytes` filled by pack(W, type, ldw, n, k, dst, threads) (an F16 or Q8_0 W from its
  // widened copy, under widen_mutex). `mine` is this context's record of them (read and written
  // under `mutex`), `slot` the model's (PackedWeights::State::panels makes them once, under the
  // weight's own lock).
  using Weight = PackedWeights::State::Weight;
  template <typename T>
  using PackFn = void (*)(const void* w, DType w_dt, int64_t ldw, int64_t n, int64_t k, T* dst, int threads);
  template <typename T>
  T* kernel_panels(const GemmArgs& g, int threads, T* Known::*mine, std::atomic<T*> Weight::*slot, size_t bytes,
                   PackFn<T> pack) {
    Known& k = known_of(g);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (k.*mine) return k.*mine;
    }
    T* p = weights->state().panels(*k.shared, (*k.shared).*slot, bytes, [&](T* dst) {
      if (!widened_type(g.w_dt)) return pack(g.w, g.w_dt, g.ldw, g.n, g.k, dst, threads);
      std::lock_guard<std::mutex> lock(widen_mutex);
      const GemmArgs w = widen(g);
      pack(w.w, w.w_dt, w.ldw, w.n, w.k, dst, threads);
    });
    std::lock_guard<std::mutex> lock(mutex);
    return k.*mine = p;
  }

  // The AMX panels of constant weights g.w (amx.hpp).
  uint16_t* amx_packed(const GemmArgs& g, int threads) {
    return kernel_panels(g, threads, &Known::amx, &Weight::amx, amx::packed_bytes(g.n, g.k), &amx::pack);
  }

  // The AVX2 panels of constant weights g.w (avx2.hpp).
  float* avx2_packed(const GemmArgs& g, int threads) {
    return kernel_panels(g, threads, &Known::avx2, &Weight::avx2, avx2::packed_floats(g.n, g.k) * sizeof(float),
                         &avx2::pack);
  }

  // The packed copy of constant weights g.w for entry e (made on first use): one reorder from
  // where W lies, converting its type if the kernel's differs.
  dnnl::memory packed_weights(const GemmArgs& g, const Entry& e, dnnl::stream& st) {
    Known& k = known_of(g);
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [desc, data] : k.layouts)
        if (desc == e.w_packed_md) return dnnl::memory(e.w_packed_md, engine, data);
    }
    // The weight's own lock makes one copy per layout, whichever thread asks first.
    void* data = weights->state().layout(*k.shared, e.w_packed_md,
                                         [&](void* dst) { copy_weights(g, e, engine, dst, st); });
    std::lock_guard<std::mutex> lock(mutex);
    bool listed = false;
    for (const auto& l : k.layouts) listed = listed || l.first == e.w_packed_md;
    if (!listed) k.layouts.emplace_back(e.w_packed_md, data);
    return dnnl::memory(e.w_packed_md, engine, data);
  }
};

Gemm::Gemm() : s_(std::make_unique<State>()) {
  s_->own = std::make_unique<PackedWeights>();
  bind(*s_->own);
  reserve_threads(std::max(omp_get_max_threads(), omp_get_num_procs()));
}

void Gemm::bind(PackedWeights& weights) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  if (s_->weights_id == weights.state().id) return;
  s_->weights = &weights;
  s_->weights_id = weights.state().id;
  s_->known.clear();  // pointers into another model's cache
}

void Gemm::reserve_threads(int threads) {
  const size_t n = size_t(std::max(threads, 1));
  if (s_->scratch.size() < n) s_->scratch.resize(n);
  while (s_->streams.size() < n) s_->streams.push_back(std::make_unique<dnnl::stream>(s_->engine));
}
Gemm::~Gemm() = default;

std::map<int, int> Gemm::primitives_per_team_size() const {
  std::lock_guard<std::mutex> lock(s_->mutex);
  std::map<int, int> out;
  for (const auto& [key, entry] : s_->cache) ++out[std::get<15>(key)];
  return out;
}

void Gemm::run(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  try {
    run_unchecked(g);
  } catch (const dnnl::error& err) {
    throw Error(Errc::device, std::string("oneDNN matmul failed: ") + err.what());
  }
}

bool Gemm::packs_weights(DType kernel_dt) {
  return s_->packs_blocked(kernel_dt) || (kernel_dt == DType::f32 && avx2_takes_f32());
}

bool Gemm::avx2_takes_f32() {
  static const bool takes = avx2::usable() && !onednn_packs_blocked(DType::f32);
  return takes;
}

void Gemm::pack_on_first_use(bool yes) { s_->pack_first = yes; }

void Gemm::set_capacity(size_t primitives) {
  std::lock_guard<std::mutex> lock(s_->mutex);
  s_->capacity = std::max<size_t>(primitives, 1);
}

size_t Gemm::primitives() const {
  std::lock_guard<std::mutex> lock(s_->mutex);
  return s_->cache.size();
}

Gemm::PackedStats Gemm::packed_stats() const { return s_->weights->stats(); }

namespace {
// The linear layers of a bf16 encode on AMX tiles (amx.hpp) instead of oneDNN's matmul.
bool amx_takes(const GemmArgs& g) {
  return g.constant_w && g.a_dt == DType::bf16 && !g.w_is_kn && g.alpha == 1.0f &&
         (g.w_dt == DType::f32 || g.w_dt == DType::bf16 || widened_type(g.w_dt)) && (g.c_dt == DType::f32 || g.c_dt == DType::bf16) &&
         g.m > 0 && amx::fits(g.n, g.k) && amx::usable();
}
// The f32 linear layers on fovea's AVX2 kernel (avx2.hpp) where oneDNN has no f32 brgemm.
bool avx2_takes(const GemmArgs& g) {
  return g.constant_w && g.a_dt == DType::f32 && g.c_dt == DType::f32 && !g.w_is_kn &&
         (g.w_dt == DType::f32 || g.w_dt == DType::bf16 || widened_type(g.w_dt)) && g.m > 0 && Gemm::avx2_takes_f32();
}
}  // namespace

void Gemm::run_avx2(const GemmArgs& g, bool packed) {
  avx2::GemmArgs a;
  a.a = static_cast<const float*>(g.a), a.lda = g.lda;
  a.w = g.w, a.ldw = g.ldw, a.w_dt = g.w_dt;
  a.bias = g.bias;
  a.c = static_cast<float*>(g.c), a.ldc = g.ldc;
  a.m = g.m, a.n = g.n, a.k = g.k;
  a.alpha = g.alpha, a.post = g.post, a.accumulate = g.accumulate;
  a.threads = team_size();
  // First use: each thread packs its own panels on the fly into a buffer of its own (an F16 W
  // from its widened copy).
  if (packed) a.packed = s_->avx2_packed(g, a.threads);
  std::unique_lock<std::mutex> widen_lock;
  if (!packed && widened_type(g.w_dt)) {
    widen_lock = std::unique_lock<std::mutex>(s_->widen_mutex);
    const GemmArgs w = s_->widen(g);
    a.w = w.w, a.ldw = w.ldw, a.w_dt = w.w_dt;
  }
  avx2::gemm(a);
}

void Gemm::run_amx(const GemmArgs& g, bool packed) {
  amx::GemmArgs a;
  a.a = static_cast<const uint16_t*>(g.a), a.lda = g.lda;
  a.w = g.w, a.ldw = g.ldw, a.w_dt = g.w_dt;
  a.bias = g.bias;
  a.c = g.c, a.ldc = g.ldc, a.c_dt = g.c_dt;
  a.m = g.m, a.n = g.n, a.k = g.k;
  a.post = g.post, a.accumulate = g.accumulate;
  a.threads = team_size();
  if (packed) {
    a.packed = s_->amx_packed(g, a.threads);
    a.pack = false;
    amx::gemm(a);
    return;
  }
  // First use: each thread packs its own panels into the reused buffer, then reads them (an F16
  // W from its widened copy).
  std::lock_guard<std::mutex> lock(s_->transient_mutex);
  std::unique_lock<std::mutex> widen_lock;
  if (widened_type(g.w_dt)) {
    widen_lock = std::unique_lock<std::mutex>(s_->widen_mutex);
    const GemmArgs w = s_->widen(g);
    a.w = w.w, a.ldw = w.ldw, a.w_dt = w.w_dt;
  }
  a.packed = static_cast<uint16_t*>(s_->transient_buffer(amx::packed_bytes(g.n, g.k)));
  a.pack = true;
  amx::gemm(a);
}

void Gemm::run_unchecked(const GemmArgs& g) {
  if (!g.constant_w && g.w_dt != g.a_dt) throw Error(Errc::internal, "encoder GEMM: A and W types differ");
  if (avx2_takes(g)) {
    run_avx2(g, s_->reads_packed(g));
    return;
  }
  const WeightUse use = s_->weight_use(g);
  if (amx_takes(g)) {
    run_amx(g, use == WeightUse::packed);
    return;
  }
  // An F16 weight's first use by f32 kernels reads its widened copy in the plain layout, as an F32
  // weight's is read where it lies (the same primitive: the same bits).
  const bool widened_plain = widened_type(g.w_dt) && use == WeightUse::transient && g.a_dt == DType::f32;
  const std::shared_ptr<State::Entry> e = s_->get(State::as_f32(g), use != WeightUse::plain && !widened_plain);
  const int tid = omp_in_parallel() ? omp_get_thread_num() : 0;
  if (tid >= int(s_->streams.size())) throw Error(Errc::internal, "encoder GEMM: thread id out of range");
  State::Scratch& scratch = s_->scratch[tid];
  if (scratch.bytes < e->scratch_bytes || !scratch.data) {
    scratch.data = aligned_alloc_bytes(std::max<size_t>(e->scratch_bytes, 64));
    scratch.bytes = e->scratch_bytes;
  }
  const dnnl::engine& eng = s_->engine;
  dnnl::stream& st = *s_->streams[tid];
  std::unique_lock<std::mutex> transient_lock, widen_lock;
  // W's memory: a packed copy's own object (made per layout), or W where it lies.
  dnnl::memory packed_w;
  void* w_data = const_cast<void*>(g.w);
  if (use == WeightUse::packed) {
    packed_w = s_->packed_weights(g, *e, st);
  } else if (widened_plain) {
    widen_lock = std::unique_lock<std::mutex>(s_->widen_mutex);
    w_data = const_cast<void*>(s_->widen(g).w);
  } else if (use == WeightUse::transient) {
    transient_lock = std::unique_lock<std::mutex>(s_->transient_mutex);
    w_data = s_->transient_buffer(e->w_packed_md.get_size());
    s_->copy_weights(g, *e, eng, w_data, st);
  }
  // This thread's memory objects for the primitive (made at its first call here).
  std::vector<State::Bound>& bound = scratch.bound;
  auto it = std::find_if(bound.begin(), bound.end(), [&](const State::Bound& b) { return b.entry == e; });
  if (it == bound.end()) {
    if (bound.size() >= State::kBoundPerThread) bound.erase(bound.begin());
    State::Bound b;
    b.entry = e;
    b.a = dnnl::memory(e->a_md, eng, const_cast<void*>(g.a));
    b.w = dnnl::memory(use == WeightUse::transient ? e->w_packed_md : e->w_md, eng, w_data);
    b.c = dnnl::memory(e->c_md, eng, g.c);
    b.sp = dnnl::memory(dnnl::memory::desc({int64_t(e->scratch_bytes)}, dnnl::memory::data_type::u8, {1}), eng,
                        scratch.data.get());
    if (g.bias) b.b = dnnl::memory(e->b_md, eng, const_cast<float*>(g.bias));
    bound.push_back(std::move(b));
    it = bound.end() - 1;
  } else if (it != bound.end() - 1) {
    std::rotate(it, it + 1, bound.end());
    it = bound.end() - 1;
  }
  State::Bound& b = *it;
  b.a.set_data_handle(const_cast<void*>(g.a));
  b.c.set_data_handle(g.c);
  b.sp.set_data_handle(scratch.data.get());
  if (g.bias) b.b.set_data_handle(const_cast<float*>(g.bias));
  dnnl::memory w = packed_w;
  if (use != WeightUse::packed) {
    // A transient use reads the packed layout, the others W's own: one Bound serves one of them.
    const dnnl::memory::desc& wmd = use == WeightUse::transient ? e->w_packed_md : e->w_md;
    if (b.w.get_desc() != wmd) b.w = dnnl::memory(wmd, eng, w_data);
    else b.w.set_data_handle(w_data);
    w = b.w;
  }
  b.args[DNNL_ARG_SRC] = b.a;
  b.args[DNNL_ARG_WEIGHTS] = w;
  b.args[DNNL_ARG_DST] = b.c;
  b.args[DNNL_ARG_SCRATCHPAD] = b.sp;
  if (g.bias) b.args[DNNL_ARG_BIAS] = b.b;
  e->prim.execute(st, b.args);
  st.wait();
}

namespace {
float load(const void* p, DType t, int64_t i) {
  if (t == kWeightQ8_0) {
    float block[kQ8_0Block];
    weight_row_f32(p, t, kQ8_0Block, i / kQ8_0Block, kQ8_0Block, block);
    return block[i % kQ8_0Block];
  }
  if (t == DType::f32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}
}  // namespace

float activation_ref(Activation a, float x) {
  switch (a) {
    case Activation::quick_gelu: return x / (1.0f + std::exp(-1.702f * x));
    case Activation::gelu_tanh: {
      const double k = std::sqrt(2.0 / M_PI);
      return float(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * double(x) * x * x))));
    }
    case Activation::gelu_erf: return float(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
    case Activation::swiglu: return float(double(x) / (1.0 + std::exp(-double(x))));  // silu, the gate's half
  }
  return x;
}

void gemm_reference(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < g.k; ++k) {
        float wv = g.w_is_kn ? load(g.w, g.w_dt, k * g.ldw + j) : load(g.w, g.w_dt, j * g.ldw + k);
        if (g.a_dt == DType::bf16 && g.w_dt != DType::bf16) wv = bf16_to_f32(f32_to_bf16(wv));  // as the kernel
        acc += double(load(g.a, g.a_dt, i * g.lda + k)) * wv;
      }
      float v = float(acc) * g.alpha;
      if (g.bias) v += g.bias[j];
      switch (g.post) {
        case Post::none: break;
        case Post::quick_gelu: v = activation_ref(Activation::quick_gelu, v); break;
        case Post::gelu_tanh: v = activation_ref(Activation::gelu_tanh, v); break;
        case Post::gelu_erf: v = activation_ref(Activation::gelu_erf, v); break;
      }
      const int64_t ci = i * g.ldc + j;
      if (g.c_dt == DType::f32) {
        float* c = static_cast<float*>(g.c);
        c[ci] = g.accumulate ? c[ci] + v : v;
      } else {
        uint16_t* c = static_cast<uint16_t*>(g.c);
        c[ci] = f32_to_bf16(g.accumulate ? bf16_to_f32(c[ci]) + v : v);
      }
    }
}

}  // namespace fovea::encoder_detail

namespace fovea {

bool bf16_supported() {
  // Native bf16 dot products: AVX512_BF16 (Cooper Lake, Zen 4 and later) or AMX-BF16 (Sapphire
  // Rapids and later), as oneDNN sees the CPU (so ONEDNN_MAX_CPU_ISA=AVX512_CORE or below says
  // no). Plain AVX-512 (Skylake-SP to Ice Lake) also gets a bf16 matmul primitive from oneDNN
  // 2.6, but an emulated one (gemm:jit, converting to f32 in the kernel): on an Ice Lake Xeon
  // its bare 4096x768x3072 GEMM ran at 61 GFLOP/s against f32's 202, and a ViT-B/16 bf16 encode
  // took 3.7x fp32's time at N = 273 (bench/results/encode/). bf16 is asked for speed; there
  // it is neither faster nor as exact, so it runs fp32, as on AVX2. A fact of the CPU and of
  // ONEDNN_MAX_CPU_ISA, which oneDNN reads once, so it is asked once.
  static const bool supported = [] {
    // The CPU's ISA as oneDNN detected it, capped (0x67 = avx512_core_vnni on an Ice Lake,
    // 0x27 there under ONEDNN_MAX_CPU_ISA=AVX512_CORE); off x86 it is dnnl_cpu_isa_all, 0, and
    // bf16 runs fp32.
    const auto bf16 = unsigned(dnnl::cpu_isa::avx512_core_bf16);  // a bit set: avx512_core + vnni + bf16
    if ((unsigned(dnnl::get_effective_cpu_isa()) & bf16) != bf16) return false;
    try {  // and a primitive for it, as every bf16 GEMM needs first
      using md = dnnl::memory::desc;
      using dt = dnnl::memory::data_type;
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      const md a({16, 64}, dt::bf16, dnnl::memory::format_tag::ab);
      const md w({64, 16}, dt::bf16, dnnl::memory::format_tag::any);
      const md c({16, 16}, dt::bf16, dnnl::memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, w, c), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return supported;
}

bool encoder_detail::amx_kernels_enabled() { return encoder_detail::amx::usable(); }

bool encoder_detail::avx512bf16_kernels_enabled() {
  return encoder_detail::avx512bf16::usable() && !encoder_detail::amx::usable();
}

bool encoder_detail::avx2_kernels_enabled() { return encoder_detail::Gemm::avx2_takes_f32(); }

// The deprecated public names (fovea/encoder.hpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
bool amx_kernels_enabled() { return encoder_detail::amx_kernels_enabled(); }
bool avx512bf16_kernels_enabled() { return encoder_detail::avx512bf16_kernels_enabled(); }
bool avx2_kernels_enabled() { return encoder_detail::avx2_kernels_enabled(); }
#pragma GCC diagnostic pop

const char* matrix_kernels(Precision p) {
  namespace d = encoder_detail;
  const Precision r = runnable_precision(p);
  if (r == Precision::int8) return encoder_detail::int8_matrix_kernels();
  if (r == Precision::bf16)
    return d::amx_kernels_enabled() ? "amx+onednn" : d::avx512bf16_kernels_enabled() ? "avx512bf16+onednn" : "onednn";
  return d::avx2_kernels_enabled() ? "avx2+onednn" : "onednn";
}

Precision runnable_precision(Precision requested) {
  if (requested == Precision::int8) return int8_supported() ? Precision::int8 : Precision::fp32;
  return requested == Precision::bf16 && !bf16_supported() ? Precision::fp32 : requested;
}

}  // namespace fovea
