// Still images in the formats FFmpeg's libavcodec decodes: WebP, GIF (first frame), BMP, TIFF,
// PNM/PAM/PFM, QOI, JPEG 2000, PSD. (Not JPEG XL: FFmpeg 5.1's libjxl wrapper can spin forever
// on a truncated file, decode.cpp.) decode.cpp recognises the signature; the
// whole file goes to the decoder as one packet (these decoders parse their own container), so
// no demuxer and no probing is involved.
//
// Limits come first: each format's header extents are read here and checked against
// LoadOptions::max_pixels before the decoder runs, and the decoder itself is given the same
// limit (AVCodecContext::max_pixels) for what is not read here (a JP2 file whose header box
// comes late, a TIFF without the two tags in its first directory).
#include "image/codecs.hpp"

#if FOVEA_IMAGE_LIBAV

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

extern "C" {
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
}

#include "image/libav_common.hpp"

namespace fovea::image_detail {

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }
uint32_t le32(const uint8_t* p) { return uint32_t(p[3]) << 24 | uint32_t(p[2]) << 16 | uint32_t(p[1]) << 8 | p[0]; }
uint32_t le24(const uint8_t* p) { return uint32_t(p[2]) << 16 | uint32_t(p[1]) << 8 | p[0]; }
uint32_t le16(const uint8_t* p) { return uint32_t(p[1]) << 8 | p[0]; }

struct Extent {
  uint64_t width = 0, height = 0;
};

// PNM's text header: magic, then width and height as decimal tokens, '#' comments between.
std::optional<Extent> pnm_extent(std::span<const uint8_t> b) {
  size_t i = 2;
  uint64_t v[2] = {0, 0};
  for (uint64_t& out : v) {
    for (;;) {  // whitespace and comments
      while (i < b.size() && std::isspace(b[i])) ++i;
      if (i < b.size() && b[i] == '#') {
        while (i < b.size() && b[i] != '\n' && b[i] != '\r') ++i;
        continue;
      }
      break;
    }
    if (i >= b.size() || !std::isdigit(b[i])) return std::nullopt;
    for (; i < b.size() && std::isdigit(b[i]); ++i) {
      out = out * 10 + (b[i] - '0');
      if (out > UINT32_MAX) return std::nullopt;
    }
  }
  return Extent{v[0], v[1]};
}

// PAM: "WIDTH n" and "HEIGHT n" lines before ENDHDR.
std::optional<Extent> pam_extent(std::span<const uint8_t> b) {
  const std::string head(reinterpret_cast<const char*>(b.data()), std::min<size_t>(b.size(), 1024));
  const auto field = [&](const char* key) -> std::optional<uint64_t> {
    const size_t at = head.find(key);
    if (at == std::string::npos) return std::nullopt;
    size_t i = at + std::strlen(key);
    while (i < head.size() && (head[i] == ' ' || head[i] == '\t')) ++i;
    uint64_t v = 0;
    if (i >= head.size() || !std::isdigit(static_cast<unsigned char>(head[i]))) return std::nullopt;
    for (; i < head.size() && std::isdigit(static_cast<unsigned char>(head[i])); ++i) {
      v = v * 10 + (head[i] - '0');
      if (v > UINT32_MAX) return std::nullopt;
    }
    return v;
  };
  const auto w = field("\nWIDTH"), h = field("\nHEIGHT");
  if (!w || !h) return std::nullopt;
  return Extent{*w, *h};
}

