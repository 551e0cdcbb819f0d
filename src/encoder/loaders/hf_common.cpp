// What HF CLIP and SigLIP vision towers share: the embeddings, the encoder blocks
// (`encoder.layers.N.{layer_norm1, self_attn.{q,k,v,out}_proj, layer_norm2, mlp.fc1, mlp.fc2}`)
// and post_layernorm, and the checks of config.json against the tensors.
// SigLIP 2 (Siglip2VisionModel, google/siglip2-*-naflex and the towers of VLMs built on it) is
// SigLIP with a linear patch embedding `patch_embedding.weight` [D, P·P·C] over pixels in
// (row, column, channel) order (Siglip2ImageProcessor's convert_image_to_patches), permuted here
// to the conv layout [D, C·P·P] the tokenizer's patches have, and a √n × √n position table
// resized bilinearly with antialias=True (resize_positional_embeddings;
// PositionSampling::bilinear_antialias). P is config.json's patch_size, else the square that
// fits P·P·C columns.
// Idefics2 / Idefics3 / SmolVLM towers are SigLIP's tensors with NaViT-style positions: no
// resize, each patch takes the table cell its fractional coordinates fall in (idefics_kind()).
#include <cmath>
#include <cstring>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {

std::optional<std::string> hf_vision_prefix(const WeightSource& w) {
  const std::string kPe = "embeddings.patch_embedding.weight";
  std::optional<std::string> best;
  // "vision_model." normally; inside a VLM checkpoint the shortest prefix ending in it wins.
  for (const std::string& name : w.names()) {
    if (!name.ends_with(kPe)) continue;
    const std::string pre = name.substr(0, name.size() - kPe.size());
    const bool better = !best || (pre.ends_with("vision_model.") && !best->ends_with("vision_model.")) ||
                        (pre.ends_with("vision_model.") == best->ends_with("vision_model.") && pre.size() < best->size());
    if (better) best = pre;
  }
  return best;
}

namespace {

// Idefics2, Idefics3 and SmolVLM (1 and 2) towers: SigLIP's tensors, positions looked up by
// bucketized fractional coordinates (PositionSampling::bucketized). Told by config.json's
// model_type (the vision part's or the VLM's), else by the VLM's connector beside the tower:
// Idefics3's `connector.modality_projection.proj` (pixel shuffle + linear), Idefics2's
// `connector.perceiver_resampler`. Both connectors group a uniform grid of tokens, so they are
// counted as ignored, as InternVL's mlp1. nullopt: a plain SigLIP tower.
std::optional<std::string> idefics_kind(const WeightSource& w, const std::string& prefix, const std::string& mt,
                                        const std::string& parent) {
  auto has = [&](const char* s) { return mt.find(s) != std::string::npos || parent.find(s) != std::string::npos; };
  if (has("idefics2")) return "hf_idefics2";
  if (has("idefics3") || has("smolvlm")) return "hf_idefics3";
  if (!prefix.ends_with("vision_model.")) return std::nullopt;
  const std::string root = prefix.substr(0, prefix.size() - std::string_view("vision_model.").size());
  if (w.info(root + "connector.modality_projection.proj.weight")) return "hf_idefics3";
  const std::string resampler = root + "connector.perceiver_resampler.";
  for (const std::string& n : w.names())
    if (n.rfind(resampler, 0) == 0) return "hf_idefics2";
  return std::nullopt;
}

}  // namespace

