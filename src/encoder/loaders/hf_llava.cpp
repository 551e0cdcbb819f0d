// HF LlavaForConditionalGeneration checkpoints (single-file .safetensors): the vision tower
// (`[model.]vision_tower.vision_model.*`, CLIP or SigLIP) and `[model.]multi_modal_projector.
// linear_1/2`; the language model's tensors are ignored. config.json says which hidden state the
// projector reads and how:
//   vision_feature_layer (default -2): an index into HF's hidden_states, which hold the encoder
//     input (after CLIP's pre_layrnorm) and then every block's output, so index k runs k blocks
//     and a negative k means L + 1 + k. No post_layernorm: hidden_states never include it.
//   vision_feature_select_strategy: "default" drops the class token (fovea's embeddings never
//     hold it); "full" keeps it, which only towers without a class token can do here.
//   projector_hidden_act (default "gelu", the erf form).
#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

std::optional<std::string> projector_prefix(const WeightSource& w) {
  return shortest_prefix_of(w, "multi_modal_projector.linear_1.weight");
}

class HfLlavaLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "hf_llava"; }
  bool accepts(const Checkpoint& c) const override {
    return !c.gguf && hf_vision_prefix(*c.weights) && projector_prefix(*c.weights);
  }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    const std::string vp = *hf_vision_prefix(w);
    const bool clip = w.info(vp + "embeddings.class_embedding").has_value();
    auto m = std::make_shared<VitModel::Impl>();
    hf_configure(ck, clip, *m);
    VitConfig& c = m->config;
    c.naming = "hf_llava";
    const nlohmann::json& top = ck.full_config;
    const char* file = "config.json";

    // ---- which hidden state the projector reads ---------------------------------------------
    int layer = -2;
    if (auto it = top.find("vision_feature_layer"); it != top.end() && !it->is_null()) {
      if (it->is_array()) {
        if (it->size() != 1)
          throw Error(Errc::unsupported, "'" + path + "': config.json vision_feature_layer lists " +
                                             std::to_string(it->size()) +
                                             " layers; concatenated features from several layers are not supported");
        layer = cfg_get<int>(nlohmann::json{{"v", (*it)[0]}}, {"v"}, file).value();
      } else {
        layer = cfg_get<int>(top, {"vision_feature_layer"}, file).value();
      }
    }
    const int L = c.layers;
    const int blocks = layer < 0 ? L + 1 + layer : layer;
    if (blocks < 0 || blocks > L)
      throw Error(Errc::corrupt_data, "'" + path + "': config.json vision_feature_layer " + std::to_string(layer) +
                                          " is outside the tower's " + std::to_string(L) + " blocks");
    const std::string strategy = cfg_get<std::string>(top, {"vision_feature_select_strategy"}, file).value_or("default");
    if (strategy != "default" && !(strategy == "full" && !c.class_token))
      throw Error(Errc::unsupported, "'" + path + "': vision_feature_select_strategy '" + strategy +
                                         "' is not supported here (fovea's tokens never include the class token: "
                                         "'default', or 'full' for towers without one)");
    c.layers_in_checkpoint = L;
    c.layers = blocks;
    c.final_norm = FinalNorm::none;
    c.attention_pool = false;
    c.projection_dim = 0;
    c.projector = ProjectorType::mlp;
    c.projector_act = parse_hf_act(cfg_get<std::string>(top, {"projector_hidden_act"}, file).value_or("gelu"), path);

    // ---- tensors: the tower's first `blocks` blocks, then the projector ---------------------
    const int64_t D = c.hidden, M = c.mlp, C = c.channels, P = c.patch_px, G = c.grid;
    Lookup L2(w);
    m->patch_w = L2.get(vp + "embeddings.patch_embedding.weight", {D, C, P, P}, true, {D, C * P * P});
    if (c.patch_bias) m->patch_b = L2.get(vp + "embeddings.patch_embedding.bias", {D});
    if (c.class_token) {
      m->class_emb = L2.get(vp + "embeddings.class_embedding", {D});
      split_class_position(L2.get(vp + "embeddings.position_embedding.weight", {G * G + 1, D}), D, *m);
      m->pre_w = L2.get(vp + "pre_layrnorm.weight", {D});
      m->pre_b = L2.get(vp + "pre_layrnorm.bias", {D});
    } else {
      m->pos_grid = L2.get(vp + "embeddings.position_embedding.weight", {G * G, D});
    }
    hf_load_blocks(L2, vp, blocks, D, M, *m);
    const std::string pp = *projector_prefix(w);
    const auto l1 = w.info(pp + "multi_modal_projector.linear_1.weight");
    const int64_t E1 = l1->shape.size() == 2 ? l1->shape[0] : 0;
    const auto l2 = w.info(pp + "multi_modal_projector.linear_2.weight");
    const int64_t E = l2 && l2->shape.size() == 2 ? l2->shape[0] : 0;
    m->mm0_w = L2.decoded(pp + "multi_modal_projector.linear_1.weight", {E1, D});
    m->mm0_b = L2.get(pp + "multi_modal_projector.linear_1.bias", {E1}, /*required=*/false);
    m->mm2_w = L2.decoded(pp + "multi_modal_projector.linear_2.weight", {E, E1});
    m->mm2_b = L2.get(pp + "multi_modal_projector.linear_2.bias", {E}, false);
    c.projector_hidden = int(E1);
    c.projector_dim = int(E);
    L2.finish("HF LLaVA");
    m->tensors_used = L2.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_llava_loader() {
  static const HfLlavaLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