// The extents a header declares, for the formats where they are fixed fields. nullopt: not
// read here (the decoder's own max_pixels check applies) or the header is too short (the
// decoder reports that).
std::optional<Extent> header_extent(std::span<const uint8_t> b, StillFormat f) {
  const uint8_t* p = b.data();
  switch (f) {
    case StillFormat::gif:  // logical screen
      if (b.size() < 10) return std::nullopt;
      return Extent{le16(p + 6), le16(p + 8)};
    case StillFormat::bmp: {
      if (b.size() < 26) return std::nullopt;
      const uint32_t header = le32(p + 14);
      if (header == 12) return Extent{le16(p + 18), le16(p + 20)};  // OS/2 1.x
      const int32_t w = int32_t(le32(p + 18)), h = int32_t(le32(p + 22));
      const auto mag = [](int32_t v) { return v < 0 ? uint64_t(-int64_t(v)) : uint64_t(v); };
      return Extent{mag(w), mag(h)};  // negative height: stored top-down
    }
    case StillFormat::qoi:
      if (b.size() < 12) return std::nullopt;
      return Extent{be32(p + 4), be32(p + 8)};
    case StillFormat::psd:
      if (b.size() < 22) return std::nullopt;
      return Extent{be32(p + 18), be32(p + 14)};
    case StillFormat::webp: {
      if (b.size() < 30) return std::nullopt;
      if (std::memcmp(p + 12, "VP8X", 4) == 0) return Extent{le24(p + 24) + 1, le24(p + 27) + 1};
      if (std::memcmp(p + 12, "VP8L", 4) == 0 && p[20] == 0x2F) {
        const uint32_t bits = le32(p + 21);
        return Extent{(bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1};
      }
      if (std::memcmp(p + 12, "VP8 ", 4) == 0) return Extent{le16(p + 26) & 0x3FFF, le16(p + 28) & 0x3FFF};
      return std::nullopt;
    }
    case StillFormat::jpeg2000:
      if (b.size() >= 24 && p[0] == 0xFF && p[1] == 0x4F) {  // raw codestream: SIZ right after SOC
        const uint32_t x = be32(p + 8), y = be32(p + 12), x0 = be32(p + 16), y0 = be32(p + 20);
        if (x0 >= x || y0 >= y) return std::nullopt;
        return Extent{x - x0, y - y0};
      }
      // JP2 boxes: the image header box ('ihdr': height, width) comes early in the header
      // superbox; a file that hides it further on is left to the decoder's own limit.
      for (size_t i = 0; i + 12 <= std::min<size_t>(b.size(), 4096); ++i)
        if (std::memcmp(p + i, "ihdr", 4) == 0) return Extent{be32(p + i + 8), be32(p + i + 4)};
      return std::nullopt;
    case StillFormat::pbm:
    case StillFormat::pgm:
    case StillFormat::ppm:
    case StillFormat::pfm: return pnm_extent(b);
    case StillFormat::pam: return pam_extent(b);
    case StillFormat::tiff: {  // the first picture's: ImageWidth (256), ImageLength (257)
      const auto w = tiff_ifd0_value(b, 256), h = tiff_ifd0_value(b, 257);
      if (!w || !h) return std::nullopt;
      return Extent{*w, *h};
    }
  }
  return std::nullopt;
}

AVCodecID codec_id(StillFormat f) {
  switch (f) {
    case StillFormat::webp: return AV_CODEC_ID_WEBP;
    case StillFormat::gif: return AV_CODEC_ID_GIF;
    case StillFormat::bmp: return AV_CODEC_ID_BMP;
    case StillFormat::tiff: return AV_CODEC_ID_TIFF;
    case StillFormat::pbm: return AV_CODEC_ID_PBM;
    case StillFormat::pgm: return AV_CODEC_ID_PGM;
    case StillFormat::ppm: return AV_CODEC_ID_PPM;
    case StillFormat::pam: return AV_CODEC_ID_PAM;
    case StillFormat::pfm: return AV_CODEC_ID_PFM;
    case StillFormat::qoi: return AV_CODEC_ID_QOI;
    case StillFormat::jpeg2000: return AV_CODEC_ID_JPEG2000;
    case StillFormat::psd: return AV_CODEC_ID_PSD;
  }
  return AV_CODEC_ID_NONE;
}

// A WebP file's EXIF chunk (RIFF chunks: fourcc, LE32 size, payload padded to even), as the
// TIFF structure inside it ("Exif\0\0" prefixed by some writers).
std::span<const uint8_t> webp_exif(std::span<const uint8_t> b) {
  size_t at = 12;
  while (b.size() >= 8 && at <= b.size() - 8) {
    const uint64_t size = le32(b.data() + at + 4);
    if (size > b.size() - at - 8) return {};
    if (std::memcmp(b.data() + at, "EXIF", 4) == 0) {
      std::span<const uint8_t> payload = b.subspan(at + 8, size);
      if (payload.size() >= 6 && std::memcmp(payload.data(), "Exif\0", 5) == 0) payload = payload.subspan(6);
      return payload;
    }
    at += 8 + size + (size & 1);
  }
  return {};
}

// ---- TIFF: what FFmpeg 5.1's decoder cannot read, refused by name --------------------------
//
// Measured on Debian 12's FFmpeg: a JPEG-compressed TIFF (Pillow's compression="jpeg") decodes
// to an all-black picture with no error; floating-point and 32-bit samples fail with "Invalid
// data found when processing input"; compressions it lacks fail with "Not yet implemented".
// Each is a clear refusal here instead, before the decoder runs.
std::optional<std::string> tiff_refusal(std::span<const uint8_t> b) {
  if (const auto c = tiff_ifd0_value(b, 259)) {  // Compression
    switch (*c) {
      case 1: case 2: case 3: case 4: case 5: case 8: case 32773: case 32946: case 34925: break;
      case 6: case 7:
        return std::string("JPEG-compressed TIFF is not supported (Debian 12's FFmpeg decodes it to a black "
                           "picture); convert it to PNG or JPEG");
      default: return "TIFF compression " + std::to_string(*c) + " is not supported (fovea reads uncompressed, "
                      "LZW, Deflate, PackBits, LZMA and CCITT TIFF); convert it to PNG";
    }
  }
  if (const auto f = tiff_ifd0_value(b, 339, true); f && *f != 1)  // SampleFormat: 1 unsigned
    return (*f == 3 ? std::string("floating-point") : *f == 2 ? std::string("signed-integer") : "SampleFormat " + std::to_string(*f)) +
           " TIFF samples are not supported (unsigned 1- to 16-bit samples are); convert it to a 16-bit PNG";
  if (const auto bits = tiff_ifd0_value(b, 258, true); bits && *bits > 16)  // BitsPerSample
    return std::to_string(*bits) + "-bit TIFF samples are not supported (1- to 16-bit samples are)";
  return std::nullopt;
}

// ---- animated WebP: the first frame ------------------------------------------------------
//
// FFmpeg 5.1's WebP decoder reads no ANIM / ANMF chunks: an animated WebP (stickers, web
// animations) fails with "Invalid data". Its first frame is cut out here into a still WebP of
// its own (VP8X, the frame's ALPH and VP8 / VP8L chunks, the file's EXIF chunk), decoded, and
// placed on the canvas, as Pillow's Image.open() shows it: the first frame of a GIF is what
// fovea reads too.
struct WebpFrame {
  std::vector<uint8_t> file;                     // the still WebP
  uint64_t x = 0, y = 0, width = 0, height = 0;  // where the frame lies on the canvas
  uint64_t canvas_width = 0, canvas_height = 0;
};

bool webp_animated(std::span<const uint8_t> b) {
  return b.size() >= 30 && std::memcmp(b.data() + 12, "VP8X", 4) == 0 && (b[20] & 0x02) != 0;
}

// RIFF chunks in b[at, end): fourcc, LE32 size, payload padded to even. Calls f(fourcc, whole
// chunk, payload) for each; a chunk that runs past `end` stops the walk (returns false).
template <typename F>
bool riff_walk(std::span<const uint8_t> b, size_t at, size_t end, F&& f) {
  while (end >= 8 && at <= end - 8) {
    const uint64_t size = le32(b.data() + at + 4);
    if (size > end - at - 8) return false;
    const uint64_t whole = std::min<uint64_t>(8 + size + (size & 1), end - at);
    f(b.subspan(at, 4), b.subspan(at, whole), b.subspan(at + 8, size));
    at += whole;
  }
  return true;
}

bool is_fourcc(std::span<const uint8_t> c, const char* four) { return std::memcmp(c.data(), four, 4) == 0; }

std::optional<WebpFrame> webp_first_frame(std::span<const uint8_t> b, const std::string& name) {
  if (!webp_animated(b)) return std::nullopt;
  WebpFrame out;
  out.canvas_width = le24(b.data() + 24) + 1;
  out.canvas_height = le24(b.data() + 27) + 1;
  std::span<const uint8_t> anmf, exif;
  const size_t riff_end = std::min<uint64_t>(b.size(), uint64_t(le32(b.data() + 4)) + 8);
  riff_walk(b, 12, riff_end, [&](auto fourcc, auto whole, auto payload) {
    if (is_fourcc(fourcc, "ANMF") && anmf.empty()) anmf = payload;
    if (is_fourcc(fourcc, "EXIF") && exif.empty()) exif = whole;
  });
  if (anmf.size() < 16) fail(Errc::corrupt_data, name, "animated WebP: no complete first frame (ANMF chunk)");
  const uint8_t* h = anmf.data();
  out.x = uint64_t(le24(h)) * 2;
  out.y = uint64_t(le24(h + 3)) * 2;
  out.width = uint64_t(le24(h + 6)) + 1;
  out.height = uint64_t(le24(h + 9)) + 1;
  std::span<const uint8_t> alph, bitstream;
  riff_walk(anmf, 16, anmf.size(), [&](auto fourcc, auto whole, auto) {
    if (is_fourcc(fourcc, "ALPH") && alph.empty()) alph = whole;
    if ((is_fourcc(fourcc, "VP8 ") || is_fourcc(fourcc, "VP8L")) && bitstream.empty()) bitstream = whole;
  });
  if (bitstream.empty()) fail(Errc::corrupt_data, name, "animated WebP: the first frame has no VP8 / VP8L picture");

  const uint64_t body = 4 + 18 + alph.size() + bitstream.size() + exif.size();
  if (body > UINT32_MAX - 8) fail(Errc::limit_exceeded, name, "animated WebP: the first frame is over 4 GiB");
  auto put32 = [&](uint64_t v) {
    for (int i = 0; i < 4; ++i) out.file.push_back(uint8_t(v >> (8 * i)));
  };
  auto put24 = [&](uint64_t v) {
    for (int i = 0; i < 3; ++i) out.file.push_back(uint8_t(v >> (8 * i)));
  };
  out.file.reserve(8 + body);
  for (char c : std::string_view("RIFF")) out.file.push_back(uint8_t(c));
  put32(body);
  for (char c : std::string_view("WEBPVP8X")) out.file.push_back(uint8_t(c));
  put32(10);
  out.file.push_back(uint8_t((alph.empty() ? 0 : 0x10) | (exif.empty() ? 0 : 0x08)));
  put24(0);
  put24(out.width - 1);
  put24(out.height - 1);
  for (auto chunk : {alph, bitstream, exif}) out.file.insert(out.file.end(), chunk.begin(), chunk.end());
  return out;
}

int orientation_of(std::span<const uint8_t> b, StillFormat f, const LoadOptions& options) {
  if (!options.apply_exif_orientation) return 1;
  int o = 0;
  if (f == StillFormat::tiff) o = tiff_orientation(b);
  else if (f == StillFormat::webp) o = tiff_orientation(webp_exif(b));
  return o == 0 ? 1 : o;
}

[[noreturn]] void fail_av(Errc code, const std::string& name, StillFormat f, const std::string& what, int err) {
  fail(code, name, std::string(still_format_name(f)) + ": " + what + " (" + libav::error_string(err) + ")");
}

}  // namespace

