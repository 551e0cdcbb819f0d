// HF PaliGemma and PaliGemma 2 checkpoints (PaliGemmaForConditionalGeneration, single-file or
// sharded): the SigLIP tower (`[model.]vision_tower.vision_model.*`, read as hf_siglip reads it)
// and `[model.]multi_modal_projector.linear` [E, D] (+ bias), one Linear per token. The projector
// reads last_hidden_state (after post_layernorm), and get_image_features divides its output by
// √(text_config.hidden_size): projected = (W·x + b) / √H, the language model's input. The scale is
// folded into W and b here. Without config.json, H is E (PaliGemma's projection_dim is the text
// model's width in every released checkpoint). The language model's tensors are ignored.
#include <cmath>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

std::optional<std::string> projector_prefix(const WeightSource& w) {
  return shortest_prefix_of(w, "multi_modal_projector.linear.weight");
}

class HfPaliGemmaLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "hf_paligemma"; }
  bool accepts(const Checkpoint& c) const override {
    if (c.gguf || !projector_prefix(*c.weights)) return false;
    const auto p = hf_vision_prefix(*c.weights);
    return p && !c.weights->info(*p + "embeddings.class_embedding").has_value();
  }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    auto m = std::make_shared<VitModel::Impl>();
    const std::string vp = hf_configure(ck, /*clip=*/false, *m);
    VitConfig& c = m->config;
    c.naming = "hf_paligemma";
    const int64_t D = c.hidden;
    Lookup L(w);
    hf_load_tower(L, vp, *m);
    // PaliGemma's tower has no pooling head (vision_use_head=False); one in the file is read.
    const std::vector<std::string> names = w.names();
    for (const std::string& n : names)
      if (n.rfind(vp + "head.", 0) == 0)
        throw Error(Errc::unsupported, "'" + path + "': a PaliGemma checkpoint whose tower has a pooling head (" + n +
                                           ") is not supported");
    const std::string pp = *projector_prefix(w);
    const auto info = w.info(pp + "multi_modal_projector.linear.weight");
    const int64_t E = info->shape.size() == 2 ? info->shape[0] : 0;
    Tensor mm0_w = L.get(pp + "multi_modal_projector.linear.weight", {E, D});
    m->mm0_b = L.get(pp + "multi_modal_projector.linear.bias", {E}, /*required=*/false);
    L.finish("HF PaliGemma");
    const nlohmann::json& top = ck.full_config;
    int64_t text_hidden = E;
    if (auto it = top.find("text_config"); it != top.end() && !it->is_null()) {
      if (!it->is_object()) throw Error(Errc::corrupt_data, "config.json: 'text_config' is not an object");
      text_hidden = cfg_get<int64_t>(*it, {"hidden_size"}, "config.json").value_or(E);
    }
    if (text_hidden < 1 || text_hidden > (int64_t(1) << 20))
      throw Error(Errc::corrupt_data, "'" + path + "': config.json text_config.hidden_size " +
                                          std::to_string(text_hidden) + " is not a model width");
    const float scale = float(1.0 / std::sqrt(double(text_hidden)));
    for (Tensor* t : {&mm0_w, &m->mm0_b})
      if (present(*t))
        for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] *= scale;
    if (present(mm0_w)) m->mm0_w = WeightMatrix(std::move(mm0_w));
    c.projector = ProjectorType::linear;
    c.projector_hidden = int(E);
    c.projector_dim = int(E);
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_paligemma_loader() {
  static const HfPaliGemmaLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
