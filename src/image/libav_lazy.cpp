// FFmpeg loaded on first use, for the programs that link fovea's static stages: the CLI
// (fovea-main) and the Python module (CMake target fovea_libav_lazy, src/image/CMakeLists.txt).
// These are definitions of the 44 libav*/libswscale functions the stages call
// (src/video/reader.cpp, src/image/libav*.cpp), linked ahead of the static libraries, so the
// linker resolves the stages' calls here and (with --as-needed) records no libav* library. Each
// function dlopen()s FFmpeg once, on the first call that needs it, and forwards to the real one.
//
// Why: FFmpeg brings 124 of the 144 shared libraries fovea-main would otherwise load at exec
// (libavformat's network stacks, libavcodec's codecs), and the dynamic loader binds ~39 K
// symbols across them before main(): `fovea-main --version` took 45-81 ms with them and 12-27 ms
// without, and a one-shot `fovea encode` of a JPEG, which never touches FFmpeg, ~50 ms more at
// the median (bench/results/oneshot/2026-12-02_zen4_f654f0f23c-7.json). The library's own targets, the tests and the fuzz
// targets link FFmpeg as before.
//
// Each definition repeats the prototype of FFmpeg's header, included above it: a definition that
// differs from the header is a compile error (C functions cannot be overloaded), so the
// forwarders cannot drift from the FFmpeg the build is compiled against, whose major versions
// also name the libraries loaded (libavformat.so.59 for FFmpeg 5.1). The definitions are hidden:
// they resolve the program's own calls and are never exported, so FFmpeg's libraries, once
// loaded, bind to one another, not to these.
//
// A failed load is one fovea::Error (Errc::unsupported, naming the library and dlerror()),
// thrown from the call that needed FFmpeg: the video reader's or the still decoder's first call,
// so the CLI prints one `fovea: error:` line and Python raises an exception with that message.
// The functions that free or release (av_free, av_frame_free, avformat_close_input, ...) never
// load FFmpeg: before it is loaded nothing they could free exists. av_log_set_level before the
// load is remembered and applied by the load.
//
// A new FFmpeg call in a stage needs its forwarder here. Without one, the linker resolves that
// call from libavformat.so and records FFmpeg again, silently; Cli.FfmpegIsLoadedOnFirstUse and
// tests/python's test_ffmpeg_is_loaded_on_first_use then fail (the program no longer starts, or
// `import fovea` maps libavformat).
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
#include <libavutil/rational.h>
#include <libswscale/swscale.h>
}

#include <dlfcn.h>

#include <atomic>
#include <climits>
#include <mutex>
#include <string>

#include "fovea/error.hpp"

namespace {

#define FOVEA_STR2(x) #x
#define FOVEA_STR(x) FOVEA_STR2(x)
constexpr const char* kFormatLib = "libavformat.so." FOVEA_STR(LIBAVFORMAT_VERSION_MAJOR);
constexpr const char* kScaleLib = "libswscale.so." FOVEA_STR(LIBSWSCALE_VERSION_MAJOR);

struct Libs {
  void* format = nullptr;  // libavformat and, through its dependencies, libavcodec and libavutil
  void* scale = nullptr;   // libswscale
};

std::atomic<bool> g_loaded{false};
std::atomic<int> g_log_level{INT_MIN};  // av_log_set_level before the load; INT_MIN: none
std::mutex g_load_mutex;
Libs g_libs;

void* open_lib(const char* soname) {
  void* h = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = ::dlerror();
    throw fovea::Error(fovea::Errc::unsupported,
                       std::string("FFmpeg could not be loaded (") + (why ? why : soname) +
                           "): install Debian's libavformat" FOVEA_STR(LIBAVFORMAT_VERSION_MAJOR) " and libswscale" FOVEA_STR(
                               LIBSWSCALE_VERSION_MAJOR) " packages for video and for stills other than PNG and JPEG");
  }
  return h;
}

const Libs& libs() {
  if (g_loaded.load(std::memory_order_acquire)) return g_libs;
  std::lock_guard lock(g_load_mutex);
  if (!g_loaded.load(std::memory_order_relaxed)) {
    void* format = open_lib(kFormatLib);
    void* scale = nullptr;
    try {
      scale = open_lib(kScaleLib);
    } catch (...) {
      ::dlclose(format);
      throw;
    }
    g_libs = {format, scale};
    using SetLevel = void (*)(int);
    if (const int level = g_log_level.load(); level != INT_MIN) {
      if (auto* set = reinterpret_cast<SetLevel>(::dlsym(format, "av_log_set_level"))) set(level);
    }
    g_loaded.store(true, std::memory_order_release);
  }
  return g_libs;
}

