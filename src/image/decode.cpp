// Public image file entry points: format detection by magic bytes, then PNG or JPEG.
#include <cctype>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "image/codecs.hpp"

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
  if (width * height > options.max_pixels)
    fail(Errc::limit_exceeded, name,
         std::string(format) + " image is " + std::to_string(width) + "x" + std::to_string(height) +
             " = " + std::to_string(width * height) + " pixels, over the limit of " +
             std::to_string(options.max_pixels) + " (LoadOptions::max_pixels)");
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

}  // namespace image_detail

namespace {

using image_detail::fail;

enum class Format { png, jpeg };

bool starts_with(std::span<const uint8_t> b, std::string_view magic, size_t at = 0) {
  return b.size() >= at + magic.size() && std::memcmp(b.data() + at, magic.data(), magic.size()) == 0;
}

// Names what the bytes look like so that "unsupported" says something actionable.
std::string describe_unknown(std::span<const uint8_t> b) {
  using namespace std::string_view_literals;
  if (starts_with(b, "GIF87a") || starts_with(b, "GIF89a")) return "GIF is not supported";
  if (starts_with(b, "RIFF") && starts_with(b, "WEBP", 8)) return "WebP is not supported";
  if (starts_with(b, "BM")) return "BMP is not supported";
  if (starts_with(b, "II*\0"sv) || starts_with(b, "MM\0*"sv)) return "TIFF is not supported";
  if (starts_with(b, "ftypavif", 4) || starts_with(b, "ftypavis", 4)) return "AVIF is not supported";
  if (starts_with(b, "ftyphei", 4) || starts_with(b, "ftypmif1", 4) || starts_with(b, "ftyphev", 4))
    return "HEIF/HEIC is not supported";
  if (starts_with(b, "\xFF\x0A"sv) || starts_with(b, "\0\0\0\x0CJXL \r\n\x87\n"sv))
    return "JPEG XL is not supported";
  if (starts_with(b, "\0\0\0\x0CjP  \r\n\x87\n"sv) || starts_with(b, "\xFF\x4F\xFF\x51"sv))
    return "JPEG 2000 is not supported";
  if (starts_with(b, "qoif")) return "QOI is not supported";
  if (starts_with(b, "8BPS")) return "PSD is not supported";
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return "PNM/PAM is not supported";
  std::string hex;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    static constexpr char kDigits[] = "0123456789abcdef";
    if (i) hex += ' ';
    hex += kDigits[b[i] >> 4];
    hex += kDigits[b[i] & 15];
  }
  std::string what = "not a PNG or JPEG file (starts with " + hex + ")";
  const size_t n = std::min<size_t>(b.size(), 64);
  bool text = n >= 4;
  for (size_t i = 0; i < n && text; ++i)
    text = std::isprint(b[i]) || b[i] == '\n' || b[i] == '\r' || b[i] == '\t';
  if (text) what += b[0] == '<' ? "; it looks like HTML or XML" : "; it looks like text";
  return what;
}

Format detect_format(std::span<const uint8_t> b, const std::string& name) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  static constexpr uint8_t kJpeg[3] = {0xFF, 0xD8, 0xFF};
  if (b.empty()) fail(Errc::corrupt_data, name, "the file is empty");
  const auto matches = [&](const uint8_t* magic, size_t n) {
    return std::memcmp(b.data(), magic, std::min(n, b.size())) == 0;
  };
  if (matches(kPng, sizeof kPng)) {
    if (b.size() < sizeof kPng) fail(Errc::corrupt_data, name, "PNG is truncated inside its signature");
    return Format::png;
  }
  if (matches(kJpeg, sizeof kJpeg)) {
    if (b.size() < sizeof kJpeg) fail(Errc::corrupt_data, name, "JPEG is truncated inside its signature");
    return Format::jpeg;
  }
  fail(Errc::unsupported, name, describe_unknown(b));
}

template <typename T>
Image<T> decode_any(std::span<const uint8_t> bytes, const LoadOptions& options,
                    const std::string& name) {
  switch (detect_format(bytes, name)) {
    case Format::png: return image_detail::decode_png<T>(bytes, options, name);
    case Format::jpeg: return image_detail::decode_jpeg<T>(bytes, options, name);
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
