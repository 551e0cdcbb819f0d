// Private to src/video: the windows foveation of a video (VideoSession with
// tokenize.foveation windows; the contract is in fovea/video.hpp).
//
// Per frame: the change test and the reference pyramid as the mixed-scale session keeps them;
// a window plan (fovea/windows.hpp) kept across frames with hysteresis; every window and the base
// view encoded as a sequence of its own. A window whose box, grid and patches are the previous
// frame's (its pixels did not change beyond the change test's threshold) hands on its previous
// outputs, bit for bit; a changed or new one is encoded again: with Reuse::exact every such
// window as a standalone image, all of them in one batched call (encode_batch: what
// fovea::encode_windows computes for it); with Reuse::incremental through an IncrementalEncoder
// of its own, which recomputes only the tokens of that sequence whose layer inputs moved
// (approximate; no class token). Reuse::off encodes every window of every frame.
#pragma once

#include <memory>

#include "fovea/video.hpp"

namespace fovea::video_detail {

class WindowsVideo {
 public:
  WindowsVideo(const VideoParams& params, const VitModel* model, Executor& exec);
  ~WindowsVideo();
  WindowsVideo(const WindowsVideo&) = delete;
  WindowsVideo& operator=(const WindowsVideo&) = delete;

  // One frame, encoded at once (windows are not grouped across frames).
  FrameResult process(ImageU8 frame, const Query& query, int64_t index, double pts_s);
  // The buffer of the last frame in, for the caller's next read.
  ImageU8 take_recycled();
  const PyramidU8& pyramid() const;
  const Allocation& allocation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fovea::video_detail