// The real function `name`, of the type F of its declaration in FFmpeg's header.
template <typename F>
F real(const char* name) {
  const Libs& l = libs();
  void* p = ::dlsym(l.format, name);
  if (!p) p = ::dlsym(l.scale, name);
  if (!p)
    throw fovea::Error(fovea::Errc::unsupported, std::string("FFmpeg's libraries (") + kFormatLib + ", " + kScaleLib +
                                                     ") lack " + name + ": not the FFmpeg fovea was built against");
  return reinterpret_cast<F>(p);
}

}  // namespace

#define FOVEA_HIDDEN __attribute__((visibility("hidden")))
// A forwarder: loads FFmpeg if needed, looks the function up once, calls it.
#define FOVEA_FORWARD(ret, name, params, args)                   \
  extern "C" FOVEA_HIDDEN ret name params {                      \
    static const auto fn = real<decltype(&::name)>(#name);       \
    return fn args;                                              \
  }
// A releasing function: a no-op until FFmpeg is loaded (nothing it could release exists yet).
#define FOVEA_RELEASE(name, params, args)                        \
  extern "C" FOVEA_HIDDEN void name params {                     \
    if (!g_loaded.load(std::memory_order_acquire)) return;       \
    static const auto fn = real<decltype(&::name)>(#name);       \
    fn args;                                                     \
  }

// libavutil
FOVEA_FORWARD(double, av_display_rotation_get, (const int32_t matrix[9]), (matrix))
FOVEA_FORWARD(AVFrame*, av_frame_alloc, (void), ())
FOVEA_RELEASE(av_frame_free, (AVFrame** frame), (frame))
FOVEA_FORWARD(int, av_frame_get_buffer, (AVFrame* frame, int align), (frame, align))
FOVEA_FORWARD(AVFrameSideData*, av_frame_get_side_data, (const AVFrame* frame, enum AVFrameSideDataType type),
              (frame, type))
FOVEA_RELEASE(av_frame_unref, (AVFrame* frame), (frame))
FOVEA_RELEASE(av_free, (void* ptr), (ptr))
FOVEA_RELEASE(av_freep, (void* ptr), (ptr))
FOVEA_FORWARD(const char*, av_get_pix_fmt_name, (enum AVPixelFormat pix_fmt), (pix_fmt))
FOVEA_FORWARD(void*, av_malloc, (size_t size), (size))
FOVEA_FORWARD(const AVPixFmtDescriptor*, av_pix_fmt_desc_get, (enum AVPixelFormat pix_fmt), (pix_fmt))
FOVEA_FORWARD(int, av_reduce, (int* dst_num, int* dst_den, int64_t num, int64_t den, int64_t max),
              (dst_num, dst_den, num, den, max))
FOVEA_FORWARD(char*, av_strdup, (const char* s), (s))
FOVEA_FORWARD(int, av_strerror, (int errnum, char* errbuf, size_t errbuf_size), (errnum, errbuf, errbuf_size))

extern "C" FOVEA_HIDDEN void av_log_set_level(int level) {
  if (!g_loaded.load(std::memory_order_acquire)) {
    std::lock_guard lock(g_load_mutex);
    if (!g_loaded.load(std::memory_order_relaxed)) {
      g_log_level.store(level);  // applied by the load
      return;
    }
  }
  static const auto fn = real<decltype(&::av_log_set_level)>("av_log_set_level");
  fn(level);
}

// libavcodec
FOVEA_FORWARD(int, av_codec_is_decoder, (const AVCodec* codec), (codec))
FOVEA_FORWARD(const AVCodec*, av_codec_iterate, (void** opaque), (opaque))
FOVEA_FORWARD(int, av_new_packet, (AVPacket* pkt, int size), (pkt, size))
FOVEA_FORWARD(AVPacket*, av_packet_alloc, (void), ())
FOVEA_RELEASE(av_packet_free, (AVPacket** pkt), (pkt))
FOVEA_RELEASE(av_packet_unref, (AVPacket* pkt), (pkt))
FOVEA_FORWARD(AVCodecContext*, avcodec_alloc_context3, (const AVCodec* codec), (codec))
FOVEA_FORWARD(const AVCodec*, avcodec_find_decoder, (enum AVCodecID id), (id))
FOVEA_RELEASE(avcodec_free_context, (AVCodecContext** avctx), (avctx))
FOVEA_FORWARD(int, avcodec_open2, (AVCodecContext* avctx, const AVCodec* codec, AVDictionary** options),
              (avctx, codec, options))
FOVEA_FORWARD(int, avcodec_parameters_to_context, (AVCodecContext* codec, const AVCodecParameters* par), (codec, par))
FOVEA_FORWARD(int, avcodec_receive_frame, (AVCodecContext* avctx, AVFrame* frame), (avctx, frame))
FOVEA_FORWARD(int, avcodec_send_packet, (AVCodecContext* avctx, const AVPacket* avpkt), (avctx, avpkt))

// libavformat
FOVEA_FORWARD(int, av_find_best_stream,
              (AVFormatContext* ic, enum AVMediaType type, int wanted_stream_nb, int related_stream,
               const AVCodec** decoder_ret, int flags),
              (ic, type, wanted_stream_nb, related_stream, decoder_ret, flags))
FOVEA_FORWARD(AVRational, av_guess_sample_aspect_ratio, (AVFormatContext* format, AVStream* stream, AVFrame* frame),
              (format, stream, frame))
FOVEA_FORWARD(int, av_read_frame, (AVFormatContext* s, AVPacket* pkt), (s, pkt))
FOVEA_FORWARD(uint8_t*, av_stream_get_side_data,
              (const AVStream* stream, enum AVPacketSideDataType type, size_t* size), (stream, type, size))
FOVEA_FORWARD(AVFormatContext*, avformat_alloc_context, (void), ())
FOVEA_RELEASE(avformat_close_input, (AVFormatContext** s), (s))
FOVEA_FORWARD(int, avformat_find_stream_info, (AVFormatContext* ic, AVDictionary** options), (ic, options))
FOVEA_FORWARD(int, avformat_open_input,
              (AVFormatContext** ps, const char* url, const AVInputFormat* fmt, AVDictionary** options),
              (ps, url, fmt, options))
FOVEA_FORWARD(AVIOContext*, avio_alloc_context,
              (unsigned char* buffer, int buffer_size, int write_flag, void* opaque,
               int (*read_packet)(void* opaque, uint8_t* buf, int buf_size),
               int (*write_packet)(void* opaque, uint8_t* buf, int buf_size),
               int64_t (*seek)(void* opaque, int64_t offset, int whence)),
              (buffer, buffer_size, write_flag, opaque, read_packet, write_packet, seek))
FOVEA_RELEASE(avio_context_free, (AVIOContext** s), (s))
FOVEA_FORWARD(int, avio_open2,
              (AVIOContext** s, const char* url, int flags, const AVIOInterruptCB* int_cb, AVDictionary** options),
              (s, url, flags, int_cb, options))

// libswscale
FOVEA_RELEASE(sws_freeContext, (struct SwsContext* swsContext), (swsContext))
FOVEA_FORWARD(struct SwsContext*, sws_getCachedContext,
              (struct SwsContext* context, int srcW, int srcH, enum AVPixelFormat srcFormat, int dstW, int dstH,
               enum AVPixelFormat dstFormat, int flags, SwsFilter* srcFilter, SwsFilter* dstFilter,
               const double* param),
              (context, srcW, srcH, srcFormat, dstW, dstH, dstFormat, flags, srcFilter, dstFilter, param))
FOVEA_FORWARD(const int*, sws_getCoefficients, (int colorspace), (colorspace))
FOVEA_FORWARD(int, sws_scale,
              (struct SwsContext* c, const uint8_t* const srcSlice[], const int srcStride[], int srcSliceY,
               int srcSliceH, uint8_t* const dst[], const int dstStride[]),
              (c, srcSlice, srcStride, srcSliceY, srcSliceH, dst, dstStride))
FOVEA_FORWARD(int, sws_setColorspaceDetails,
              (struct SwsContext* c, const int inv_table[4], int srcRange, const int table[4], int dstRange,
               int brightness, int contrast, int saturation),
              (c, inv_table, srcRange, table, dstRange, brightness, contrast, saturation))
