// Public image file entry points: format detection by magic bytes, then PNG, JPEG, or one of
// the formats FFmpeg decodes (libav.cpp).
#include <cctype>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include "fovea/files.hpp"
#include "image/codecs.hpp"
#include "io/file_kind.hpp"

namespace fovea {

namespace image_detail {

void fail(Errc code, const std::string& name, const std::string& why) {
  throw Error(code, "cannot decode '" + name + "': " + why);
}

void check_extents(uint64_t width, uint64_t height, const LoadOptions& options,
                   const std::string& name, const char* format) {
  if (width == 0 || height == 0)
    fail(Errc::corrupt_data, name,
         std::string(format) + " header declares an empty image (" + std::to_string(width) + "x" +
             std::to_string(height) + ")");
  if (!over_pixel_limit(width, height, options.max_pixels)) return;
  auto text = [](unsigned __int128 v) {
    return v > UINT64_MAX ? std::string("more than 2^64") : std::to_string(uint64_t(v));
  };
  const unsigned __int128 pixels = (unsigned __int128)width * height;
  const std::string extent = std::string(format) + " image is " + std::to_string(width) + "x" + std::to_string(height);
  const std::string limit = "over the limit of " + std::to_string(options.max_pixels) + " (LoadOptions::max_pixels)";
  if (pixels > options.max_pixels) fail(Errc::limit_exceeded, name, extent + " = " + text(pixels) + " pixels, " + limit);
  fail(Errc::limit_exceeded, name,
       extent + ": rows this narrow are stored 64 pixels wide, so it needs the memory of " +
           text(stored_pixels(width, height)) + " pixels, " + limit);
}

template <typename T>
Image<T> make_image(int width, int height, int channels, const std::string& name) {
  try {
    return Image<T>(width, height, channels);
  } catch (const Error& e) {
    if (e.code() != Errc::out_of_memory) throw;
    fail(Errc::out_of_memory, name,
         "no memory for a " + std::to_string(width) + "x" + std::to_string(height) + " image");
  }
}
template Image<uint8_t> make_image(int, int, int, const std::string&);
template Image<float> make_image(int, int, int, const std::string&);

const char* still_format_name(StillFormat f) {
  switch (f) {
    case StillFormat::webp: return "WebP";
    case StillFormat::gif: return "GIF";
    case StillFormat::bmp: return "BMP";
    case StillFormat::tiff: return "TIFF";
    case StillFormat::pbm: return "PBM";
    case StillFormat::pgm: return "PGM";
    case StillFormat::ppm: return "PPM";
    case StillFormat::pam: return "PAM";
    case StillFormat::pfm: return "PFM";
    case StillFormat::qoi: return "QOI";
    case StillFormat::jpeg2000: return "JPEG 2000";
    case StillFormat::psd: return "PSD";
  }
  return "?";
}

}  // namespace image_detail

const std::vector<std::string>& image_file_extensions() {
  static const std::vector<std::string> with_libav = {
      ".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".pbm", ".pgm", ".ppm",
      ".pnm", ".pam", ".pfm", ".qoi", ".jp2", ".j2k", ".j2c", ".psd"};
  static const std::vector<std::string> png_jpeg = {".png", ".jpg", ".jpeg"};
  return image_detail::have_libav_images() ? with_libav : png_jpeg;
}

const char* image_formats() {
  return image_detail::have_libav_images()
             ? "PNG, JPEG, WebP, GIF, BMP, TIFF, PNM/PAM/PFM, QOI, JPEG 2000, PSD"
             : "PNG, JPEG";
}

namespace {

using image_detail::fail;

using image_detail::StillFormat;

// PNG and JPEG through libpng and libjpeg; the rest through FFmpeg (libav.cpp).
enum class Format { png, jpeg, libav };
struct Detected {
  Format format;
  StillFormat still = StillFormat::webp;  // when format == libav
};

bool starts_with(std::span<const uint8_t> b, std::string_view magic, size_t at = 0) {
  return b.size() >= at + magic.size() && std::memcmp(b.data() + at, magic.data(), magic.size()) == 0;
}

// The formats FFmpeg decodes for us, by signature.
std::optional<StillFormat> detect_still(std::span<const uint8_t> b) {
  using namespace std::string_view_literals;
  if (starts_with(b, "GIF87a") || starts_with(b, "GIF89a")) return StillFormat::gif;
  if (starts_with(b, "RIFF") && starts_with(b, "WEBP", 8)) return StillFormat::webp;
  if (starts_with(b, "BM")) return StillFormat::bmp;
  if (starts_with(b, "II*\0"sv) || starts_with(b, "MM\0*"sv)) return StillFormat::tiff;
  if (starts_with(b, "\0\0\0\x0CjP  \r\n\x87\n"sv) || starts_with(b, "\xFF\x4F\xFF\x51"sv))
    return StillFormat::jpeg2000;
  if (starts_with(b, "qoif")) return StillFormat::qoi;
  if (starts_with(b, "8BPS")) return StillFormat::psd;
  if (b.size() >= 3 && b[0] == 'P' && std::isspace(b[2])) {
    switch (b[1]) {
      case '1': case '4': return StillFormat::pbm;
      case '2': case '5': return StillFormat::pgm;
      case '3': case '6': return StillFormat::ppm;
      case '7': return StillFormat::pam;
      case 'F': case 'f': return StillFormat::pfm;
      default: break;
    }
  }
  return std::nullopt;
}

// Names what the bytes look like so that "unsupported" says something actionable.
std::string describe_unknown(std::span<const uint8_t> b) {
  if (starts_with(b, "ftypavif", 4) || starts_with(b, "ftypavis", 4))
    return "AVIF is not supported (Debian 12's FFmpeg reads no AVIF stills; convert it to PNG)";
  if (starts_with(b, "ftyphei", 4) || starts_with(b, "ftypmif1", 4) || starts_with(b, "ftyphev", 4))
    return "HEIF/HEIC is not supported (convert it to PNG or JPEG)";
  using namespace std::string_view_literals;
  // FFmpeg 5.1 has a JPEG XL decoder (libjxl), but its wrapper spins forever on some truncated
  // files (a 29-byte one from fuzz_still: fuzz/crashes/still-timeout-984ccd1c...), so it is not used.
  if (starts_with(b, "\xFF\x0A"sv) || starts_with(b, "\0\0\0\x0CJXL \r\n\x87\n"sv))
    return "JPEG XL is not supported (Debian 12's FFmpeg wrapper of libjxl can hang on a truncated file; convert it to PNG)";
  const FileKind kind = io_detail::identify_file(b);
  if (kind.known()) {
    const bool video = kind.media == FileKind::Media::video;
    return "not an image file fovea reads (" + std::string(image_formats()) + "): it is " + kind.description +
           (video ? "; `fovea video` reads videos" : "");
  }
  return "not an image file fovea reads (" + std::string(image_formats()) + "; it starts with " +
         io_detail::leading_bytes_hex(b) + ")";
}

Detected detect_format(std::span<const uint8_t> b, const std::string& name) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  static constexpr uint8_t kJpeg[3] = {0xFF, 0xD8, 0xFF};
  if (b.empty()) fail(Errc::corrupt_data, name, "the file is empty");
  const auto matches = [&](const uint8_t* magic, size_t n) {
    return std::memcmp(b.data(), magic, std::min(n, b.size())) == 0;
  };
  if (matches(kPng, sizeof kPng)) {
    if (b.size() < sizeof kPng) fail(Errc::corrupt_data, name, "PNG is truncated inside its signature");
    return {Format::png};
  }
  if (matches(kJpeg, sizeof kJpeg)) {
    if (b.size() < sizeof kJpeg) fail(Errc::corrupt_data, name, "JPEG is truncated inside its signature");
    return {Format::jpeg};
  }
  if (const auto still = detect_still(b)) return {Format::libav, *still};
  fail(Errc::unsupported, name, describe_unknown(b));
}

template <typename T>
Image<T> decode_any(std::span<const uint8_t> bytes, const LoadOptions& options,
                    const std::string& name) {
  const Detected d = detect_format(bytes, name);
  switch (d.format) {
    case Format::png: return image_detail::decode_png<T>(bytes, options, name);
    case Format::jpeg: return image_detail::decode_jpeg<T>(bytes, options, name);
    case Format::libav: return image_detail::decode_libav<T>(bytes, d.still, options, name);
  }
  fail(Errc::internal, name, "unknown format tag");
}

// A file far larger than any encoding of max_pixels pixels is refused before it is read into
// memory (uncompressed 16-bit RGBA PNG is 8 bytes a pixel; the rest is room for metadata).
std::vector<uint8_t> read_image_file(const std::string& path, const LoadOptions& options) {
  constexpr uint64_t kMetadataAllowance = uint64_t(64) << 20;
  const uint64_t limit = options.max_pixels > (UINT64_MAX - kMetadataAllowance) / 16
                             ? UINT64_MAX
                             : options.max_pixels * 16 + kMetadataAllowance;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  // On error read_file says what is wrong (missing, a directory, no permission).
  if (!ec && size > limit)
    fail(Errc::limit_exceeded, path,
         "file is " + std::to_string(size) + " bytes, more than any image within the pixel limit (" +
             std::to_string(options.max_pixels) + " pixels, LoadOptions::max_pixels) needs");
  return read_file(path);
}

}  // namespace

ImageU8 decode_image(std::span<const uint8_t> bytes, const LoadOptions& options,
                     const std::string& name) {
  return decode_any<uint8_t>(bytes, options, name);
}

ImageF32 decode_image_f32(std::span<const uint8_t> bytes, const LoadOptions& options,
                          const std::string& name) {
  return decode_any<float>(bytes, options, name);
}

ImageU8 load_image(const std::string& path, const LoadOptions& options) {
  const std::vector<uint8_t> bytes = read_image_file(path, options);
  return decode_any<uint8_t>(bytes, options, path);
}

ImageF32 load_image_f32(const std::string& path, const LoadOptions& options) {
  const std::vector<uint8_t> bytes = read_image_file(path, options);
  return decode_any<float>(bytes, options, path);
}

}  // namespace fovea
