// open_clip's own VisionTransformer (open_clip_pytorch_model.bin / open_clip_model.safetensors of
// the LAION, DFN, MetaCLIP and DataComp CLIP models, and OpenAI's CLIP state dicts, which use the
// same names): `visual.` + `conv1` (no bias), `class_embedding` [D], `positional_embedding`
// [1 + G·G, D], `ln_pre`, `transformer.resblocks.N.{ln_1, attn.in_proj_weight [3D, D] (q|k|v),
// attn.in_proj_bias, attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}` with optional layer scale
// `ls_1/ls_2.gamma` (folded), `ln_post` on every token (open_clip's default
// final_ln_after_pool=False: the tokens are normed, the pooled output is the normed class token)
// and `proj` [D, E]: image_embeds = pooled·proj. The text tower beside it is ignored (counted).
//
// The activation is not in the tensors: open_clip_config.json's model_cfg.quick_gelu, else
// quick_gelu for OpenAI's own state dicts (they carry `input_resolution` / `context_length`),
// else open_clip's default nn.GELU (exact). LayerNorm eps 1e-5. Positions at other sizes:
// open_clip's resize_pos_embed (bicubic, antialias=True). Input contract:
// preprocessor_config.json, else open_clip_config.json's preprocess_cfg, else OpenAI CLIP's.
// Refused by name: attentional pooling (CoCa's attn_pool), and pool types other than the class
// token (model_cfg.vision_cfg.pool_type / final_ln_after_pool).
#include <cstring>
#include <optional>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {

InputContract open_clip_contract(const nlohmann::json& oc, const InputContract& fallback) {
  if (!oc.is_object()) return fallback;
  const auto it = oc.find("preprocess_cfg");
  if (it == oc.end() || !it->is_object() || !it->contains("mean")) return fallback;
  nlohmann::json pc = {{"image_mean", (*it)["mean"]}};
  if (it->contains("std")) pc["image_std"] = (*it)["std"];
  return contract_from_preprocessor(pc, fallback, "open_clip_config.json preprocess_cfg");
}

