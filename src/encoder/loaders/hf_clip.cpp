// HF CLIPVisionModel / CLIPModel (and the CLIP tower inside VLM checkpoints): `vision_model.*`
// with a class embedding, pre_layrnorm, and `visual_projection` beside the tower when present.
#include "encoder/loaders/loader.hpp"

namespace fovea::encoder_detail {
namespace {

class HfClipLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "hf_clip"; }
  bool accepts(const Checkpoint& c) const override {
    if (c.gguf) return false;
    const auto p = hf_vision_prefix(*c.weights);
    return p && c.weights->info(*p + "embeddings.class_embedding").has_value();
  }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    auto m = std::make_shared<VitModel::Impl>();
    const std::string p = hf_configure(ck, /*clip=*/true, *m);
    const std::string root = p.ends_with("vision_model.") ? p.substr(0, p.size() - 13) : "";
    const int64_t D = m->config.hidden;
    Lookup L(*ck.weights);
    hf_load_tower(L, p, *m);
    m->pre_w = L.get(p + "pre_layrnorm.weight", {D});
    m->pre_b = L.get(p + "pre_layrnorm.bias", {D});
    if (const auto pj = ck.weights->info(root + "visual_projection.weight"); pj && pj->shape.size() == 2) {
      m->config.projection_dim = int(pj->shape[0]);
      m->proj_w = L.get(root + "visual_projection.weight", {pj->shape[0], D});
    }
    L.finish("HF CLIP vision");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_clip_loader() {
  static const HfClipLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
