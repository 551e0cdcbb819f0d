// VideoReader: libavformat demuxes, libavcodec decodes, libswscale converts each kept frame
// straight into the three planes of an ImageU8 (GBRP: the planes are G, B, R, so the pointers
// are handed over in that order). Streaming: one packet and one decoded frame at a time.
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <span>
#include <string>
#include <string_view>

#include "fovea/files.hpp"
#include "fovea/error.hpp"
#include "fovea/video.hpp"
#include "image/codecs.hpp"
#include "image/libav_common.hpp"
#include "io/file_kind.hpp"

namespace fovea {

namespace {

using libav::CodecFree;
using libav::FrameFree;
using libav::PacketFree;
std::string av_error(int code) { return libav::error_string(code); }

// A frame's extents for a limit message, with what its rows store when that is the reason.
std::string extent_text(int w, int h) {
  std::string s = std::to_string(w) + "x" + std::to_string(h);
  const unsigned __int128 stored = image_detail::stored_pixels(uint64_t(w), uint64_t(h));
  if (w > 0 && h > 0 && stored > (unsigned __int128)uint64_t(w) * uint64_t(h) * 2)
    s += " (rows this narrow are stored 64 pixels wide: " + std::to_string(uint64_t(stored)) + " pixels)";
  return s;
}

struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};
struct AvioFree {
  void operator()(AVIOContext* c) const {
    av_freep(&c->buffer);  // libavformat may have replaced the buffer it was given
    avio_context_free(&c);
  }
};

// What a demuxer may open. libavformat opens every file and URL through AVFormatContext::io_open:
// the input itself, and whatever the input names. A playlist (HLS .m3u8, DASH .mpd) or an image
// pattern makes a demuxer open other files or URLs; a downloaded "video" could thus make fovea
// read (and encode into its output) any file the user can read, or fetch any URL. So the only
// thing opened is the input, by its exact name (`allowed`; none for open_bytes); any other open
// is refused and remembered, and the reader then fails naming it.
struct IoGuard {
  std::string allowed;
  std::string refused;  // the first URL refused
};

int open_only_the_input(AVFormatContext* s, AVIOContext** pb, const char* url, int flags, AVDictionary** options) {
  auto* g = static_cast<IoGuard*>(s->opaque);
  if (g && url && !g->allowed.empty() && g->allowed == url && !(flags & AVIO_FLAG_WRITE))
    return avio_open2(pb, url, flags, &s->interrupt_callback, options);
  if (g && g->refused.empty()) g->refused = url ? url : "?";
  return AVERROR(EPERM);
}

Error refused_error(const std::string& path, const std::string& url) {
  return Error(Errc::unsupported, path + ": refers to another file or URL ('" + url +
                                      "'): playlists (HLS .m3u8, DASH .mpd) and other indirect inputs are not read; "
                                      "fovea reads only the file it is given");
}

// A read-only, seekable view of bytes in memory, for libavformat's custom I/O (open_bytes).
struct MemorySource {
  const uint8_t* data = nullptr;
  int64_t size = 0, pos = 0;

  static int read(void* opaque, uint8_t* buf, int n) {
    auto* m = static_cast<MemorySource*>(opaque);
    const int64_t left = m->size - m->pos;
    if (left <= 0) return AVERROR_EOF;
    const int k = int(std::min<int64_t>(n, left));
    std::memcpy(buf, m->data + m->pos, size_t(k));
    m->pos += k;
    return k;
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* m = static_cast<MemorySource*>(opaque);
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
      case AVSEEK_SIZE: return m->size;
      case SEEK_SET: base = 0; break;
      case SEEK_CUR: base = m->pos; break;
      case SEEK_END: base = m->size; break;
      default: return AVERROR(EINVAL);
    }
    // Overflow-safe: offsets come from the (possibly hostile) file.
    if ((offset > 0 && base > INT64_MAX - offset) || (offset < 0 && base + offset < 0)) return AVERROR(EINVAL);
    m->pos = base + offset;  // past the end is allowed (reads then return EOF), as for a file
    return m->pos;
  }
};