std::string hf_configure(const Checkpoint& ck, bool clip, VitModel::Impl& m) {
  const WeightSource& w = *ck.weights;
  const std::string& path = w.path();
  const std::string p = *hf_vision_prefix(w);
  const nlohmann::json& cfg = ck.config;
  VitConfig& c = m.config;
  const std::string pe_name = p + "embeddings.patch_embedding.weight";
  const auto pe = w.info(pe_name);
  const bool linear_patch = pe && pe->shape.size() == 2;  // SigLIP 2
  if (linear_patch) {
    if (clip)
      throw Error(Errc::unsupported, "'" + path + "': " + pe_name +
                                         " is a linear patch embedding (SigLIP 2) in a checkpoint with a class embedding");
    c.hidden = checked_dim(pe->shape[0], 1 << 16, path, "the hidden size (" + pe_name + " dim 0)");
    c.channels = checked_dim(cfg_get<int64_t>(cfg, {"num_channels"}).value_or(3), 16, path, "the channel count");
    const int64_t cols = pe->shape[1];
    int64_t P = cfg_get<int64_t>(cfg, {"patch_size"}).value_or(0);
    if (P == 0 && cols > 0 && cols % c.channels == 0) P = int64_t(std::llround(std::sqrt(double(cols / c.channels))));
    if (P < 1 || P > 1024 || P * P * c.channels != cols)
      throw Error(Errc::corrupt_data, "'" + path + "': " + pe_name + " has shape " + shape_str(pe->shape) +
                                          ", not [D, P·P·" + std::to_string(c.channels) + "] for patch size " +
                                          std::to_string(P));
    c.patch_px = int(P);
    c.pos_sampling = PositionSampling::bilinear_antialias;
  } else {
    patch_embedding_dims(w, pe_name, c);
  }
  std::string mt = cfg_get<std::string>(cfg, {"model_type"}).value_or("");
  if (mt.empty()) mt = cfg_get<std::string>(cfg, {"parent_model_type"}).value_or("");
  if ((clip && mt.find("siglip") != std::string::npos) || (!clip && mt.find("clip") != std::string::npos &&
                                                           mt.find("siglip") == std::string::npos))
    throw Error(Errc::corrupt_data, "'" + path + "': config.json says model_type '" + mt + "' but the tensors " +
                                        (clip ? "have" : "have no") + " class embedding");
  c.family = clip ? VitFamily::clip : VitFamily::siglip;
  c.naming = clip ? "hf_clip" : linear_patch ? "hf_siglip2" : "hf_siglip";
  if (!clip && !linear_patch) {
    if (const auto kind = idefics_kind(w, p, mt, cfg_get<std::string>(cfg, {"parent_model_type"}).value_or(""))) {
      c.naming = *kind;
      c.pos_sampling = PositionSampling::bucketized;
    }
  }
  // VLM projectors beside the tower that group a uniform grid of tokens (not run).
  if (clip && p.ends_with("img_processor.vision_model.")) {  // Phi-3 / Phi-3.5-vision
    const std::string root = p.substr(0, p.size() - std::string_view("img_processor.vision_model.").size());
    if (w.info(root + "img_projection.0.weight"))
      c.ignored_projector = "Phi-3-vision's img_projection: a 2x2 merge of neighbouring tokens, then an MLP";
  }
  if (!clip && p.ends_with("vision_model.")) {
    const std::string root = p.substr(0, p.size() - std::string_view("vision_model.").size());
    const std::string vlm = root.ends_with("vision_tower.") ? root.substr(0, root.size() - 13) : root;
    if (w.info(root + "connector.modality_projection.proj.weight"))
      c.ignored_projector = "Idefics3's connector: pixel shuffle of s x s neighbours, then a linear layer";
    else if (w.info(vlm + "multi_modal_projector.mm_input_projection_weight"))
      c.ignored_projector = "Gemma 3's projector: 4x4 average pooling of the patch grid, RMSNorm, a linear layer";
    else
      for (const std::string& n : w.names())
        if (n.rfind(root + "connector.perceiver_resampler.", 0) == 0) {
          c.ignored_projector = "Idefics2's perceiver resampler";
          break;
        }
  }
  const auto pos = w.info(p + "embeddings.position_embedding.weight");
  if (!pos || pos->shape.size() != 2)
    throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed " + p + "embeddings.position_embedding.weight");
  c.grid = square_side(pos->shape[0] - (clip ? 1 : 0), path, p + "embeddings.position_embedding.weight");
  c.layers = count_layers(w, p + "encoder.layers.");
  c.layers_in_checkpoint = c.layers;
  const auto fc1 = w.info(p + "encoder.layers.0.mlp.fc1.weight");
  c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
  c.heads = cfg_get<int>(cfg, {"num_attention_heads"}).value_or(default_heads(c.hidden));
  c.class_token = clip;
  c.patch_bias = !clip;
  c.pre_norm = clip;
  // HF CLIP's last_hidden_state is before post_layernorm (applied to the pooled class token
  // only); SigLIP's is after it.
  c.final_norm = clip ? FinalNorm::pooled_only : FinalNorm::all_tokens;
  c.act = clip ? Activation::quick_gelu : Activation::gelu_tanh;
  c.ln_eps = clip ? 1e-5f : 1e-6f;
  if (auto a = cfg_get<std::string>(cfg, {"hidden_act"})) c.act = parse_hf_act(*a, path);
  if (auto e = cfg_get<double>(cfg, {"layer_norm_eps"})) c.ln_eps = float(*e);
  check_dims(cfg, path, c, p + "encoder.layers.N");
  if (auto n = cfg_get<int64_t>(cfg, {"num_patches"}); linear_patch && n && *n != int64_t(c.grid) * c.grid)
    throw Error(Errc::corrupt_data, "'" + path + "': config.json num_patches = " + std::to_string(*n) +
                                        " but the position table has " + std::to_string(c.grid * c.grid) + " rows");
  c.input = contract_from_preprocessor(ck.preprocessor, clip ? clip_defaults() : siglip_defaults());
  if (linear_patch) naflex_configure(ck, c);
  return p;
}

