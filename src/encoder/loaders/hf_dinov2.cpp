// HF transformers Dinov2Model (facebook/dinov2-*): HF ViT's embeddings and attention names
// (hf_vit_common.cpp) with `encoder.layer.N.{norm1, norm2, mlp.fc1, mlp.fc2}` and layer scale
// `layer_scale1/2.lambda1` (folded into attention.output.dense and mlp.fc2 at load), `layernorm`
// on every token; `embeddings.mask_token` is unused. The position table is the 518 px model's
// 37×37 grid; every other input size samples it bicubically at the token centres, which is
// HF's interpolate_pos_encoding (F.interpolate size=(h/P, w/P), bicubic, align_corners=False,
// no antialias) on a uniform grid. Pooled output: the normed class token (pooler_output).
// Dinov2ForImageClassification's `classifier` (class token ⊕ mean patch token) is not read.
// Exact GELU, eps 1e-6; BitImageProcessor's ImageNet mean / std unless preprocessor_config.json
// says otherwise.
// Dinov2WithRegistersModel (facebook/dinov2-with-registers-*) is the same with
// `embeddings.register_tokens` [1, R, D]: R learned tokens inserted after the class token once
// the positions are added (so they have none), attended by every token and dropped from the
// outputs (VitConfig::registers). Its interpolate_pos_encoding resamples the table with
// antialias=True, so its positions are read with PositionSampling::bicubic_antialias
// (hf_vit_common.cpp).
#include "encoder/loaders/loader.hpp"

namespace fovea::encoder_detail {
namespace {

const HfVitNaming kNaming{"HF DINOv2", "hf_dinov2", VitFamily::dinov2, "norm1.weight", "norm1", "norm2",
                          "mlp.fc1",   "mlp.fc2",   /*layer_scale=*/true, /*registers=*/true, 1e-6f,
                          {"dinov2", "dinov2_with_registers"}};

class HfDinov2Loader final : public ModelLoader {
 public:
  std::string_view name() const override { return kNaming.naming; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && hf_vit_prefix(*c.weights, kNaming).has_value(); }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    auto m = std::make_shared<VitModel::Impl>();
    Lookup L(*ck.weights);
    hf_vit_load(ck, kNaming, imagenet_contract("DINOv2 defaults: ImageNet mean/std (no preprocessor_config.json)"), L, *m);
    L.finish(kNaming.what);
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_dinov2_loader() {
  static const HfDinov2Loader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
