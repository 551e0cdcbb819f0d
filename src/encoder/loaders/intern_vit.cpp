// InternViT (InternVisionModel: OpenGVLab/InternViT-300M-448px(-V2_5), the vision tower of
// InternVL 2 / 2.5 / 3 chat checkpoints under `vision_model.`): `embeddings.class_embedding`
// [1, 1, D], `embeddings.patch_embedding` (conv with bias), `embeddings.position_embedding`
// [1, 1 + G·G, D] (resized with plain bicubic, F.interpolate(size=(H, W), align_corners=False)),
// `encoder.layers.N.{norm1, attn.qkv [3D, D] (q|k|v), attn.proj, ls1 [D], norm2, mlp.fc1,
// mlp.fc2, ls2 [D]}` with the layer scales folded into attn.proj / mlp.fc2, and no final norm:
// `last_hidden_state` is the last block's output and pooler_output its class token. LayerNorm
// (config.json norm_type layer_norm, eps layer_norm_eps, default 1e-6), hidden_act from
// config.json (exact GELU by default).
//
// InternVL's projector (`mlp1`: pixel shuffle of 2×2 neighbouring tokens, then an MLP) needs a
// uniform grid of tokens, which foveated tokens are not: the tower's embeddings are the output
// and `mlp1` is counted as ignored. Refused by name: RMSNorm (norm_type rms_norm, InternViT-6B)
// and query/key normalisation (qk_normalization, InternViT-6B).
#include <cstring>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

// The tower's prefix: an HF vision prefix whose blocks have InternViT's fused attn.qkv.
std::optional<std::string> intern_prefix(const WeightSource& w) {
  const std::optional<std::string> p = hf_vision_prefix(w);
  if (p && w.info(*p + "encoder.layers.0.attn.qkv.weight") && w.info(*p + "embeddings.position_embedding"))
    return p;
  return std::nullopt;
}

const FusedBlockNames kBlock{"norm1", "attn.qkv.weight", "attn.qkv.bias", "attn.proj", "norm2", "mlp.fc1",
                             "mlp.fc2", "ls1", "ls2", /*ls_required=*/true};

class InternVitLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "intern_vit"; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && intern_prefix(*c.weights).has_value(); }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    const std::string p = *intern_prefix(w);
    const nlohmann::json& cfg = ck.config;
    const std::pair<std::string, const char*> foreign[] = {
        {p + "encoder.layers.0.attn.q_norm.weight", "query/key normalisation (qk_normalization: InternViT-6B) is not supported"},
    };
    for (const auto& [name, why] : foreign)
      if (w.info(name)) throw Error(Errc::unsupported, "'" + path + "': InternViT with " + name + ": " + why);
    if (auto nt = cfg_get<std::string>(cfg, {"norm_type"}); nt && *nt != "layer_norm")
      throw Error(Errc::unsupported, "'" + path + "': InternViT norm_type '" + *nt +
                                         "' is not supported (layer_norm is; rms_norm is InternViT-6B's)");
    if (!w.info(p + "encoder.layers.0.norm1.bias"))
      throw Error(Errc::unsupported, "'" + path + "': InternViT without " + p +
                                         "encoder.layers.0.norm1.bias (RMSNorm: InternViT-6B) is not supported");

    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.family = VitFamily::vit;
    c.naming = "intern_vit";
    patch_embedding_dims(w, p + "embeddings.patch_embedding.weight", c);
    const std::string pos_name = p + "embeddings.position_embedding";
    class_token_tower_dims(w, cfg, pos_name, p + "encoder.layers.", "mlp.fc1", c);
    c.class_token = true;
    c.patch_bias = true;
    c.pre_norm = false;
    c.final_norm = FinalNorm::none;
    c.act = Activation::gelu_erf;
    if (auto a = cfg_get<std::string>(cfg, {"hidden_act"})) c.act = parse_hf_act(*a, path);
    c.ln_eps = float(cfg_get<double>(cfg, {"layer_norm_eps"}).value_or(1e-6));
    check_dims(cfg, path, c, p + "encoder.layers.N");
    c.input = contract_from_preprocessor(ck.preprocessor,
                                         imagenet_contract("InternVL's ImageNet mean/std (no preprocessor_config.json)"));

    const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid;
    Lookup L(w);
    m->patch_w = L.get(p + "embeddings.patch_embedding.weight", {D, C, P, P}, true, {D, C * P * P});
    m->patch_b = L.get(p + "embeddings.patch_embedding.bias", {D});
    m->class_emb = L.get(p + "embeddings.class_embedding", {1, 1, D}, true, {D});
    split_class_position(L.get(pos_name, {1, G * G + 1, D}), D, *m);
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
      m->layers.push_back(load_fused_block(L, l, kBlock, c));
    }
    L.finish("InternViT");
    const std::string root = p.substr(0, p.size() - std::string_view("vision_model.").size());
    for (const std::string& n : w.names())
      if (n.rfind(root + "mlp1.", 0) == 0) {
        c.ignored_projector = "InternVL's mlp1: pixel shuffle of 2x2 neighbours, then an MLP";
        break;
      }
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& intern_vit_loader() {
  static const InternVitLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
