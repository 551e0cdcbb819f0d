// fovea encode with a native-resolution tower (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): the image as native
// images (a base view and full-resolution windows on the query, or the whole image with
// --uniform), written as projected, embeddings, image_grid_thw, mrope_positions and the windows'
// boxes; or, for experiment, --foveation mixed: one sequence of merge units of mixed mip levels
// (encode_native_mixed), written with each unit's level and box.
// With a SigLIP 2 NaFlex tower: the processor's encode (--uniform: resized to fit
// max_num_patches, aspect kept) or its windows foveation, written as an embeddings file.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fovea/encoder.hpp"
#include "fovea/image.hpp"
#include "fovea/relevance.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"

namespace fovea::cli {

struct NativeEncodeArgs {
  std::string model_spec, image, output;
  Query query;
  int budget = 1024;  // merged tokens (windows)
  bool uniform = false;
  // --foveation mixed: the tokenize settings (relevance, allocation); patch size, normalisation and
  // budget are set from the model and `budget`.
  std::optional<TokenizeParams> mixed;
  Precision asked = Precision::fp32, precision = Precision::fp32;
  bool json = false;
  LoadOptions load;
};

// Writes a native encoding's file (projected, embeddings, grid_thw under `grid_name`,
// mrope_positions, deepstack_k) with `extra` tensors, atomically.
void save_native_encoding(const std::string& path, const Tensor& projected, const Tensor& embeddings,
                          const Tensor& grid_thw, const std::string& grid_name, const Tensor& mrope,
                          const std::vector<Tensor>& deepstack, const std::vector<NamedTensor>& extra,
                          const std::map<std::string, std::string>& meta);

// The "encoder" object of a native run's summary: `shapes` (e.g. {"projected": [M, E]}) with the
// model as given, its description, family and the precision it ran in.
nlohmann::json encoder_summary(const VitModel& model, const std::string& spec, Precision ran, nlohmann::json shapes);

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
