// Private to src/image: what the PNG and JPEG decoders share — limits, error wording, EXIF
// orientation and the row scatter that turns interleaved decoder rows into planar samples.
//
// Every decoder works the same way: read the header, check it against LoadOptions, allocate the
// output image already in display orientation, then convert and scatter each decoded row into
// place. No second full-size buffer is needed for orientation or sample conversion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "fovea/error.hpp"
#include "fovea/image.hpp"

namespace fovea::image_detail {

// ---- errors and limits ------------------------------------------------------------------------

// Throws Error(code, "cannot decode '<name>': <why>"): every decode failure names its input.
[[noreturn]] void fail(Errc code, const std::string& name, const std::string& why);

// What a width x height image stores per plane: Image rows are at least 64 samples apart (its
// stride, a multiple of 64 bytes), so a narrow image stores more than its pixels (1 pixel wide:
// 64 times). In 128 bits: header extents up to 2^32 each overflow 64.
inline unsigned __int128 stored_pixels(uint64_t width, uint64_t height) {
  return (unsigned __int128)((width + 63) / 64 * 64) * height;
}
// The pixel limit, shared by still images and video frames: the pixels must fit max_pixels, and
// so must the rows as stored, with 2^24 stored pixels of padding never held against an image (a
// limit admits every ordinary image whose pixels it admits; a 1xN bomb is refused).
inline bool over_pixel_limit(uint64_t width, uint64_t height, uint64_t max_pixels) {
  constexpr uint64_t kPaddingAllowance = uint64_t(1) << 24;
  return (unsigned __int128)width * height > max_pixels ||
         stored_pixels(width, height) > (max_pixels > kPaddingAllowance ? max_pixels : kPaddingAllowance);
}

// Refuses zero extents (corrupt_data) and over_pixel_limit (limit_exceeded).
// Called right after a header is parsed, before any pixel buffer exists.
void check_extents(uint64_t width, uint64_t height, const LoadOptions& options,
                   const std::string& name, const char* format);

// Image<T>(w, h, c) whose out_of_memory error names the input being decoded.
template <typename T>
Image<T> make_image(int width, int height, int channels, const std::string& name);

// ---- EXIF ------------------------------------------------------------------------------------

// The Orientation tag (0x0112) of an APP1 payload ("Exif\0\0" + TIFF), or 0 when the payload is
// not EXIF, has no orientation, or is malformed in any way: a broken EXIF block never fails a
// decode, it is ignored.
int exif_orientation(std::span<const uint8_t> app1);
// The same for a bare TIFF structure (a TIFF file, a WebP EXIF chunk): IFD0's Orientation.
int tiff_orientation(std::span<const uint8_t> tiff);
// A single-valued SHORT or LONG entry `tag` of a TIFF structure's IFD0 (ImageWidth 256,
// ImageLength 257, Orientation 274); nullopt when absent or malformed. With `first_of_several`,
// the first value of a per-sample array (BitsPerSample 258, SampleFormat 339) is accepted too.
std::optional<uint32_t> tiff_ifd0_value(std::span<const uint8_t> tiff, uint16_t tag, bool first_of_several = false);

// Orientations 5..8 turn a stored W×H image into a displayed H×W one.
inline bool swaps_axes(int orientation) { return orientation >= 5 && orientation <= 8; }

// Where stored row `y` of a `stored_width`×`stored_height` image lands once the orientation is
// applied: sample x of that row goes to plane(c)[offset + x * step] of the displayed image, whose
// rows are `stride` samples apart. Orientation 1 (or 0: none) is the identity.
struct RowPlacement {
  ptrdiff_t offset = 0;
  ptrdiff_t step = 1;
};
RowPlacement place_row(int orientation, int stored_width, int stored_height, size_t stride, int y);

// ---- sample conversion + scatter ---------------------------------------------------------------

// 8-bit and 16-bit decoder samples to the output sample type. Floats are v / max (the exactly
// rounded quotient, not v * (1 / max)); 16 -> 8 bits rounds to nearest: (v * 255 + 32767) / 65535.
template <typename T> T convert_sample(uint8_t v);
template <> inline uint8_t convert_sample<uint8_t>(uint8_t v) { return v; }
template <> inline float convert_sample<float>(uint8_t v) { return float(v) / 255.0f; }
template <typename T> T convert_sample(uint16_t v);
template <> inline uint8_t convert_sample<uint8_t>(uint16_t v) {
  return static_cast<uint8_t>((uint32_t(v) * 255u + 32767u) / 65535u);
}
template <> inline float convert_sample<float>(uint16_t v) { return float(v) / 65535.0f; }

// Copies the first img.channels() samples of each `src_channels`-sample pixel of stored row `y`
// into the (already oriented) image; extra source channels (alpha) are dropped.
template <typename T, typename S>
void scatter_row(Image<T>& img, int orientation, int stored_width, int stored_height, int y,
                 const S* src, int src_channels) {
  const RowPlacement p = place_row(orientation, stored_width, stored_height, img.stride(), y);
  for (int c = 0; c < img.channels(); ++c) {
    T* dst = img.plane(c) + p.offset;
    const S* s = src + c;
    if (p.step == 1) {
      for (int x = 0; x < stored_width; ++x) dst[x] = convert_sample<T>(s[size_t(x) * src_channels]);
    } else {
      for (int x = 0; x < stored_width; ++x)
        dst[ptrdiff_t(x) * p.step] = convert_sample<T>(s[size_t(x) * src_channels]);
    }
  }
}

// ---- codecs ----------------------------------------------------------------------------------

// Each decoder expects bytes that start with its signature (decode.cpp checks).
template <typename T>
Image<T> decode_png(std::span<const uint8_t> bytes, const LoadOptions& options,
                    const std::string& name);
template <typename T>
Image<T> decode_jpeg(std::span<const uint8_t> bytes, const LoadOptions& options,
                     const std::string& name);

// Formats decoded through FFmpeg's libavcodec (libav.cpp), recognised by their signatures.
enum class StillFormat { webp, gif, bmp, tiff, pbm, pgm, ppm, pam, pfm, qoi, jpeg2000, psd };
const char* still_format_name(StillFormat f);
// Whether this build decodes them (FFmpeg's development packages were found at configure time).
bool have_libav_images();
// Decodes the first picture of `bytes` with FFmpeg's decoder for `format`: gray stays one
// channel, colour becomes RGB, alpha is dropped, samples deeper than 8 bits keep 16 bits for
// float output; TIFF's and WebP's EXIF orientation is applied like JPEG's.
template <typename T>
Image<T> decode_libav(std::span<const uint8_t> bytes, StillFormat format, const LoadOptions& options,
                      const std::string& name);

}  // namespace fovea::image_detail
