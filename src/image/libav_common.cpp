// See libav_common.hpp.
#include "image/libav_common.hpp"

extern "C" {
#include <libavutil/error.h>
#include <libavutil/pixdesc.h>
}

#include <cstring>
#include <type_traits>

namespace fovea::libav {

namespace {

// An enum field read as the int it is stored as. Decoders copy tags from the bitstream, so a
// hostile file can leave a value no enumerator has; loading that as the enum type is undefined
// behaviour (UBSan's -fsanitize=enum caught it: fuzz_video, AVColorSpace 191). Compared as
// ints, any value is fine.
template <typename E>
int enum_value(const E& field) {
  static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &field, sizeof v);
  return v;
}

int sws_colorspace(const AVFrame* f, UntaggedMatrix untagged) {
  switch (enum_value(f->colorspace)) {
    case AVCOL_SPC_BT709: return SWS_CS_ITU709;
    case AVCOL_SPC_FCC: return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M: return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return SWS_CS_BT2020;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M: return SWS_CS_ITU601;
    default:
      return untagged == UntaggedMatrix::by_height && f->height >= 720 ? SWS_CS_ITU709 : SWS_CS_ITU601;
  }
}

bool full_range(const AVFrame* f) {
  const int range = enum_value(f->color_range);
  if (range == AVCOL_RANGE_JPEG) return true;
  switch (f->format) {
    case AV_PIX_FMT_YUVJ420P:
    case AV_PIX_FMT_YUVJ422P:
    case AV_PIX_FMT_YUVJ444P:
    case AV_PIX_FMT_YUVJ440P:
    case AV_PIX_FMT_YUVJ411P: return true;
    default: break;
  }
  // Gray (and gray + alpha) samples are 0..max unless tagged otherwise: TIFF, PAM, PGM and
  // FFmpeg's own gray encoders all write them so. Taken as limited range, swscale stretched
  // (y - 16) * 255 / 219 whenever the conversion was not a plain copy: a gray + alpha TIFF
  // came out 11 levels too bright at mid-gray.
  const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(AVPixelFormat(f->format));
  return d && range != AVCOL_RANGE_MPEG && d->nb_components <= 2 &&
         !(d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL));
}

// The yuvj* formats are deprecated in swscale; it wants the plain format plus the range flag.
AVPixelFormat plain_format(int fmt) {
  switch (fmt) {
    case AV_PIX_FMT_YUVJ420P: return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: return AV_PIX_FMT_YUV411P;
    default: return AVPixelFormat(fmt);
  }
}

}  // namespace

std::string error_string(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

const char* refused_decoder(int codec_id) {
  if (codec_id == AV_CODEC_ID_JPEGXL)
    return "JPEG XL is not supported (Debian 12's FFmpeg wrapper of libjxl can hang on a truncated file; convert it to PNG)";
  return nullptr;
}

const char* decoder_whitelist() {
  static const std::string list = [] {
    std::string names;
    void* it = nullptr;
    while (const AVCodec* c = av_codec_iterate(&it)) {
      if (!av_codec_is_decoder(c) || refused_decoder(c->id)) continue;
      if (!names.empty()) names += ',';
      names += c->name;
    }
    return names;
  }();
  return list.c_str();
}

std::string pixel_format_name(int fmt) {
  const char* n = av_get_pix_fmt_name(AVPixelFormat(fmt));
  return n ? n : "?";
}

SwsContext* rgb_conversion(SwsContext* cached, const AVFrame* f, AVPixelFormat dst, UntaggedMatrix untagged) {
  const AVPixelFormat src = plain_format(f->format);
  if (!av_pix_fmt_desc_get(src)) {
    sws_freeContext(cached);
    return nullptr;
  }
  SwsContext* sws = sws_getCachedContext(cached, f->width, f->height, src, f->width, f->height, dst,
                                         SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr,
                                         nullptr, nullptr);
  if (!sws) return nullptr;
  const int* coeffs = sws_getCoefficients(sws_colorspace(f, untagged));
  sws_setColorspaceDetails(sws, coeffs, full_range(f) ? 1 : 0, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0,
                           1 << 16, 1 << 16);
  return sws;
}

}  // namespace fovea::libav
