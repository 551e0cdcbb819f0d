// Row kernels of the relevance statistics: BT.601 luma and per-column accumulation. Highway
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

void luma_row(const uint8_t* r, const uint8_t* g, const uint8_t* b, uint8_t* out, int n);
void accumulate_row(const uint8_t* row, uint16_t* acc, int n);

}  // namespace fovea::relevance_detail
