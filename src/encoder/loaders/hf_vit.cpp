// HF transformers ViTModel / ViTForImageClassification (google/vit-*): `[vit.]embeddings.*`,
// `encoder.layer.N.{layernorm_before, attention.attention.{query,key,value},
// attention.output.dense, layernorm_after, intermediate.dense, output.dense}`, `layernorm`,
// ViTModel's optional `pooler.dense` (tanh) and the classification head's `classifier`.
// Exact GELU, layer_norm_eps 1e-12 (config.json's when present); ViTImageProcessor's 0.5/0.5
// unless preprocessor_config.json says otherwise.
#include "encoder/loaders/loader.hpp"

namespace fovea::encoder_detail {
namespace {

const HfVitNaming kNaming{"HF ViT",          "hf_vit",          VitFamily::vit,       "layernorm_before.weight",
                          "layernorm_before", "layernorm_after", "intermediate.dense", "output.dense",
                          /*layer_scale=*/false, /*registers=*/false, 1e-12f,         {"vit", "vit_msn"}};

class HfVitLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return kNaming.naming; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && hf_vit_prefix(*c.weights, kNaming).has_value(); }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    auto m = std::make_shared<VitModel::Impl>();
    InputContract defaults;  // ViTImageProcessor: IMAGENET_STANDARD_MEAN / _STD
    defaults.mean = {0.5f, 0.5f, 0.5f};
    defaults.std = {0.5f, 0.5f, 0.5f};
    defaults.source = "HF ViT defaults 0.5/0.5 (no preprocessor_config.json)";
    Lookup L(*ck.weights);
    const std::string p = hf_vit_load(ck, kNaming, defaults, L, *m);
    const int64_t D = m->config.hidden;
    if (L.has(p + "pooler.dense.weight") || L.has(p + "pooler.dense.bias")) {
      m->pooler_w = L.get(p + "pooler.dense.weight", {D, D});
      m->pooler_b = L.get(p + "pooler.dense.bias", {D});
    }
    // ViTForImageClassification: `classifier` beside the `vit.` model.
    const std::string root = p.empty() ? "" : p.substr(0, p.find_last_of('.', p.size() - 2) + 1);
    if (const auto hw = ck.weights->info(root + "classifier.weight"); hw && hw->shape.size() == 2) {
      m->config.num_classes = checked_dim(hw->shape[0], 1 << 20, ck.weights->path(), "the class count");
      m->head_w = L.get(root + "classifier.weight", {hw->shape[0], D});
      m->head_b = L.get(root + "classifier.bias", {hw->shape[0]});
    }
    L.finish(kNaming.what);
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_vit_loader() {
  static const HfVitLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
