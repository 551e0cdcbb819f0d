// HF SigLIP vision tower (SiglipVisionModel, and the tower inside VLM checkpoints):
// `vision_model.*` without a class embedding, a patch-embedding bias, post_layernorm on every
// token, and the optional attention-pooling `head`.
#include <algorithm>

#include "encoder/loaders/loader.hpp"

namespace fovea::encoder_detail {
namespace {

class HfSiglipLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "hf_siglip"; }
  bool accepts(const Checkpoint& c) const override {
    if (c.gguf) return false;
    const auto p = hf_vision_prefix(*c.weights);
    return p && !c.weights->info(*p + "embeddings.class_embedding").has_value();
  }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    auto m = std::make_shared<VitModel::Impl>();
    const std::string p = hf_configure(ck, /*clip=*/false, *m);
    VitConfig& c = m->config;
    const int64_t D = c.hidden, M = c.mlp;
    Lookup L(*ck.weights);
    hf_load_tower(L, p, *m);
    const std::vector<std::string> names = ck.weights->names();
    // Any head tensor means the checkpoint has the pooling head: then all of it is required.
    if (std::any_of(names.begin(), names.end(), [&](const std::string& n) { return n.rfind(p + "head.", 0) == 0; })) {
      c.attention_pool = true;
      const std::string h = p + "head.";
      m->pool_probe = L.get(h + "probe", {1, 1, D}, true, {D});
      m->pool_in_w = L.get(h + "attention.in_proj_weight", {3 * D, D});
      m->pool_in_b = L.get(h + "attention.in_proj_bias", {3 * D});
      m->pool_out_w = L.get(h + "attention.out_proj.weight", {D, D});
      m->pool_out_b = L.get(h + "attention.out_proj.bias", {D});
      m->pool_ln_w = L.get(h + "layernorm.weight", {D});
      m->pool_ln_b = L.get(h + "layernorm.bias", {D});
      m->pool_fc1_w = L.get(h + "mlp.fc1.weight", {M, D});
      m->pool_fc1_b = L.get(h + "mlp.fc1.bias", {M});
      m->pool_fc2_w = L.get(h + "mlp.fc2.weight", {D, M});
      m->pool_fc2_b = L.get(h + "mlp.fc2.bias", {D});
    }
    L.finish("HF SigLIP vision");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_siglip_loader() {
  static const HfSiglipLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