// The display matrix (AV_PKT_DATA_DISPLAYMATRIX: a phone's "rotate" tag, an H.264 display
// orientation SEI) as an EXIF orientation (1..8), the way ffmpeg's command line turns frames
// for display (fftools, autorotate): 90° steps, with the mirrored variants. 0 when the matrix
// is not a multiple of 90° (not applied), 1 when there is none.
int display_orientation(const int32_t* m) {
  if (!m) return 1;
  double theta = -std::round(av_display_rotation_get(m));
  if (!std::isfinite(theta)) return 1;
  theta -= 360 * std::floor(theta / 360 + 0.9 / 360);
  if (std::fabs(theta - 90) < 1.0) return m[3] > 0 ? 5 : 6;   // transpose / 90° clockwise
  if (std::fabs(theta - 270) < 1.0) return m[3] < 0 ? 7 : 8;  // transverse / 90° counter-clockwise
  if (std::fabs(theta - 180) < 1.0) {
    const bool h = m[0] < 0, v = m[4] < 0;  // 180° is both flips
    return h && v ? 3 : h ? 2 : v ? 4 : 1;
  }
  if (std::fabs(theta) < 1.0 || std::fabs(theta - 360) < 1.0) return m[4] < 0 ? 4 : 1;
  return 0;
}

}  // namespace

std::string_view orientation_name(int o) {
  switch (o) {
    case 2: return "mirrored left-right";
    case 3: return "rotated 180 degrees";
    case 4: return "mirrored top-bottom";
    case 5: return "transposed";
    case 6: return "rotated 90 degrees clockwise";
    case 7: return "transversed";
    case 8: return "rotated 90 degrees counter-clockwise";
    default: return "as stored";
  }
}

namespace {

bool swaps_axes(int o) { return o >= 5 && o <= 8; }

// dst = src turned by EXIF orientation `o` (dst sized by the caller: swapped for 5..8). Stored
// (x, y) of a W×H image goes to displayed (dx, dy):
//   2 (W-1-x, y)  3 (W-1-x, H-1-y)  4 (x, H-1-y)  5 (y, x)  6 (H-1-y, x)  7 (H-1-y, W-1-x)  8 (y, W-1-x)
void orient(const ImageU8& src, ImageU8& dst, int o) {
  const int W = src.width(), H = src.height();
  const ptrdiff_t s = ptrdiff_t(dst.stride());
  for (int c = 0; c < src.channels(); ++c) {
    uint8_t* d = dst.plane(c);
    for (int y = 0; y < H; ++y) {
      const uint8_t* row = src.row(c, y);
      ptrdiff_t at = 0, step = 1;  // where x = 0 of stored row y lands, and the step per x
      switch (o) {
        case 2: at = y * s + (W - 1), step = -1; break;
        case 3: at = (H - 1 - y) * s + (W - 1), step = -1; break;
        case 4: at = (H - 1 - y) * s, step = 1; break;
        case 5: at = y, step = s; break;
        case 6: at = H - 1 - y, step = s; break;
        case 7: at = ptrdiff_t(W - 1) * s + (H - 1 - y), step = -s; break;
        case 8: at = ptrdiff_t(W - 1) * s + y, step = -s; break;
        default: at = y * s, step = 1; break;
      }
      for (int x = 0; x < W; ++x) d[at + ptrdiff_t(x) * step] = row[x];
    }
  }
}

// "http://...", "pipe:0", "concat:a|b": what ffmpeg would take as a URL or protocol, which the
// reader does not open (it reads files).
bool looks_like_url(const std::string& p) {
  const size_t colon = p.find(':');
  if (colon == std::string::npos || colon < 2) return false;
  for (size_t i = 0; i < colon; ++i) {
    const char c = p[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
    if (!ok) return false;
  }
  if (p.compare(colon, 3, "://") == 0) return true;
  const std::string scheme = p.substr(0, colon);
  for (const char* known : {"pipe", "fd", "concat", "subfile", "data", "cache", "async", "crypto", "file"})
    if (scheme == known) return true;
  return false;
}

}  // namespace

struct VideoReader::Impl {
  std::string path;
  VideoReaderOptions options;
  VideoInfo info;
  MemorySource memory;                           // open_bytes: the caller's bytes
  IoGuard guard;                                 // fmt's opaque: declared before fmt, outlives it
  std::unique_ptr<AVIOContext, AvioFree> avio;   // open_bytes: declared before fmt, freed after it
  std::unique_ptr<AVFormatContext, FormatCloser> fmt;
  std::unique_ptr<AVCodecContext, CodecFree> codec;
  std::unique_ptr<AVPacket, PacketFree> packet;
  std::unique_ptr<AVFrame, FrameFree> frame;
  SwsContext* sws = nullptr;  // sws_getCachedContext owns and replaces it
  int stream = -1;
  AVRational time_base{0, 1};
  int64_t decoded = 0, corrupt_packets = 0, corrupt_frames = 0, repaired = 0;
  int consecutive_errors = 0;
  bool demux_done = false, flushed = false, finished = false;
  bool have_pts = false;  // last_pts holds the previous frame's
  double last_pts = 0;
  double pts_offset = 0;  // added to the stream's timestamps after a backward discontinuity
  int stream_orientation = 1;  // the stream's display matrix (EXIF numbering; 0: not a 90° step)
  bool odd_rotation_warned = false;
  ImageU8 stored;              // a turned frame as stored, before orient()
  std::vector<std::string> warnings;

