// JPEG through libjpeg-turbo's libjpeg62 API.
//
// libjpeg reports errors through error_exit, which must not return: it longjmps back into the
// JpegReader/JpegWriter member that made the call. Those members hold only plain data across
// their setjmp, so no C++ destructor is ever skipped. Warnings are errors too: libjpeg "recovers"
// from truncated or corrupt entropy data by padding with gray, and a silently damaged image is
// worse than a clear failure.
#include <cstdio>  // jpeglib.h needs FILE and size_t first
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <vector>

#include "image/codecs.hpp"

namespace fovea {

namespace image_detail {

namespace {

// A normal progressive file has about 10 scans. Each scan costs a pass over the whole
// coefficient buffer, so a tiny hostile file with thousands of scans would keep a core busy for
// minutes; 500 is the limit libjpeg-turbo's own documentation suggests.
constexpr int kMaxProgressiveScans = 500;
constexpr int kStripRows = 16;

// Plain data shared with libjpeg's callbacks; `pub` first so the error_mgr pointer converts back.
struct JpegErrorState {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
  Errc code;
};

void on_jpeg_error(j_common_ptr cinfo) {
  auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
  char text[JMSG_LENGTH_MAX] = {};
  (*cinfo->err->format_message)(cinfo, text);
  std::snprintf(state->message, sizeof state->message, "%s", text);
  switch (cinfo->err->msg_code) {
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_NOT_COMPILED:
    case JERR_ARITH_NOTIMPL:
    case JERR_CONVERSION_NOTIMPL: state->code = Errc::unsupported; break;
    case JERR_OUT_OF_MEMORY: state->code = Errc::out_of_memory; break;
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW: state->code = Errc::limit_exceeded; break;
    default: state->code = Errc::corrupt_data; break;
  }
  std::longjmp(state->jump, 1);
}

void on_jpeg_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace output
  switch (cinfo->err->msg_code) {
    // Metadata problems that leave the pixels intact.
    case JWRN_JFIF_MAJOR:
    case JWRN_BOGUS_ICC: ++cinfo->err->num_warnings; return;
    default: on_jpeg_error(cinfo);
  }
}

void on_jpeg_progress(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  const int scan = reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number;
  if (scan <= kMaxProgressiveScans) return;
  auto* state = reinterpret_cast<JpegErrorState*>(cinfo->err);
  std::snprintf(state->message, sizeof state->message, "more than %d progressive scans",
                kMaxProgressiveScans);
  state->code = Errc::limit_exceeded;
  std::longjmp(state->jump, 1);
}

void init_error_state(JpegErrorState* err) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = on_jpeg_error;
  err->pub.emit_message = on_jpeg_message;
  err->message[0] = 0;
  err->code = Errc::corrupt_data;
}

class JpegReader {
 public:
  explicit JpegReader(std::span<const uint8_t> bytes) : data_(bytes) {
    std::memset(&cinfo_, 0, sizeof cinfo_);
    std::memset(&progress_, 0, sizeof progress_);
    init_error_state(&err_);
    cinfo_.err = &err_.pub;
    progress_.progress_monitor = on_jpeg_progress;
  }
  // Safe after a failed create(): jpeg_destroy only frees what the memory manager holds.
  ~JpegReader() { jpeg_destroy_decompress(&cinfo_); }
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  const char* message() const { return err_.message; }
  Errc code() const { return err_.code; }
  jpeg_decompress_struct& info() { return cinfo_; }

  // Each step returns false when libjpeg failed; message() and code() say why.
  bool read_header() {
    if (setjmp(err_.jump)) return false;
    jpeg_create_decompress(&cinfo_);
    cinfo_.progress = &progress_;
    jpeg_mem_src(&cinfo_, data_.data(), static_cast<unsigned long>(data_.size()));
    jpeg_save_markers(&cinfo_, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&cinfo_, TRUE);
    return true;
  }

  bool start() {
    if (setjmp(err_.jump)) return false;
    jpeg_start_decompress(&cinfo_);
    return true;
  }

  bool read_rows(JSAMPARRAY rows, int count) {
    if (setjmp(err_.jump)) return false;
    int done = 0;
    while (done < count) {
      const JDIMENSION n = jpeg_read_scanlines(&cinfo_, rows + done, JDIMENSION(count - done));
      // A memory source never suspends; zero rows would mean a loop that never ends.
      if (n == 0) {
        std::snprintf(err_.message, sizeof err_.message, "decoder returned no rows");
        return false;
      }
      done += int(n);
    }
    return true;
  }

