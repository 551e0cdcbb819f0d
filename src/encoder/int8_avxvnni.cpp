// The int8 kernel on AVX-VNNI (int8.hpp): the VEX-encoded vpdpbusd of CPUs with VNNI but no
// AVX-512 (Alder Lake and later, Zen 5 desktop parts report it too). 16 vector registers: 3 rows
// × 4 accumulators. Compiled with -mavx2 -mfma -mavxvnni; runs only after
// int8::available(Kernel::avxvnni) said yes.
#include "encoder/int8_kernels.inc"

#define FOVEA_INT8_DPBUSD256(acc, a, b) _mm256_dpbusd_avx_epi32(acc, a, b)
#include "encoder/int8_vnni_tile.inc"

namespace fovea::encoder_detail::int8::isa {
void gemm_avxvnni(const Args& g, int threads) { run<TileDp256<3>>(g, threads, act_max(Kernel::avxvnni)); }
}  // namespace fovea::encoder_detail::int8::isa
