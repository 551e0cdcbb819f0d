// HF Qwen3-VL vision towers (Qwen3VLForConditionalGeneration, single-file or sharded, the tower
// under `[model.]visual.`, or the tower alone):
//   patch_embed.proj.{weight [D, C, T, P, P], bias} (Conv3d), pos_embed.weight [G·G, D] (the
//   learned table, sampled bilinearly with corners aligned at each image's patch grid),
//   blocks.N.{norm1, norm2 (LayerNorm, eps 1e-6), attn.qkv, attn.proj, mlp.linear_fc1,
//   mlp.linear_fc2 (tanh-GELU)}, merger.{norm (over D), linear_fc1, linear_fc2} and
//   deepstack_merger_list.K.{norm (over the merge unit's 4D), linear_fc1, linear_fc2}, run on the
//   hidden state after block deepstack_visual_indexes[K].
// config.json's vision_config: num_heads (required unless the width is a multiple of 64),
// deepstack_visual_indexes (required when the file has DeepStack mergers); depth, hidden_size,
// intermediate_size, out_hidden_size, patch_size, spatial_merge_size, temporal_patch_size,
// num_position_embeddings and hidden_act are checked against the tensors. preprocessor_config.json
// as for Qwen2-VL (defaults: mean and std 0.5, 65,536..16,777,216 pixels).
#include <algorithm>
#include <cmath>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

std::optional<std::string> qwen3_prefix(const WeightSource& w) {
  const auto p = shortest_prefix_of(w, "merger.linear_fc1.weight");
  if (!p || !w.info(*p + "patch_embed.proj.weight") || !w.info(*p + "pos_embed.weight") ||
      !w.info(*p + "blocks.0.attn.qkv.weight"))
    return std::nullopt;
  return p;
}

// One Qwen3-VL checkpoint being loaded, read in phases: the dimensions from the tensors,
// config.json, preprocessor_config.json, then the tensors.
struct Qwen3VlRead {
  const Checkpoint& ck;
  const WeightSource& w;
  const std::string& path;
  std::string p;  // the tower's prefix
  VitModel::Impl& m;
  VitConfig& c;
  int64_t U = 0;  // the merger's input width (merge² × D)
  int mergers = 0;  // DeepStack mergers in the file

  Qwen3VlRead(const Checkpoint& ck, VitModel::Impl& m)
      : ck(ck), w(*ck.weights), path(w.path()), p(*qwen3_prefix(w)), m(m), c(m.config) {}
  Error bad(const std::string& why) const { return Error(Errc::corrupt_data, "'" + path + "': " + why); }

  // The width, channels, patch sizes, block count, position grid, merge size, merger and MLP widths.
  void read_dims() {
    read_qwen_patch_embed(w, p, c);
    const int64_t D = c.hidden;
    const auto pos = w.info(p + "pos_embed.weight");
    if (pos->shape.size() != 2 || pos->shape[1] != D)
      throw bad(p + "pos_embed.weight is " + shape_str(pos->shape) + ", not [G·G, " + std::to_string(D) + "]");
    c.grid = square_side(pos->shape[0], path, p + "pos_embed.weight");
    const auto f0 = w.info(p + "merger.linear_fc1.weight"), f2 = w.info(p + "merger.linear_fc2.weight");
    if (!f0 || !f2 || f0->shape.size() != 2 || f2->shape.size() != 2)
      throw bad("the merger needs " + p + "merger.linear_fc1.weight and linear_fc2.weight (matrices)");
    U = f0->shape[1];
    const int merge = int(std::lround(std::sqrt(double(U) / double(D))));
    if (merge < 1 || merge > 16 || int64_t(merge) * merge * D != U)
      throw bad(p + "merger.linear_fc1.weight reads " + std::to_string(U) + " values, not merge² × " + std::to_string(D));
    c.native.merge = merge;
    c.projector = ProjectorType::patch_merger;
    c.projector_hidden = checked_dim(f0->shape[0], 1 << 20, path, "the merger's hidden width");
    c.projector_dim = checked_dim(f2->shape[0], 1 << 20, path, "the language model's width");
    const auto fc1 = w.info(p + "blocks.0.mlp.linear_fc1.weight");
    if (!fc1 || fc1->shape.size() != 2) throw bad("missing or malformed " + p + "blocks.0.mlp.linear_fc1.weight");
    c.mlp = checked_dim(fc1->shape[0], 1 << 20, path, "the MLP width");
  }

