// Scalar reference of the 2×2 box row kernels: the definition every SIMD target is tested
// against. The arithmetic (and, for float, the order of the adds) is the contract spelled out
// in downsample.hpp.
#include "pyramid/downsample.hpp"

namespace fovea::pyramid_detail {

void box2x2_ref(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x) {
    const unsigned sum = unsigned(top[2 * x]) + top[2 * x + 1] + bottom[2 * x] + bottom[2 * x + 1];
    dst[x] = static_cast<uint8_t>((sum + 2) >> 2);
  }
}

void box2x2_ref(const float* top, const float* bottom, float* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x) {
    const float left = top[2 * x] + bottom[2 * x];
    const float right = top[2 * x + 1] + bottom[2 * x + 1];
    dst[x] = (left + right) * 0.25f;
  }
}

void box2x1_ref(const uint8_t* src, uint8_t* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x)
    dst[x] = static_cast<uint8_t>((unsigned(src[2 * x]) + src[2 * x + 1] + 1) >> 1);
}

void box2x1_ref(const float* src, float* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x) dst[x] = (src[2 * x] + src[2 * x + 1]) * 0.5f;
}

void box1x2_ref(const uint8_t* top, const uint8_t* bottom, uint8_t* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x)
    dst[x] = static_cast<uint8_t>((unsigned(top[x]) + bottom[x] + 1) >> 1);
}

void box1x2_ref(const float* top, const float* bottom, float* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x) dst[x] = (top[x] + bottom[x]) * 0.5f;
}

void box2x2_interleaved_ref(const uint8_t* top, const uint8_t* bottom, ptrdiff_t pixel_stride, int channels,
                            uint8_t* const* dst, int dst_w) {
  for (int x = 0; x < dst_w; ++x) {
    const ptrdiff_t a = 2 * x * pixel_stride, b = a + pixel_stride;
    for (int c = 0; c < channels; ++c)
      dst[c][x] = static_cast<uint8_t>((unsigned(top[a + c]) + top[b + c] + bottom[a + c] + bottom[b + c] + 2) >> 2);
  }
}

}  // namespace fovea::pyramid_detail