bool have_libav_images() { return true; }

}  // namespace fovea::image_detail

namespace fovea {
void quiet_ffmpeg_log() { av_log_set_level(AV_LOG_QUIET); }
}  // namespace fovea

namespace fovea::image_detail {

namespace {

// An animated WebP's first frame, decoded and placed on its canvas. The canvas outside the
// frame is transparent black, so black once alpha is dropped: what libwebp's animation decoder
// gives and Pillow's convert("RGB") shows. A frame that covers the canvas (what encoders write
// first) keeps the file's EXIF orientation; one that does not is placed as stored.
template <typename T>
Image<T> place_on_canvas(const WebpFrame& frame, const LoadOptions& options, const std::string& name) {
  check_extents(frame.canvas_width, frame.canvas_height, options, name, "WebP");
  const bool covers = frame.x == 0 && frame.y == 0 && frame.width == frame.canvas_width &&
                      frame.height == frame.canvas_height;
  LoadOptions o = options;
  if (!covers) o.apply_exif_orientation = false;
  Image<T> picture = decode_libav<T>(frame.file, StillFormat::webp, o, name);
  if (covers) return picture;
  Image<T> canvas = make_image<T>(int(frame.canvas_width), int(frame.canvas_height), picture.channels(), name);
  const int x0 = int(std::min(frame.x, frame.canvas_width)), y0 = int(std::min(frame.y, frame.canvas_height));
  const int w = std::min(picture.width(), canvas.width() - x0), h = std::min(picture.height(), canvas.height() - y0);
  for (int c = 0; c < canvas.channels(); ++c)
    for (int y = 0; y < canvas.height(); ++y) {
      T* row = canvas.row(c, y);
      std::fill(row, row + canvas.width(), T(0));
      if (y >= y0 && y - y0 < h) std::copy_n(picture.row(c, y - y0), w, row + x0);
    }
  return canvas;
}

}  // namespace

template <typename T>
Image<T> decode_libav(std::span<const uint8_t> bytes, StillFormat format, const LoadOptions& options,
                      const std::string& name) {
  const char* fname = still_format_name(format);
  if (const auto e = header_extent(bytes, format)) check_extents(e->width, e->height, options, name, fname);
  if (format == StillFormat::tiff)
    if (const auto why = tiff_refusal(bytes)) fail(Errc::unsupported, name, *why);
  if (format == StillFormat::webp)
    if (const auto frame = webp_first_frame(bytes, name)) return place_on_canvas<T>(*frame, options, name);
  const AVCodec* decoder = avcodec_find_decoder(codec_id(format));
  if (!decoder)
    fail(Errc::unsupported, name, std::string(fname) + ": this system's FFmpeg (libavcodec) has no decoder for it");
  if (bytes.size() > size_t(INT_MAX) - AV_INPUT_BUFFER_PADDING_SIZE)
    fail(Errc::limit_exceeded, name, std::string(fname) + " file is over 2 GiB");

  libav::CodecPtr ctx(avcodec_alloc_context3(decoder));
  libav::PacketPtr packet(av_packet_alloc());
  libav::FramePtr frame(av_frame_alloc());
  if (!ctx || !packet || !frame) fail(Errc::out_of_memory, name, "no memory for an FFmpeg decoder");
  ctx->thread_count = 1;  // one picture: no worker threads to start and join
  ctx->max_pixels = int64_t(std::min<uint64_t>(options.max_pixels, uint64_t(INT64_MAX)));
  int err = avcodec_open2(ctx.get(), decoder, nullptr);
  if (err < 0) fail_av(Errc::unsupported, name, format, "cannot open FFmpeg's decoder", err);

  // The decoders read up to AV_INPUT_BUFFER_PADDING_SIZE bytes past the end: a padded copy.
  if ((err = av_new_packet(packet.get(), int(bytes.size()))) < 0)
    fail_av(Errc::out_of_memory, name, format, "no memory for the file's bytes", err);
  std::memcpy(packet->data, bytes.data(), bytes.size());

  err = avcodec_send_packet(ctx.get(), packet.get());
  if (err >= 0) {
    err = avcodec_receive_frame(ctx.get(), frame.get());
    if (err == AVERROR(EAGAIN)) {  // decoders with a delay: drain
      avcodec_send_packet(ctx.get(), nullptr);
      err = avcodec_receive_frame(ctx.get(), frame.get());
    }
  }
  if (err < 0) {
    if (err == AVERROR(ENOMEM)) fail_av(Errc::out_of_memory, name, format, "out of memory while decoding", err);
    if (err == AVERROR_EOF || err == AVERROR(EAGAIN)) fail(Errc::corrupt_data, name, std::string(fname) + ": no picture in the file");
    if (err == AVERROR(EINVAL) || err == AVERROR(ERANGE))
      fail_av(Errc::corrupt_data, name, format,
              "FFmpeg's decoder refused it: invalid extents, or over the limit of " +
                  std::to_string(options.max_pixels) + " pixels (LoadOptions::max_pixels)",
              err);
    fail_av(Errc::corrupt_data, name, format, "FFmpeg's decoder failed", err);
  }
  const int w = frame->width, h = frame->height;
  if (w < 1 || h < 1) fail(Errc::corrupt_data, name, std::string(fname) + ": decoded a picture with no pixels");
  check_extents(uint64_t(w), uint64_t(h), options, name, fname);

  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(AVPixelFormat(frame->format));
  if (!desc) fail(Errc::corrupt_data, name, std::string(fname) + ": decoded an unknown pixel format");
  const bool gray = !(desc->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL)) && desc->nb_components <= 2;
  const bool deep = desc->comp[0].depth > 8 || (desc->flags & AV_PIX_FMT_FLAG_FLOAT);
  const int channels = gray ? 1 : 3;
  const AVPixelFormat packed = gray ? (deep ? AV_PIX_FMT_GRAY16 : AV_PIX_FMT_GRAY8)
                                    : (deep ? AV_PIX_FMT_RGB48 : AV_PIX_FMT_RGB24);
  libav::SwsPtr sws(libav::rgb_conversion(nullptr, frame.get(), packed, libav::UntaggedMatrix::bt601));
  if (!sws)
    fail(Errc::unsupported, name,
         std::string(fname) + ": cannot convert FFmpeg's pixel format " + libav::pixel_format_name(frame->format) +
             " to " + (gray ? "gray" : "RGB"));

