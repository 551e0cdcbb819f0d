// Private to src/encoder: the int8 linear layers of Precision::int8.
//
// Numerics. A weight W [n, k] is quantized once per model, symmetrically per output channel:
// W[r, :] ≈ scale[r]·q[r, :] with q in [-127, 127] and scale[r] = max|W[r, :]| / 127. The rows
// of the activations A [m, k] are quantized at each call, asymmetrically per row (token):
// A[i, :] ≈ s[i]·(u[i, :] − z[i]) with u in [0, qmax], s[i] = (max − min) / qmax over the row
// and 0, and z[i] = round(−min / s[i]). Then
//   (A·Wᵀ)[i, r] ≈ s[i]·scale[r]·(Σ_k u[i, k]·q[r, k] − z[i]·Σ_k q[r, k]),
// an exact int32 dot product of unsigned by signed bytes, the integer product VNNI's vpdpbusd
// and AVX2's vpmaddubsw compute. qmax is 255, except on the AVX2 kernel, where it is 127:
// vpmaddubsw adds two u8·s8 products into a saturating int16, and 2·127·127 fits where 2·255·127
// does not. The bias, the activation (GELU ...) and the accumulate into C run on the f32 result.
//
// Kernels (chosen at run time, best first): AVX512-VNNI at 512 bits, the same at 256 bits
// (AVX512-VL), AVX-VNNI (the VEX form, on CPUs without AVX-512), AVX2 vpmaddubsw, and the scalar
// reference. Every kernel's integer sums are exact, so for the same qmax each gives the
// reference's result up to the rounding of its epilogue's activation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fovea/tensor.hpp"

namespace fovea::encoder_detail {
enum class Post : uint8_t;
}

namespace fovea::encoder_detail::int8 {

enum class Kernel : uint8_t { scalar, avx2, avxvnni, vnni256, vnni512 };
const char* name(Kernel k);
// Whether this build and CPU (and the OS's saved register state) run kernel k. scalar: always.
bool available(Kernel k);
// The kernel int8 encodes run: the best available one, or the one FOVEA_INT8_KERNEL names
// (scalar, avx2, avxvnni, vnni256, vnni512) when it is available. Asked once.
Kernel best();
// The activations' unsigned range for kernel k (see above).
inline int act_max(Kernel k) { return k == Kernel::avx2 ? 127 : 255; }

// A weight's columns are kept in panels of 16 output channels; each panel holds, for each group
// of 4 consecutive k, 16 × 4 bytes: byte 4j + t of group g is q[16p + j][4g + t]. k is padded
// with zeros to a multiple of 4 and n to a multiple of 32 (panels come in pairs).
constexpr int64_t kNr = 16;
struct Weight {
  int64_t n = 0, k = 0;
  int64_t kp = 0;   // k rounded up to a multiple of 4
  int64_t np = 0;   // n rounded up to a multiple of 32
  std::unique_ptr<std::byte[], AlignedFree> panels;  // np / 16 panels of kp · 16 bytes
  const std::byte* mapped = nullptr;  // the panels where they lie in a checkpoint (then `panels` is empty)
  std::vector<float> scale;  // [np]: W[r, :] ≈ scale[r]·q[r, :] (0 past n)
  std::vector<int32_t> sum;  // [np]: Σ_k q[r, k]
  const std::byte* panel_bytes() const { return mapped ? mapped : panels.get(); }
  const int8_t* panel(int64_t p) const { return reinterpret_cast<const int8_t*>(panel_bytes()) + p * kp * kNr; }
  int8_t q(int64_t r, int64_t c) const { return panel(r / kNr)[(c / 4) * 64 + (r % kNr) * 4 + c % 4]; }
  size_t bytes() const { return size_t(np * kp) + size_t(np) * 8; }
};

// W [n, k] (row stride ldw, f32 or bf16) quantized per output channel.
Weight quantize(const void* w, DType dt, int64_t ldw, int64_t n, int64_t k);
// A weight already quantized: q [n, k] row-major int8 in [-127, 127], scale [n].
Weight from_quantized(const int8_t* q, const float* scale, int64_t n, int64_t k);
// Rounding of one value as the quantizers do it: to nearest, ties to even.
// Per-row activation quantization, as every kernel does it: x [k] f32 → u [kp] (zero past k),
// scale and zero point. A row with an infinite or NaN value gets scale NaN, so its outputs are NaN.
void quantize_row_ref(const float* x, int64_t k, int64_t kp, int qmax, uint8_t* u, float* s, int32_t* z);

// C[m, n] (+)= post(A·Wᵀ + bias), A [m, k] f32 or bf16 (row stride lda), C f32 or bf16 (row
// stride ldc). `accumulate` adds into C after the activation.
struct Args {
  const void* a = nullptr;
  int64_t lda = 0;
  DType a_dt = DType::f32;
  const Weight* w = nullptr;
  const float* bias = nullptr;  // [n] or null
  void* c = nullptr;
  int64_t ldc = 0;
  DType c_dt = DType::f32;
  int64_t m = 0;
  Post post{};
  bool accumulate = false;
};
// Runs on `threads` OpenMP threads (called outside a parallel region). k must be at most
// kMaxK (the int32 sums' range).
constexpr int64_t kMaxK = 16384;
void gemm(Kernel kernel, const Args& g, int threads);
// The plain reference (scalar, any qmax).
void gemm_reference(const Args& g, int qmax);

// The quantized copies of a model's layer matrices, keyed by the WeightMatrix's data pointer.
struct Layers {
  std::unordered_map<const void*, Weight> weights;
  size_t bytes = 0;
  bool stored = false;  // read from the checkpoint (fovea convert --dtype int8), not quantized at load
  std::shared_ptr<const void> keep;  // the mapping stored panels point into
  const Weight* find(const void* w) const {
    auto it = weights.find(w);
    return it == weights.end() ? nullptr : &it->second;
  }
};

}  // namespace fovea::encoder_detail::int8

// ---- what each kernel translation unit defines (int8_avx2.cpp, int8_avx512.cpp, int8_avxvnni.cpp)
namespace fovea::encoder_detail::int8::isa {
void gemm_avx2(const Args& g, int threads);
void gemm_avxvnni(const Args& g, int threads);
void gemm_vnni256(const Args& g, int threads);
void gemm_vnni512(const Args& g, int threads);
}  // namespace fovea::encoder_detail::int8::isa
