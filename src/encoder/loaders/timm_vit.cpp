// timm VisionTransformer state dicts (vit_*, deit_* without distillation, deit3_*; timm's
// model.safetensors): `cls_token` [1, 1, D], `pos_embed` [1, 1 + G·G, D] (or [1, G·G, D] with
// no_embed_class, as DeiT III: the class token gets no position), `patch_embed.proj`,
// `blocks.N.{norm1, attn.qkv (q|k|v fused, [3D, D]), attn.proj, norm2, mlp.fc1, mlp.fc2}`,
// optional layer scale `blocks.N.ls1/ls2.gamma` (DeiT III; folded into attn.proj / mlp.fc2),
// `norm` on every token (forward_features), optional `head` on the normed class token. Exact
// GELU, eps 1e-6. timm files carry no head count: config.json's `num_heads` (or
// model_args.num_heads) when present, else the standard one for the width. The input contract:
// preprocessor_config.json, else timm's config.json pretrained_cfg mean / std, else
// open_clip_config.json's preprocess_cfg (open_clip's files), else ImageNet's, and `source` says
// which.
//
// timm's CLIP image towers (vit_*_clip_*, pre_norm=True) are the same module with `norm_pre`
// after the position embedding, no patch-embedding bias and nn.LayerNorm's eps 1e-5; their
// `head` is CLIP's image projection. Their activation is not in the tensors: timm's
// *_clip_quickgelu_* models (and act_layer 'quick_gelu') use quick_gelu, the plain *_clip_* ones
// exact GELU on the same names, so config.json's `architecture` / model_args decide, and exact
// GELU (timm's default) without them.
//
// Positions at other input sizes: resample_abs_pos_embed's bicubic with antialias=True
// (PositionSampling::bicubic_antialias).
//
// Register tokens (`reg_token` [1, R, D]: vit_*_reg4_dinov2, DINOv2 with registers) follow the
// class token. With no_embed_class (those models) they get no position; otherwise pos_embed has
// 1 + R + G·G rows and their rows are added to them once, at load.
#include <cmath>
#include <cstring>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

bool is_square(int64_t n) {
  const int64_t g = int64_t(std::llround(std::sqrt(double(std::max<int64_t>(n, 0)))));
  return g > 0 && g * g == n;
}

// The MLP activation timm builds: act_layer from config.json's model_args, else the architecture
// name (timm registers the quick_gelu CLIP variants as *_clip_quickgelu_*), else nn.GELU.
Activation timm_activation(const nlohmann::json& cfg, const std::string& path) {
  if (auto it = cfg.find("model_args"); it != cfg.end() && it->is_object()) {
    if (auto act = cfg_get<std::string>(*it, {"act_layer"})) {
      if (*act == "quick_gelu" || *act == "QuickGELU") return Activation::quick_gelu;
      if (*act == "gelu" || *act == "GELU") return Activation::gelu_erf;
      if (*act == "gelu_tanh") return Activation::gelu_tanh;
      throw Error(Errc::unsupported, "'" + path + "': timm act_layer '" + *act +
                                         "' is not supported (gelu, gelu_tanh and quick_gelu are)");
    }
  }
  const std::string arch = cfg_get<std::string>(cfg, {"architecture"}).value_or("");
  return arch.find("quickgelu") != std::string::npos ? Activation::quick_gelu : Activation::gelu_erf;
}

const FusedBlockNames kBlock{"norm1", "attn.qkv.weight", "attn.qkv.bias", "attn.proj", "norm2",
                             "mlp.fc1", "mlp.fc2", "ls1.gamma", "ls2.gamma"};

