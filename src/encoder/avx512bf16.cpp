// avx512bf16::usable(): compiled without AVX-512 flags, so it runs on any x86-64 CPU (and says
// no off x86-64). The kernel is in avx512bf16_kernels.cpp.
#include <cctype>
#include <cstdlib>
#include <string>

#include "encoder/avx512bf16.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fovea::encoder_detail::avx512bf16 {

namespace {

// ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 (AVX2, AVX512_CORE, AVX512_CORE_VNNI): off, so a
// capped run behaves as that older CPU would.
[[maybe_unused]] bool isa_capped_below_bf16() {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!isa || !*isa) return false;
  std::string s(isa);
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s != "ALL" && s.find("BF16") == std::string::npos && s.find("AMX") == std::string::npos &&
         s.find("FP16") == std::string::npos;
}

#if defined(__x86_64__)
[[maybe_unused]] bool cpu_and_os_allow() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512 = (b >> 16 & 1) && (b >> 17 & 1) && (b >> 30 & 1) && (b >> 31 & 1);  // F, DQ, BW, VL
  if (!avx512 || a < 1) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1)) return false;  // AVX512-BF16
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  // XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM (bits 1, 2, 5-7).
  const unsigned need = (1u << 1) | (1u << 2) | (7u << 5);
  return (lo & need) == need;
}
#else
[[maybe_unused]] bool cpu_and_os_allow() { return false; }
#endif

}  // namespace

#ifndef FOVEA_AVX512BF16_KERNELS
// Built without the kernel (compiler or target without AVX512-BF16): never usable, never called.
void attention(const uint16_t*, int64_t, int64_t, const uint16_t*, const uint16_t*, int64_t, int64_t, float,
               const float*, int64_t, std::byte*, float*) {}
double dpbf16_peak_gflops(int, double) { return 0; }
#endif

bool usable() {
#ifdef FOVEA_AVX512BF16_KERNELS
  static const bool ok = [] {
    const char* off = std::getenv("FOVEA_AVX512BF16");
    if (off && std::string(off) == "0") return false;
    if (isa_capped_below_bf16()) return false;
    return cpu_and_os_allow();
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace fovea::encoder_detail::avx512bf16
