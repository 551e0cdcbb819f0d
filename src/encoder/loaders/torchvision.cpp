// torchvision.models.VisionTransformer state dicts: `conv_proj`, `class_token`,
// `encoder.pos_embedding`, `encoder.layers.encoder_layer_N.*` (`mlp.0/3`, or the legacy
// `mlp.linear_1/2`), `encoder.ln`, `heads.head`. torchvision files carry no config: the head
// count comes from config.json when present, else from the width; the input contract is
// ImageNet's mean and std (the transforms of every torchvision ViT weight set) unless a
// preprocessor_config.json says otherwise.
#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

// Blocks: nn.MultiheadAttention's fused in_proj, the MLP as mlp.0 / mlp.3 (legacy: linear_1 / linear_2).
const FusedBlockNames kBlock{"ln_1", "self_attention.in_proj_weight", "self_attention.in_proj_bias",
                             "self_attention.out_proj", "ln_2", "mlp.0", "mlp.3"};
const FusedBlockNames kLegacyBlock{"ln_1", "self_attention.in_proj_weight", "self_attention.in_proj_bias",
                                   "self_attention.out_proj", "ln_2", "mlp.linear_1", "mlp.linear_2"};

class TorchvisionLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "torchvision"; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && c.weights->info("conv_proj.weight").has_value(); }

  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const WeightSource& w = *ck.weights;
    const std::string& path = w.path();
    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.family = VitFamily::torchvision;
    c.naming = "torchvision";
    patch_embedding_dims(w, "conv_proj.weight", c);
    const auto pos = w.info("encoder.pos_embedding");
    if (!pos || pos->shape.size() != 3)
      throw Error(Errc::corrupt_data, "'" + path + "': missing or malformed encoder.pos_embedding");
    c.grid = square_side(pos->shape[1] - 1, path, "encoder.pos_embedding");
    c.layers = count_layers(w, "encoder.layers.encoder_layer_");
    c.layers_in_checkpoint = c.layers;
    const bool legacy_mlp = w.info("encoder.layers.encoder_layer_0.mlp.linear_1.weight").has_value();
    const auto fc1 = w.info("encoder.layers.encoder_layer_0." + std::string((legacy_mlp ? kLegacyBlock : kBlock).fc1) +
                            ".weight");
    c.mlp = fc1 && fc1->shape.size() == 2 ? checked_dim(fc1->shape[0], 1 << 20, path, "the MLP width") : 4 * c.hidden;
    c.heads = cfg_get<int>(ck.config, {"num_heads", "num_attention_heads"}).value_or(default_heads(c.hidden));
    c.class_token = true;
    c.patch_bias = true;
    c.pre_norm = false;
    c.final_norm = FinalNorm::all_tokens;
    c.act = Activation::gelu_erf;
    c.ln_eps = 1e-6f;
    check_dims(nlohmann::json::object(), path, c, "encoder.layers.encoder_layer_N");  // torchvision has no config
    c.input = contract_from_preprocessor(ck.preprocessor, imagenet_defaults());
    const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid;
    Lookup L(w);
    m->patch_w = L.get("conv_proj.weight", {D, C, P, P}, true, {D, C * P * P});
    m->patch_b = L.get("conv_proj.bias", {D});
    m->class_emb = L.get("class_token", {1, 1, D}, true, {D});
    split_class_position(L.get("encoder.pos_embedding", {1, G * G + 1, D}), D, *m);
    for (int i = 0; i < c.layers; ++i) {
      const std::string l = "encoder.layers.encoder_layer_" + std::to_string(i) + ".";
      m->layers.push_back(load_fused_block(L, l, legacy_mlp ? kLegacyBlock : kBlock, c));
    }
    m->post_w = L.get("encoder.ln.weight", {D});
    m->post_b = L.get("encoder.ln.bias", {D});
    if (!L.has("heads.pre_logits.weight")) {
      if (const auto hw = w.info("heads.head.weight"); hw && hw->shape.size() == 2) {
        c.num_classes = checked_dim(hw->shape[0], 1 << 20, path, "the class count");
        m->head_w = L.get("heads.head.weight", {hw->shape[0], D});
        m->head_b = L.get("heads.head.bias", {hw->shape[0]});
      }
    }
    L.finish("torchvision VisionTransformer");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& torchvision_loader() {
  static const TorchvisionLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
