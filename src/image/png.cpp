// PNG through libpng's classic API (the simplified png_image API converts 16-bit data to linear
// light, which is not what a pixel pipeline wants).
//
// libpng reports errors by longjmp. Every libpng call runs inside a small PngReader/PngWriter
// member that holds nothing but plain data across its setjmp, so a longjmp never skips a C++
// destructor; the C++ side (buffers, images, exceptions) lives in the callers.
#include <png.h>

#include <algorithm>
#include <bit>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "image/codecs.hpp"

namespace fovea {

namespace image_detail {

namespace {

// Ancillary chunks nothing here reads: skipping them means their (possibly compressed, possibly
// hostile) payloads are never inflated or stored.
constexpr png_byte kIgnoredChunks[] = {
    'i', 'C', 'C', 'P', 0, 't', 'E', 'X', 't', 0, 'z', 'T', 'X', 't', 0, 'i', 'T', 'X', 't', 0,
    's', 'P', 'L', 'T', 0, 'e', 'X', 'I', 'f', 0, 'h', 'I', 'S', 'T', 0, 't', 'I', 'M', 'E', 0,
};
// Deflate's best possible ratio: no stream of n bytes inflates to more than 1032 * n bytes.
constexpr double kMaxDeflateRatio = 1032;
constexpr size_t kMaxAncillaryChunkBytes = 8u << 20;
constexpr png_uint_32 kMaxAncillaryChunks = 1000;
constexpr int kStripRows = 16;

// Shared with libpng's callbacks through its io/error pointers: plain data only.
struct PngState {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  std::vector<uint8_t>* out = nullptr;  // encoding only
  char message[256] = {};
};

void on_png_error(png_structp png, png_const_charp msg) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

// Warnings are about ancillary chunks (bad CRC, odd sRGB profiles) that do not change pixels;
// anything that would corrupt pixels is an error in libpng.
void on_png_warning(png_structp, png_const_charp) {}

void on_png_read(png_structp png, png_bytep out, size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > state->size - state->pos) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(out, state->data + state->pos, n);
  state->pos += n;
}

bool append(std::vector<uint8_t>* out, const uint8_t* data, size_t n) noexcept {
  try {
    out->insert(out->end(), data, data + n);
    return true;
  } catch (...) {
    return false;
  }
}

void on_png_write(png_structp png, png_bytep data, size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (!append(state->out, data, n)) png_error(png, "out of memory");
}

void on_png_flush(png_structp) {}

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  // After the transforms: 1..4 interleaved channels of 8 or 16 bits, `row_bytes` a row.
  int channels = 0, out_bit_depth = 0;
  size_t row_bytes = 0;
};

class PngReader {
 public:
  PngReader(std::span<const uint8_t> bytes) {
    state_.data = bytes.data();
    state_.size = bytes.size();
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state_, on_png_error, on_png_warning);
    if (png_) info_ = png_create_info_struct(png_);
  }
  ~PngReader() { png_destroy_read_struct(&png_, info_ ? &info_ : nullptr, nullptr); }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;

  bool created() const { return png_ && info_; }
  const char* message() const { return state_.message; }
  size_t bytes_left() const { return state_.size - state_.pos; }

