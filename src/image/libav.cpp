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

template <typename T>
Image<T> decode_libav(std::span<const uint8_t> bytes, StillFormat format, const LoadOptions& options,
                      const std::string& name) {
  const char* fname = still_format_name(format);
  if (const auto e = header_extent(bytes, format)) check_extents(e->width, e->height, options, name, fname);
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
