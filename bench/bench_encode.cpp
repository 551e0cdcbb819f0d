// Times fovea's ViT encoder; driven by bench/encode_bench.py, which runs torch in the same run.
//
//   build/bench/bench_encode --model random:vit-b16 --n 196,273,1024 --precision fp32 --threads 2 --reps 3
//   build/bench/bench_encode --e2e IMAGE --budget 273 --precision bf16 ...   (tokenize + encode)
//   build/bench/bench_encode --peak [--peak-shape 4096,768,3072]   (bare oneDNN matmul f32 and bf16)
//   build/bench/bench_encode --n 273 --precision bf16 --paired-peak   (each encode next to a bare GEMM)
//   build/bench/bench_encode --layouts [--reps 5]   (f32 weights as they lie vs oneDNN's preferred layout)
//   build/bench/bench_encode --attention-kernel --n 576,4096   (fovea's AVX512-BF16 and AVX2 attention kernels alone, one thread, where they run)
//   build/bench/bench_encode --n 4096 --attention exact,hierarchical:8:64 --compare-exact --qk-scale 4 --entropy
//
// --attention: a comma list of modes timed back to back per N (fovea::parse_attention).
// --compare-exact: per-token cosine of each non-exact mode's embeddings to exact's (mean, min).
// --qk-scale S: multiplies every layer's Q and K projections (weights and biases) by √S, so the
//   attention logits are S times the model's: random-init ViTs attend almost uniformly, trained
//   ones do not; S makes the benchmark's attention as peaked as a trained model's (see --entropy).
// --qk-tie: sets every layer's K projection equal to its Q projection (per head, scores become
//   q_i·q_j: tokens attend to tokens like themselves, as trained ViTs' content and locality heads
//   do; random Q and K give a random bilinear form instead).
// --image PATH: the N tokens are the uniform side×side grid of PATH resized (nearest) to
//   side·P pixels square, normalised (x/255 − 0.5)/0.25, instead of random patches: real images
//   are spatially coherent, random patches are not.
// --entropy: the mean attention entropy (nats) per layer of exact attention, over 64 sampled query
//   rows per head, and ln(T) (uniform attention) for reference.
//
// Prints one JSON object per line: {"n", "precision", "threads", "median_ms", "min_ms", ...};
// encodes also give attention_median_ms / attention_min_ms, the attention op's share
// (Encoding::attention_ms: every layer's Q·Kᵀ, softmax and P·V, and a hierarchical mode's
// pooling, ranking and gathers), so a mode's speed-up can be read for the op and the encode.
// The first encode of every shape (oneDNN primitive creation, weight packing, first touch of the
// weights) is a warm-up, not in the median; it is reported apart as first_ms (and the model's
// load as load_ms), for bench/oneshot_bench.py.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "encoder/amx.hpp"
#include "encoder/avx2.hpp"
#include "encoder/avx512bf16.hpp"
#include "encoder/encoder_internal.hpp"
#include "encoder/int8.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/tokenize.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

struct Stats {
  double median = 0, min = 0;
};
template <typename F>
Stats time_reps(int reps, F&& fn) {
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    ts.push_back(ms_since(t0));
  }
  std::sort(ts.begin(), ts.end());
  return {ts[ts.size() / 2], ts[0]};
}

