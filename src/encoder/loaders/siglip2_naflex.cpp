// SigLIP 2 NaFlex (Siglip2VisionModel): what its processor adds to the SigLIP tower hf_common.cpp
// loads. preprocessor_config.json's max_num_patches (Siglip2ImageProcessor's default 256) is the
// patch count an image is resized to fit (naflex_size); its patch_size must be the tensors'.
#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {

void naflex_configure(const Checkpoint& ck, VitConfig& c) {
  const nlohmann::json& pre = ck.preprocessor;
  const char* pf = "preprocessor_config.json";
  auto bad = [&](const std::string& why) { return Error(Errc::corrupt_data, "'" + ck.path + "': " + why); };
  int64_t n = 256;
  if (!pre.is_null() && !pre.is_object()) throw bad("preprocessor_config.json is not an object");
  if (pre.is_object()) {
    if (const auto v = cfg_get<int64_t>(pre, {"max_num_patches"}, pf)) n = *v;
    if (const auto p = cfg_get<int64_t>(pre, {"patch_size"}, pf); p && *p != c.patch_px)
      throw bad("preprocessor_config.json says patch_size = " + std::to_string(*p) + " but the tensors' patch size is " +
                std::to_string(c.patch_px));
  }
  if (n < 1 || n > (int64_t(1) << 20))
    throw bad("preprocessor_config.json's max_num_patches = " + std::to_string(n) + " is not within 1..2^20");
  c.native.max_num_patches = int(n);
}

}  // namespace fovea::encoder_detail
