// fovea encode with a native-resolution tower (Qwen2-VL, Qwen2.5-VL): the image as native images
// (a base view and full-resolution windows on the query, or the whole image with --uniform),
// written as projected, embeddings, image_grid_thw, mrope_positions and the windows' boxes.
#pragma once

#include <string>

#include "fovea/encoder.hpp"
#include "fovea/image.hpp"
#include "fovea/relevance.hpp"

namespace fovea::cli {

struct NativeEncodeArgs {
  std::string model_spec, image, output;
  Query query;
  int budget = 1024;  // merged tokens (windows)
  bool uniform = false;
  Precision asked = Precision::fp32, precision = Precision::fp32;
  bool json = false;
  LoadOptions load;
};

int run_native_encode(const VitModel& model, const NativeEncodeArgs& a, Executor& ex);

}  // namespace fovea::cli