// Variants whose arithmetic differs: refused by name rather than encoded wrong.
void refuse_foreign(const WeightSource& w, const std::string& path) {
  const std::pair<const char*, const char*> foreign[] = {
      {"dist_token", "a distilled DeiT (class and distillation tokens) is not supported; the non-distilled "
                     "deit_*_patch16_224 weights are"},
      {"blocks.0.attn.q_norm.weight", "query/key normalisation (qk_norm) is not supported"},
      {"fc_norm.weight", "average pooling with fc_norm (global_pool='avg') is not supported"},
      {"attn_pool.q_norm.weight", "query/key normalisation in the attention-pooling head is not supported"},
      {"attn_pool.pos_embed", "a position embedding in the attention-pooling head is not supported"},
      {"blocks.0.mlp.fc1_g.weight", "the unpacked SwiGLU MLP (fc1_g / fc1_x: EVA-style) is not supported; "
                                    "SwiGLUPacked (one fc1) is"},
      {"blocks.0.mlp.norm.weight", "a norm inside the MLP is not supported"},
  };
  for (const auto& [name, why] : foreign)
    if (w.info(name)) throw Error(Errc::unsupported, "'" + path + "': timm ViT with " + name + ": " + why);
}

// The prefix tokens and their positions, as the tensors say.
struct TimmTokens {
  bool map_pool = false;        // global_pool='map': an attention-pooling head, no class token
  bool no_embed_class = false;  // pos_embed has the grid's rows only
};

// The class token, registers, pooling and position grid (c.class_token, c.registers, c.grid).
TimmTokens read_tokens(const WeightSource& w, const std::string& path, VitConfig& c) {
  TimmTokens t;
  // global_pool='map' (timm's SigLIP towers, vit_*_siglip_*): no class token, an attention-pooling
  // head `attn_pool` (AttentionPoolLatent) over every token, which is SigLIP's
  // MultiheadAttention pooling head under other names.
  t.map_pool = w.info("attn_pool.latent").has_value();
  c.class_token = w.info("cls_token").has_value();
  if (!c.class_token && !t.map_pool)
    throw Error(Errc::unsupported, "'" + path +
                                       "': timm ViT without cls_token is supported only with attention pooling "
                                       "(global_pool='map', attn_pool.*: the SigLIP towers)");
  if (c.class_token && t.map_pool)
    throw Error(Errc::unsupported, "'" + path + "': timm ViT with both cls_token and attn_pool is not supported");
  if (t.map_pool) c.family = VitFamily::siglip;
  const auto pos = w.info("pos_embed");
  if (!pos || pos->shape.size() != 3)
    throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed pos_embed (expected [1, 1 + G·G, D])");
  if (const auto reg = w.info("reg_token")) {
    if (reg->shape.size() != 3 || reg->shape[0] != 1 || reg->shape[2] != c.hidden)
      throw Error(Errc::corrupt_data, "'" + path + "': reg_token has shape " + shape_str(reg->shape) +
                                          ", expected [1, R, " + std::to_string(c.hidden) + "]");
    c.registers = checked_dim(reg->shape[1], 1024, path, "the register count");
  }
  const int64_t R = c.registers;
  // G·G + 1 + R rows, or G·G without prefix positions (no_embed_class); both squares only for
  // small grids, where a square count is read as no_embed_class when there are registers
  // (timm's register models all are) and, without, as G·G + 1 unless that is impossible.
  const int64_t rows = pos->shape[1];
  t.no_embed_class = !c.class_token || (is_square(rows) && (R > 0 || !is_square(rows - 1)));
  c.grid = square_side(rows - (t.no_embed_class ? 0 : 1 + R), path, "pos_embed");
  return t;
}

