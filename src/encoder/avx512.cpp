// avx512::usable(): compiled without AVX-512 flags, so it runs on any x86-64 CPU (and says no
// off x86-64). The kernel is in avx512_kernels.cpp.
#include <cctype>
#include <cstdlib>
#include <string>

#include "encoder/avx512.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fovea::encoder_detail::avx512 {

namespace {

// ONEDNN_MAX_CPU_ISA below AVX-512: the kernel stays off too, so a capped run behaves as that
// older CPU would (and the AVX2 tests' caps mean what they say).
[[maybe_unused]] bool isa_capped_below_avx512() {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!isa || !*isa) return false;
  std::string s(isa);
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s == "SSE41" || s == "AVX" || s.rfind("AVX2", 0) == 0;
}

#if defined(__x86_64__)
[[maybe_unused]] bool cpu_and_os_allow() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1;
  if (!fma || !osxsave) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(b >> 5 & 1) || !(b >> 16 & 1)) return false;  // AVX2 (the key packing), AVX-512 F
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  // XCR0: SSE, AVX (bits 1, 2), opmask, ZMM_Hi256, Hi16_ZMM (5-7).
  const unsigned need = (1u << 1) | (1u << 2) | (7u << 5);
  return (lo & need) == need;
}
#else
[[maybe_unused]] bool cpu_and_os_allow() { return false; }
#endif

}  // namespace

#ifndef FOVEA_AVX512_KERNELS
// Built without the kernel (compiler or target without AVX-512): never usable, never called.
void attention(const float*, int64_t, int64_t, const float*, const float*, int64_t, int64_t, float, const float*,
               int64_t, float*) {}
double fma_peak_gflops(int, double) { return 0; }
#endif

bool usable() {
#ifdef FOVEA_AVX512_KERNELS
  static const bool ok = [] {
    const char* off = std::getenv("FOVEA_AVX512");
    if (off && std::string(off) == "0") return false;
    if (isa_capped_below_avx512()) return false;
    return cpu_and_os_allow();
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace fovea::encoder_detail::avx512