  ~Impl() { sws_freeContext(sws); }

  void warn(const std::string& w) {
    if (warnings.size() < 100) warnings.push_back(w);
  }

  // Receives one decoded frame into `frame`; false when the decoder needs more input or is done.
  bool receive() {
    for (;;) {
      const int r = avcodec_receive_frame(codec.get(), frame.get());
      if (r == 0) {
        if (frame->decode_error_flags || (frame->flags & AV_FRAME_FLAG_CORRUPT)) {
          ++corrupt_frames;
          warn("frame " + std::to_string(decoded) + " decoded with errors (concealed)");
        }
        return true;
      }
      if (r == AVERROR(EAGAIN)) return false;
      if (r == AVERROR_EOF) {
        finished = true;
        return false;
      }
      ++corrupt_packets;  // a decode error surfacing at receive: that frame is lost
      warn("decoding error after frame " + std::to_string(decoded) + ": " + av_error(r) + " (skipped)");
    }
  }

  // Feeds the decoder until it has a frame. false at the end of the stream.
  bool next_decoded() {
    for (;;) {
      if (finished) return false;
      if (receive()) return true;
      if (finished) return false;
      if (demux_done) {
        if (flushed) return false;  // EAGAIN after a flush: nothing will come
        avcodec_send_packet(codec.get(), nullptr);
        flushed = true;
        continue;
      }
      const int r = av_read_frame(fmt.get(), packet.get());
      if (r == AVERROR_EOF) {
        demux_done = true;
        continue;
      }
      if (r < 0) {
        ++corrupt_packets;
        // One line for a run of errors (a demuxer resynchronising may fail on every byte of
        // the damage): the first, and the count when the run ends.
        if (consecutive_errors == 0) warn("read error after frame " + std::to_string(decoded) + ": " + av_error(r) + " (skipped)");
        if (r == AVERROR(EIO) || ++consecutive_errors >= options.max_consecutive_errors) {
          warn("too many read errors: the stream is taken as ended");
          demux_done = true;
        }
        continue;
      }
      if (consecutive_errors > 1)
        warn(std::to_string(consecutive_errors) + " read errors in a row before this packet (skipped)");
      consecutive_errors = 0;
      if (packet->stream_index != stream) {
        av_packet_unref(packet.get());
        continue;
      }
      const bool flagged = packet->flags & AV_PKT_FLAG_CORRUPT;
      const int s = avcodec_send_packet(codec.get(), packet.get());
      av_packet_unref(packet.get());
      if (flagged) {
        ++corrupt_packets;
        warn("packet flagged corrupt by the demuxer");
      }
      if (s < 0 && s != AVERROR(EAGAIN) && s != AVERROR_EOF) {
        if (!flagged) ++corrupt_packets;
        warn("corrupt packet after frame " + std::to_string(decoded) + ": " + av_error(s) + " (skipped)");
      }
    }
  }