// The blocks: their count, MLP width and activation, heads, norms and eps.
void read_blocks(const WeightSource& w, const nlohmann::json& cfg, const std::string& path, VitConfig& c) {
  c.layers = count_layers(w, "blocks.");
  c.layers_in_checkpoint = c.layers;
  const auto fc1 = w.info("blocks.0.mlp.fc1.weight");
  c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
  // SwiGLUPacked (vit_giant_patch14_dinov2 and its reg4 variant): fc1 [2H, D] gives [x1 | x2],
  // fc2 [D, H] reads silu(x1)·x2, so fc1 is twice as wide as fc2's input.
  const auto fc2 = w.info("blocks.0.mlp.fc2.weight");
  const bool swiglu = fc1 && fc2 && fc1->shape.size() == 2 && fc2->shape.size() == 2 && fc2->shape[1] > 0 &&
                      fc1->shape[0] == 2 * fc2->shape[1];
  if (swiglu) c.mlp /= 2;
  std::optional<int> heads = cfg_get<int>(cfg, {"num_heads"});
  if (!heads && cfg.contains("model_args") && cfg["model_args"].is_object())
    heads = cfg_get<int>(cfg["model_args"], {"num_heads"});
  c.heads = heads.value_or(default_heads(c.hidden));
  c.pre_norm = w.info("norm_pre.weight").has_value();
  // CLIP towers have no patch bias (timm: bias=not pre_norm); every other ViT must have one.
  c.patch_bias = !c.pre_norm || w.info("patch_embed.proj.bias").has_value();
  c.final_norm = FinalNorm::all_tokens;
  c.act = swiglu ? Activation::swiglu : timm_activation(cfg, path);  // SwiGLUPacked: SiLU, whatever act_layer
  c.ln_eps = c.pre_norm ? 1e-5f : 1e-6f;  // CLIP towers: nn.LayerNorm; the rest: partial(LayerNorm, eps=1e-6)
  // timm's config.json has no hidden_size & co.: only the block count and heads are checked.
  check_dims(nlohmann::json::object(), path, c, "blocks.N");
}

// The input contract: preprocessor_config.json, else timm's pretrained_cfg, else open_clip's
// preprocess_cfg, else ImageNet's.
InputContract timm_contract(const Checkpoint& ck) {
  const nlohmann::json& cfg = ck.config;
  InputContract fallback = imagenet_contract(
      "ImageNet mean/std assumed (no preprocessor_config.json, no timm config.json pretrained_cfg)");
  if (auto it = cfg.find("pretrained_cfg"); it != cfg.end() && it->is_object()) {
    nlohmann::json pc = nlohmann::json::object();
    if (it->contains("mean")) pc["image_mean"] = (*it)["mean"];
    if (it->contains("std")) pc["image_std"] = (*it)["std"];
    if (!pc.empty()) fallback = contract_from_preprocessor(pc, fallback, "timm config.json pretrained_cfg");
  } else {
    fallback = open_clip_contract(ck.open_clip, fallback);  // open_clip's files: a timm trunk under visual.trunk.
  }
  return contract_from_preprocessor(ck.preprocessor, fallback);
}

// The patch embedding, pre-norm, class token, registers and positions.
void bind_embeddings(Lookup& L, const TimmTokens& t, VitModel::Impl& m) {
  const VitConfig& c = m.config;
  const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid, R = c.registers;
  m.patch_w = L.get("patch_embed.proj.weight", {D, C, P, P}, true, {D, C * P * P});
  if (c.patch_bias) m.patch_b = L.get("patch_embed.proj.bias", {D});
  if (c.pre_norm) {
    m.pre_w = L.get("norm_pre.weight", {D});
    m.pre_b = L.get("norm_pre.bias", {D});
  }
  if (c.class_token) m.class_emb = L.get("cls_token", {1, 1, D}, true, {D});
  if (R > 0) m.registers = L.get("reg_token", {1, R, D}, true, {R, D});
  if (t.no_embed_class) {
    m.pos_grid = L.get("pos_embed", {1, G * G, D}, true, {G * G, D});
    // zeros: timm adds pos_embed before the prefix tokens join
    if (c.class_token) m.class_pos = Tensor(DType::f32, {D});
  } else if (R == 0) {
    split_class_position(L.get("pos_embed", {1, G * G + 1, D}), D, m);
  } else if (Tensor all = L.get("pos_embed", {1, 1 + R + G * G, D}, true, {1 + R + G * G, D}); present(all)) {
    // [class, registers, grid]: the registers' positions are constants, added to them here.
    const float* a = all.data<float>();
    m.class_pos = Tensor(DType::f32, {D});
    std::memcpy(m.class_pos.bytes(), a, size_t(D) * 4);
    if (present(m.registers))
      for (int64_t i = 0; i < R * D; ++i) m.registers.data<float>()[i] += a[D + i];
    m.pos_grid = Tensor(DType::f32, {G * G, D});
    std::memcpy(m.pos_grid.bytes(), a + (1 + R) * D, size_t(G * G * D) * 4);
  }
}

