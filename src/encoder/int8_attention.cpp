// int8attn::usable(): compiled without ISA flags, so it runs on any CPU. The kernel is in
// int8_attention_kernels.cpp.
#include <cstdlib>
#include <string>

#include "encoder/avx512bf16.hpp"
#include "encoder/int8.hpp"
#include "encoder/int8_attention.hpp"

namespace fovea::encoder_detail::int8attn {

#ifndef FOVEA_INT8_ATTENTION_KERNELS
// Built without the kernel: never usable, never called.
void quantize_keys(const uint16_t*, int64_t, int64_t, int8_t*, float*, int32_t*) {}
void quantize_values(const uint16_t*, int64_t, int64_t, int8_t*, float*) {}
void attention(const uint16_t*, int64_t, int64_t, const int8_t*, const float*, const int32_t*, const int8_t*,
               const float*, int64_t, int64_t, float, std::byte*, float*) {}
#endif

bool usable() {
#ifdef FOVEA_INT8_ATTENTION_KERNELS
  static const bool ok = [] {
    const char* off = std::getenv("FOVEA_INT8_ATTENTION");
    if (off && std::string(off) == "0") return false;
    // vnni512's availability is the CPU's AVX512-VNNI (and ONEDNN_MAX_CPU_ISA's cap); the
    // kernel's translation unit is built with AVX512-BF16 flags, so that is asked too.
    return int8::available(int8::Kernel::vnni512) && avx512bf16::usable();
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace fovea::encoder_detail::int8attn
