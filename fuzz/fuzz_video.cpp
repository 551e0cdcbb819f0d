// The video demuxer and decoder path users feed downloaded clips to: VideoReader over bytes in
// memory (VideoReader::open_bytes, a custom AVIOContext: ffmpeg probes the container from the
// bytes, as for a file), every frame decoded and converted to RGB planes, and the first frames
// through a patches-only VideoSession (change test, pyramid update, allocation, extraction; a
// size change mid-stream is a refresh). Bad input must give a fovea::Error, or frames with
// corrupt packets counted and skipped; anything else escaping is a finding, as are crashes,
// sanitizer reports, leaks, hangs and runaway memory.
//
// libav* itself is Debian's build (not instrumented): coverage feedback comes from fovea's
// side, so the fuzzer mostly mutates blindly inside the containers; ASan still sees every
// access fovea makes to the frames ffmpeg hands back.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fovea/exec.hpp"
#include "fovea/video.hpp"
#include "fuzz_util.hpp"

namespace {

constexpr int kMaxFrames = 12;             // decoded and converted per input
constexpr int kSessionFrames = 4;          // of those, through the session
constexpr uint64_t kMaxPixels = 1u << 20;  // a bigger frame is refused (Error(limit_exceeded))
constexpr uint64_t kSessionPixels = 256 * 256;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fovea::quiet_ffmpeg_log();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fovea::Executor exec(fovea::ExecConfig{.threads = 1});
  fovea::fuzz::expect_only_fovea_errors([&] {
    fovea::VideoReaderOptions ro;
    ro.threads = 1;  // no decoder threads: deterministic, and each input stays on one core
    ro.max_pixels = kMaxPixels;
    ro.max_consecutive_errors = 64;
    fovea::VideoReader reader = fovea::VideoReader::open_bytes(std::span(data, size), "fuzz.video", ro);
    const fovea::VideoInfo& info = reader.info();
    if (uint64_t(info.width) * uint64_t(info.height) > kMaxPixels) __builtin_trap();  // open() promised

    fovea::VideoParams vp;
    vp.tokenize.patch_px = 16;
    vp.tokenize.alloc.budget_tokens = 32;
    vp.reuse = fovea::Reuse::exact;
    fovea::VideoSession session(vp, nullptr, exec);
    fovea::VideoFrame frame;
    int64_t last_index = -1;
    for (int n = 0; n < kMaxFrames; ++n) {
      if (!reader.read(frame)) break;
      const fovea::ImageU8& im = frame.image;
      if (im.channels() != 3 || im.width() < 1 || im.height() < 1 ||
          uint64_t(im.width()) * uint64_t(im.height()) > kMaxPixels || frame.index <= last_index)
        __builtin_trap();
      last_index = frame.index;
      if (n < kSessionFrames && uint64_t(im.width()) * uint64_t(im.height()) <= kSessionPixels) {
        fovea::Query q;
        q.fixations.push_back({float(im.width()) / 2, float(im.height()) / 2, 1.0f});
        fovea::FrameResult r = session.process(std::move(frame.image), q, frame.index, frame.pts_s);
        if (r.batch.size() > vp.tokenize.alloc.budget_tokens) __builtin_trap();
        frame.image = std::move(r.recycled);
      }
    }
    (void)reader.take_warnings();
  });
  return 0;
}
