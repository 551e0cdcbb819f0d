// fovea/view.hpp — non-owning views of a caller's pixels and tensors: no copy on the way in.
//
//   // A C-contiguous [H, W, 3] uint8 buffer (a numpy array, a decoded video frame):
//   int width = 640, height = 480;
//   std::vector<uint8_t> pixels(size_t(width) * height * 3, 128);
//   fovea::ImageViewU8 v = fovea::ImageViewU8::interleaved(pixels.data(), width, height, 3);
//   fovea::Executor exec;
//   fovea::Tokenization t = fovea::tokenize(v, fovea::Query{}, fovea::TokenizeParams{}, exec);
//   // t.pyramid borrows `pixels` as level 0: keep the buffer alive (and unchanged) while t lives.
//
//   fovea::ImageU8 img = fovea::load_image("in.jpg");
//   fovea::ImageViewU8 planar = img;                                     // an Image is a view too
//
//   std::vector<float> data(4 * 3 * 16 * 16);
//   fovea::TensorView p(fovea::DType::f32, {4, 3, 16, 16}, data.data());  // [N, C, P, P], C order
//
// ImageView layout: sample (c, y, x) is at data[c·channel_stride + y·row_stride +
// x·pixel_stride] (strides in samples, not bytes). Interleaved HWC: pixel_stride = channels,
// channel_stride = 1, row_stride >= width·channels (row padding allowed). Planar (fovea's
// Image): pixel_stride = 1, channel_stride = the plane stride. Every pipeline stage that
// reads level-0 pixels (the pyramid's first reduction, level-0 patches, tile statistics, the
// uniform baseline's resize, the overlay) reads a view, so neither layout is copied whole.
//
// TensorView: a dense, row-major (C-contiguous) n-d array the caller owns. A Tensor converts
// to one implicitly, so every function taking a TensorView also takes a Tensor.
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fovea/image.hpp"
#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

template <typename T>
class ImageView {
 public:
  ImageView() = default;
  // The general form; check() validates it.
  ImageView(const T* data, int width, int height, int channels, ptrdiff_t pixel_stride, ptrdiff_t row_stride,
            ptrdiff_t channel_stride)
      : data_(data),
        width_(width),
        height_(height),
        channels_(channels),
        pixel_stride_(pixel_stride),
        row_stride_(row_stride),
        channel_stride_(channel_stride) {}
  // An owned planar image (implicit: every function taking a view takes an Image).
  ImageView(const Image<T>& img)  // NOLINT(google-explicit-constructor)
      : ImageView(img.empty() ? nullptr : img.plane(0), img.width(), img.height(), img.channels(), 1,
                  ptrdiff_t(img.stride()), ptrdiff_t(img.plane_stride())) {}

  // HWC: `row_stride` samples between rows (0: width·channels, i.e. C-contiguous).
  static ImageView interleaved(const T* data, int width, int height, int channels, ptrdiff_t row_stride = 0) {
    return ImageView(data, width, height, channels, channels, row_stride ? row_stride : ptrdiff_t(width) * channels, 1);
  }
  // CHW: `row_stride` samples between rows (0: width), planes height·row_stride apart.
  static ImageView planar(const T* data, int width, int height, int channels, ptrdiff_t row_stride = 0) {
    const ptrdiff_t rs = row_stride ? row_stride : width;
    return ImageView(data, width, height, channels, 1, rs, rs * height);
  }

  const T* data() const { return data_; }
  int width() const { return width_; }
  int height() const { return height_; }
  int channels() const { return channels_; }
  bool empty() const { return width_ == 0 || height_ == 0 || data_ == nullptr; }
  int64_t pixels() const { return int64_t(width_) * height_; }
  ptrdiff_t pixel_stride() const { return pixel_stride_; }
  ptrdiff_t row_stride() const { return row_stride_; }
  ptrdiff_t channel_stride() const { return channel_stride_; }
  // Rows are contiguous runs of one channel's samples (the row kernels can read them as is).
  bool planar_rows() const { return pixel_stride_ == 1; }

  // Sample x of row(c, y) is row(c, y)[x · pixel_stride()].
  const T* row(int c, int y) const { return data_ + c * channel_stride_ + ptrdiff_t(y) * row_stride_; }
  T at(int c, int y, int x) const { return row(c, y)[ptrdiff_t(x) * pixel_stride_]; }

  // Throws Error(invalid_argument) for an empty view, non-positive extents, channels not in
  // {1, 3}, or strides that make two samples alias (the pipeline reads, but a view whose
  // pixels overlap is never what the caller meant).
  void check(const std::string& what = "image") const;

 private:
  const T* data_ = nullptr;
  int width_ = 0, height_ = 0, channels_ = 0;
  ptrdiff_t pixel_stride_ = 0, row_stride_ = 0, channel_stride_ = 0;
};

using ImageViewU8 = ImageView<uint8_t>;

extern template class ImageView<uint8_t>;

// An owned planar copy (for callers that need one, e.g. a device upload).
ImageU8 to_image(const ImageViewU8& view);

class TensorView {
 public:
  TensorView() = default;
  TensorView(DType dtype, std::vector<int64_t> shape, const void* data)
      : dtype_(dtype), shape_(std::move(shape)), data_(static_cast<const std::byte*>(data)) {}
  TensorView(const Tensor& t)  // NOLINT(google-explicit-constructor)
      : dtype_(t.dtype()), shape_(t.shape()), data_(t.bytes()) {}

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  size_t size_bytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool empty() const { return numel() == 0; }
  const std::byte* bytes() const { return data_; }
  // Typed access; throws Error(internal) when sizeof(T) does not match the dtype (f16/bf16
  // are read as uint16_t), as Tensor::data does.
  template <typename T> const T* data() const {
    check_type(sizeof(T));
    return reinterpret_cast<const T*>(data_);
  }

 private:
  void check_type(size_t elem_size) const;

  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  const std::byte* data_ = nullptr;
};

}  // namespace fovea
FOVEA_API_END