  const int orientation = orientation_of(bytes, format, options);
  const bool swap = swaps_axes(orientation);
  Image<T> img = make_image<T>(swap ? h : w, swap ? w : h, channels, name);
  // The converted picture, interleaved (8- or 16-bit samples), then scattered into place. The
  // buffer is FFmpeg's own (av_frame_get_buffer: aligned rows plus padding): swscale's SIMD
  // writes whole vectors and runs past the last pixel of a row. A tightly packed vector of
  // w * 3 bytes a row was overrun by it at the end (fuzz_still: ASan found the next heap chunk's
  // header damaged when it was freed).
  libav::FramePtr rgb(av_frame_alloc());
  if (!rgb) fail(Errc::out_of_memory, name, "no memory for an FFmpeg frame");
  rgb->format = packed;
  rgb->width = w;
  rgb->height = h;
  if ((err = av_frame_get_buffer(rgb.get(), 0)) < 0)
    fail_av(Errc::out_of_memory, name, format,
            "no memory to convert a " + std::to_string(w) + "x" + std::to_string(h) + " picture", err);
  if (sws_scale(sws.get(), frame->data, frame->linesize, 0, h, rgb->data, rgb->linesize) != h)
    fail(Errc::internal, name, std::string(fname) + ": swscale did not convert the whole picture");
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = rgb->data[0] + ptrdiff_t(y) * rgb->linesize[0];
    if (deep) scatter_row(img, orientation, w, h, y, reinterpret_cast<const uint16_t*>(row), channels);
    else scatter_row(img, orientation, w, h, y, row, channels);
  }
  return img;
}

