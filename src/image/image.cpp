#include "fovea/image.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "fovea/error.hpp"

namespace fovea {

template <typename T>
Image<T>::Image(int width, int height, int channels, bool zero)
    : width_(width), height_(height), channels_(channels) {
  if (width <= 0 || height <= 0)
    throw Error(Errc::invalid_argument, "image extents must be positive, got " +
                                            std::to_string(width) + "x" + std::to_string(height));
  if (channels != 1 && channels != 3)
    throw Error(Errc::invalid_argument, "images have 1 or 3 channels, got " + std::to_string(channels));
  constexpr size_t kRowAlign = 64 / sizeof(T);
  stride_ = (size_t(width) + kRowAlign - 1) / kRowAlign * kRowAlign;
  const unsigned __int128 wide = (unsigned __int128)stride_ * size_t(height) * size_t(channels) * sizeof(T);
  // 2^47 bytes (128 TiB) is more than any x86-64 or AArch64 process can map: refuse it here
  // rather than ask the allocator (which a sanitizer, or an overcommitting kernel, may not
  // refuse cleanly).
  if (wide > (unsigned __int128)(uint64_t(1) << 47))
    throw Error(Errc::out_of_memory, "image of " + std::to_string(width) + "x" + std::to_string(height) +
                                         " is too large to allocate");
  const size_t bytes = static_cast<size_t>(wide);
  storage_ = aligned_alloc_bytes(bytes);
  data_ = reinterpret_cast<T*>(storage_.get());
  if (zero) std::memset(storage_.get(), 0, bytes);
}

template <typename T>
Image<T> Image<T>::clone() const {
  if (empty()) return Image();
  Image out(width_, height_, channels_);
  std::memcpy(out.data_, data_, stride_ * size_t(height_) * size_t(channels_) * sizeof(T));
  return out;
}

template class Image<uint8_t>;
template class Image<float>;

ImageF32 to_f32(const ImageU8& img) {
  ImageF32 out(img.width(), img.height(), img.channels());
  for (int c = 0; c < img.channels(); ++c)
    for (int y = 0; y < img.height(); ++y) {
      const uint8_t* s = img.row(c, y);
      float* d = out.row(c, y);
      for (int x = 0; x < img.width(); ++x) d[x] = s[x] / 255.0f;
    }
  return out;
}

ImageU8 to_u8(const ImageF32& img) {
  ImageU8 out(img.width(), img.height(), img.channels());
  for (int c = 0; c < img.channels(); ++c)
    for (int y = 0; y < img.height(); ++y) {
      const float* s = img.row(c, y);
      uint8_t* d = out.row(c, y);
      for (int x = 0; x < img.width(); ++x) {
        const float v = std::nearbyint(s[x] * 255.0f);
        d[x] = static_cast<uint8_t>(std::clamp(std::isnan(v) ? 0.0f : v, 0.0f, 255.0f));
      }
    }
  return out;
}

ImageU8 to_rgb(const ImageU8& img) {
  if (img.channels() == 3) return img.clone();
  ImageU8 out(img.width(), img.height(), 3);
  for (int c = 0; c < 3; ++c) std::memcpy(out.plane(c), img.plane(0), img.plane_stride());
  return out;
}

}  // namespace fovea
