// What HF ViTModel and Dinov2Model share (transformers' modeling_vit.py / modeling_dinov2.py):
// `embeddings.{cls_token [1, 1, D], position_embeddings [1, G·G + 1, D],
// patch_embeddings.projection}` (a biased conv), `encoder.layer.N.attention.attention.{query,
// key, value}`, `attention.output.dense`, two block norms and an MLP whose names differ, and the
// final `layernorm` on every token. Checkpoints of the task heads carry the model under a prefix
// (`vit.`, `dinov2.`).
#include <algorithm>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {

namespace {
const std::string kPatch = "embeddings.patch_embeddings.projection.weight";
}  // namespace

std::optional<std::string> hf_vit_prefix(const WeightSource& w, const HfVitNaming& n) {
  std::optional<std::string> best;
  for (const std::string& name : w.names()) {
    if (!name.ends_with(kPatch)) continue;
    const std::string pre = name.substr(0, name.size() - kPatch.size());
    if (!w.info(pre + "encoder.layer.0." + n.marker)) continue;
    if (!best || pre.size() < best->size()) best = pre;
  }
  return best;
}

namespace {

// One HF ViT / DINOv2 checkpoint read in steps: what is refused, the configuration from the
// shapes and config.json, then the tensors.
struct HfVitRead {
  const Checkpoint& ck;
  const HfVitNaming& n;
  const WeightSource& w;
  const std::string& path;
  const std::string p;  // the model's prefix
  const nlohmann::json& cfg;
  VitConfig& c;
  // DINOv2's SwiGLU MLP (use_swiglu_ffn: dinov2-giant): mlp.weights_in [2H, D] gives [x1 | x2],
  // mlp.weights_out [D, H] reads silu(x1)·x2 (Dinov2SwiGLUFFN). Only DINOv2 has it.
  const std::string swiglu_in;
  const bool swiglu;
  const std::string fc1_name, fc2_name;
  const std::string reg_name, pos_name;
  const std::optional<WeightSource::Info> reg;

  HfVitRead(const Checkpoint& ck, const HfVitNaming& n, VitConfig& c)
      : ck(ck), n(n), w(*ck.weights), path(w.path()), p(*hf_vit_prefix(w, n)), cfg(ck.config), c(c),
        swiglu_in(p + "encoder.layer.0.mlp.weights_in.weight"), swiglu(w.info(swiglu_in).has_value()),
        fc1_name(swiglu ? "mlp.weights_in" : n.fc1), fc2_name(swiglu ? "mlp.weights_out" : n.fc2),
        reg_name(p + "embeddings.register_tokens"), pos_name(p + "embeddings.position_embeddings"),
        reg(w.info(reg_name)) {}

  // Relatives with the same names and other arithmetic, a SwiGLU MLP or register tokens outside
  // DINOv2, another model_type: refused by name rather than read wrong.
  void refuse_foreign() const {
    const std::pair<std::string, const char*> foreign[] = {
        {p + "embeddings.distillation_token", "a distilled DeiT (DeiTModel: class and distillation tokens) is not supported"},
        {p + "encoder.layer.0.lambda_1", "BEiT / Data2VecVision (relative position bias, lambda_1) is not supported"},
    };
    for (const auto& [name, why] : foreign)
      if (w.info(name)) throw Error(Errc::unsupported, "'" + path + "': " + name + ": " + why);
    if (swiglu && n.family != VitFamily::dinov2)
      throw Error(Errc::unsupported, "'" + path + "': " + swiglu_in + ": a SwiGLU MLP in a " + n.what +
                                         " checkpoint is not supported (DINOv2's is)");
    if (auto s = cfg_get<bool>(cfg, {"use_swiglu_ffn"}); s && *s != swiglu)
      throw Error(Errc::corrupt_data, "'" + path + "': config.json use_swiglu_ffn = " + (*s ? "true" : "false") +
                                          " but the tensors " + (swiglu ? "have" : "lack") + " mlp.weights_in");
    if (reg && !n.registers)
      throw Error(Errc::unsupported, "'" + path + "': " + reg_name + ": register tokens in a " + n.what +
                                         " checkpoint are not supported (Dinov2WithRegistersModel's are)");
    if (auto mt = cfg_get<std::string>(cfg, {"model_type"}); mt && !mt->empty()) {
      std::string known;
      for (const char* t : n.model_types) known += std::string(known.empty() ? "" : ", ") + t;
      if (std::none_of(n.model_types.begin(), n.model_types.end(), [&](const char* t) { return *mt == t; }))
        throw Error(Errc::unsupported, "'" + path + "': config.json model_type '" + *mt + "' is not " + n.what + " (" +
                                           known + ")");
    }
  }

  // The widths, grid, block count, heads and registers from the shapes and config.json.
  void read_dims() {
    patch_embedding_dims(w, p + kPatch, c);
    const auto pos = w.info(pos_name);
    if (!pos || pos->shape.size() != 3)
      throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed " + pos_name + " (expected [1, G·G + 1, D])");
    c.grid = square_side(pos->shape[1] - 1, path, pos_name);
    c.layers = count_layers(w, p + "encoder.layer.");
    c.layers_in_checkpoint = c.layers;
    const std::string l0 = p + "encoder.layer.0.";
    const auto fc1 = w.info(l0 + fc1_name + ".weight");
    c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
    if (swiglu) {
      if (c.mlp % 2)
        throw Error(Errc::corrupt_data, "'" + path + "': " + swiglu_in + " has an odd row count (" +
                                            std::to_string(c.mlp) + "), not [2·H, D]");
      c.mlp /= 2;
    }
    c.heads = cfg_get<int>(cfg, {"num_attention_heads"}).value_or(default_heads(c.hidden));
    c.class_token = true;
    if (reg) read_registers();
  }