  // Reads on to EOI, so that a file cut after its last row is still reported as truncated.
  bool finish() {
    if (setjmp(err_.jump)) return false;
    jpeg_finish_decompress(&cinfo_);
    return true;
  }

 private:
  std::span<const uint8_t> data_;
  jpeg_decompress_struct cinfo_;
  JpegErrorState err_;
  jpeg_progress_mgr progress_;
};

[[noreturn]] void fail_jpeg(const JpegReader& reader, const std::string& name) {
  fail(reader.code(), name, std::string("JPEG: ") + reader.message());
}

int find_orientation(const jpeg_decompress_struct& cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next) {
    if (m->marker != JPEG_APP0 + 1 || !m->data) continue;
    const int o = exif_orientation({m->data, m->data_length});
    if (o) return o;
  }
  return 1;
}

// CMYK as libjpeg returns it (YCCK already turned into CMYK) to RGB, without color management.
// Adobe's writers, which produce nearly every CMYK JPEG and mark them with an APP14 "Adobe"
// segment, store inverted values (255 = no ink); others store ink amounts.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, int width, bool inverted) {
  for (int x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const uint32_t k = inverted ? cmyk[3] : 255u - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const uint32_t v = inverted ? cmyk[c] : 255u - cmyk[c];
      rgb[c] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
}

}  // namespace

template <typename T>
Image<T> decode_jpeg(std::span<const uint8_t> bytes, const LoadOptions& options,
                     const std::string& name) {
  JpegReader reader(bytes);
  if (!reader.read_header()) fail_jpeg(reader, name);
  jpeg_decompress_struct& cinfo = reader.info();
  check_extents(cinfo.image_width, cinfo.image_height, options, name, "JPEG");

  bool cmyk = false;
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr:
    case JCS_RGB: cinfo.out_color_space = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo.out_color_space = JCS_CMYK;
      cmyk = true;
      break;
    default:
      fail(Errc::unsupported, name,
           "JPEG with " + std::to_string(cinfo.num_components) + " components in an unknown color space");
  }
  const int orientation = options.apply_exif_orientation ? find_orientation(cinfo) : 1;

  // Progressive files are decoded in full by start(), before any image buffer exists.
  if (!reader.start()) fail_jpeg(reader, name);
  const int width = int(cinfo.output_width), height = int(cinfo.output_height);
  const int channels = cinfo.output_components;
  if (channels != (cmyk ? 4 : cinfo.out_color_space == JCS_GRAYSCALE ? 1 : 3))
    fail(Errc::internal, name, "unexpected libjpeg output format");

  std::vector<uint8_t> strip(size_t(width) * channels * kStripRows);
  std::vector<uint8_t> rgb(cmyk ? size_t(width) * 3 : 0);
  std::vector<JSAMPROW> rows(kStripRows);
  for (int i = 0; i < kStripRows; ++i) rows[i] = strip.data() + size_t(i) * width * channels;

  // The image is allocated only once the first rows decode: a header that promises a huge
  // image over a few bytes of data fails here, not after a multi-gigabyte allocation.
  Image<T> img;
  for (int y = 0; y < height; y += kStripRows) {
    const int n = std::min(kStripRows, height - y);
    if (!reader.read_rows(rows.data(), n)) fail_jpeg(reader, name);
    if (img.empty()) {
      img = swaps_axes(orientation) ? make_image<T>(height, width, cmyk ? 3 : channels, name)
                                    : make_image<T>(width, height, cmyk ? 3 : channels, name);
    }
    for (int i = 0; i < n; ++i) {
      if (cmyk) {
        cmyk_to_rgb(rows[i], rgb.data(), width, cinfo.saw_Adobe_marker);
        scatter_row(img, orientation, width, height, y + i, rgb.data(), 3);
      } else {
        scatter_row(img, orientation, width, height, y + i, rows[i], channels);
      }
    }
  }
  if (!reader.finish()) fail_jpeg(reader, name);
  return img;
}

template Image<uint8_t> decode_jpeg(std::span<const uint8_t>, const LoadOptions&, const std::string&);
template Image<float> decode_jpeg(std::span<const uint8_t>, const LoadOptions&, const std::string&);

