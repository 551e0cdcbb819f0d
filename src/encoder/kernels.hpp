// Private to fovea: which of fovea's own matrix kernels this process runs. The public answer is
// fovea::matrix_kernels(Precision) (fovea/encoder.hpp); these are the parts it is made of, for
// the tests, the Python module's diagnostics and the benchmarks. Not installed.
#pragma once

namespace fovea::encoder_detail {

// Whether bf16 encodes run their linear layers and attention on fovea's own AMX tile kernels
// (the CPU has AMX-BF16, the OS grants the tile state, and neither FOVEA_AMX=0 nor an
// ONEDNN_MAX_CPU_ISA below AMX says otherwise) instead of oneDNN's. Shapes the kernels do not
// take (N or K not a multiple of 32, head widths other than 32 and 64) stay on oneDNN. Asked
// once per process.
bool amx_kernels_enabled();
// Whether bf16 encodes run attention on fovea's own AVX512-BF16 kernel instead of oneDNN's
// matmuls: the CPU has AVX512-BF16 but fovea's AMX kernels do not run (no AMX, or FOVEA_AMX=0),
// and neither FOVEA_AVX512BF16=0 nor an ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 says
// otherwise. The linear layers stay on oneDNN; head widths other than 32, 64, 96 and 128 too.
// Asked once per process.
bool avx512bf16_kernels_enabled();
// Whether fp32 encodes run their linear layers on fovea's own AVX2 + FMA kernel instead of
// oneDNN's: where oneDNN has no f32 brgemm (AVX2-only CPUs, or ONEDNN_MAX_CPU_ISA=AVX2), the
// CPU has AVX2 and FMA, and FOVEA_AVX2=0 does not say otherwise. Attention stays on oneDNN and
// Highway. Asked once per process.
bool avx2_kernels_enabled();

}  // namespace fovea::encoder_detail