  void read_registers() {
    if (reg->shape.size() != 3 || reg->shape[0] != 1 || reg->shape[2] != c.hidden)
      throw Error(Errc::corrupt_data, "'" + path + "': " + reg_name + " has shape " + shape_str(reg->shape) +
                                          ", expected [1, R, " + std::to_string(c.hidden) + "]");
    c.registers = checked_dim(reg->shape[1], 1024, path, "the register count");
    if (auto r = cfg_get<int>(cfg, {"num_register_tokens"}); r && *r != c.registers)
      throw Error(Errc::corrupt_data, "'" + path + "': config.json num_register_tokens = " + std::to_string(*r) +
                                          " but the tensors say " + std::to_string(c.registers));
    // Dinov2WithRegisters' interpolate_pos_encoding resizes with antialias=True (Dinov2Model's
    // and ViTModel's without).
    c.pos_sampling = PositionSampling::bicubic_antialias;
  }

  // The block's arithmetic (post-LN flags, activation, epsilon), the sizes config.json repeats
  // and the input contract.
  void read_config(const InputContract& defaults) {
    c.patch_bias = true;
    c.pre_norm = false;
    c.final_norm = FinalNorm::all_tokens;
    c.act = Activation::gelu_erf;
    c.ln_eps = n.ln_eps;
    if (auto a = cfg_get<std::string>(cfg, {"hidden_act"})) c.act = parse_hf_act(*a, path);
    if (swiglu) c.act = Activation::swiglu;  // Dinov2SwiGLUFFN ignores hidden_act
    if (auto e = cfg_get<double>(cfg, {"layer_norm_eps"})) c.ln_eps = float(*e);
    check_dims(cfg, path, c, p + "encoder.layer.N");
    c.input = contract_from_preprocessor(ck.preprocessor, defaults);
  }

  void bind_embeddings(Lookup& L, VitModel::Impl& m) const {
    const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid;
    m.patch_w = L.get(p + kPatch, {D, C, P, P}, true, {D, C * P * P});
    m.patch_b = L.get(p + "embeddings.patch_embeddings.projection.bias", {D});
    m.class_emb = L.get(p + "embeddings.cls_token", {1, 1, D}, true, {D});
    split_class_position(L.get(pos_name, {1, G * G + 1, D}), D, m);
    if (c.registers > 0) m.registers = L.get(reg_name, {1, c.registers, D}, true, {c.registers, D});
    L.mark_used(p + "embeddings.mask_token");  // masked image modelling only
  }

  // Block i's tensors (encoder.layer.i.*).
  VitLayer bind_block(Lookup& L, int i) const {
    const int64_t D = c.hidden, M = c.mlp;
    const std::string l = p + "encoder.layer." + std::to_string(i) + ".";
    const std::string a = l + "attention.attention.";
    VitLayer ly;
    ly.ln1_w = L.get(l + n.ln1 + ".weight", {D});
    ly.ln1_b = L.get(l + n.ln1 + ".bias", {D});
    stack_qkv(L, {a + "query.weight", a + "key.weight", a + "value.weight"},
              {a + "query.bias", a + "key.bias", a + "value.bias"}, D, ly);
    ly.out_w = L.matrix(l + "attention.output.dense.weight", {D, D});
    ly.out_b = L.get(l + "attention.output.dense.bias", {D});
    ly.ln2_w = L.get(l + n.ln2 + ".weight", {D});
    ly.ln2_b = L.get(l + n.ln2 + ".bias", {D});
    const int64_t M1 = fc1_width(c);
    ly.fc1_w = L.matrix(l + fc1_name + ".weight", {M1, D});
    ly.fc1_b = L.get(l + fc1_name + ".bias", {M1});
    ly.fc2_w = L.matrix(l + fc2_name + ".weight", {D, M});
    ly.fc2_b = L.get(l + fc2_name + ".bias", {D});
    if (n.layer_scale) {
      fold_layer_scale(L, l + "layer_scale1.lambda1", D, true, ly.out_w, ly.out_b);
      fold_layer_scale(L, l + "layer_scale2.lambda1", D, true, ly.fc2_w, ly.fc2_b);
    }
    return ly;
  }
};

}  // namespace

std::string hf_vit_load(const Checkpoint& ck, const HfVitNaming& n, const InputContract& defaults, Lookup& L,
                        VitModel::Impl& m) {
  VitConfig& c = m.config;
  HfVitRead r(ck, n, c);
  r.refuse_foreign();
  c.family = n.family;
  c.naming = n.naming;
  r.read_dims();
  r.read_config(defaults);
  r.bind_embeddings(L, m);
  for (int i = 0; i < c.layers; ++i) m.layers.push_back(r.bind_block(L, i));
  m.post_w = L.get(r.p + "layernorm.weight", {c.hidden});
  m.post_b = L.get(r.p + "layernorm.bias", {c.hidden});
  return r.p;
}

}  // namespace fovea::encoder_detail