void check_dims(const nlohmann::json& cfg, const std::string& path, const VitConfig& c, const std::string& blocks) {
  // Shapes win over config.json; a disagreement is a mismatched pair of files.
  auto check = [&](const char* key, int have) {
    if (auto v = cfg_get<int>(cfg, {key}); v && *v != have)
      throw Error(Errc::corrupt_data, "'" + path + "': config.json " + key + " = " + std::to_string(*v) +
                                          " but the tensors say " + std::to_string(have));
  };
  check("hidden_size", c.hidden);
  check("patch_size", c.patch_px);
  check("num_hidden_layers", c.layers);
  check("intermediate_size", c.mlp);
  check("image_size", c.grid * c.patch_px);
  if (c.layers < 1) throw Error(Errc::corrupt_data, "'" + path + "': no " + blocks + " tensors");
  if (c.heads < 1 || c.hidden % c.heads != 0)
    throw Error(Errc::corrupt_data, "'" + path + "': hidden size " + std::to_string(c.hidden) +
                                        " is not divisible by " + std::to_string(c.heads) + " heads");
}

void stack_qkv(Lookup& L, const std::string (&w)[3], const std::string (&b)[3], int64_t D, VitLayer& ly) {
  ly.qkv_w = L.stacked({w[0], w[1], w[2]}, D, D);
  if (present(ly.qkv_w)) ly.qkv_b = Tensor(DType::f32, {3 * D});
  for (int j = 0; j < 3; ++j) {
    Tensor t = L.get(b[j], {D});
    if (present(ly.qkv_w) && present(t)) std::memcpy(ly.qkv_b.bytes() + size_t(j * D) * 4, t.bytes(), size_t(D) * 4);
  }
}

void hf_load_blocks(Lookup& L, const std::string& p, int blocks, int64_t D, int64_t M, VitModel::Impl& m) {
  for (int i = 0; i < blocks; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    VitLayer ly;
    ly.ln1_w = L.get(l + "layer_norm1.weight", {D});
    ly.ln1_b = L.get(l + "layer_norm1.bias", {D});
    const std::string a = l + "self_attn.";
    stack_qkv(L, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
              {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}, D, ly);
    ly.out_w = L.matrix(l + "self_attn.out_proj.weight", {D, D});
    ly.out_b = L.get(l + "self_attn.out_proj.bias", {D});
    ly.ln2_w = L.get(l + "layer_norm2.weight", {D});
    ly.ln2_b = L.get(l + "layer_norm2.bias", {D});
    ly.fc1_w = L.matrix(l + "mlp.fc1.weight", {M, D});
    ly.fc1_b = L.get(l + "mlp.fc1.bias", {M});
    ly.fc2_w = L.matrix(l + "mlp.fc2.weight", {D, M});
    ly.fc2_b = L.get(l + "mlp.fc2.bias", {D});
    m.layers.push_back(std::move(ly));
  }
}

void hf_load_tower(Lookup& L, const std::string& p, VitModel::Impl& m) {
  const VitConfig& c = m.config;
  const int64_t D = c.hidden, M = c.mlp, C = c.channels, P = c.patch_px, G = c.grid;
  const std::string pe = p + "embeddings.patch_embedding.weight";
  if (c.pos_sampling == PositionSampling::bilinear_antialias) {  // SigLIP 2: [D, P·P·C], (row, column, channel)
    const Tensor lin = L.get(pe, {D, P * P * C});
    if (present(lin)) {
      m.patch_w = Tensor(DType::f32, {D, C * P * P});
      const float* s = lin.data<float>();
      float* d = m.patch_w.data<float>();
      for (int64_t o = 0; o < D; ++o)
        for (int64_t ch = 0; ch < C; ++ch)
          for (int64_t yx = 0; yx < P * P; ++yx) d[(o * C + ch) * P * P + yx] = s[(o * P * P + yx) * C + ch];
    }
  } else {
    m.patch_w = L.get(pe, {D, C, P, P}, true, {D, C * P * P});
  }
  if (c.patch_bias) m.patch_b = L.get(p + "embeddings.patch_embedding.bias", {D});
  if (c.class_token) {
    m.class_emb = L.get(p + "embeddings.class_embedding", {D});
    split_class_position(L.get(p + "embeddings.position_embedding.weight", {G * G + 1, D}), D, m);
  } else {
    m.pos_grid = L.get(p + "embeddings.position_embedding.weight", {G * G, D});
  }
  L.mark_used(p + "embeddings.position_ids");
  hf_load_blocks(L, p, c.layers, D, M, m);
  m.post_w = L.get(p + "post_layernorm.weight", {D});
  m.post_b = L.get(p + "post_layernorm.bias", {D});
}

}  // namespace fovea::encoder_detail