  // Each step returns false when libpng failed; message() says why.
  bool read_header(PngHeader* h) {
    if (setjmp(png_jmpbuf(png_))) return false;
    png_set_read_fn(png_, &state_, on_png_read);
    // Extents are checked against LoadOptions::max_pixels by the caller, with a better message
    // than libpng's; its own default (1e6 per side) would refuse legitimate long strips.
    png_set_user_limits(png_, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
    png_set_chunk_cache_max(png_, kMaxAncillaryChunks);
    png_set_chunk_malloc_max(png_, kMaxAncillaryChunkBytes);
    png_set_keep_unknown_chunks(png_, PNG_HANDLE_CHUNK_NEVER, kIgnoredChunks,
                                int(sizeof kIgnoredChunks / 5));
    png_read_info(png_, info_);
    png_get_IHDR(png_, info_, &h->width, &h->height, &h->bit_depth, &h->color_type, &h->interlace,
                 nullptr, nullptr);
    return true;
  }

  bool configure(PngHeader* h) {
    if (setjmp(png_jmpbuf(png_))) return false;
    // Palette -> RGB (RGBA when tRNS is present), gray 1/2/4 -> 8 bits scaled to 0..255.
    // No gamma, background or alpha handling: alpha is dropped when scattering.
    if (h->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png_);
    if (h->color_type == PNG_COLOR_TYPE_GRAY && h->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png_);
    if (h->bit_depth == 16 && std::endian::native == std::endian::little) png_set_swap(png_);
    if (h->interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png_);
    png_read_update_info(png_, info_);
    h->channels = png_get_channels(png_, info_);
    h->out_bit_depth = png_get_bit_depth(png_, info_);
    h->row_bytes = png_get_rowbytes(png_, info_);
    return true;
  }

  bool read_rows(uint8_t* strip, size_t row_bytes, int rows) {
    if (setjmp(png_jmpbuf(png_))) return false;
    for (int i = 0; i < rows; ++i) png_read_row(png_, strip + size_t(i) * row_bytes, nullptr);
    return true;
  }

  // Interlaced images: every pass touches every row, so the whole image is read at once.
  bool read_image(png_bytepp rows) {
    if (setjmp(png_jmpbuf(png_))) return false;
    png_read_image(png_, rows);
    return true;
  }

  // Reads up to IEND, so that a file cut after its last row is still reported as truncated.
  bool finish() {
    if (setjmp(png_jmpbuf(png_))) return false;
    png_read_end(png_, nullptr);
    return true;
  }

 private:
  PngState state_;
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

[[noreturn]] void fail_png(const PngReader& reader, const std::string& name) {
  const std::string why = reader.message();
  fail(why.find("memory") != std::string::npos ? Errc::out_of_memory : Errc::corrupt_data, name,
       "PNG: " + why);
}

template <typename T, typename S>
void scatter_rows(Image<T>& img, const PngHeader& h, int y0, int rows, const uint8_t* strip) {
  for (int i = 0; i < rows; ++i)
    scatter_row(img, 1, int(h.width), int(h.height), y0 + i,
                reinterpret_cast<const S*>(strip + size_t(i) * h.row_bytes), h.channels);
}

}  // namespace

template <typename T>
Image<T> decode_png(std::span<const uint8_t> bytes, const LoadOptions& options,
                    const std::string& name) {
  PngReader reader(bytes);
  if (!reader.created()) fail(Errc::out_of_memory, name, "cannot initialise libpng");
  PngHeader h;
  if (!reader.read_header(&h)) fail_png(reader, name);
  check_extents(h.width, h.height, options, name, "PNG");

  // Refuse, before allocating, a file too short to inflate to its declared size.
  const int file_channels = h.color_type == PNG_COLOR_TYPE_PALETTE ? 1
                            : h.color_type == PNG_COLOR_TYPE_GRAY  ? 1
                            : h.color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                            : h.color_type == PNG_COLOR_TYPE_RGB ? 3
                                                                 : 4;
  // In doubles: max_pixels may be raised far enough for the exact product to overflow.
  const double min_raw_bytes = double(h.width) * double(h.height) * file_channels * h.bit_depth / 8;
  if (double(reader.bytes_left()) * kMaxDeflateRatio < min_raw_bytes)
    fail(Errc::corrupt_data, name,
         "PNG is truncated: " + std::to_string(reader.bytes_left()) + " bytes after the header cannot hold a " +
             std::to_string(h.width) + "x" + std::to_string(h.height) + " image");

  if (!reader.configure(&h)) fail_png(reader, name);
  if (h.channels < 1 || h.channels > 4 || (h.out_bit_depth != 8 && h.out_bit_depth != 16))
    fail(Errc::internal, name, "unexpected libpng output format");
  const int out_channels = h.channels <= 2 ? 1 : 3;
  Image<T> img = make_image<T>(int(h.width), int(h.height), out_channels, name);

  const auto scatter = h.out_bit_depth == 16 ? &scatter_rows<T, uint16_t> : &scatter_rows<T, uint8_t>;
  // uint16_t storage keeps 16-bit rows aligned for the reinterpret in scatter_rows.
  std::vector<uint16_t> buffer;
  if (h.interlace == PNG_INTERLACE_NONE) {
    buffer.resize((h.row_bytes * kStripRows + 1) / 2);
    uint8_t* strip = reinterpret_cast<uint8_t*>(buffer.data());
    for (int y = 0; y < int(h.height); y += kStripRows) {
      const int rows = std::min(kStripRows, int(h.height) - y);
      if (!reader.read_rows(strip, h.row_bytes, rows)) fail_png(reader, name);
      scatter(img, h, y, rows, strip);
    }
  } else {
    buffer.resize((h.row_bytes * h.height + 1) / 2);
    uint8_t* all = reinterpret_cast<uint8_t*>(buffer.data());
    std::vector<png_bytep> rows(h.height);
    for (size_t y = 0; y < rows.size(); ++y) rows[y] = all + y * h.row_bytes;
    if (!reader.read_image(rows.data())) fail_png(reader, name);
    scatter(img, h, 0, int(h.height), all);
  }
  if (!reader.finish()) fail_png(reader, name);
  return img;
}

template Image<uint8_t> decode_png(std::span<const uint8_t>, const LoadOptions&, const std::string&);
template Image<float> decode_png(std::span<const uint8_t>, const LoadOptions&, const std::string&);

namespace {

class PngWriter {
 public:
  explicit PngWriter(std::vector<uint8_t>* out) {
    state_.out = out;
    png_ = png_create_write_struct(PNG_LIBPNG_VER_STRING, &state_, on_png_error, on_png_warning);
    if (png_) info_ = png_create_info_struct(png_);
  }
  ~PngWriter() { png_destroy_write_struct(&png_, info_ ? &info_ : nullptr); }
  PngWriter(const PngWriter&) = delete;
  PngWriter& operator=(const PngWriter&) = delete;

