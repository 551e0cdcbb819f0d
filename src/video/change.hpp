// Private to src/video: the row kernel of the change test (change.cpp). The Highway version
// (change_hwy.cpp) is dispatched at run time; the scalar one here is the reference it is tested
// against, and what Kernels::reference runs.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace fovea::video_detail {

// acc[x] += |a[x] − b[x]|; acc holds at most 257 rows of 255 without overflow.
inline void absdiff_accumulate_row_ref(const uint8_t* a, const uint8_t* b, uint16_t* acc, int n) {
  for (int x = 0; x < n; ++x) acc[x] = static_cast<uint16_t>(acc[x] + std::abs(int(a[x]) - int(b[x])));
}

void absdiff_accumulate_row(const uint8_t* a, const uint8_t* b, uint16_t* acc, int n);

}  // namespace fovea::video_detail