  // The frame's presentation time, strictly increasing (the rules are in fovea/video.hpp, VideoFrame).
  double pts_of(const AVFrame* f, int64_t index) {
    const int64_t ts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    // One frame interval: the stream's average rate when it is plausible, else 25 fps.
    const double step = info.fps > 0.5 && info.fps < 10000 ? 1.0 / info.fps : 1.0 / 25;
    double t;
    if (ts != AV_NOPTS_VALUE && time_base.num > 0 && time_base.den > 0) {
      t = double(ts) * av_q2d(time_base) + pts_offset;
      if (have_pts && !(t > last_pts)) {
        const double back = last_pts - t;
        if (back >= step / 2) {  // a discontinuity: continue the clock, keep the stream's spacing after it
          pts_offset += back + step;
          t = last_pts + step;
          warn("frame " + std::to_string(index) + ": the timestamps jump back by " + std::to_string(back) +
               " s (a discontinuity): this frame and the later ones are shifted to continue after the previous one");
        } else {  // a duplicate or a small disorder: just after the previous frame
          t = last_pts + step / 16;
          if (repaired == 0)
            warn("frame " + std::to_string(index) + ": its timestamp does not increase (a duplicate?): moved just after the previous frame's; "
                      "later repairs are only counted");
        }
        ++repaired;
      }
    } else {
      t = have_pts ? last_pts + step : 0.0;  // no timestamp: the next frame interval
    }
    have_pts = true;
    last_pts = t;
    return t;
  }