namespace {

// open_clip_config.json's model_cfg.vision_cfg (or {}).
nlohmann::json vision_cfg(const nlohmann::json& oc) {
  if (!oc.is_object()) return nlohmann::json::object();
  const auto mc = oc.find("model_cfg");
  if (mc == oc.end() || !mc->is_object()) return nlohmann::json::object();
  const auto vc = mc->find("vision_cfg");
  return vc != mc->end() && vc->is_object() ? *vc : nlohmann::json::object();
}

// "visual." (a whole CLIP checkpoint: the text tower beside it) or "" (the visual tower alone).
std::optional<std::string> open_clip_prefix(const WeightSource& w) {
  for (const char* p : {"visual.", ""})
    if (w.info(std::string(p) + "conv1.weight") && w.info(std::string(p) + "class_embedding") &&
        w.info(std::string(p) + "transformer.resblocks.0.attn.in_proj_weight"))
      return p;
  return std::nullopt;
}

const FusedBlockNames kBlock{"ln_1", "attn.in_proj_weight", "attn.in_proj_bias", "attn.out_proj", "ln_2",
                             "mlp.c_fc", "mlp.c_proj", "ls_1.gamma", "ls_2.gamma"};

class OpenClipLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "open_clip"; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && open_clip_prefix(*c.weights).has_value(); }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    const std::string p = *open_clip_prefix(w);
    const nlohmann::json vc = vision_cfg(ck.open_clip);
    const std::pair<std::string, const char*> foreign[] = {
        {p + "attn_pool.query", "attentional pooling (CoCa's attn_pool) is not supported"},
        {p + "attn_pool_contrastive.query", "attentional pooling (CoCa's attn_pool) is not supported"},
        {p + "transformer.resblocks.0.ln_attn.weight", "scaled-cosine / NormFormer attention norms are not supported"},
        {p + "transformer.resblocks.0.attn.ln_inner.weight", "scaled-cosine / NormFormer attention norms are not supported"},
    };
    for (const auto& [name, why] : foreign)
      if (w.info(name)) throw Error(Errc::unsupported, "'" + path + "': open_clip ViT with " + name + ": " + why);
    if (auto pool = cfg_get<std::string>(vc, {"pool_type"}); pool && *pool != "tok")
      throw Error(Errc::unsupported, "'" + path + "': open_clip vision_cfg pool_type '" + *pool +
                                         "' is not supported (the class token, 'tok', is)");
    if (cfg_get<bool>(vc, {"final_ln_after_pool"}).value_or(false))
      throw Error(Errc::unsupported, "'" + path + "': open_clip vision_cfg final_ln_after_pool is not supported");

    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.family = VitFamily::clip;
    c.naming = "open_clip";
    patch_embedding_dims(w, p + "conv1.weight", c);
    const auto pos = w.info(p + "positional_embedding");
    if (!pos || pos->shape.size() != 2)
      throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed positional_embedding (expected [1 + G·G, D])");
    c.grid = square_side(pos->shape[0] - 1, path, "positional_embedding");
    c.layers = count_layers(w, p + "transformer.resblocks.");
    c.layers_in_checkpoint = c.layers;
    const auto fc = w.info(p + "transformer.resblocks.0.mlp.c_fc.weight");
    c.mlp = fc && fc->shape.size() == 2 ? checked_dim(fc->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
    // open_clip: heads = width / vision_cfg.head_width (64 by default, but 80 for ViT-H, 88 for
    // ViT-g, 104 for ViT-bigG: without a config, the standard count for the width).
    const std::optional<int> head_width = cfg_get<int>(vc, {"head_width"});
    c.heads = head_width && *head_width > 0 && c.hidden % *head_width == 0 ? c.hidden / *head_width
                                                                            : default_heads(c.hidden);
    c.class_token = true;
    c.patch_bias = false;
    c.pre_norm = true;
    c.final_norm = FinalNorm::all_tokens;
    c.pos_sampling = PositionSampling::bicubic_antialias;  // resize_pos_embed: bicubic, antialias=True
    const bool openai = w.info("input_resolution").has_value() || w.info("context_length").has_value();
    std::optional<bool> quick;
    if (ck.open_clip.is_object())
      if (auto mc = ck.open_clip.find("model_cfg"); mc != ck.open_clip.end() && mc->is_object())
        quick = cfg_get<bool>(*mc, {"quick_gelu"});
    c.act = quick.value_or(openai) ? Activation::quick_gelu : Activation::gelu_erf;
    c.ln_eps = 1e-5f;
    check_dims(nlohmann::json::object(), path, c, p + "transformer.resblocks.N");
    InputContract fallback = clip_defaults();
    fallback.source = "open_clip defaults: OpenAI CLIP mean/std (no open_clip_config.json)";
    c.input = contract_from_preprocessor(ck.preprocessor, open_clip_contract(ck.open_clip, fallback));

    const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid;
    Lookup L(w);
    m->patch_w = L.get(p + "conv1.weight", {D, C, P, P}, true, {D, C * P * P});
    m->class_emb = L.get(p + "class_embedding", {D});
    split_class_position(L.get(p + "positional_embedding", {G * G + 1, D}), D, *m);
    m->pre_w = L.get(p + "ln_pre.weight", {D});
    m->pre_b = L.get(p + "ln_pre.bias", {D});
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = p + "transformer.resblocks." + std::to_string(i) + ".";
      m->layers.push_back(load_fused_block(L, l, kBlock, c));
    }
    m->post_w = L.get(p + "ln_post.weight", {D});
    m->post_b = L.get(p + "ln_post.bias", {D});
    if (const auto pj = w.info(p + "proj"); pj && pj->shape.size() == 2) {
      // x @ proj: stored [D, E], kept as a linear's [E, D].
      const int64_t E = checked_dim(pj->shape[1], 1 << 20, path, "the projection width");
      const Tensor pt = L.get(p + "proj", {D, E});
      if (present(pt)) {
        c.projection_dim = int(E);
        m->proj_w = Tensor(DType::f32, {E, D});
        const float* s = pt.data<float>();
        float* d = m->proj_w.data<float>();
        for (int64_t i = 0; i < D; ++i)
          for (int64_t j = 0; j < E; ++j) d[j * D + i] = s[i * E + j];
      }
    }
    for (const char* n : {"input_resolution", "context_length", "vocab_size"}) L.mark_used(n);
    L.finish("open_clip ViT");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& open_clip_loader() {
  static const OpenClipLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
