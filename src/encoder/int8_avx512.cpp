// The int8 kernels on AVX512-VNNI (int8.hpp): vpdpbusd on 512-bit vectors (one panel of 16
// columns per register) and on 256-bit ones (AVX512-VL: 32 registers, CPUs where 512-bit
// vectors lower the clock or run at half rate). Compiled with AVX-512 F/BW/VL/VNNI flags; runs
// only after int8::available(Kernel::vnni512 / vnni256) said yes.
#include "encoder/int8_kernels.inc"

#define FOVEA_INT8_DPBUSD256(acc, a, b) _mm256_dpbusd_epi32(acc, a, b)
#include "encoder/int8_vnni_tile.inc"

namespace fovea::encoder_detail::int8::isa {
namespace {

// Mr rows × 32 columns: two 16-column vectors per row, 2·Mr accumulators of 32 registers.
struct Tile512 {
  static constexpr int Mr = 8;
  template <int R>
  static void rows(const uint8_t* a, int64_t lda, const int8_t* p0, const int8_t* p1, int64_t groups, int32_t* out) {
    __m512i c0[R], c1[R];
    for (int r = 0; r < R; ++r) c0[r] = _mm512_setzero_si512(), c1[r] = _mm512_setzero_si512();
    for (int64_t gi = 0; gi < groups; ++gi) {
      const __m512i w0 = _mm512_loadu_si512(p0 + gi * 64);
      const __m512i w1 = _mm512_loadu_si512(p1 + gi * 64);
      for (int r = 0; r < R; ++r) {
        int32_t a4;
        std::memcpy(&a4, a + r * lda + gi * 4, 4);
        const __m512i av = _mm512_set1_epi32(a4);
        c0[r] = _mm512_dpbusd_epi32(c0[r], av, w0);
        c1[r] = _mm512_dpbusd_epi32(c1[r], av, w1);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_store_si512(out + r * 32, c0[r]);
      _mm512_store_si512(out + r * 32 + 16, c1[r]);
    }
  }
  template <int R>
  static void dispatch(int n, const uint8_t* a, int64_t lda, const int8_t* p0, const int8_t* p1, int64_t groups,
                       int32_t* out) {
    if constexpr (R > 1) {
      if (n < R) return dispatch<R - 1>(n, a, lda, p0, p1, groups, out);
    }
    rows<R>(a, lda, p0, p1, groups, out);
  }
  static void run(int n, const uint8_t* a, int64_t lda, const int8_t* p0, const int8_t* p1, int64_t groups,
                  int32_t* out) {
    dispatch<Mr>(n, a, lda, p0, p1, groups, out);
  }
};

}  // namespace

void gemm_vnni512(const Args& g, int threads) { run<Tile512>(g, threads, act_max(Kernel::vnni512)); }
void gemm_vnni256(const Args& g, int threads) { run<TileDp256<6>>(g, threads, act_max(Kernel::vnni256)); }

}  // namespace fovea::encoder_detail::int8::isa