  void convert(const AVFrame* f, ImageU8& out) {
    const int w = f->width, h = f->height;
    if (w < 1 || h < 1) throw Error(Errc::corrupt_data, path + ": decoded a frame with no pixels");
    if (image_detail::over_pixel_limit(uint64_t(w), uint64_t(h), options.max_pixels))
      throw Error(Errc::limit_exceeded, path + ": a " + extent_text(w, h) + " frame is over the limit of " +
                                            std::to_string(options.max_pixels) + " pixels");
    // How this frame is shown: the frame's own display matrix (an H.264 orientation SEI), else the stream's.
    int o = 1;
    if (options.autorotate) {
      const AVFrameSideData* sd = av_frame_get_side_data(f, AV_FRAME_DATA_DISPLAYMATRIX);
      o = sd && sd->size >= 9 * sizeof(int32_t) ? display_orientation(reinterpret_cast<const int32_t*>(sd->data))
                                                : stream_orientation;
      if (o == 0) {
        if (!odd_rotation_warned) warn("the display matrix is not a multiple of 90 degrees: frames are left as stored");
        odd_rotation_warned = true;
        o = 1;
      }
    }
    const int ow = swaps_axes(o) ? h : w, oh = swaps_axes(o) ? w : h;
    if (out.width() != ow || out.height() != oh || out.channels() != 3) out = ImageU8(ow, oh, 3);
    ImageU8& target = o == 1 ? out : stored;
    if (o != 1 && (stored.width() != w || stored.height() != h)) stored = ImageU8(w, h, 3);
    sws = libav::rgb_conversion(sws, f, AV_PIX_FMT_GBRP, libav::UntaggedMatrix::by_height);
    if (!sws)
      throw Error(Errc::unsupported, path + ": cannot convert pixel format " + libav::pixel_format_name(f->format) + " to RGB");
    uint8_t* dst[4] = {target.plane(1), target.plane(2), target.plane(0), nullptr};  // G, B, R
    const int ls = int(target.stride());
    const int dst_stride[4] = {ls, ls, ls, 0};
    sws_scale(sws, f->data, f->linesize, 0, h, dst, dst_stride);
    if (o != 1) orient(stored, out, o);
  }
};

VideoReader::VideoReader() : impl_(std::make_unique<Impl>()) {}
VideoReader::VideoReader(VideoReader&&) noexcept = default;
VideoReader& VideoReader::operator=(VideoReader&&) noexcept = default;
VideoReader::~VideoReader() = default;

VideoReader VideoReader::open(const std::string& path, const VideoReaderOptions& options) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (looks_like_url(path))
      throw Error(Errc::io, path + ": not a file (videos are read from files, /dev/stdin included; not from URLs or "
                                   "ffmpeg protocols)");
    throw Error(Errc::io, path + ": cannot open (" + std::strerror(err) + ")");
  }
  if (S_ISDIR(st.st_mode)) throw Error(Errc::io, path + ": is a directory, not a video file");
  if (options.threads < 0) throw Error(Errc::invalid_argument, "video reader: threads must be >= 0");

  VideoReader r;
  Impl& m = *r.impl_;
  m.path = path;
  m.options = options;
  AVFormatContext* raw = avformat_alloc_context();
  if (!raw) throw Error(Errc::out_of_memory, path + ": cannot allocate a demuxer");
  m.guard.allowed = path;
  raw->opaque = &m.guard;
  raw->io_open = &open_only_the_input;
  raw->codec_whitelist = av_strdup(libav::decoder_whitelist());  // freed with the context
  // On failure avformat_open_input frees the context.
  const int e = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  if (e < 0) {
    if (!m.guard.refused.empty()) throw refused_error(path, m.guard.refused);
    if (e == AVERROR(EACCES) || e == AVERROR(ENOENT))
      throw Error(Errc::io, path + ": cannot open (" + av_error(e) + ")");
    // The file was there and readable (stat): an end of file or an I/O error inside the headers
    // is what libavformat reports for a file cut short (a truncated mkv says EIO, an mp4 EOF).
    if (e == AVERROR_EOF || e == AVERROR(EIO))
      throw Error(Errc::corrupt_data, path + ": ends inside its headers: a truncated or damaged file (" + av_error(e) + ")");
    {
      std::error_code ec;
      if (std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0 && !ec)
        throw Error(Errc::corrupt_data, path + ": not a video file: the file is empty");
    }
    const FileKind kind = io_detail::identify_file(path);  // a Git LFS pointer, JSON, ... say so
    using M = FileKind::Media;
    if (kind.known() && kind.media != M::video && kind.media != M::audio && kind.media != M::av)
      throw Error(Errc::corrupt_data, path + ": not a video file: it is " + kind.description);
    throw Error(Errc::corrupt_data, path + ": not a video file ffmpeg can read, or a damaged one (" + av_error(e) + ")");
  }
  m.fmt.reset(raw);
  r.open_stream();
  return r;
}