  bool created() const { return png_ && info_; }
  const char* message() const { return state_.message; }

  // `row` is scratch space for one interleaved row (width * channels bytes).
  bool write(const ImageU8& img, uint8_t* row) {
    if (setjmp(png_jmpbuf(png_))) return false;
    png_set_write_fn(png_, &state_, on_png_write, on_png_flush);
    const int channels = img.channels();
    png_set_IHDR(png_, info_, png_uint_32(img.width()), png_uint_32(img.height()), 8,
                 channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    // zlib level 3 (its fast matcher) with the Sub/Up/Paeth filters: about 3x faster than the
    // default level 6 with all filters on photos, for files a few percent larger. The outputs
    // here (--seen, --overlay) are previews, written on every run.
    png_set_compression_level(png_, 3);
    png_set_filter(png_, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB | PNG_FILTER_UP | PNG_FILTER_PAETH);
    png_write_info(png_, info_);
    for (int y = 0; y < img.height(); ++y) {
      if (channels == 1) {
        std::memcpy(row, img.row(0, y), size_t(img.width()));
      } else {
        const uint8_t *r = img.row(0, y), *g = img.row(1, y), *b = img.row(2, y);
        for (int x = 0; x < img.width(); ++x) {
          row[3 * x] = r[x];
          row[3 * x + 1] = g[x];
          row[3 * x + 2] = b[x];
        }
      }
      png_write_row(png_, row);
    }
    png_write_end(png_, info_);
    return true;
  }

 private:
  PngState state_;
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

}  // namespace

}  // namespace image_detail

std::vector<uint8_t> encode_png(const ImageU8& img) {
  if (img.empty()) throw Error(Errc::invalid_argument, "encode_png: the image is empty");
  std::vector<uint8_t> out;
  std::vector<uint8_t> row(size_t(img.width()) * img.channels());
  image_detail::PngWriter writer(&out);
  if (!writer.created()) throw Error(Errc::out_of_memory, "encode_png: cannot initialise libpng");
  if (!writer.write(img, row.data()))
    throw Error(std::strstr(writer.message(), "memory") ? Errc::out_of_memory : Errc::internal,
                std::string("encode_png: ") + writer.message());
  return out;
}

void save_png(const ImageU8& img, const std::string& path) {
  write_file_atomic(path, encode_png(img));
}

}  // namespace fovea