namespace {

// libjpeg destination that appends to a std::vector. jpeg_mem_dest is not used because after
// an error its buffer ownership is unclear (it frees and replaces the caller's pointer).
struct VectorDestination {
  jpeg_destination_mgr pub;
  std::vector<uint8_t>* out;
};

bool grow(std::vector<uint8_t>* out, size_t size) noexcept {
  try {
    out->resize(size);
    return true;
  } catch (...) {
    return false;
  }
}

void dest_init(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  if (!grow(dest->out, 64 * 1024)) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  dest->pub.next_output_byte = dest->out->data();
  dest->pub.free_in_buffer = dest->out->size();
}

boolean dest_empty(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  const size_t used = dest->out->size();  // libjpeg only calls this when the buffer is full
  if (!grow(dest->out, used * 2)) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 1);
  dest->pub.next_output_byte = dest->out->data() + used;
  dest->pub.free_in_buffer = dest->out->size() - used;
  return TRUE;
}

void dest_term(j_compress_ptr cinfo) {
  auto* dest = reinterpret_cast<VectorDestination*>(cinfo->dest);
  dest->out->resize(dest->out->size() - dest->pub.free_in_buffer);  // shrinking never throws
}

class JpegWriter {
 public:
  explicit JpegWriter(std::vector<uint8_t>* out) {
    std::memset(&cinfo_, 0, sizeof cinfo_);
    init_error_state(&err_);
    cinfo_.err = &err_.pub;
    dest_.pub.init_destination = dest_init;
    dest_.pub.empty_output_buffer = dest_empty;
    dest_.pub.term_destination = dest_term;
    dest_.out = out;
  }
  ~JpegWriter() { jpeg_destroy_compress(&cinfo_); }
  JpegWriter(const JpegWriter&) = delete;
  JpegWriter& operator=(const JpegWriter&) = delete;

  const char* message() const { return err_.message; }
  Errc code() const { return err_.code; }

  // `row` is scratch space for one interleaved row (width * channels bytes).
  bool write(const ImageU8& img, int quality, uint8_t* row) {
    if (setjmp(err_.jump)) return false;
    jpeg_create_compress(&cinfo_);
    cinfo_.dest = &dest_.pub;
    cinfo_.image_width = JDIMENSION(img.width());
    cinfo_.image_height = JDIMENSION(img.height());
    cinfo_.input_components = img.channels();
    cinfo_.in_color_space = img.channels() == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo_);
    jpeg_set_quality(&cinfo_, quality, TRUE);
    cinfo_.optimize_coding = TRUE;  // a few percent smaller for little time
    jpeg_start_compress(&cinfo_, TRUE);
    while (cinfo_.next_scanline < cinfo_.image_height) {
      const int y = int(cinfo_.next_scanline);
      if (img.channels() == 1) {
        std::memcpy(row, img.row(0, y), size_t(img.width()));
      } else {
        const uint8_t *r = img.row(0, y), *g = img.row(1, y), *b = img.row(2, y);
        for (int x = 0; x < img.width(); ++x) {
          row[3 * x] = r[x];
          row[3 * x + 1] = g[x];
          row[3 * x + 2] = b[x];
        }
      }
      JSAMPROW rows[1] = {row};
      jpeg_write_scanlines(&cinfo_, rows, 1);
    }
    jpeg_finish_compress(&cinfo_);
    return true;
  }

 private:
  jpeg_compress_struct cinfo_;
  JpegErrorState err_;
  VectorDestination dest_;
};

}  // namespace

}  // namespace image_detail

std::vector<uint8_t> encode_jpeg(const ImageU8& img, int quality) {
  if (quality < 1 || quality > 100)
    throw Error(Errc::invalid_argument,
                "encode_jpeg: quality must be in 1..100, got " + std::to_string(quality));
  if (img.empty()) throw Error(Errc::invalid_argument, "encode_jpeg: the image is empty");
  if (img.width() > JPEG_MAX_DIMENSION || img.height() > JPEG_MAX_DIMENSION)
    throw Error(Errc::unsupported, "encode_jpeg: JPEG images are at most " +
                                       std::to_string(JPEG_MAX_DIMENSION) + " pixels a side, got " +
                                       std::to_string(img.width()) + "x" + std::to_string(img.height()));
  std::vector<uint8_t> out;
  std::vector<uint8_t> row(size_t(img.width()) * img.channels());
  image_detail::JpegWriter writer(&out);
  if (!writer.write(img, quality, row.data()))
    throw Error(writer.code() == Errc::out_of_memory ? Errc::out_of_memory : Errc::internal,
                std::string("encode_jpeg: ") + writer.message());
  return out;
}

void save_jpeg(const ImageU8& img, const std::string& path, int quality) {
  write_file_atomic(path, encode_jpeg(img, quality));
}

}  // namespace fovea