VideoReader VideoReader::open_bytes(std::span<const uint8_t> data, const std::string& name,
                                    const VideoReaderOptions& options) {
  if (options.threads < 0) throw Error(Errc::invalid_argument, "video reader: threads must be >= 0");
  VideoReader r;
  Impl& m = *r.impl_;
  m.path = name;
  m.options = options;
  m.memory = MemorySource{data.data(), int64_t(data.size()), 0};
  constexpr int kBuffer = 64 << 10;
  auto* buf = static_cast<uint8_t*>(av_malloc(kBuffer));
  if (!buf) throw Error(Errc::out_of_memory, name + ": cannot allocate an I/O buffer");
  AVIOContext* io = avio_alloc_context(buf, kBuffer, 0, &m.memory, &MemorySource::read, nullptr, &MemorySource::seek);
  if (!io) {
    av_free(buf);
    throw Error(Errc::out_of_memory, name + ": cannot allocate an I/O context");
  }
  m.avio.reset(io);
  AVFormatContext* raw = avformat_alloc_context();
  if (!raw) throw Error(Errc::out_of_memory, name + ": cannot allocate a demuxer");
  raw->pb = io;
  raw->flags |= AVFMT_FLAG_CUSTOM_IO;
  raw->opaque = &m.guard;  // nothing may be opened: the bytes are the whole input
  raw->io_open = &open_only_the_input;
  raw->codec_whitelist = av_strdup(libav::decoder_whitelist());  // freed with the context
  // On failure avformat_open_input frees the context (never the custom I/O).
  const int e = avformat_open_input(&raw, name.c_str(), nullptr, nullptr);
  if (e < 0 && !m.guard.refused.empty()) throw refused_error(name, m.guard.refused);
  if (e < 0) throw Error(Errc::corrupt_data, name + ": not a video ffmpeg can read (" + av_error(e) + ")");
  m.fmt.reset(raw);
  r.open_stream();
  return r;
}

