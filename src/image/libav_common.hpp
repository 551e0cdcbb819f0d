// Private to src/image and src/video (which both decode through FFmpeg): RAII for libav
// objects, error strings, and the one colour conversion both use, so that a still WebP and a
// video frame with the same pixels and tags come out as the same RGB.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <string>

namespace fovea::libav {

struct CodecFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct SwsFree {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using CodecPtr = std::unique_ptr<AVCodecContext, CodecFree>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using SwsPtr = std::unique_ptr<SwsContext, SwsFree>;

// av_strerror's text for an AVERROR code.
std::string error_string(int code);

// Which YUV matrix an untagged frame is assumed to use: video players take BT.709 for HD
// (≥ 720 lines) and BT.601 below; still images (JPEG, WebP) are BT.601 whatever their size.
enum class UntaggedMatrix { by_height, bt601 };

// Returns `cached` (or a replacement: sws_getCachedContext semantics; nullptr when swscale
// cannot convert this pixel format) set up to convert `f` to `dst` at the same size, with the
// frame's YUV matrix and range (limited unless tagged full or a deprecated yuvj* format).
// Bilinear, accurate rounding, full chroma interpolation.
SwsContext* rgb_conversion(SwsContext* cached, const AVFrame* f, AVPixelFormat dst, UntaggedMatrix untagged);

// Decoders fovea never runs: FFmpeg 5.1's libjxl wrapper spins forever on some truncated JPEG
// XL files (fuzz_still found a 29-byte one). `refused_decoder(id)` names the reason, or nullptr.
const char* refused_decoder(int codec_id);
// Every decoder of this FFmpeg except the refused ones, comma-separated: an AVFormatContext's
// codec_whitelist, so that avformat_find_stream_info never opens a refused one either.
const char* decoder_whitelist();

// The frame's pixel format name for messages ("?" when unknown).
std::string pixel_format_name(int fmt);

}  // namespace fovea::libav