// The bare GEMMs at M×K×N: oneDNN's matmul (B in the layout the kernel prefers, as the
// encoder's weights are) and, for bf16 on AMX CPUs or fp32 on AVX2-only ones, fovea's own AMX or
// AVX2 GEMM through the encoder's Gemm with its weights packed (a model's second use on); inputs filled with ordinary values
// (zero pages and denormals would flatter or slow them). One call each per *_once(), in GFLOP/s:
// --peak takes the best of repetitions, --paired-peak one call right before each encode.
class BarePeak {
 public:
  BarePeak(int64_t M, int64_t K, int64_t N, fovea::Precision prec, int threads)
      : M_(M), K_(K), N_(N), threads_(threads), eng_(dnnl::engine::kind::cpu, 0), st_(eng_) {
    using dt = dnnl::memory::data_type;
    const dt t = prec == fovea::Precision::bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc a({M, K}, t, {K, 1}), b({K, N}, t, dnnl::memory::format_tag::any), c({M, N}, t, {N, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng_);
    impl_ = pd.impl_info_str();
    A_ = dnnl::memory(a, eng_), B_ = dnnl::memory(pd.weights_desc(), eng_), C_ = dnnl::memory(c, eng_);
    for (dnnl::memory* m : {&A_, &B_, &C_}) {
      const size_t n = m->get_desc().get_size();
      auto* p = static_cast<uint8_t*>(m->get_data_handle());
      if (t == dt::f32)
        for (size_t i = 0; i < n / 4; ++i) reinterpret_cast<float*>(p)[i] = value(i);
      else
        for (size_t i = 0; i < n / 2; ++i) reinterpret_cast<uint16_t*>(p)[i] = fovea::f32_to_bf16(value(i));
    }
    mm_ = dnnl::matmul(pd);
    // fovea's own kernel where it runs this precision: AMX tiles for bf16, AVX2 for fp32.
    const bool bf16 = prec == fovea::Precision::bf16;
    if (bf16 ? fovea::encoder_detail::amx::usable() : fovea::encoder_detail::Gemm::avx2_takes_f32()) {
      const fovea::DType io = bf16 ? fovea::DType::bf16 : fovea::DType::f32;
      const size_t es = bf16 ? 2 : 4;
      a_.resize(size_t(M * K) * es), c_.resize(size_t(M * N) * es), w_.resize(size_t(N * K));
      for (size_t i = 0; i < size_t(M * K); ++i) {
        if (bf16) reinterpret_cast<uint16_t*>(a_.data())[i] = fovea::f32_to_bf16(value(i));
        else reinterpret_cast<float*>(a_.data())[i] = value(i);
      }
      for (size_t i = 0; i < w_.size(); ++i) w_[i] = value(i * 3 + 1);
      g_.a = a_.data(), g_.lda = K, g_.a_dt = io;
      g_.w = w_.data(), g_.ldw = K, g_.w_dt = fovea::DType::f32;
      g_.c = c_.data(), g_.ldc = N, g_.c_dt = io;
      g_.m = M, g_.n = N, g_.k = K, g_.constant_w = true;
      gemm_ = std::make_unique<fovea::encoder_detail::Gemm>();
      const fovea::encoder_detail::OmpThreadsScope team(threads_);
      gemm_->run(g_), gemm_->run(g_);  // packed from the second use
      fovea_impl_ = bf16 ? "fovea:amx" : "fovea:avx2";
    }
    onednn_once();  // warm
  }
  const std::string& onednn_impl() const { return impl_; }
  bool has_fovea() const { return gemm_ != nullptr; }
  const std::string& fovea_impl() const { return fovea_impl_; }
  double onednn_once() {
    const fovea::encoder_detail::OmpThreadsScope team(threads_);
    const auto t0 = Clock::now();
    mm_.execute(st_, {{DNNL_ARG_SRC, A_}, {DNNL_ARG_WEIGHTS, B_}, {DNNL_ARG_DST, C_}});
    st_.wait();
    return gflop() / (ms_since(t0) / 1e3);
  }
  double fovea_once() {  // 0 without fovea's kernel
    if (!gemm_) return 0;
    const fovea::encoder_detail::OmpThreadsScope team(threads_);
    const auto t0 = Clock::now();
    gemm_->run(g_);
    return gflop() / (ms_since(t0) / 1e3);
  }
  double once() { return std::max(onednn_once(), fovea_once()); }  // the faster of the two
  double gflop() const { return 2.0 * double(M_) * double(N_) * double(K_) / 1e9; }

 private:
  static float value(size_t i) { return float((i * 2654435761u >> 13) & 255) / 128 - 1; }
  int64_t M_, K_, N_;
  int threads_;
  std::string impl_;
  dnnl::engine eng_;
  dnnl::stream st_;
  dnnl::memory A_, B_, C_;
  dnnl::matmul mm_;
  std::vector<std::byte> a_, c_;  // A and C of fovea's kernel, in the precision's type
  std::vector<float> w_;
  std::string fovea_impl_;
  fovea::encoder_detail::GemmArgs g_{};
  std::unique_ptr<fovea::encoder_detail::Gemm> gemm_;
};

// The machine's bare GEMM rate: oneDNN's matmul f32 and bf16 and, on AMX CPUs, fovea's own AMX
// GEMM, best of `reps` after a warm-up each; then the AMX tiles' own rate on registers.
// fovea's AVX2 attention kernel alone (avx2::attention), one thread: one head's query block of
// bq rows against nk keys, hd = 64, best of `reps`; GFLOP/s counts Q·Kᵀ and P·V (4·bq·nk·hd) and
// is printed beside the one-core FMA ceiling. Where the kernel does not run, says so.
// fovea's AVX512-BF16 attention kernel alone (avx512bf16::attention), the same shapes in bf16,
// beside the one-core VDPBF16PS ceiling.
void attention_kernel_bf16(const std::vector<int>& ns, int reps) {
  namespace k512 = fovea::encoder_detail::avx512bf16;
  namespace amx = fovea::encoder_detail::amx;
  const double ceiling = k512::dpbf16_peak_gflops(1, 0.5);
  constexpr int64_t hd = 64;
  for (const int nk : ns)
    for (const int64_t bq : {64, 128}) {
      std::vector<uint16_t> q(size_t(bq * hd)), k(size_t(nk) * hd), v(size_t(nk) * hd);
      std::vector<uint16_t> vp(amx::packed_kv_elems(nk, hd));
      std::vector<float> o(size_t(bq * hd));
      uint32_t st = 12345;
      auto rnd = [&] {
        return fovea::f32_to_bf16(float((st = st * 1664525u + 1013904223u) >> 8) / float(1 << 24) - 0.5f);
      };
      for (uint16_t& x : q) x = rnd();
      for (uint16_t& x : k) x = rnd();
      for (uint16_t& x : v) x = rnd();
      amx::pack_values(v.data(), nk, hd, vp.data());
      auto scratch = fovea::aligned_alloc_bytes(k512::kScratchBytes);
      const double flop = 4.0 * double(bq) * nk * hd;
      double best = 1e30;
      for (int r = 0; r < std::max(reps, 3) * 4; ++r) {
        const auto t0 = Clock::now();
        k512::attention(q.data(), bq, hd, k.data(), vp.data(), nk, hd, 0.125f, nullptr, 0, scratch.get(), o.data());
        best = std::min(best, ms_since(t0));
      }
      std::printf("%s\n", nlohmann::json{{"mode", "attention_kernel"}, {"kernel", "avx512bf16"}, {"bq", bq}, {"nk", nk},
                                         {"hd", hd}, {"min_ms", best}, {"gflops", flop / best / 1e6},
                                         {"dpbf16_ceiling_1core", ceiling}, {"of_ceiling", flop / best / 1e6 / ceiling}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    }
}

void attention_kernel(const std::vector<int>& ns, int reps) {
  namespace avx2 = fovea::encoder_detail::avx2;
  if (fovea::encoder_detail::avx512bf16::usable()) attention_kernel_bf16(ns, reps);
  if (!fovea::encoder_detail::Gemm::avx2_takes_f32()) {
    if (!fovea::encoder_detail::avx512bf16::usable())
      std::printf("%s\n", nlohmann::json{{"mode", "attention_kernel"}, {"supported", false}}.dump().c_str());
    return;
  }
  const double fma = avx2::fma_peak_gflops(1, 0.5);
  constexpr int64_t hd = 64;
  for (const int nk : ns)
    for (const int64_t bq : {64, 128}) {
      std::vector<float> q(size_t(bq * hd)), k(size_t(nk) * hd), v(size_t(nk) * hd), o(size_t(bq * hd));
      uint32_t st = 12345;
      auto rnd = [&] { return float((st = st * 1664525u + 1013904223u) >> 8) / float(1 << 24) - 0.5f; };
      for (float& x : q) x = rnd();
      for (float& x : k) x = rnd();
      for (float& x : v) x = rnd();
      const double flop = 4.0 * double(bq) * nk * hd;
      double best = 1e30;
      for (int r = 0; r < std::max(reps, 3) * 4; ++r) {
        const auto t0 = Clock::now();
        avx2::attention(q.data(), bq, hd, k.data(), v.data(), nk, hd, 0.125f, nullptr, 0, o.data());
        best = std::min(best, ms_since(t0));
      }
      std::printf("%s\n", nlohmann::json{{"mode", "attention_kernel"}, {"bq", bq}, {"nk", nk}, {"hd", hd},
                                         {"min_ms", best}, {"gflops", flop / best / 1e6}, {"fma_ceiling_1core", fma},
                                         {"of_ceiling", flop / best / 1e6 / fma}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    }
}

// The int8 candidates on the same shape: fovea's int8 kernels (A bf16 quantized per row inside
// the call, C bf16, as an encode runs them) and oneDNN's int8 matmul (A already u8, W s8 in its
// preferred layout, per-channel output scales, C f32: the integer product alone, A's quantization
// not counted). GFLOP/s count a multiply-add as 2, as the float peaks do.
void int8_peak(int64_t M, int64_t K, int64_t N, int threads, int reps) {
  namespace q8 = fovea::encoder_detail::int8;
  const double gflop = 2.0 * double(M) * double(K) * double(N) / 1e9;
  auto report = [&](const std::string& impl, auto&& once) {
    double best = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      once();
      best = std::max(best, gflop / (ms_since(t0) / 1e3));
    }
    nlohmann::json j{{"mode", "peak"}, {"precision", "int8"}, {"m", M}, {"k", K}, {"n", N}, {"threads", threads},
                     {"min_ms", gflop / best * 1e3}, {"gflops", best}, {"impl", impl}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  };
  std::vector<uint16_t> a(size_t(M * K)), c(size_t(M * N));
  std::vector<float> w(size_t(N * K));
  auto value = [](size_t i) { return float((i * 2654435761u >> 13) & 255) / 128 - 1; };
  for (size_t i = 0; i < a.size(); ++i) a[i] = fovea::f32_to_bf16(value(i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = value(i * 3 + 1);
  const q8::Weight qw = q8::quantize(w.data(), fovea::DType::f32, K, N, K);
  q8::Args g;
  g.a = a.data(), g.lda = K, g.a_dt = fovea::DType::bf16, g.w = &qw, g.c = c.data(), g.ldc = N,
  g.c_dt = fovea::DType::bf16, g.m = M;
  for (q8::Kernel k : {q8::Kernel::avx2, q8::Kernel::avxvnni, q8::Kernel::vnni256, q8::Kernel::vnni512}) {
    if (!q8::available(k)) continue;
    q8::gemm(k, g, threads);  // warm
    report(std::string("fovea:int8-") + q8::name(k), [&] { q8::gemm(k, g, threads); });
  }
  try {
    using dt = dnnl::memory::data_type;
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream st(eng);
    const dnnl::memory::desc ad({M, K}, dt::u8, {K, 1}), bd({K, N}, dt::s8, dnnl::memory::format_tag::any),
        cd({M, N}, dt::f32, {N, 1});
    dnnl::primitive_attr attr;
    attr.set_output_scales(2, std::vector<float>(size_t(N), 1e-3f));
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, eng);
    dnnl::memory A(ad, eng), B(pd.weights_desc(), eng), C(cd, eng);
    std::memset(A.get_data_handle(), 7, ad.get_size());
    std::memset(B.get_data_handle(), 3, pd.weights_desc().get_size());
    dnnl::matmul mm(pd);
    auto once = [&] {
      mm.execute(st, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
      st.wait();
    };
    once();
    report(std::string("onednn:") + pd.impl_info_str(), once);
  } catch (const dnnl::error& e) {
    std::printf("%s\n", nlohmann::json{{"mode", "peak"}, {"precision", "int8"}, {"impl", "onednn"}, {"error", e.what()}}
                             .dump()
                             .c_str());
  }
}

void peak(int64_t M, int64_t K, int64_t N, int threads, int reps) {
  omp_set_num_threads(threads);
  for (const fovea::Precision prec : {fovea::Precision::fp32, fovea::Precision::bf16}) {
    const char* name = prec == fovea::Precision::fp32 ? "fp32" : "bf16";
    if (prec == fovea::Precision::bf16 && !fovea::bf16_supported()) {  // AVX2-only CPUs: oneDNN has no bf16 matmul
      std::printf("%s\n", nlohmann::json{{"mode", "peak"}, {"precision", "bf16"}, {"supported", false}}.dump().c_str());
      continue;
    }
    BarePeak bare(M, K, N, prec, threads);
    auto report = [&](const std::string& impl, auto&& once) {
      double best = 0;
      for (int r = 0; r < reps; ++r) best = std::max(best, once());
      nlohmann::json j{{"mode", "peak"}, {"precision", name}, {"m", M}, {"k", K}, {"n", N}, {"threads", threads},
                       {"min_ms", bare.gflop() / best * 1e3}, {"gflops", best}, {"impl", impl}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    };
    report(bare.onednn_impl(), [&] { return bare.onednn_once(); });
    if (bare.has_fovea()) report(bare.fovea_impl(), [&] { return bare.fovea_once(); });
  }
  int8_peak(M, K, N, threads, reps);
  if (fovea::encoder_detail::Gemm::avx2_takes_f32()) {
    // The FMA units' own f32 rate at AVX2's width (the widest vectors an AVX2-only CPU has): 12
    // independent FMA chains on registers, no memory. Every f32 GEMM on such a machine is under it.
    const double fma = fovea::encoder_detail::avx2::fma_peak_gflops(threads, 0.5);
    std::printf("%s\n", nlohmann::json{{"mode", "ceiling"}, {"precision", "fp32"}, {"threads", threads},
                                       {"gflops", fma}, {"impl", "avx2 fma (VFMADD on registers)"}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  }
  if (!fovea::encoder_detail::amx::usable()) return;
  // The tiles' own rate: TDPBF16PS on registers, no memory at all. No GEMM reaches it; it is the
  // ceiling every bf16 kernel on this machine is under.
  const double tiles = fovea::encoder_detail::amx::tile_peak_gflops(threads, 0.5);
  std::printf("%s\n", nlohmann::json{{"mode", "ceiling"}, {"precision", "bf16"}, {"threads", threads},
                                     {"gflops", tiles}, {"impl", "amx tiles (TDPBF16PS on registers)"}}
                          .dump()
                          .c_str());
  std::fflush(stdout);
}

// FLOPs of one encode of n tokens (+ the model's prefix tokens), multiply-adds counted as 2:
// bench/encode_bench.py's encode_gflop for any config.
double encode_gflop(const fovea::VitConfig& c, int64_t n) {
  const double t = double(n + (c.class_token ? 1 : 0) + c.registers), d = c.hidden, m = c.mlp;
  const double per_layer = 2 * t * d * 3 * d + 2 * t * t * d * 2 + 2 * t * d * d + 2 * 2 * t * d * m;
  return (2.0 * double(n) * double(c.channels) * c.patch_px * c.patch_px * d + c.layers * per_layer) / 1e9;
}

// Why the encoder packs constant weights only where oneDNN has a blocked (brgemm) layout: per
// ViT-B/16 linear shape (M = 274, a B=273 image; M = 104, a video group's recomputed rows), the
// f32 matmul with W as it lies ([N, K], read transposed) against W reordered into the layout the
// primitive prefers ("any"), one thread, best of `reps` in thread CPU time (so other processes on
// a shared machine change the figure little). Prints the implementation oneDNN chose.
void layouts(int reps) {
  using dt = dnnl::memory::data_type;
  using md = dnnl::memory::desc;
  omp_set_num_threads(1);
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream st(eng);
  auto cpu_s = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  const int64_t shapes[][3] = {{274, 768, 2304}, {274, 768, 768}, {274, 768, 3072}, {274, 3072, 768},
                               {104, 768, 2304}, {104, 768, 768}, {104, 768, 3072}, {104, 3072, 768}};
  for (const auto& s : shapes) {
    const int64_t M = s[0], K = s[1], N = s[2];
    const md a({M, K}, dt::f32, {K, 1}), w({K, N}, dt::f32, {1, K}), c({M, N}, dt::f32, {N, 1});
    dnnl::memory A(a, eng), W(w, eng), C(c, eng);
    for (dnnl::memory* m : {&A, &W}) {
      auto* p = static_cast<float*>(m->get_data_handle());
      for (size_t i = 0; i < m->get_desc().get_size() / 4; ++i) p[i] = float((i * 2654435761u >> 13) & 255) / 128 - 1;
    }
    const dnnl::matmul::primitive_desc plain(dnnl::matmul::desc(a, w, c), eng);
    const dnnl::matmul::primitive_desc any(
        dnnl::matmul::desc(a, md({K, N}, dt::f32, dnnl::memory::format_tag::any), c), eng);
    dnnl::memory P(any.weights_desc(), eng);
    dnnl::reorder(W, P).execute(st, W, P);
    st.wait();
    const dnnl::matmul mp(plain), ma(any);
    double best_plain = 1e30, best_any = 1e30;
    for (int r = 0; r < reps + 1; ++r) {
      double t = cpu_s();
      mp.execute(st, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, W}, {DNNL_ARG_DST, C}});
      st.wait();
      if (r) best_plain = std::min(best_plain, cpu_s() - t);
      t = cpu_s();
      ma.execute(st, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, P}, {DNNL_ARG_DST, C}});
      st.wait();
      if (r) best_any = std::min(best_any, cpu_s() - t);
    }
    const double gflop = 2.0 * double(M) * double(N) * double(K) / 1e9;
    nlohmann::json j{{"mode", "layouts"}, {"m", M}, {"k", K}, {"n", N}, {"impl", any.impl_info_str()},
                     {"plain_gflops", gflop / best_plain}, {"preferred_gflops", gflop / best_any}};
    if (fovea::encoder_detail::avx2::usable()) {  // fovea's AVX2 kernel: panels packed on the fly, and packed once
      namespace avx2 = fovea::encoder_detail::avx2;
      std::vector<float> panels(avx2::packed_floats(N, K));
      avx2::GemmArgs g;
      g.a = static_cast<const float*>(A.get_data_handle()), g.lda = K;
      g.w = W.get_data_handle(), g.ldw = K, g.w_dt = fovea::DType::f32;
      g.c = static_cast<float*>(C.get_data_handle()), g.ldc = N;
      g.m = M, g.n = N, g.k = K, g.threads = 1;
      avx2::pack(g.w, g.w_dt, K, N, K, panels.data(), 1);
      double best_fly = 1e30, best_packed = 1e30;
      for (int r = 0; r < reps + 1; ++r) {
        g.packed = nullptr;
        double t = cpu_s();
        avx2::gemm(g);
        if (r) best_fly = std::min(best_fly, cpu_s() - t);
        g.packed = panels.data();
        t = cpu_s();
        avx2::gemm(g);
        if (r) best_packed = std::min(best_packed, cpu_s() - t);
      }
      j["fovea_avx2_on_the_fly_gflops"] = gflop / best_fly;
      j["fovea_avx2_packed_gflops"] = gflop / best_packed;
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
}

// Scales every layer's Q and K projections by √s (see --qk-scale). Benchmarks only: call before
// the first encode, on the only handle to the model (ModelAccess::unshared checks both).
// The layer's stacked q|k|v weights, writable: only an f32 model the process owns (random:...).
float* qkv_weights(fovea::VitLayer& l) {
  if (l.qkv_w.dtype != fovea::DType::f32 || l.qkv_w.mapped() || l.qkv_w.owned.dtype() != fovea::DType::f32)
    throw fovea::Error(fovea::Errc::invalid_argument, "--qk-scale / --qk-tie need a random:... model (f32, not mapped)");
  return l.qkv_w.owned.data<float>();
}

void scale_qk(fovea::VitModel& model, float s) {
  auto& m = fovea::encoder_detail::ModelAccess::unshared(model);
  const int64_t D = m.config.hidden;
  const float r = std::sqrt(s);
  for (fovea::VitLayer& l : m.layers) {
    float* w = qkv_weights(l);
    for (int64_t i = 0; i < 2 * D * D; ++i) w[i] *= r;
    if (fovea::encoder_detail::present(l.qkv_b))
      for (int64_t i = 0; i < 2 * D; ++i) l.qkv_b.data<float>()[i] *= r;
  }
}

// K projection := Q projection in every layer (see --qk-tie). Before the first encode.
void tie_qk(fovea::VitModel& model) {
  auto& m = fovea::encoder_detail::ModelAccess::unshared(model);
  const int64_t D = m.config.hidden;
  for (fovea::VitLayer& l : m.layers) {
    float* w = qkv_weights(l);
    std::copy(w, w + D * D, w + D * D);
    if (fovea::encoder_detail::present(l.qkv_b))
      std::copy(l.qkv_b.data<float>(), l.qkv_b.data<float>() + D, l.qkv_b.data<float>() + D);
  }
}

// Per layer, the mean entropy (nats) of exact softmax attention rows, over up to 64 query rows
// per head spread evenly over the tokens, of the encodes run on `ctx` while attached.
struct EntropyProbe {
  std::vector<double> sum;
  std::vector<int64_t> count;
  int64_t tokens = 0;
  void attach(fovea::EncoderContext& ctx, const fovea::VitModel& model) {
    const fovea::VitConfig& c = model.config();
    const int64_t D = c.hidden;
    const int heads = c.heads;
    sum.assign(size_t(c.layers), 0.0), count.assign(size_t(c.layers), 0);
    ctx.impl().attention_probe = [this, D, heads](int layer, const std::byte* qkv, fovea::DType dt, int64_t T) {
      tokens = T;
      const int64_t hd = D / heads, ld = 3 * D, step = std::max<int64_t>(1, T / 64);
      auto at = [&](int64_t row, int64_t col) {
        return dt == fovea::DType::f32 ? reinterpret_cast<const float*>(qkv)[row * ld + col]
                                       : fovea::bf16_to_f32(reinterpret_cast<const uint16_t*>(qkv)[row * ld + col]);
      };
      std::vector<double> s(size_t(T), 0.0);
      for (int h = 0; h < heads; ++h)
        for (int64_t i = 0; i < T; i += step) {
          double mx = -INFINITY;
          for (int64_t t = 0; t < T; ++t) {
            double a = 0;
            for (int64_t j = 0; j < hd; ++j) a += double(at(i, h * hd + j)) * at(t, D + h * hd + j);
            s[t] = a / std::sqrt(double(hd));
            mx = std::max(mx, s[t]);
          }
          double z = 0, ez = 0;
          for (int64_t t = 0; t < T; ++t) {
            const double e = std::exp(s[t] - mx);
            z += e, ez += e * (s[t] - mx);
          }
          sum[size_t(layer)] += std::log(z) - ez / z;  // H = log Z − E[s − max]
          ++count[size_t(layer)];
        }
    };
  }
  void detach(fovea::EncoderContext& ctx) { ctx.impl().attention_probe = {}; }
};

// Per-token cosine of a's rows to b's: mean and min.
std::pair<double, double> row_cosines(const fovea::Tensor& a, const fovea::Tensor& b) {
  const int64_t n = a.dim(0), d = a.dim(1);
  double total = 0, worst = 1;
  for (int64_t i = 0; i < n; ++i) {
    const float* x = a.data<float>() + i * d;
    const float* y = b.data<float>() + i * d;
    double xy = 0, xx = 0, yy = 0;
    for (int64_t j = 0; j < d; ++j) xy += double(x[j]) * y[j], xx += double(x[j]) * x[j], yy += double(y[j]) * y[j];
    const double c = xx > 0 && yy > 0 ? xy / std::sqrt(xx * yy) : 1.0;
    total += c, worst = std::min(worst, c);
  }
  return {total / double(n), worst};
}

// The command line (see the top of this file).
struct Options {
  std::string model_spec = "random:vit-b16", ns = "196,273,576,1024,4096", precision = "fp32", e2e_image;
  std::string attention_list = "exact", peak_shape = "4096,768,3072";
  int threads = 2, reps = 3, budget = 273;
  bool run_layouts = false;
  bool uniform = false, run_peak = false, run_attention_kernel = false, compare_exact = false, entropy = false, qk_tie = false, paired = false;
  std::string grid_image;
  float qk_scale = 1.0f;
};

// Reads the arguments into `o`; an exit code when the program is done (--int8-supported, or a
// bad argument), nothing when it goes on.
std::optional<int> parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_encode: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") o.model_spec = next();
    else if (a == "--n") o.ns = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--e2e") o.e2e_image = next();
    else if (a == "--budget") o.budget = std::stoi(next());
    else if (a == "--uniform") o.uniform = true;
    else if (a == "--peak") o.run_peak = true;
    else if (a == "--int8-supported") {  // one JSON line: whether int8 runs here, and on which kernels
      std::printf("%s\n", nlohmann::json{{"int8_supported", fovea::int8_supported()},
                                         {"kernels", fovea::matrix_kernels(fovea::Precision::int8)}}
                               .dump()
                               .c_str());
      return 0;
    }
    else if (a == "--peak-shape") o.peak_shape = next();
    else if (a == "--paired-peak") o.paired = true;
    else if (a == "--layouts") o.run_layouts = true;
    else if (a == "--attention-kernel") o.run_attention_kernel = true;
    else if (a == "--attention") o.attention_list = next();
    else if (a == "--compare-exact") o.compare_exact = true;
    else if (a == "--entropy") o.entropy = true;
    else if (a == "--qk-tie") o.qk_tie = true;
    else if (a == "--image") o.grid_image = next();
    else if (a == "--qk-scale") o.qk_scale = std::stof(next());
    else {
      std::fprintf(stderr, "bench_encode: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  return std::nullopt;
}

// What the encodes run with: the model (loaded once), its executor and the precision that runs.
struct EncodeRun {
  const Options& o;
  fovea::VitModel& model;
  fovea::Executor& exec;
  fovea::Precision prec;
  std::string precision;  // prec's name: what runs (bf16 runs fp32 without bf16 kernels)
  double load_ms = 0;
};

// --e2e: decode once (excluded), then tokenize + encode per repetition.
void bench_e2e(const EncodeRun& r) {
  const Options& o = r.o;
  const fovea::ImageU8 img = fovea::load_image(o.e2e_image);
  fovea::TokenizeParams params;
  params.alloc.budget_tokens = o.budget;
  params.patch_px = r.model.config().patch_px;
  params.uniform = o.uniform;
  fovea::Query query;
  query.fixations.push_back({img.width() * 0.5f, img.height() * 0.4f, 1.0f});
  int64_t n = 0;
  auto run = [&] {
    fovea::Tokenization t = fovea::tokenize(img.clone(), query, params, r.exec);
    const fovea::Encoding e = fovea::encode(r.model, t.batch.patches, t.batch.positions,
                                            {.precision = r.prec, .image_width = img.width(), .image_height = img.height()},
                                            r.exec);
    n = e.embeddings.dim(0);
  };
  run();  // warm-up
  const Stats s = time_reps(o.reps, run);
  nlohmann::json j{{"mode", o.uniform ? "uniform" : "foveated"}, {"budget", o.budget}, {"n", n},
                   {"precision", r.precision}, {"threads", o.threads}, {"median_ms", s.median},
                   {"min_ms", s.min}, {"image", o.e2e_image}, {"model", r.model.describe()}};
  std::printf("%s\n", j.dump().c_str());
}

// N tokens on a side x side grid: random patches, or with --image that image's pixels.
struct GridInput {
  fovea::Tensor patches;    // [n, C, P, P] f32
  fovea::Tensor positions;  // [n, 4] f32
  int side = 0;
};

GridInput grid_input(const fovea::VitConfig& c, int n, const std::string& grid_image) {
  GridInput g{fovea::Tensor(fovea::DType::f32, {n, c.channels, c.patch_px, c.patch_px}),
              fovea::Tensor(fovea::DType::f32, {n, 4}), 0};
  fovea::Tensor& patches = g.patches;
  uint32_t s = 1;
  for (int64_t i = 0; i < patches.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    patches.data<float>()[i] = float(s >> 8) / float(1 << 24) * 4 - 2;
  }
  const int side = g.side = int(std::ceil(std::sqrt(double(n))));
  if (!grid_image.empty()) {
    const fovea::ImageU8 img = fovea::load_image(grid_image);
    const int P = c.patch_px, px = side * P;
    float* d = patches.data<float>();
    for (int i = 0; i < n; ++i)
      for (int ch = 0; ch < c.channels; ++ch)
        for (int y = 0; y < P; ++y)
          for (int x = 0; x < P; ++x) {
            const int gx = (i % side) * P + x, gy = (i / side) * P + y;
            const uint8_t v = img.at(std::min(ch, img.channels() - 1), int(int64_t(gy) * img.height() / px),
                                     int(int64_t(gx) * img.width() / px));
            d[((int64_t(i) * c.channels + ch) * P + y) * P + x] = (v / 255.0f - 0.5f) / 0.25f;
          }
  }
  for (int i = 0; i < n; ++i) {
    float* p = g.positions.data<float>() + i * 4;
    p[0] = (float(i % side) + 0.5f) * c.patch_px, p[1] = (float(i / side) + 0.5f) * c.patch_px;
    p[2] = float(c.patch_px), p[3] = 0;
  }
  return g;
}

// The timed encodes of one mode: each repetition's attention time and, with --paired-peak, its
// encode rate over the bare GEMM's right before it.
struct Timed {
  Stats st;
  std::vector<double> attention_ms;  // per repetition: Encoding::attention_ms, the attention op alone
  std::vector<double> fractions, peaks;
};

Timed time_encodes(const EncodeRun& r, const GridInput& g, int n, const fovea::EncodeParams& ep) {
  const Options& o = r.o;
  Timed t;
  std::unique_ptr<BarePeak> bare;
  if (o.paired) {
    const std::vector<int> ps = parse_list(o.peak_shape);
    bare = std::make_unique<BarePeak>(ps.at(0), ps.at(1), ps.at(2), r.prec, o.threads);
  }
  if (!bare) {
    t.st = time_reps(o.reps, [&] { t.attention_ms.push_back(fovea::encode(r.model, g.patches, g.positions, ep, r.exec).attention_ms); });
    return t;
  }
  std::vector<double> ts;
  for (int rep = 0; rep < o.reps; ++rep) {
    const double peak_now = bare->once();  // the bare GEMM right before this encode
    const auto t0 = Clock::now();
    t.attention_ms.push_back(fovea::encode(r.model, g.patches, g.positions, ep, r.exec).attention_ms);
    ts.push_back(ms_since(t0));
    t.fractions.push_back(encode_gflop(r.model.config(), n) / (ts.back() / 1e3) / peak_now);
    t.peaks.push_back(peak_now);
  }
  std::sort(ts.begin(), ts.end());
  t.st = {ts[ts.size() / 2], ts[0]};
  return t;
}

// --entropy: the mean attention entropy per layer of one exact encode, and ln(T).
void add_entropy(const EncodeRun& r, const GridInput& g, const fovea::EncodeParams& ep, nlohmann::json& j) {
  EntropyProbe probe;
  fovea::EncoderContext probed;
  probe.attach(probed, r.model);
  fovea::encode(probed, r.model, g.patches, g.positions, ep, r.exec);
  probe.detach(probed);
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < probe.sum.size(); ++l) layers.push_back(probe.sum[l] / double(std::max<int64_t>(1, probe.count[l])));
  j["entropy_per_layer"] = layers;
  j["entropy_uniform"] = std::log(double(probe.tokens));
}

// One JSON line per N and attention mode. `exact_embeddings`: exact attention's, for
// --compare-exact (computed on demand when exact is not in the list, or comes later).
void bench_mode(const EncodeRun& r, const GridInput& g, int n, const fovea::AttentionParams& att,
                fovea::Tensor& exact_embeddings) {
  const Options& o = r.o;
  const fovea::VitConfig& c = r.model.config();
  const fovea::EncodeParams ep{.precision = r.prec, .image_width = g.side * c.patch_px,
                               .image_height = g.side * c.patch_px, .attention = att};
  const auto t_first = Clock::now();
  const fovea::Encoding first = fovea::encode(r.model, g.patches, g.positions, ep, r.exec);  // warm-up: first touch
  const double first_ms = ms_since(t_first);
  Timed t = time_encodes(r, g, n, ep);
  nlohmann::json j{{"mode", "encode"}, {"n", n}, {"precision", r.precision}, {"threads", o.threads},
                   {"attention", fovea::to_string(att)}, {"qk_scale", o.qk_scale}, {"median_ms", t.st.median},
                   {"min_ms", t.st.min}, {"first_ms", first_ms}, {"load_ms", r.load_ms}, {"model", r.model.describe()}};
  if (!t.attention_ms.empty()) {
    std::sort(t.attention_ms.begin(), t.attention_ms.end());
    j["attention_median_ms"] = t.attention_ms[t.attention_ms.size() / 2], j["attention_min_ms"] = t.attention_ms[0];
  }
  if (o.paired) {
    // Per repetition: this encode's rate over the bare GEMM's rate just before it. The
    // machine's speed drifts (a shared host: 2x within minutes here), so a peak measured
    // minutes apart from the encode says little; a ratio of neighbours does.
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    j["paired_fraction_of_peak"] = median(t.fractions);
    j["paired_fractions"] = t.fractions;
    j["paired_peak_gflops_median"] = median(t.peaks);
    j["gflop"] = encode_gflop(c, n);
  }
  const bool is_exact = att.mode == fovea::AttentionParams::Mode::exact;
  if (o.compare_exact && !is_exact) {
    if (exact_embeddings.rank() == 0) {
      fovea::EncodeParams ex = ep;
      ex.attention = {};
      exact_embeddings = fovea::encode(r.model, g.patches, g.positions, ex, r.exec).embeddings;
    }
    const auto [mean, worst] = row_cosines(first.embeddings, exact_embeddings);
    j["cosine_to_exact_mean"] = mean, j["cosine_to_exact_min"] = worst;
  }
  if (is_exact && o.compare_exact) exact_embeddings = first.embeddings.clone();
  if (is_exact && o.entropy) add_entropy(r, g, ep, j);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// The model's encodes: --e2e, or per N every --attention mode.
void bench_encodes(const Options& o) {
  std::vector<fovea::AttentionParams> modes;
  {
    std::stringstream ss(o.attention_list);
    for (std::string item; std::getline(ss, item, ',');) modes.push_back(fovea::parse_attention(item));
  }
  const auto t_load = Clock::now();
  fovea::VitModel model = fovea::VitModel::load(o.model_spec);
  const double load_ms = ms_since(t_load);
  if (o.qk_tie) tie_qk(model);
  if (o.qk_scale != 1.0f) scale_qk(model, o.qk_scale);
  fovea::Executor exec({.threads = o.threads});
  const fovea::Precision asked = o.precision == "bf16"   ? fovea::Precision::bf16
                                 : o.precision == "int8" ? fovea::Precision::int8
                                                         : fovea::Precision::fp32;
  const fovea::Precision prec = fovea::runnable_precision(asked);
  if (prec != asked) std::fprintf(stderr, "bench_encode: this CPU has no bf16 matrix kernels; bf16 runs fp32\n");
  const EncodeRun r{o, model, exec, prec, std::string(fovea::to_string(prec)), load_ms};
  if (!o.e2e_image.empty()) {
    bench_e2e(r);
    return;
  }
  for (int n : parse_list(o.ns)) {
    const GridInput g = grid_input(model.config(), n, o.grid_image);
    fovea::Tensor exact_embeddings;
    for (const fovea::AttentionParams& att : modes) bench_mode(r, g, n, att, exact_embeddings);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The passive OpenMP wait policy, as the fovea CLI chooses it (tools/fovea/main.cpp): the
  // program owns that choice, and libgomp reads it only at load time, hence the re-exec.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0) {
    ::execv("/proc/self/exe", argv);
    ::unsetenv("OMP_WAIT_POLICY");
  }
  Options o;
  if (const std::optional<int> done = parse_args(argc, argv, o)) return *done;
  try {
    if (o.run_layouts) {
      layouts(o.reps);
      return 0;
    }
    if (o.run_attention_kernel) {
      attention_kernel(parse_list(o.ns), o.reps);
      return 0;
    }
    if (o.run_peak) {
      const std::vector<int> s = parse_list(o.peak_shape);
      if (s.size() != 3) throw fovea::Error(fovea::Errc::invalid_argument, "--peak-shape M,K,N");
      peak(s[0], s[1], s[2], o.threads, o.reps);
      return 0;
    }
    bench_encodes(o);
  } catch (const fovea::Error& e) {
    std::fprintf(stderr, "bench_encode: %s\n", e.what());
    return 1;
  }
  return 0;
}