  // config.json (the vision_config): the heads and the DeepStack blocks, and every size it
  // repeats checked against the tensors'.
  void read_config() {
    const nlohmann::json& cfg = ck.config;
    const char* cf = "config.json";
    const int64_t D = c.hidden;
    if (!cfg.is_null() && !cfg.is_object()) throw bad("config.json is not an object");
    if (const auto h = cfg_get<int>(cfg, {"num_heads", "num_attention_heads"}, cf)) c.heads = *h;
    else if (D % 64 == 0) c.heads = int(D / 64);  // the released towers: 64-wide heads
    else throw bad("config.json has no vision_config.num_heads, and the width " + std::to_string(D) + " is not a multiple of 64");
    if (c.heads < 1 || D % c.heads || (D / c.heads) % 4)
      throw bad("num_heads = " + std::to_string(c.heads) + " does not divide the width " + std::to_string(D) +
                " into heads whose width is a multiple of 4 (2-D rotary positions)");
    auto agree = [&](std::initializer_list<const char*> keys, int64_t have, const std::string& what) {
      check_agrees(cfg, cf, keys, have, path, "the tensors' " + what);
    };
    agree({"depth"}, c.layers, "block count");
    agree({"hidden_size"}, D, "width");
    agree({"intermediate_size"}, c.mlp, "MLP width");
    agree({"out_hidden_size"}, c.projector_dim, "merger output width");
    agree({"patch_size"}, c.patch_px, "patch size");
    agree({"spatial_merge_size"}, c.native.merge, "merge size");
    agree({"temporal_patch_size"}, c.native.temporal_patch, "temporal patch size");
    agree({"num_position_embeddings"}, int64_t(c.grid) * c.grid, "position table size");
    agree({"in_channels", "in_chans"}, c.channels, "channel count");
    if (const auto a = cfg_get<std::string>(cfg, {"hidden_act"}, cf); a && *a != "gelu_pytorch_tanh")
      throw Error(Errc::unsupported, "'" + path + "': config.json hidden_act '" + *a +
                                         "': Qwen3-VL's tower runs gelu_pytorch_tanh; another activation is not supported");
    mergers = count_layers(w, p + "deepstack_merger_list.");
    if (auto it = cfg.find("deepstack_visual_indexes"); it != cfg.end() && !it->is_null()) {
      if (!it->is_array()) throw bad("config.json deepstack_visual_indexes is not a list");
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.layers)
          throw bad("config.json deepstack_visual_indexes holds " + v.dump() + ", not a block index below " +
                    std::to_string(c.layers));
        c.native.deepstack_blocks.push_back(v.get<int>());
      }
    }
    if (int(c.native.deepstack_blocks.size()) != mergers)
      throw bad("the file has " + std::to_string(mergers) + " DeepStack mergers but config.json's "
                "deepstack_visual_indexes names " + std::to_string(c.native.deepstack_blocks.size()) + " blocks");
  }

  // preprocessor_config.json: the input contract and pixel limits (image and video).
  void read_preprocessor() {
    InputContract half;
    half.mean = {0.5f, 0.5f, 0.5f}, half.std = {0.5f, 0.5f, 0.5f};
    half.source = "Qwen3-VL defaults (mean and std 0.5)";
    read_image_limits(ck, c, half, 65536, 16777216);
    // Qwen3VLVideoProcessor: size.shortest_edge / longest_edge over all frames' pixels, by
    // default 128·32² .. 768·32².
    read_video_limits(ck, c, 128 * 32 * 32, 32 * 32 * 768, true);
  }

  // Block i's tensors (blocks.i.*).
  VitLayer bind_block(Lookup& L, int i) const {
    const int64_t D = c.hidden, M = c.mlp;
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    VitLayer ly;
    ly.ln1_w = L.get(b + "norm1.weight", {D});
    ly.ln1_b = L.get(b + "norm1.bias", {D});
    ly.ln2_w = L.get(b + "norm2.weight", {D});
    ly.ln2_b = L.get(b + "norm2.bias", {D});
    ly.qkv_w = L.matrix(b + "attn.qkv.weight", {3 * D, D});
    ly.qkv_b = L.get(b + "attn.qkv.bias", {3 * D});
    ly.out_w = L.matrix(b + "attn.proj.weight", {D, D});
    ly.out_b = L.get(b + "attn.proj.bias", {D});
    ly.fc1_w = L.matrix(b + "mlp.linear_fc1.weight", {M, D});
    ly.fc1_b = L.get(b + "mlp.linear_fc1.bias", {M});
    ly.fc2_w = L.matrix(b + "mlp.linear_fc2.weight", {D, M});
    ly.fc2_b = L.get(b + "mlp.linear_fc2.bias", {D});
    return ly;
  }

  // DeepStack merger k's tensors (deepstack_merger_list.k.*).
  VitModel::Impl::NativeMerger bind_deepstack(Lookup& L, int k) const {
    const int64_t E = c.projector_dim;
    const std::string b = p + "deepstack_merger_list." + std::to_string(k) + ".";
    VitModel::Impl::NativeMerger dm;
    dm.norm_w = L.get(b + "norm.weight", {U});
    dm.norm_b = L.get(b + "norm.bias", {U});
    dm.fc1_w = L.get(b + "linear_fc1.weight", {U, U});
    dm.fc1_b = L.get(b + "linear_fc1.bias", {U});
    dm.fc2_w = L.get(b + "linear_fc2.weight", {E, U});
    dm.fc2_b = L.get(b + "linear_fc2.bias", {E});
    return dm;
  }

  // Every tensor: the embeddings, the blocks, the merger and the DeepStack mergers.
  void bind_tensors(Lookup& L) {
    const int64_t D = c.hidden, T = c.native.temporal_patch, P = c.patch_px, E = c.projector_dim, Hd = c.projector_hidden;
    m.patch_w = L.get(p + "patch_embed.proj.weight", {D, c.channels, T, P, P}, true, {D, c.channels * T * P * P});
    m.patch_b = L.get(p + "patch_embed.proj.bias", {D});
    m.pos_grid = L.get(p + "pos_embed.weight", {int64_t(c.grid) * c.grid, D});
    for (int i = 0; i < c.layers; ++i) m.layers.push_back(bind_block(L, i));
    m.post_w = L.get(p + "merger.norm.weight", {D});
    m.post_b = L.get(p + "merger.norm.bias", {D});
    m.mm0_w = L.decoded(p + "merger.linear_fc1.weight", {Hd, U});
    m.mm0_b = L.get(p + "merger.linear_fc1.bias", {Hd});
    m.mm2_w = L.decoded(p + "merger.linear_fc2.weight", {E, Hd});
    m.mm2_b = L.get(p + "merger.linear_fc2.bias", {E});
    for (int k = 0; k < mergers; ++k) m.deepstack.push_back(bind_deepstack(L, k));
  }
};

class Qwen3VlLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "hf_qwen3_vl"; }
  bool accepts(const Checkpoint& c) const override { return !c.gguf && qwen3_prefix(*c.weights).has_value(); }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    Qwen3VlRead r(ck, *m);
    c.family = VitFamily::qwen3_vl;
    c.naming = "hf_qwen3_vl";
    c.class_token = false;
    c.final_norm = FinalNorm::none;
    c.ln_eps = 1e-6f;
    c.act = Activation::gelu_tanh;
    c.patch_bias = true;
    r.read_dims();
    r.read_config();
    r.read_preprocessor();
    Lookup L(r.w);
    r.bind_tensors(L);
    L.finish("HF Qwen3-VL");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& hf_qwen3_vl_loader() {
  static const Qwen3VlLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
