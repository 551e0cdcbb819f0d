// fovea video with a native-resolution tower (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the sampled frames
// in chunks, each chunk one video as the family's video processor gives it (native_video_size,
// frames paired by the temporal patch), written as projected, video_grid_thw, mrope_positions
// and deepstack_* with each chunk's rows, frames and times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/exec.hpp"

namespace fovea::cli {

struct NativeVideoArgs {
  std::string model_spec, video, output;
  Precision asked = Precision::fp32, precision = Precision::fp32;
  int every = 0;             // every N-th decoded frame (0: see fps)
  double fps = 0;            // frames sampled at this rate (0: every frame, or --every)
  int64_t max_frames = 0;    // 0: every sampled frame
  int chunk_frames = 16;     // frames a chunk (a multiple of the temporal patch); 0: the whole clip
  bool cap_pixels_per_frame = false;  // Qwen3-VL: qwen-vl-utils' per-frame cap
  bool json = false, autorotate = true;
  uint64_t max_pixels = 0;   // a larger decoded frame is refused
  std::vector<std::string> refused;  // options given that a native tower's video does not take
};

int run_native_video(const VitModel& model, const NativeVideoArgs& a, Executor& ex);

}  // namespace fovea::cli
