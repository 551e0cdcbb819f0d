// Area-filter resize, separable: each output sample is the mean of the input interval it
// covers, with fractional weights for partially covered input samples (INTER_AREA).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/image.hpp"

namespace fovea {

namespace {

struct Tap {
  int first = 0;               // first input index
  std::vector<float> weights;  // consecutive inputs from `first`; sum to 1
};

// Output i of n covers input [i·s, (i+1)·s), s = in / out. For upscaling (s < 1) the box is
// narrower than a sample, so use bilinear interpolation at the sample centre instead.
std::vector<Tap> make_taps(int in, int out) {
  std::vector<Tap> taps(out);
  const double s = double(in) / out;
  for (int i = 0; i < out; ++i) {
    Tap& t = taps[i];
    if (s >= 1.0) {
      const double a = i * s, b = (i + 1) * s;
      const int first = static_cast<int>(std::floor(a));
      const int last = std::min(in - 1, static_cast<int>(std::ceil(b)) - 1);
      t.first = first;
      for (int k = first; k <= last; ++k) {
        const double w = std::min<double>(b, k + 1) - std::max<double>(a, k);
        t.weights.push_back(static_cast<float>(std::max(0.0, w) / s));
      }
    } else {
      const double c = (i + 0.5) * s - 0.5;
      const int x0 = std::clamp(static_cast<int>(std::floor(c)), 0, in - 1);
      const int x1 = std::min(in - 1, x0 + 1);
      const float f = static_cast<float>(std::clamp(c - x0, 0.0, 1.0));
      t.first = x0;
      if (x1 == x0) t.weights = {1.0f};
      else t.weights = {1.0f - f, f};
    }
  }
  return taps;
}

// Integer factors (the common case: 1024 → 256 for a 16×16 grid) are a kx×ky box mean in
// integer arithmetic: vertical sums into u32 columns, then horizontal groups. Ties round up.
ImageU8 resize_box_integer(const ImageViewU8& src, int width, int height, int kx, int ky, Executor& exec) {
  const int C = src.channels();
  ImageU8 dst(width, height, C);
  const uint32_t area = uint32_t(kx) * ky;
  // round(sum / area), ties up, = floor(n / d) with n = 2·sum + area, d = 2·area. A division
  // per output pixel dominated this loop; a multiply by m = ceil(2^52 / d) and a shift is exact
  // while n·d < 2^52 (the error n·(m − 2^52/d)/2^52 < n/2^52 stays below the 1/d gap to the
  // next integer), i.e. for areas up to 2^21 px. Larger boxes keep the division.
  const uint64_t d = 2ull * area;
  const bool fast = 1022.0 * double(area) * double(area) < 4503599627370496.0;  // 511·area·d < 2^52
  const uint64_t m = ((uint64_t(1) << 52) + d - 1) / d;
  const ptrdiff_t ps = src.pixel_stride();
  exec.parallel_for(int64_t(C) * height, 4, [&](int64_t r0, int64_t r1) {
    std::vector<uint32_t> col(src.width());
    for (int64_t r = r0; r < r1; ++r) {
      const int c = static_cast<int>(r / height), y = static_cast<int>(r % height);
      std::fill(col.begin(), col.end(), 0u);
      for (int k = 0; k < ky; ++k) {
        const uint8_t* s = src.row(c, y * ky + k);
        if (ps == 1)
          for (int x = 0; x < src.width(); ++x) col[x] += s[x];
        else
          for (int x = 0; x < src.width(); ++x) col[x] += s[x * ps];
      }
      uint8_t* out = dst.row(c, y);
      for (int x = 0; x < width; ++x) {
        uint32_t sum = 0;
        for (int k = 0; k < kx; ++k) sum += col[size_t(x) * kx + k];
        const uint64_t n = 2ull * sum + area;
        out[x] = static_cast<uint8_t>(fast ? (n * m) >> 52 : n / d);
      }
    }
  });
  return dst;
}

}  // namespace

ImageU8 resize_area(const ImageViewU8& src, int width, int height, Executor& exec) {
  const ptrdiff_t ps = src.pixel_stride();
  if (width <= 0 || height <= 0)
    throw Error(Errc::invalid_argument, "resize target must be positive, got " +
                                            std::to_string(width) + "x" + std::to_string(height));
  const int C = src.channels();
  ImageU8 dst(width, height, C);
  if (width == src.width() && height == src.height()) {
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < height; ++y) {
        const uint8_t* s = src.row(c, y);
        uint8_t* d = dst.row(c, y);
        for (int x = 0; x < width; ++x) d[x] = s[x * ps];
      }
    return dst;
  }
  if (src.width() % width == 0 && src.height() % height == 0)
    return resize_box_integer(src, width, height, src.width() / width, src.height() / height, exec);
  const std::vector<Tap> tx = make_taps(src.width(), width);
  const std::vector<Tap> ty = make_taps(src.height(), height);
  // Horizontal pass over every input row into float, then vertical.
  std::vector<float> tmp(size_t(C) * src.height() * width);
  exec.parallel_for(int64_t(C) * src.height(), 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int c = static_cast<int>(r / src.height()), y = static_cast<int>(r % src.height());
      const uint8_t* s = src.row(c, y);
      float* d = tmp.data() + size_t(r) * width;
      for (int x = 0; x < width; ++x) {
        const Tap& t = tx[x];
        float acc = 0;
        for (size_t k = 0; k < t.weights.size(); ++k) acc += t.weights[k] * s[(t.first + ptrdiff_t(k)) * ps];
        d[x] = acc;
      }
    }
  });
  exec.parallel_for(int64_t(C) * height, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> acc(width);
    for (int64_t r = r0; r < r1; ++r) {
      const int c = static_cast<int>(r / height), y = static_cast<int>(r % height);
      const Tap& t = ty[y];
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (size_t k = 0; k < t.weights.size(); ++k) {
        const float w = t.weights[k];
        const float* s = tmp.data() + (size_t(c) * src.height() + t.first + k) * width;
        for (int x = 0; x < width; ++x) acc[x] += w * s[x];
      }
      uint8_t* d = dst.row(c, y);
      for (int x = 0; x < width; ++x)
        d[x] = static_cast<uint8_t>(std::clamp(std::nearbyint(acc[x]), 0.0f, 255.0f));
    }
  });
  return dst;
}

}  // namespace fovea