// After avformat_open_input: the stream information, the video stream, its decoder, the limits.
void VideoReader::open_stream() {
  Impl& m = *impl_;
  const std::string& path = m.path;
  const VideoReaderOptions& options = m.options;
  AVFormatContext* raw = m.fmt.get();
  int e = avformat_find_stream_info(raw, nullptr);
  if (!m.guard.refused.empty()) throw refused_error(path, m.guard.refused);
  if (e < 0) throw Error(Errc::corrupt_data, path + ": cannot read the stream information (" + av_error(e) + ")");

  // The best video stream that is not a still attached to an audio file (cover art).
  const AVCodec* dec = nullptr;
  int idx = av_find_best_stream(raw, AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
  if (idx >= 0 && (raw->streams[idx]->disposition & AV_DISPOSITION_ATTACHED_PIC)) idx = AVERROR_STREAM_NOT_FOUND;
  if (idx == AVERROR_STREAM_NOT_FOUND) throw Error(Errc::unsupported, path + ": has no video stream");
  if (idx >= 0 && dec)
    if (const char* why = libav::refused_decoder(dec->id)) throw Error(Errc::unsupported, path + ": " + why);
  if (idx == AVERROR_DECODER_NOT_FOUND || (idx >= 0 && !dec)) {
    throw Error(Errc::unsupported, path + ": no decoder for its video codec in this ffmpeg build");
  }
  if (idx < 0) throw Error(Errc::corrupt_data, path + ": " + av_error(idx));
  AVStream* s = raw->streams[idx];
  m.stream = idx;
  m.time_base = s->time_base;
  m.codec.reset(avcodec_alloc_context3(dec));
  if (!m.codec) throw Error(Errc::out_of_memory, path + ": cannot allocate a decoder");
  if ((e = avcodec_parameters_to_context(m.codec.get(), s->codecpar)) < 0)
    throw Error(Errc::corrupt_data, path + ": bad codec parameters (" + av_error(e) + ")");
  m.codec->pkt_timebase = s->time_base;
  m.codec->thread_count = options.threads;
  if ((e = avcodec_open2(m.codec.get(), dec, nullptr)) < 0)
    throw Error(Errc::unsupported, path + ": cannot open the " + dec->name + " decoder (" + av_error(e) + ")");
  const int w = s->codecpar->width, h = s->codecpar->height;
  if (image_detail::over_pixel_limit(uint64_t(std::max(w, 0)), uint64_t(std::max(h, 0)), options.max_pixels))
    throw Error(Errc::limit_exceeded, path + ": " + extent_text(w, h) + " frames are over the limit of " +
                                          std::to_string(options.max_pixels) + " pixels");
  m.packet.reset(av_packet_alloc());
  m.frame.reset(av_frame_alloc());
  if (!m.packet || !m.frame) throw Error(Errc::out_of_memory, path + ": cannot allocate a packet");

  VideoInfo& in = m.info;
  const int32_t* matrix = nullptr;
#if LIBAVFORMAT_VERSION_INT >= AV_VERSION_INT(60, 15, 100)  // stream side data moved to codecpar
  if (const AVPacketSideData* sd = av_packet_side_data_get(s->codecpar->coded_side_data, s->codecpar->nb_coded_side_data,
                                                           AV_PKT_DATA_DISPLAYMATRIX);
      sd && sd->size >= 9 * sizeof(int32_t))
    matrix = reinterpret_cast<const int32_t*>(sd->data);
#else
  size_t matrix_size = 0;
  matrix = reinterpret_cast<const int32_t*>(av_stream_get_side_data(s, AV_PKT_DATA_DISPLAYMATRIX, &matrix_size));
  if (matrix_size < 9 * sizeof(int32_t)) matrix = nullptr;
#endif
  const int orientation = display_orientation(matrix);
  in.orientation = orientation == 0 ? 1 : orientation;
  in.rotation_applied = options.autorotate && in.orientation != 1;
  m.stream_orientation = orientation;
  if (options.autorotate && orientation == 0) {
    m.warn("the display matrix turns frames by " + std::to_string(-av_display_rotation_get(matrix)) +
           " degrees, not a multiple of 90: frames are left as stored");
    m.odd_rotation_warned = true;
  }
  const bool swap = in.rotation_applied && swaps_axes(in.orientation);
  in.width = swap ? h : w;
  in.height = swap ? w : h;
  const AVRational sar = av_guess_sample_aspect_ratio(raw, s, nullptr);
  if (sar.num > 0 && sar.den > 0 && sar.num != sar.den) {
    AVRational r = av_make_q(swap ? sar.den : sar.num, swap ? sar.num : sar.den);  // turned with the frame
    av_reduce(&r.num, &r.den, r.num, r.den, 1 << 20);
    in.sar_num = r.num, in.sar_den = r.den;
  }
  const AVRational fr = s->avg_frame_rate.num > 0 ? s->avg_frame_rate : s->r_frame_rate;
  in.fps = fr.num > 0 && fr.den > 0 ? av_q2d(fr) : 0;
  if (s->duration != AV_NOPTS_VALUE) in.duration_s = double(s->duration) * av_q2d(s->time_base);
  else if (raw->duration != AV_NOPTS_VALUE) in.duration_s = double(raw->duration) / AV_TIME_BASE;
  in.frame_count = s->nb_frames > 0 ? s->nb_frames : 0;
  in.container = raw->iformat && raw->iformat->name ? raw->iformat->name : "";
  in.codec = dec->name;
}

const VideoInfo& VideoReader::info() const { return impl_->info; }
int64_t VideoReader::frames_decoded() const { return impl_->decoded; }
int64_t VideoReader::corrupt_packets() const { return impl_->corrupt_packets; }
int64_t VideoReader::corrupt_frames() const { return impl_->corrupt_frames; }
int64_t VideoReader::timestamps_repaired() const { return impl_->repaired; }
std::vector<std::string> VideoReader::take_warnings() { return std::exchange(impl_->warnings, {}); }

bool VideoReader::read(VideoFrame& out, const FrameFilter& keep) {
  Impl& m = *impl_;
  while (m.next_decoded()) {
    if (!m.guard.refused.empty()) throw refused_error(m.path, m.guard.refused);
    const int64_t index = m.decoded++;
    const double pts = m.pts_of(m.frame.get(), index);
    if (keep && !keep(index, pts)) {
      av_frame_unref(m.frame.get());
      continue;
    }
    try {
      m.convert(m.frame.get(), out.image);
    } catch (...) {
      av_frame_unref(m.frame.get());
      throw;
    }
    av_frame_unref(m.frame.get());
    out.index = index;
    out.pts_s = pts;
    return true;
  }
  return false;
}


}  // namespace fovea
