// amx::usable(): compiled without AMX / AVX-512 flags, so it runs on any x86-64 CPU (and
// says no off x86-64). The kernels are in amx_kernels.cpp.
#include <cctype>
#include <cstdlib>
#include <string>

#include "encoder/amx.hpp"

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace fovea::encoder_detail::amx {

namespace {

// ONEDNN_MAX_CPU_ISA below AMX (e.g. AVX2, AVX512_CORE_BF16): fovea's own AMX kernels stay off
// too, so a capped run behaves as that older CPU would.
[[maybe_unused]] bool isa_capped_below_amx() {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!isa || !*isa) return false;
  std::string s(isa);
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s != "ALL" && s.find("AMX") == std::string::npos;
}

#if defined(__x86_64__) && defined(__linux__)
[[maybe_unused]] bool cpu_and_os_allow() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool avx512 = (b >> 16 & 1) && (b >> 17 & 1) && (b >> 30 & 1) && (b >> 31 & 1);  // F, DQ, BW, VL
  const bool amx = (d >> 22 & 1) && (d >> 24 & 1);                                       // AMX-BF16, AMX-TILE
  const unsigned max_sub = a;
  if (!avx512 || !amx || max_sub < 1) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a >> 5 & 1)) return false;  // AVX512-BF16
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false;           // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  // XCR0: SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM (bits 1, 2, 5-7) and XTILECFG, XTILEDATA (17, 18).
  const unsigned long long xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  const unsigned long long need = (1ull << 1) | (1ull << 2) | (7ull << 5) | (3ull << 17);
  if ((xcr0 & need) != need) return false;
  // Linux ≥ 5.16 hands out the tile data state per process on request; older kernels (or a
  // signal stack too small for the larger frame) refuse, and the tiles stay off.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#else
[[maybe_unused]] bool cpu_and_os_allow() { return false; }
#endif

}  // namespace

#ifndef FOVEA_AMX_KERNELS
// Built without the kernels (compiler or target without AMX): never usable, and never called.
void gemm(const GemmArgs&) {}
void pack(const void*, DType, int64_t, int64_t, int64_t, uint16_t*, int) {}
double tile_peak_gflops(int, double) { return 0; }
void pack_keys(const uint16_t*, int64_t, int64_t, uint16_t*) {}
void pack_values(const uint16_t*, int64_t, int64_t, uint16_t*) {}
void pack_values_rows(const uint16_t* const*, int64_t, int64_t, uint16_t*) {}
void attention(const uint16_t*, int64_t, int64_t, const uint16_t*, const uint16_t*, int64_t, int64_t, float,
               const float*, int64_t, std::byte*, float*) {}
#endif

bool usable() {
#ifdef FOVEA_AMX_KERNELS
  static const bool ok = [] {
    const char* off = std::getenv("FOVEA_AMX");
    if (off && std::string(off) == "0") return false;
    if (isa_capped_below_amx()) return false;
    return cpu_and_os_allow();
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace fovea::encoder_detail::amx
