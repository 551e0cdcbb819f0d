// Row kernels of the relevance statistics: BT.601 luma, per-column accumulation and 2x2
// detail energy. Highway
// versions (stats_hwy.cpp) are dispatched at run time; the scalar ones here are the reference
// they are tested against, and are what Kernels::reference runs.
#pragma once

#include <cstdint>

namespace fovea::relevance_detail {

// luma = (77 r + 150 g + 29 b + 128) >> 8: weights sum to 256, so the result fits 8 bits.
inline void luma_row_ref(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int n) {
  for (int x = 0; x < n; ++x) out[x] = static_cast<uint8_t>((77 * r[x] + 150 * g[x] + 29 * b[x] + 128) >> 8);
}

// acc[x] += row[x]; acc holds at most 257 rows of 255 without overflow.
inline void accumulate_row_ref(const uint8_t* row, uint16_t* acc, int n) {
  for (int x = 0; x < n; ++x) acc[x] = static_cast<uint16_t>(acc[x] + row[x]);
}

// Detail energy of 2x2 blocks: for block i (columns 2i, 2i+1 of rows r0 and r1),
// acc[i] += 4·Σx² − (Σx)² = 4 · Σ (x − block mean)², the squared error (times 4) of replacing
// the four samples by their mean, i.e. by the next mip level. At most 260100 per call.
inline void block_energy_row_ref(const uint8_t* r0, const uint8_t* r1, uint32_t* acc, int blocks) {
  for (int i = 0; i < blocks; ++i) {
    const int a = r0[2 * i], b = r0[2 * i + 1], c = r1[2 * i], d = r1[2 * i + 1];
    const int s = a + b + c + d;
    acc[i] += static_cast<uint32_t>(4 * (a * a + b * b + c * c + d * d) - s * s);
  }
}

void luma_row(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int n);
void accumulate_row(const uint8_t* row, uint16_t* acc, int n);
void block_energy_row(const uint8_t* r0, const uint8_t* r1, uint32_t* acc, int blocks);

}  // namespace fovea::relevance_detail
