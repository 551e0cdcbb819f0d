// fovea encode with a native-resolution tower (Qwen2-VL, Qwen2.5-VL): the image as native images
// (a base view and full-resolution windows on the query, or the whole image with --uniform),
// written as projected, embeddings, image_grid_thw, mrope_positions and the windows' boxes.
// With a SigLIP 2 NaFlex tower: the processor's encode (--uniform: resized to fit
// max_num_patches, aspect kept) or its windows foveation, written as an embeddings file.
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

// SigLIP 2 NaFlex (is_naflex): --uniform runs prepare_naflex + encode_naflex with
// `max_num_patches` (0: preprocessor_config.json's); otherwise plan_native_windows +
// naflex_window_inputs + encode_naflex with `budget` patches (the base view first).
struct NaflexEncodeArgs {
  std::string model_spec, image, output;
  Query query;
  int budget = 0;           // patches (windows); 0: the model's max_num_patches
  int max_num_patches = 0;  // --uniform; 0: the model's
  bool uniform = false;
  Precision asked = Precision::fp32, precision = Precision::fp32;
  bool json = false;
  LoadOptions load;
};

int run_naflex_encode(const VitModel& model, const NaflexEncodeArgs& a, Executor& ex);

}  // namespace fovea::cli
