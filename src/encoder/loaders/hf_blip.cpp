// HF BLIP, BLIP-2 and InstructBLIP vision towers (BlipVisionModel, Blip2VisionModel,
// InstructBlipVisionModel, and the towers inside BlipForConditionalGeneration,
// Blip2ForConditionalGeneration, InstructBlipForConditionalGeneration under `vision_model.`):
// `embeddings.{class_embedding [1, 1, D], patch_embedding (conv with bias), position_embedding
// [1, 1 + G·G, D]}` (a parameter, not an nn.Embedding: no `.weight`),
// `encoder.layers.N.{layer_norm1, self_attn.qkv [3D, D] (q|k|v fused), self_attn.projection,
// layer_norm2, mlp.fc1, mlp.fc2}`, pre-norm blocks, and `post_layernorm` on every token:
// `last_hidden_state` is normed. The qkv bias is `self_attn.qkv.bias` [3D] (BLIP) or
// `self_attn.q_bias` and `self_attn.v_bias` [D] with no key bias (BLIP-2 / InstructBLIP's EVA
// ViT-g: q_bias | 0 | v_bias). HF's pooler_output applies post_layernorm a second time to the
// already normed class token (VitConfig::pooled_normed_twice). Positions at other sizes: plain
// bicubic (interpolate_pos_encoding). The Q-Former, the language projection, the language model
// and the text tower are ignored.
#include <cstring>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

std::optional<std::string> blip_prefix(const WeightSource& w) {
  const std::optional<std::string> p = hf_vision_prefix(w);
  if (p && w.info(*p + "encoder.layers.0.self_attn.qkv.weight") && w.info(*p + "embeddings.class_embedding"))
    return p;
  return std::nullopt;
}

class HfBlipLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "hf_blip"; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && blip_prefix(*c.weights).has_value(); }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    const std::string p = *blip_prefix(w);
    const nlohmann::json& cfg = ck.config;
    const bool split_bias = w.info(p + "encoder.layers.0.self_attn.q_bias").has_value();  // BLIP-2's EVA ViT-g

    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.family = VitFamily::vit;
    c.naming = split_bias ? "hf_blip2" : "hf_blip";
    patch_embedding_dims(w, p + "embeddings.patch_embedding.weight", c);
    const std::string pos_name = p + "embeddings.position_embedding";
    class_token_tower_dims(w, cfg, pos_name, p + "encoder.layers.", "mlp.fc1", c);
    c.class_token = true;
    c.patch_bias = true;
    c.pre_norm = false;
    c.final_norm = FinalNorm::all_tokens;
    c.pooled_normed_twice = true;
    c.act = Activation::gelu_erf;
    if (auto a = cfg_get<std::string>(cfg, {"hidden_act"})) c.act = parse_hf_act(*a, path);
    // BlipVisionConfig's default eps is 1e-5, Blip2VisionConfig's and InstructBlipVisionConfig's 1e-6.
    c.ln_eps = float(cfg_get<double>(cfg, {"layer_norm_eps"}).value_or(split_bias ? 1e-6 : 1e-5));
    check_dims(cfg, path, c, p + "encoder.layers.N");
    c.input = contract_from_preprocessor(ck.preprocessor, clip_defaults());

    const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid;
    Lookup L(w);
    m->patch_w = L.get(p + "embeddings.patch_embedding.weight", {D, C, P, P}, true, {D, C * P * P});
    m->patch_b = L.get(p + "embeddings.patch_embedding.bias", {D});
    m->class_emb = L.get(p + "embeddings.class_embedding", {1, 1, D}, true, {D});
    split_class_position(L.get(pos_name, {1, G * G + 1, D}), D, *m);
    const FusedBlockNames names{"layer_norm1", "self_attn.qkv.weight", split_bias ? nullptr : "self_attn.qkv.bias",
                                "self_attn.projection", "layer_norm2", "mlp.fc1", "mlp.fc2"};
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
      VitLayer ly = load_fused_block(L, l, names, c);
      if (split_bias) {  // q_bias | 0 | v_bias, as Blip2Attention builds it
        const Tensor qb = L.get(l + "self_attn.q_bias", {D}), vb = L.get(l + "self_attn.v_bias", {D});
        if (present(qb) && present(vb)) {
          ly.qkv_b = Tensor(DType::f32, {3 * D});  // zero-filled: the keys have no bias
          std::memcpy(ly.qkv_b.data<float>(), qb.data<float>(), size_t(D) * 4);
          std::memcpy(ly.qkv_b.data<float>() + 2 * D, vb.data<float>(), size_t(D) * 4);
        }
      }
      m->layers.push_back(std::move(ly));
    }
    m->post_w = L.get(p + "post_layernorm.weight", {D});
    m->post_b = L.get(p + "post_layernorm.bias", {D});
    L.finish(split_bias ? "HF BLIP-2 vision" : "HF BLIP vision");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_blip_loader() {
  static const HfBlipLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
