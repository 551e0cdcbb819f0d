// int8.hpp's dispatch, weight quantization and scalar reference: compiled without ISA flags, so
// it runs on any CPU. The kernels are in int8_avx2.cpp, int8_avxvnni.cpp and int8_avx512.cpp.
#include "encoder/int8.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "encoder/avx2.hpp"
#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fovea::encoder_detail::int8 {

namespace {

struct Cpu {
  bool avx2 = false, avxvnni = false, avx512vnni = false;
};

Cpu detect() {
  Cpu c;
#if defined(__x86_64__)
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
  const bool fma = cx >> 12 & 1, osxsave = cx >> 27 & 1, avx = cx >> 28 & 1;
  if (!fma || !osxsave || !avx) return c;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6u) != 6u) return c;  // the OS saves SSE and AVX state
  if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return c;
  c.avx2 = b >> 5 & 1;
  const bool f = b >> 16 & 1, bw = b >> 30 & 1, vl = b >> 31 & 1, vnni = cx >> 11 & 1;
  const bool zmm_state = (lo & 0xe0u) == 0xe0u;  // opmask, ZMM0-15 upper halves, ZMM16-31
  c.avx512vnni = c.avx2 && f && bw && vl && vnni && zmm_state;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) c.avxvnni = c.avx2 && (a1 >> 4 & 1);
#endif
  return c;
}

// ONEDNN_MAX_CPU_ISA caps fovea's own kernels too, so a capped run behaves as the older CPU.
int isa_cap() {  // 0: none; 1: AVX2 (no VNNI of either kind); 2: below AVX2
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!isa || !*isa) return 0;
  std::string s(isa);
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  if (s == "SSE41" || s == "AVX") return 2;
  if (s == "AVX2" || s == "AVX512_CORE" || s == "AVX512_MIC" || s == "AVX512_MIC_4OPS") return 1;
  return 0;
}

}  // namespace

const char* name(Kernel k) {
  switch (k) {
    case Kernel::scalar: return "scalar";
    case Kernel::avx2: return "avx2";
    case Kernel::avxvnni: return "avxvnni";
    case Kernel::vnni256: return "vnni256";
    case Kernel::vnni512: return "vnni512";
  }
  return "?";
}

bool available(Kernel k) {
  static const Cpu cpu = detect();
  static const int cap = isa_cap();
  switch (k) {
    case Kernel::scalar: return true;
    case Kernel::avx2:
#ifdef FOVEA_INT8_AVX2
      return cpu.avx2 && cap < 2;
#else
      return false;
#endif
    case Kernel::avxvnni:
#ifdef FOVEA_INT8_AVXVNNI
      return cpu.avxvnni && cap == 0;
#else
      return false;
#endif
    case Kernel::vnni256:
    case Kernel::vnni512:
#ifdef FOVEA_INT8_AVX512
      return cpu.avx512vnni && cap == 0;
#else
      return false;
#endif
  }
  return false;
}

Kernel best() {
  static const Kernel k = [] {
    const char* env = std::getenv("FOVEA_INT8_KERNEL");
    for (Kernel c : {Kernel::vnni512, Kernel::vnni256, Kernel::avxvnni, Kernel::avx2, Kernel::scalar})
      if (env && *env && std::string(env) == name(c) && available(c)) return c;
    // 512-bit first: on Zen 4 (512-bit ops on 256-bit units) the two ran within noise of each
    // other, and on Intel's AVX-512 server parts the 512-bit form does twice the work per op.
    for (Kernel c : {Kernel::vnni512, Kernel::vnni256, Kernel::avxvnni, Kernel::avx2})
      if (available(c)) return c;
    return Kernel::scalar;
  }();
  return k;
}

namespace {

Weight allocate(int64_t n, int64_t k) {
  if (n < 1 || k < 1) throw Error(Errc::internal, "int8: empty weight");
  Weight w;
  w.n = n, w.k = k, w.kp = (k + 3) / 4 * 4, w.np = (n + 31) / 32 * 32;
  const size_t bytes = size_t(w.np * w.kp);
  w.panels = aligned_alloc_bytes(bytes);
  std::memset(w.panels.get(), 0, bytes);
  w.scale.assign(size_t(w.np), 0.0f);
  w.sum.assign(size_t(w.np), 0);
  return w;
}

void put_row(Weight& w, int64_t r, const int8_t* q) {
  int8_t* panel = reinterpret_cast<int8_t*>(w.panels.get()) + (r / kNr) * w.kp * kNr;
  const int64_t j = r % kNr;
  int32_t s = 0;
  for (int64_t c = 0; c < w.k; ++c) {
    panel[(c / 4) * 64 + j * 4 + c % 4] = q[c];
    s += q[c];
  }
  w.sum[size_t(r)] = s;
}

}  // namespace

// x rounded to the nearest integer, ties to even, for |x| < 2^22: what nearbyint gives under the
// default rounding mode, without a library call (so the loops below vectorize).
inline float round_even(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 · 2^23
  return (x + kMagic) - kMagic;
}

