// avx2::usable(): compiled without AVX2 flags, so it runs on any x86-64 CPU (and says no off
// x86-64). The kernel is in avx2_kernels.cpp.
#include <cctype>
#include <cstdlib>
#include <string>

#include "encoder/avx2.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fovea::encoder_detail::avx2 {

namespace {

// ONEDNN_MAX_CPU_ISA below AVX2 (SSE41, AVX): fovea's AVX2 kernel stays off too, so a capped
// run behaves as that older CPU would.
[[maybe_unused]] bool isa_capped_below_avx2() {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!isa || !*isa) return false;
  std::string s(isa);
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s == "SSE41" || s == "AVX";
}

#if defined(__x86_64__)
[[maybe_unused]] bool cpu_and_os_allow() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1;
  if (!fma || !osxsave || !avx) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b >> 5 & 1)) return false;  // AVX2
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;  // XCR0: the OS saves the SSE and AVX (YMM) state
}
#else
[[maybe_unused]] bool cpu_and_os_allow() { return false; }
#endif

}  // namespace

#ifndef FOVEA_AVX2_KERNELS
// Built without the kernel (compiler or target without AVX2): never usable, and never called.
void gemm(const GemmArgs&) {}
void pack(const void*, DType, int64_t, int64_t, int64_t, float*, int) {}
void attention(const float*, int64_t, int64_t, const float*, const float*, int64_t, int64_t, float, const float*,
               int64_t, float*) {}
double fma_peak_gflops(int, double) { return 0; }
#endif

bool usable() {
#ifdef FOVEA_AVX2_KERNELS
  static const bool ok = [] {
    const char* off = std::getenv("FOVEA_AVX2");
    if (off && std::string(off) == "0") return false;
    if (isa_capped_below_avx2()) return false;
    return cpu_and_os_allow();
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace fovea::encoder_detail::avx2
