// timm VisionTransformer state dicts (vit_*, deit_* without distillation, deit3_*; timm's
// model.safetensors): `cls_token` [1, 1, D], `pos_embed` [1, 1 + G·G, D] (or [1, G·G, D] with
// no_embed_class, as DeiT III: the class token gets no position), `patch_embed.proj`,
// `blocks.N.{norm1, attn.qkv (q|k|v fused, [3D, D]), attn.proj, norm2, mlp.fc1, mlp.fc2}`,
// optional layer scale `blocks.N.ls1/ls2.gamma` (DeiT III; folded into attn.proj / mlp.fc2),
// `norm` on every token (forward_features), optional `head` on the normed class token. Exact
// GELU, eps 1e-6. timm files carry no head count: config.json's `num_heads` (or
// model_args.num_heads) when present, else the standard one for the width. The input contract:
// preprocessor_config.json, else timm's config.json pretrained_cfg mean / std, else ImageNet's,
// and `source` says which.
#include <cmath>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

bool is_square(int64_t n) {
  const int64_t g = int64_t(std::llround(std::sqrt(double(std::max<int64_t>(n, 0)))));
  return g > 0 && g * g == n;
}

class TimmVitLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "timm_vit"; }
  bool accepts(const Checkpoint& c) const override {
    return !c.gguf && c.weights->info("patch_embed.proj.weight").has_value() &&
           c.weights->info("blocks.0.attn.qkv.weight").has_value();
  }

  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    const nlohmann::json& cfg = ck.config;
    // Variants whose arithmetic differs: refused by name rather than encoded wrong.
    const std::pair<const char*, const char*> foreign[] = {
        {"dist_token", "a distilled DeiT (class and distillation tokens) is not supported; the non-distilled "
                       "deit_*_patch16_224 weights are"},
        {"reg_token", "register tokens are not supported"},
        {"blocks.0.attn.q_norm.weight", "query/key normalisation (qk_norm) is not supported"},
        {"norm_pre.weight", "a pre-norm (CLIP-style timm ViT, norm_pre) is not supported; use the HF CLIP checkpoint"},
        {"fc_norm.weight", "average pooling with fc_norm (global_pool='avg') is not supported"},
    };
    for (const auto& [name, why] : foreign)
      if (w.info(name)) throw Error(Errc::unsupported, "'" + path + "': timm ViT with " + name + ": " + why);
    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.family = VitFamily::vit;
    c.naming = "timm_vit";
    patch_embedding_dims(w, "patch_embed.proj.weight", c);
    if (!w.info("cls_token"))
      throw Error(Errc::unsupported, "'" + path + "': timm ViT without cls_token (class_token=False) is not supported");
    const auto pos = w.info("pos_embed");
    if (!pos || pos->shape.size() != 3)
      throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed pos_embed (expected [1, 1 + G·G, D])");
    // G·G + 1 rows, or G·G without a class position (no_embed_class); both squares only for G = 0.
    const bool no_embed_class = is_square(pos->shape[1]) && !is_square(pos->shape[1] - 1);
    c.grid = square_side(pos->shape[1] - (no_embed_class ? 0 : 1), path, "pos_embed");
    c.layers = count_layers(w, "blocks.");
    c.layers_in_checkpoint = c.layers;
    const auto fc1 = w.info("blocks.0.mlp.fc1.weight");
    c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
    std::optional<int> heads = cfg_get<int>(cfg, {"num_heads"});
    if (!heads && cfg.contains("model_args") && cfg["model_args"].is_object())
      heads = cfg_get<int>(cfg["model_args"], {"num_heads"});
    c.heads = heads.value_or(default_heads(c.hidden));
    c.class_token = true;
    c.patch_bias = true;
    c.pre_norm = false;
    c.final_norm = FinalNorm::all_tokens;
    c.act = Activation::gelu_erf;
    c.ln_eps = 1e-6f;
    // timm's config.json has no hidden_size & co.: only the block count and heads are checked.
    check_dims(nlohmann::json::object(), path, c, "blocks.N");
    InputContract fallback = imagenet_contract(
        "ImageNet mean/std assumed (no preprocessor_config.json, no timm config.json pretrained_cfg)");
    if (auto it = cfg.find("pretrained_cfg"); it != cfg.end() && it->is_object()) {
      nlohmann::json pc = nlohmann::json::object();
      if (it->contains("mean")) pc["image_mean"] = (*it)["mean"];
      if (it->contains("std")) pc["image_std"] = (*it)["std"];
      if (!pc.empty()) fallback = contract_from_preprocessor(pc, fallback, "timm config.json pretrained_cfg");
    }
    c.input = contract_from_preprocessor(ck.preprocessor, fallback);

    const int64_t D = c.hidden, M = c.mlp, C = c.channels, P = c.patch_px, G = c.grid;
    Lookup L(w);
    m->patch_w = L.get("patch_embed.proj.weight", {D, C, P, P}, true, {D, C * P * P});
    m->patch_b = L.get("patch_embed.proj.bias", {D});
    m->class_emb = L.get("cls_token", {1, 1, D}, true, {D});
    if (no_embed_class) {
      m->pos_grid = L.get("pos_embed", {1, G * G, D}, true, {G * G, D});
      m->class_pos = Tensor(DType::f32, {D});  // zeros: timm adds pos_embed before the class token joins
    } else {
      split_class_position(L.get("pos_embed", {1, G * G + 1, D}), D, *m);
    }
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = "blocks." + std::to_string(i) + ".";
      VitLayer ly;
      ly.ln1_w = L.get(l + "norm1.weight", {D});
      ly.ln1_b = L.get(l + "norm1.bias", {D});
      ly.qkv_w = L.matrix(l + "attn.qkv.weight", {3 * D, D});
      ly.qkv_b = L.get(l + "attn.qkv.bias", {3 * D});
      ly.out_w = L.matrix(l + "attn.proj.weight", {D, D});
      ly.out_b = L.get(l + "attn.proj.bias", {D});
      ly.ln2_w = L.get(l + "norm2.weight", {D});
      ly.ln2_b = L.get(l + "norm2.bias", {D});
      ly.fc1_w = L.matrix(l + "mlp.fc1.weight", {M, D});
      ly.fc1_b = L.get(l + "mlp.fc1.bias", {M});
      ly.fc2_w = L.matrix(l + "mlp.fc2.weight", {D, M});
      ly.fc2_b = L.get(l + "mlp.fc2.bias", {D});
      fold_layer_scale(L, l + "ls1.gamma", D, false, ly.out_w, ly.out_b);
      fold_layer_scale(L, l + "ls2.gamma", D, false, ly.fc2_w, ly.fc2_b);
      m->layers.push_back(std::move(ly));
    }
    m->post_w = L.get("norm.weight", {D});
    m->post_b = L.get("norm.bias", {D});
    // The head reads the normed class token (global_pool 'token', timm's default for ViT).
    const std::string pool = cfg_get<std::string>(cfg, {"global_pool"}).value_or("token");
    if (const auto hw = w.info("head.weight"); hw && hw->shape.size() == 2 && pool == "token") {
      c.num_classes = checked_dim(hw->shape[0], 1 << 20, path, "the class count");
      m->head_w = L.get("head.weight", {hw->shape[0], D});
      m->head_b = L.get("head.bias", {hw->shape[0]});
    }
    L.finish("timm VisionTransformer");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& timm_vit_loader() {
  static const TimmVitLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