Weight quantize(const void* src, DType dt, int64_t ldw, int64_t n, int64_t k) {
  Weight w = allocate(n, k);
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    weight_row_f32(src, dt, ldw, r, k, x.data());
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(x[size_t(c)]));
    const float scale = amax > 0 && std::isfinite(amax) ? amax / 127.0f : 0.0f;
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t c = 0; c < k; ++c)
      q[size_t(c)] = int8_t(std::clamp(round_even(x[size_t(c)] * inv), -127.0f, 127.0f));
    w.scale[size_t(r)] = scale;
    put_row(w, r, q.data());
  }
  return w;
}

Weight from_quantized(const int8_t* q, const float* scale, int64_t n, int64_t k) {
  Weight w = allocate(n, k);
  std::vector<int8_t> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) row[size_t(c)] = std::max<int8_t>(-127, q[r * k + c]);
    w.scale[size_t(r)] = scale[r];
    put_row(w, r, row.data());
  }
  return w;
}

void quantize_row_ref(const float* x, int64_t k, int64_t kp, int qmax, uint8_t* u, float* s_out, int32_t* z_out) {
  float lo = 0, hi = 0;
  bool finite = true;
  for (int64_t j = 0; j < k; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]), finite = finite && std::isfinite(x[j]);
  float s = (hi - lo) / float(qmax);
  if (!(s > 0) || !std::isfinite(s)) s = 1.0f;
  if (!finite) s = NAN;  // a non-finite input makes its whole output row NaN
  const float inv = finite ? 1.0f / s : 0.0f;
  const int32_t z = std::clamp(int32_t(std::nearbyint(-lo * inv)), 0, qmax);
  for (int64_t j = 0; j < k; ++j) {
    const float v = x[j] * inv;
    u[j] = std::isfinite(v) ? uint8_t(std::clamp(int32_t(std::nearbyint(v)) + z, 0, qmax)) : 0;
  }
  for (int64_t j = k; j < kp; ++j) u[j] = 0;
  *s_out = s, *z_out = z;
}

namespace {
float post_ref(Post p, float v) {
  switch (p) {
    case Post::none: return v;
    case Post::quick_gelu: return activation_ref(Activation::quick_gelu, v);
    case Post::gelu_tanh: return activation_ref(Activation::gelu_tanh, v);
    case Post::gelu_erf: return activation_ref(Activation::gelu_erf, v);
  }
  return v;
}
}  // namespace

void gemm_reference(const Args& g, int qmax) {
  const Weight& w = *g.w;
  std::vector<float> x(size_t(w.k));
  std::vector<uint8_t> u(size_t(w.kp));
  const size_t aes = dtype_size(g.a_dt);
  for (int64_t i = 0; i < g.m; ++i) {
    const std::byte* row = static_cast<const std::byte*>(g.a) + size_t(i * g.lda) * aes;
    for (int64_t c = 0; c < w.k; ++c)
      x[size_t(c)] = g.a_dt == DType::f32 ? reinterpret_cast<const float*>(row)[c]
                                          : bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[c]);
    float s = 0;
    int32_t z = 0;
    quantize_row_ref(x.data(), w.k, w.kp, qmax, u.data(), &s, &z);
    for (int64_t r = 0; r < w.n; ++r) {
      int32_t acc = 0;
      for (int64_t c = 0; c < w.k; ++c) acc += int32_t(u[size_t(c)]) * int32_t(w.q(r, c));
      const int32_t d = acc - z * w.sum[size_t(r)];
      float v = post_ref(g.post, std::fma(float(d), s * w.scale[size_t(r)], g.bias ? g.bias[r] : 0.0f));
      if (g.c_dt == DType::f32) {
        float* c = static_cast<float*>(g.c) + i * g.ldc + r;
        *c = g.accumulate ? v + *c : v;
      } else {
        uint16_t* c = static_cast<uint16_t*>(g.c) + i * g.ldc + r;
        *c = f32_to_bf16(g.accumulate ? v + bf16_to_f32(*c) : v);
      }
    }
  }
}

void gemm(Kernel kernel, const Args& g, int threads) {
  if (g.w->k > kMaxK) throw Error(Errc::internal, "int8 GEMM: k over kMaxK");
  if (g.m < 1) return;
  switch (kernel) {
    case Kernel::scalar: return gemm_reference(g, act_max(kernel));
    case Kernel::avx2: return isa::gemm_avx2(g, threads);
    case Kernel::avxvnni: return isa::gemm_avxvnni(g, threads);
    case Kernel::vnni256: return isa::gemm_vnni256(g, threads);
    case Kernel::vnni512: return isa::gemm_vnni512(g, threads);
  }
}

}  // namespace fovea::encoder_detail::int8

namespace fovea::encoder_detail::int8::isa {
// Units this build leaves out: never available, so never called.
#ifndef FOVEA_INT8_AVX2
void gemm_avx2(const Args&, int) {}
#endif
#ifndef FOVEA_INT8_AVXVNNI
void gemm_avxvnni(const Args&, int) {}
#endif
#ifndef FOVEA_INT8_AVX512
void gemm_vnni256(const Args&, int) {}
void gemm_vnni512(const Args&, int) {}
#endif
}  // namespace fovea::encoder_detail::int8::isa
