// fovea/image.hpp — planar images and their files.
//
//   fovea::ImageU8 img = fovea::load_image("photo.jpg");     // EXIF orientation applied
//   for (int c = 0; c < img.channels(); ++c)
//     for (int y = 0; y < img.height(); ++y) { const uint8_t* row = img.row(c, y); (void)row; }
//   fovea::save_png(img, "out.png");                          // temp file + rename
//
// Layout: `channels` planes (1 = gray, 3 = RGB), each `height` rows of `width` samples, rows
// `stride()` samples apart (a multiple of 64 bytes), planes `plane_stride()` samples apart.
// Planar rows are what the 2×2 pyramid kernels and per-channel patch extraction want.
// Sample ranges: uint8 in [0, 255]; float in [0, 1].
// Images are move-only: copies of megapixel buffers are explicit (clone()).
//
// Thread safety: an Image is a plain value (concurrent reads safe, a write is not). The file
// functions keep no shared state (one libpng/libjpeg context per call): any number may run at
// once.
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/files.hpp"
#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

template <typename T>
class Image {
 public:
  Image() = default;
  // Uninitialised samples unless `zero` is true. Throws Error(invalid_argument) for
  // non-positive extents or channels not in {1, 3}, Error(out_of_memory) when refused.
  Image(int width, int height, int channels, bool zero = false);
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;
  // A moved-from image is empty (0×0), never an alias of the new owner's buffer.
  Image(Image&& other) noexcept { *this = std::move(other); }
  Image& operator=(Image&& other) noexcept {
    if (this != &other) {
      width_ = std::exchange(other.width_, 0);
      height_ = std::exchange(other.height_, 0);
      channels_ = std::exchange(other.channels_, 0);
      stride_ = std::exchange(other.stride_, 0);
      storage_ = std::move(other.storage_);
      data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
  }

  Image clone() const;

  int width() const { return width_; }
  int height() const { return height_; }
  int channels() const { return channels_; }
  bool empty() const { return width_ == 0; }
  size_t stride() const { return stride_; }             // samples between rows
  size_t plane_stride() const { return stride_ * height_; }  // samples between planes
  int64_t pixels() const { return int64_t(width_) * height_; }

  T* plane(int c) { return data_ + c * plane_stride(); }
  const T* plane(int c) const { return data_ + c * plane_stride(); }
  T* row(int c, int y) { return plane(c) + size_t(y) * stride_; }
  const T* row(int c, int y) const { return plane(c) + size_t(y) * stride_; }
  T& at(int c, int y, int x) { return row(c, y)[x]; }
  T at(int c, int y, int x) const { return row(c, y)[x]; }

 private:
  int width_ = 0, height_ = 0, channels_ = 0;
  size_t stride_ = 0;
  std::unique_ptr<std::byte[], AlignedFree> storage_;
  T* data_ = nullptr;
};

using ImageU8 = Image<uint8_t>;
using ImageF32 = Image<float>;

extern template class Image<uint8_t>;
extern template class Image<float>;

// Conversions between sample types: u8 -> f32 divides by 255; f32 -> u8 rounds and clamps.
ImageF32 to_f32(const ImageU8& img);
ImageU8 to_u8(const ImageF32& img);
// Gray -> RGB by replication; RGB input is cloned.
ImageU8 to_rgb(const ImageU8& img);

template <typename T>
class ImageView;  // fovea/view.hpp (included at the end: every Image converts to a view)
using ImageViewU8 = ImageView<uint8_t>;

// Area-filter resize (each output pixel is the mean of the input area it covers, fractional
// at the borders: OpenCV's INTER_AREA for downscaling); upscaling falls back to bilinear.
// `src` is read in place (an Image, or a caller's interleaved or planar pixels).
ImageU8 resize_area(const ImageViewU8& src, int width, int height, Executor& exec);

// ---- files -----------------------------------------------------------------------------------

struct LoadOptions {
  // Images with more pixels than this are refused before any pixel buffer is allocated.
  uint64_t max_pixels = 100'000'000;
  // JPEG, TIFF, WebP: rotate/flip according to the EXIF Orientation tag (1..8), as viewers do.
  bool apply_exif_orientation = true;
};

// Decodes PNG (1/2/4/8/16-bit; gray, gray+alpha, RGB, RGBA, palette; interlaced) and JPEG
// (baseline, progressive; gray, YCbCr, RGB, and CMYK/YCCK converted to RGB without color
// management, as inverted Adobe CMYK when an Adobe APP14 marker is present) with libpng and
// libjpeg. When fovea is built with FFmpeg (libavcodec, libswscale), also WebP (lossy and
// lossless), GIF (the first frame), BMP, TIFF, PNM/PAM/PFM, QOI, JPEG 2000 and PSD
// through FFmpeg's decoders; image_formats() says which this build reads. The format is
// detected from the bytes, not the file name. Alpha is dropped (as PIL's convert("RGB") does);
// gray stays one channel. Samples deeper than 8 bits are rounded to 8 bits; load_image_f32
// keeps 16 bits of them (v / 65535; 8-bit samples are v / 255). The EXIF orientation of JPEG,
// TIFF and WebP files is applied. JPEG XL is refused (FFmpeg 5.1's libjxl wrapper can hang).
// Throws fovea::Error: io (cannot read), corrupt_data (empty, truncated, malformed; libjpeg's
// "corrupt data" warnings count), unsupported (other formats, named when recognised),
// limit_exceeded (over max_pixels). Messages name the file (`name` for in-memory bytes).
ImageU8 load_image(const std::string& path, const LoadOptions& options = {});
// The formats this build decodes, for messages and --version: "PNG, JPEG" or the longer list.
const char* image_formats();
// The file name extensions (lower case, with the dot: ".png") of those formats, for picking
// images out of folders and WebDataset shards.
const std::vector<std::string>& image_file_extensions();
// FFmpeg's decoders log to stderr by default; the CLI, the Python module and the tests call
// this once to keep stderr to fovea's own lines. Process-wide (av_log_set_level); a no-op in
// a build without FFmpeg.
void quiet_ffmpeg_log();
ImageU8 decode_image(std::span<const uint8_t> bytes, const LoadOptions& options = {},
                     const std::string& name = "<memory>");
ImageF32 load_image_f32(const std::string& path, const LoadOptions& options = {});
ImageF32 decode_image_f32(std::span<const uint8_t> bytes, const LoadOptions& options = {},
                          const std::string& name = "<memory>");

// Encoders: 8-bit gray or RGB. JPEG quality is 1..100 (else invalid_argument), 4:2:0 chroma.
// Writing goes to `path.tmp-XXXX` in the same folder, then rename(): a reader
// never sees a half-written file, and a failure leaves no file behind.
std::vector<uint8_t> encode_png(const ImageU8& img);
std::vector<uint8_t> encode_jpeg(const ImageU8& img, int quality = 92);
void save_png(const ImageU8& img, const std::string& path);
void save_jpeg(const ImageU8& img, const std::string& path, int quality = 92);

}  // namespace fovea
FOVEA_API_END

#include "fovea/view.hpp"  // after Image: view.hpp builds on it
