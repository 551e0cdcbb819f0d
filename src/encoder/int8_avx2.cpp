// The int8 kernel on AVX2 (int8.hpp): vpmaddubsw multiplies unsigned by signed bytes and adds
// pairs into int16, vpmaddwd by ones adds those pairs into int32. Activations use 7 bits
// (qmax 127) so the int16 pair sums never saturate. This translation unit alone is compiled with
// -mavx2 -mfma; it runs only after int8::available(Kernel::avx2) said yes.
#include "encoder/int8_kernels.inc"

namespace fovea::encoder_detail::int8::isa {
namespace {

// Mr rows × 32 columns (two panels, four 8-column vectors): 8 accumulators of 16 registers.
struct TileAvx2 {
  static constexpr int Mr = 2;
  template <int R>
  static void rows(const uint8_t* a, int64_t lda, const int8_t* p0, const int8_t* p1, int64_t groups, int32_t* out) {
    __m256i c[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) c[r][v] = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t gi = 0; gi < groups; ++gi) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + gi * 64));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + gi * 64 + 32));
      const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + gi * 64));
      const __m256i w3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + gi * 64 + 32));
      for (int r = 0; r < R; ++r) {
        int32_t a4;
        std::memcpy(&a4, a + r * lda + gi * 4, 4);
        const __m256i av = _mm256_set1_epi32(a4);
        c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w0), ones));
        c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w1), ones));
        c[r][2] = _mm256_add_epi32(c[r][2], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w2), ones));
        c[r][3] = _mm256_add_epi32(c[r][3], _mm256_madd_epi16(_mm256_maddubs_epi16(av, w3), ones));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) _mm256_store_si256(reinterpret_cast<__m256i*>(out + r * 32 + v * 8), c[r][v]);
  }
  static void run(int n, const uint8_t* a, int64_t lda, const int8_t* p0, const int8_t* p1, int64_t groups,
                  int32_t* out) {
    if (n == 2) rows<2>(a, lda, p0, p1, groups, out);
    else rows<1>(a, lda, p0, p1, groups, out);
  }
};

}  // namespace

void gemm_avx2(const Args& g, int threads) { run<TileAvx2>(g, threads, act_max(Kernel::avx2)); }

}  // namespace fovea::encoder_detail::int8::isa
