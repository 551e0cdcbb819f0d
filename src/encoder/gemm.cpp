// GEMMs through oneDNN's matmul primitive, cached per shape, strides and types.
//
// oneDNN here is built on OpenMP: a primitive run from the main thread uses the OpenMP team
// size (set for the call by encode()'s OmpThreadsScope); run from inside an OpenMP parallel
// region it runs on the calling thread alone. A primitive fixes its thread count (and its work
// split) when it is created, so the cache key includes the team size: a model used with 2
// threads and then with 1 gets a 1-thread primitive, not the 2-thread one. The attention blocks use the latter, so primitives run
// concurrently: each thread then brings its own scratchpad (scratchpad_mode::user), because
// the library-managed one is shared unless oneDNN was built for concurrent execution.
#include <omp.h>

#include <cmath>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {

namespace {

dnnl::memory::data_type dt_of(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    default: throw Error(Errc::internal, "encoder GEMM: unsupported dtype");
  }
}

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int, int, bool,
                       float, bool, bool, int>;

// The threads a primitive created now would use (oneDNN's own count: 1 inside a parallel region).
int team_size() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

Key key_of(const GemmArgs& a) {
  return Key{a.m, a.n, a.k, a.lda, a.ldw, a.ldc, int(a.a_dt), int(a.w_dt), int(a.c_dt), int(a.post),
             a.bias != nullptr, a.accumulate, a.alpha, a.w_is_kn, a.constant_w, team_size()};
}

}  // namespace

Post post_for(Activation a) {
  switch (a) {
    case Activation::quick_gelu: return Post::quick_gelu;
    case Activation::gelu_tanh: return Post::gelu_tanh;
    case Activation::gelu_erf: return Post::gelu_erf;
  }
  return Post::none;
}

struct Gemm::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;  // guards the cache (attention threads look primitives up concurrently)
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc a_md, w_md, b_md, c_md;
    dnnl::memory::desc w_packed_md;  // constant weights: the layout the kernel wants
    size_t scratch_bytes = 0;
  };
  std::map<Key, std::shared_ptr<Entry>> cache;
  // Constant weights reordered into a kernel's preferred layout, per source pointer (one per
  // layout: different M may pick different blockings).
  struct Packed {
    dnnl::memory::desc md;
    dnnl::memory mem;
  };
  std::map<const void*, std::vector<Packed>> packed;
  // One scratchpad and stream per OpenMP thread number (regrown on demand).
  struct Scratch {
    std::unique_ptr<std::byte[], AlignedFree> data;
    size_t bytes = 0;
  };
  std::vector<Scratch> scratch;
  std::vector<std::unique_ptr<dnnl::stream>> streams;

  std::shared_ptr<Entry> get(const GemmArgs& g) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key_of(g));
    if (it != cache.end()) return it->second;
    using md = dnnl::memory::desc;
    auto e = std::make_shared<Entry>();
    e->a_md = md({g.m, g.k}, dt_of(g.a_dt), {g.lda, 1});
    // Weights as the [K, N] operand: [N, K] row-major is K×N with strides {1, ldw}.
    e->w_md = g.w_is_kn ? md({g.k, g.n}, dt_of(g.w_dt), {g.ldw, 1}) : md({g.k, g.n}, dt_of(g.w_dt), {1, g.ldw});
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
    const md w_any = g.constant_w ? md({g.k, g.n}, dt_of(g.w_dt), dnnl::memory::format_tag::any) : e->w_md;
    dnnl::matmul::desc d = g.bias ? dnnl::matmul::desc(e->a_md, w_any, e->b_md, e->c_md)
                                  : dnnl::matmul::desc(e->a_md, w_any, e->c_md);
    dnnl::matmul::primitive_desc pd(d, attr, engine);
    e->w_packed_md = pd.weights_desc();
    e->scratch_bytes = pd.scratchpad_desc().get_size();
    e->prim = dnnl::matmul(pd);
    cache.emplace(key_of(g), e);
    return e;
  }

  // The packed copy of constant weights g.w for entry e (made on first use).
  dnnl::memory packed_weights(const GemmArgs& g, const Entry& e, dnnl::stream& st) {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<Packed>& list = packed[g.w];
    for (const Packed& p : list)
      if (p.md == e.w_packed_md) return p.mem;
    dnnl::memory src(e.w_md, engine, const_cast<void*>(g.w));
    dnnl::memory dst(e.w_packed_md, engine);
    dnnl::reorder(src, dst).execute(st, src, dst);
    st.wait();
    list.push_back({e.w_packed_md, dst});
    return dst;
  }
};

Gemm::Gemm() : s_(std::make_unique<State>()) { reserve_threads(std::max(omp_get_max_threads(), omp_get_num_procs())); }

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

void Gemm::run_unchecked(const GemmArgs& g) {
  const std::shared_ptr<State::Entry> e = s_->get(g);
  const int tid = omp_in_parallel() ? omp_get_thread_num() : 0;
  if (tid >= int(s_->streams.size())) throw Error(Errc::internal, "encoder GEMM: thread id out of range");
  State::Scratch& scratch = s_->scratch[tid];
  if (scratch.bytes < e->scratch_bytes || !scratch.data) {
    scratch.data = aligned_alloc_bytes(std::max<size_t>(e->scratch_bytes, 64));
    scratch.bytes = e->scratch_bytes;
  }
  const dnnl::engine& eng = s_->engine;
  dnnl::stream& st = *s_->streams[tid];
  dnnl::memory a(e->a_md, eng, const_cast<void*>(g.a));
  dnnl::memory w = g.constant_w ? s_->packed_weights(g, *e, st) : dnnl::memory(e->w_md, eng, const_cast<void*>(g.w));
  dnnl::memory c(e->c_md, eng, g.c);
  dnnl::memory sp(dnnl::memory::desc({int64_t(e->scratch_bytes)}, dnnl::memory::data_type::u8, {1}), eng,
                  scratch.data.get());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, sp}};
  if (g.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e->b_md, eng, const_cast<float*>(g.bias)));
  e->prim.execute(st, args);
  st.wait();
}

namespace {
float load(const void* p, DType t, int64_t i) {
  return t == DType::f32 ? static_cast<const float*>(p)[i] : bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
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
  }
  return x;
}

void gemm_reference(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < g.k; ++k) {
        const float wv = g.w_is_kn ? load(g.w, g.w_dt, k * g.ldw + j) : load(g.w, g.w_dt, j * g.ldw + k);
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