// AttentionPoolLatent: q(latent), kv(x) = MultiheadAttention's in_proj [q; k; v].
void bind_attention_pool(Lookup& L, VitModel::Impl& m) {
  VitConfig& c = m.config;
  const int64_t D = c.hidden, M = c.mlp;
  c.attention_pool = true;
  m.pool_probe = L.get("attn_pool.latent", {1, 1, D}, true, {D});
  const Tensor q = L.get("attn_pool.q.weight", {D, D}), kv = L.get("attn_pool.kv.weight", {2 * D, D});
  const Tensor qb = L.get("attn_pool.q.bias", {D}), kvb = L.get("attn_pool.kv.bias", {2 * D});
  if (present(q) && present(kv) && present(qb) && present(kvb)) {
    m.pool_in_w = Tensor(DType::f32, {3 * D, D});
    std::memcpy(m.pool_in_w.bytes(), q.bytes(), size_t(D * D) * 4);
    std::memcpy(m.pool_in_w.bytes() + size_t(D * D) * 4, kv.bytes(), size_t(2 * D * D) * 4);
    m.pool_in_b = Tensor(DType::f32, {3 * D});
    std::memcpy(m.pool_in_b.bytes(), qb.bytes(), size_t(D) * 4);
    std::memcpy(m.pool_in_b.bytes() + size_t(D) * 4, kvb.bytes(), size_t(2 * D) * 4);
  }
  m.pool_out_w = L.get("attn_pool.proj.weight", {D, D});
  m.pool_out_b = L.get("attn_pool.proj.bias", {D});
  m.pool_ln_w = L.get("attn_pool.norm.weight", {D});
  m.pool_ln_b = L.get("attn_pool.norm.bias", {D});
  m.pool_fc1_w = L.get("attn_pool.mlp.fc1.weight", {M, D});
  m.pool_fc1_b = L.get("attn_pool.mlp.fc1.bias", {M});
  m.pool_fc2_w = L.get("attn_pool.mlp.fc2.weight", {D, M});
  m.pool_fc2_b = L.get("attn_pool.mlp.fc2.bias", {D});
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
    refuse_foreign(w, path);
    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.family = VitFamily::vit;
    c.naming = "timm_vit";
    // timm resizes pos_embed for other input sizes with resample_abs_pos_embed: bicubic,
    // antialias=True (dynamic_img_size, and checkpoint_filter_fn for another img_size).
    c.pos_sampling = PositionSampling::bicubic_antialias;
    patch_embedding_dims(w, "patch_embed.proj.weight", c);
    const TimmTokens tokens = read_tokens(w, path, c);
    read_blocks(w, cfg, path, c);
    c.input = timm_contract(ck);

    const int64_t D = c.hidden;
    Lookup L(w);
    bind_embeddings(L, tokens, *m);
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = "blocks." + std::to_string(i) + ".";
      m->layers.push_back(load_fused_block(L, l, kBlock, c));
    }
    m->post_w = L.get("norm.weight", {D});
    m->post_b = L.get("norm.bias", {D});
    if (tokens.map_pool) bind_attention_pool(L, *m);
    // The head reads the normed class token (global_pool 'token', timm's default for ViT), or
    // the attention pool's output (global_pool 'map').
    const bool map_pool = tokens.map_pool;
    const std::string pool = cfg_get<std::string>(cfg, {"global_pool"}).value_or(map_pool ? "map" : "token");
    if (const auto hw = w.info("head.weight"); hw && hw->shape.size() == 2 && pool == (map_pool ? "map" : "token")) {
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
