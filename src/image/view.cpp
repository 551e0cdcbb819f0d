// Non-owning image and tensor views (fovea/view.hpp): validation and the planar copy.
#include "fovea/view.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "fovea/error.hpp"

namespace fovea {

template <typename T>
void ImageView<T>::check(const std::string& what) const {
  if (data_ == nullptr || width_ < 1 || height_ < 1)
    throw Error(Errc::invalid_argument, what + " is empty (" + std::to_string(width_) + "x" +
                                            std::to_string(height_) + ")");
  if (channels_ != 1 && channels_ != 3)
    throw Error(Errc::invalid_argument, what + " has " + std::to_string(channels_) +
                                            " channels; fovea reads 1 (gray) or 3 (RGB)");
  // The three strides must place every (c, y, x) at a distinct sample: sorted by size, each
  // must step over everything the smaller ones span. Negative strides (flipped views) are fine.
  struct Axis {
    ptrdiff_t stride;
    int64_t extent;
  };
  Axis axes[3] = {{std::abs(pixel_stride_), width_}, {std::abs(row_stride_), height_}, {std::abs(channel_stride_), channels_}};
  std::sort(axes, axes + 3, [](const Axis& a, const Axis& b) { return a.stride < b.stride; });
  int64_t span = 1;  // samples covered by the smaller axes
  for (const Axis& a : axes) {
    if (a.extent == 1) continue;
    if (a.stride < span)
      throw Error(Errc::invalid_argument, what + ": strides (pixel " + std::to_string(pixel_stride_) + ", row " +
                                              std::to_string(row_stride_) + ", channel " +
                                              std::to_string(channel_stride_) + " samples) make pixels overlap");
    span = a.stride * a.extent;
  }
}

template class ImageView<uint8_t>;

ImageU8 to_image(const ImageViewU8& view) {
  view.check();
  ImageU8 out(view.width(), view.height(), view.channels());
  for (int c = 0; c < view.channels(); ++c)
    for (int y = 0; y < view.height(); ++y) {
      const uint8_t* s = view.row(c, y);
      uint8_t* d = out.row(c, y);
      if (view.pixel_stride() == 1) {
        std::copy_n(s, view.width(), d);
      } else {
        const ptrdiff_t ps = view.pixel_stride();
        for (int x = 0; x < view.width(); ++x) d[x] = s[x * ps];
      }
    }
  return out;
}

void TensorView::check_type(size_t elem_size) const {
  if (elem_size != dtype_size(dtype_))
    throw Error(Errc::internal, "TensorView::data<T>() with a T of " + std::to_string(elem_size) +
                                    " bytes for a " + std::string(dtype_name(dtype_)) + " tensor");
}

}  // namespace fovea