template Image<uint8_t> decode_libav(std::span<const uint8_t>, StillFormat, const LoadOptions&, const std::string&);
template Image<float> decode_libav(std::span<const uint8_t>, StillFormat, const LoadOptions&, const std::string&);

}  // namespace fovea::image_detail

#else  // no FFmpeg development files at configure time

namespace fovea::image_detail {

bool have_libav_images() { return false; }

}  // namespace fovea::image_detail

namespace fovea {
void quiet_ffmpeg_log() {}
}  // namespace fovea

namespace fovea::image_detail {

template <typename T>
Image<T> decode_libav(std::span<const uint8_t>, StillFormat format, const LoadOptions&, const std::string& name) {
  fail(Errc::unsupported, name,
       std::string(still_format_name(format)) +
           " is read through FFmpeg's libavcodec, and this build of fovea has none (configured with "
           "FOVEA_WITH_FFMPEG=OFF, or without libavcodec-dev and libswscale-dev); PNG and JPEG are always read");
}

template Image<uint8_t> decode_libav(std::span<const uint8_t>, StillFormat, const LoadOptions&, const std::string&);
template Image<float> decode_libav(std::span<const uint8_t>, StillFormat, const LoadOptions&, const std::string&);

}  // namespace fovea::image_detail

#endif
