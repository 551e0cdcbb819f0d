// HF Qwen2-VL and Qwen2.5-VL vision towers (Qwen2VLForConditionalGeneration,
// Qwen2_5_VLForConditionalGeneration; the whole VLM's checkpoint, single-file or sharded, with
// the tower under `visual.` or `model.visual.`, or the tower saved alone):
//   patch_embed.proj.weight [D, C, T, P, P] (Conv3d, no bias), blocks.N.{norm1, norm2,
//   attn.qkv, attn.proj}, the MLP (Qwen2-VL: mlp.fc1 / fc2, QuickGELU; Qwen2.5-VL:
//   mlp.gate_proj / up_proj / down_proj, SiLU gate, stacked into one fc1 as gate | up), and
//   merger.{ln_q, mlp.0, mlp.2}. Qwen2-VL's norms are LayerNorms (weight and bias), Qwen2.5-VL's
//   RMSNorms (weight only); eps 1e-6 for both.
// config.json (the VLM's vision_config, or the tower's own): num_heads (required: the shapes do
// not tell it), Qwen2.5-VL's window_size and fullatt_block_indexes, tokens_per_second; depth,
// embed_dim / hidden_size, patch_size, spatial_merge_size, temporal_patch_size and the merger's
// width are checked against the tensors when present. preprocessor_config.json: image_mean,
// image_std, rescale, min_pixels / max_pixels (or size.shortest_edge / longest_edge),
// patch_size, merge_size and temporal_patch_size (checked). video_preprocessor_config.json (or,
// without it, preprocessor_config.json): the video processor's pixel limits (read_video_limits).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"

namespace fovea::encoder_detail {
namespace {

// The tower's prefix: the shortest one before `patch_embed.proj.weight` beside `merger.ln_q.weight`.
std::optional<std::string> qwen_prefix(const WeightSource& w) {
  const auto p = shortest_prefix_of(w, "merger.ln_q.weight");
  if (!p || !w.info(*p + "patch_embed.proj.weight") || !w.info(*p + "blocks.0.attn.qkv.weight")) return std::nullopt;
  return p;
}

bool gated(const WeightSource& w, const std::string& p) { return w.info(p + "blocks.0.mlp.gate_proj.weight").has_value(); }

Tensor concat(const Tensor& a, const Tensor& b) {
  if (!present(a) || !present(b)) return Tensor();
  Tensor t(DType::f32, {a.numel() + b.numel()});
  std::memcpy(t.data<float>(), a.data<float>(), size_t(a.numel()) * 4);
  std::memcpy(t.data<float>() + a.numel(), b.data<float>(), size_t(b.numel()) * 4);
  return t;
}

// One Qwen2-VL or Qwen2.5-VL checkpoint being loaded, read in phases: the dimensions from the
// tensors, config.json, preprocessor_config.json, then the tensors.
struct QwenVlRead {
  const Checkpoint& ck;
  const WeightSource& w;
  const std::string& path;
  bool qwen25;
  std::string p;  // the tower's prefix
  VitModel::Impl& m;
  VitConfig& c;
  std::string mlp0, mlp2;  // the merger's matrices
  int64_t U = 0;           // the merger's input width (merge² × D)
  int merge = 0;

  QwenVlRead(const Checkpoint& ck, bool qwen25, VitModel::Impl& m)
      : ck(ck), w(*ck.weights), path(w.path()), qwen25(qwen25), p(*qwen_prefix(w)), m(m), c(m.config),
        mlp0(p + "merger.mlp.0.weight"), mlp2(p + "merger.mlp.2.weight") {}
  Error bad(const std::string& why) const { return Error(Errc::corrupt_data, "'" + path + "': " + why); }

  // The width, channels, patch sizes, block count, merge size, merger and MLP widths.
  void read_dims() {
    read_qwen_patch_embed(w, p, c);
    const int64_t D = c.hidden;
    const auto i0 = w.info(mlp0), i2 = w.info(mlp2);
    if (!i0 || !i2 || i0->shape.size() != 2 || i2->shape.size() != 2)
      throw bad("the merger needs " + mlp0 + " and " + mlp2 + " (matrices)");
    U = i0->shape[1];
    merge = int(std::lround(std::sqrt(double(U) / double(D))));
    if (merge < 1 || merge > 16 || int64_t(merge) * merge * D != U)
      throw bad(mlp0 + " reads " + std::to_string(U) + " values, not merge² × " + std::to_string(D) +
                " (the tower's width) for a square merge unit");
    c.native.merge = merge;
    c.projector = ProjectorType::patch_merger;
    c.projector_hidden = int(checked_dim(i0->shape[0], 1 << 20, path, "the merger's hidden width"));
    c.projector_dim = int(checked_dim(i2->shape[0], 1 << 20, path, "the language model's width"));
    const std::string fc1 = p + (qwen25 ? "blocks.0.mlp.gate_proj.weight" : "blocks.0.mlp.fc1.weight");
    const auto f1 = w.info(fc1);
    if (!f1 || f1->shape.size() != 2) throw bad("missing or malformed " + fc1);
    c.mlp = checked_dim(f1->shape[0], 1 << 20, path, "the MLP width");
  }

  // config.json (the vision_config): the heads, Qwen2.5-VL's windows and time scale, and every
  // size it repeats checked against the tensors'.
  void read_config() {
    const nlohmann::json& cfg = ck.config;
    const char* cf = "config.json";
    const int64_t D = c.hidden;
    if (!cfg.is_null() && !cfg.is_object()) throw bad("config.json is not an object");
    const auto heads = cfg_get<int>(cfg, {"num_heads", "num_attention_heads"}, cf);
    if (heads) {
      c.heads = *heads;
    } else if (D % 80 == 0) {
      c.heads = int(D / 80);  // every released Qwen2-VL / Qwen2.5-VL tower: 80-wide heads
    } else {
      throw bad("config.json has no vision_config.num_heads, and the width " + std::to_string(D) +
                " is not a multiple of the released towers' 80-wide heads");
    }
    if (c.heads < 1 || D % c.heads || (D / c.heads) % 4)
      throw bad("num_heads = " + std::to_string(c.heads) + " does not divide the width " + std::to_string(D) +
                " into heads whose width is a multiple of 4 (2-D rotary positions)");
    auto agree = [&](std::initializer_list<const char*> keys, int64_t have, const std::string& what) {
      check_agrees(cfg, cf, keys, have, path, "the tensors' " + what);
    };
    agree({"depth"}, c.layers, "block count");
    agree({"patch_size", "spatial_patch_size"}, c.patch_px, "patch size");
    agree({"spatial_merge_size"}, merge, "merge size");
    agree({"temporal_patch_size"}, c.native.temporal_patch, "temporal patch size");
    agree({"in_chans", "in_channels"}, c.channels, "channel count");
    if (qwen25) {
      agree({"hidden_size"}, D, "width");
      agree({"intermediate_size"}, c.mlp, "MLP width");
      agree({"out_hidden_size"}, c.projector_dim, "merger output width");
      read_windows();
    } else {
      agree({"embed_dim"}, D, "width");
      agree({"hidden_size"}, c.projector_dim, "merger output width");
      if (const auto a = cfg_get<std::string>(cfg, {"hidden_act"}, cf); a && *a != "quick_gelu")
        throw Error(Errc::unsupported, "'" + path + "': config.json hidden_act '" + *a +
                                           "': Qwen2-VL's tower runs quick_gelu; another activation is not supported");
    }
    if (qwen25)
      if (const auto a = cfg_get<std::string>(cfg, {"hidden_act"}, cf); a && *a != "silu")
        throw Error(Errc::unsupported, "'" + path + "': config.json hidden_act '" + *a +
                                           "': Qwen2.5-VL's gated MLP runs silu; another activation is not supported");
  }

  // Qwen2.5-VL's window_size, fullatt_block_indexes and tokens_per_second (config.json).
  void read_windows() {
    const nlohmann::json& cfg = ck.config;
    const char* cf = "config.json";
    c.native.window_px = cfg_get<int>(cfg, {"window_size"}, cf).value_or(112);
    if (c.native.window_px < c.patch_px * merge || c.native.window_px > (1 << 20))
      throw bad("config.json window_size = " + std::to_string(c.native.window_px) +
                " is smaller than one merge unit (" + std::to_string(c.patch_px * merge) + " px) or out of range");
    auto it = cfg.find("fullatt_block_indexes");
    if (it != cfg.end() && !it->is_null()) {
      if (!it->is_array()) throw bad("config.json fullatt_block_indexes is not a list");
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.layers)
          throw bad("config.json fullatt_block_indexes holds " + v.dump() + ", not a block index below " +
                    std::to_string(c.layers));
        c.native.full_attention_blocks.push_back(v.get<int>());
      }
    } else {
      // The released towers: every 8th block from the 8th (7, 15, 23, 31 of 32).
      for (int i = 7; i < c.layers; i += 8) c.native.full_attention_blocks.push_back(i);
    }
    c.native.tokens_per_second = cfg_get<int>(cfg, {"tokens_per_second"}, cf).value_or(2);
    if (c.native.tokens_per_second < 0 || c.native.tokens_per_second > 1000000)
      throw bad("config.json tokens_per_second is out of range");
  }

  // preprocessor_config.json: the input contract and pixel limits (image and video).
  void read_preprocessor() {
    InputContract clip;
    clip.source = "Qwen2-VL defaults (OpenAI CLIP mean and std)";
    read_image_limits(ck, c, clip, 56 * 56, 28 * 28 * 1280);
    // Qwen2VLVideoProcessor (Qwen2.5-VL's too): 128·28² .. 768·28² pixels a frame by default.
    read_video_limits(ck, c, 128 * 28 * 28, 28 * 28 * 768, false);
  }

  // Block i's tensors (blocks.i.*): LayerNorms or RMSNorms, the attention, the MLP (Qwen2.5-VL's
  // gate | up stacked as fc1).
  VitLayer bind_block(Lookup& L, int i) const {
    const int64_t D = c.hidden, M = c.mlp;
    const std::string b = p + "blocks." + std::to_string(i) + ".";
    VitLayer ly;
    ly.ln1_w = L.get(b + "norm1.weight", {D});
    ly.ln2_w = L.get(b + "norm2.weight", {D});
    if (!qwen25) {
      ly.ln1_b = L.get(b + "norm1.bias", {D});
      ly.ln2_b = L.get(b + "norm2.bias", {D});
    }
    ly.qkv_w = L.matrix(b + "attn.qkv.weight", {3 * D, D});
    ly.qkv_b = L.get(b + "attn.qkv.bias", {3 * D});
    ly.out_w = L.matrix(b + "attn.proj.weight", {D, D});
    ly.out_b = L.get(b + "attn.proj.bias", {D});
    if (qwen25) {
      ly.fc1_w = L.stacked({b + "mlp.gate_proj.weight", b + "mlp.up_proj.weight"}, M, D);
      ly.fc1_b = concat(L.get(b + "mlp.gate_proj.bias", {M}), L.get(b + "mlp.up_proj.bias", {M}));
      ly.fc2_w = L.matrix(b + "mlp.down_proj.weight", {D, M});
      ly.fc2_b = L.get(b + "mlp.down_proj.bias", {D});
    } else {
      ly.fc1_w = L.matrix(b + "mlp.fc1.weight", {M, D});
      ly.fc1_b = L.get(b + "mlp.fc1.bias", {M});
      ly.fc2_w = L.matrix(b + "mlp.fc2.weight", {D, M});
      ly.fc2_b = L.get(b + "mlp.fc2.bias", {D});
    }
    return ly;
  }

  // Every tensor: the patch embedding, the blocks and the merger.
  void bind_tensors(Lookup& L) {
    const int64_t D = c.hidden, T = c.native.temporal_patch, P = c.patch_px;
    m.patch_w = L.get(p + "patch_embed.proj.weight", {D, c.channels, T, P, P}, true, {D, c.channels * T * P * P});
    m.patch_b = L.get(p + "patch_embed.proj.bias", {D}, false);
    for (int i = 0; i < c.layers; ++i) m.layers.push_back(bind_block(L, i));
    m.post_w = L.get(p + "merger.ln_q.weight", {D});
    if (!qwen25) m.post_b = L.get(p + "merger.ln_q.bias", {D});
    const int64_t Hd = c.projector_hidden, E = c.projector_dim;
    m.mm0_w = L.decoded(mlp0, {Hd, U});
    m.mm0_b = L.get(p + "merger.mlp.0.bias", {Hd});
    m.mm2_w = L.decoded(mlp2, {E, Hd});
    m.mm2_b = L.get(p + "merger.mlp.2.bias", {E});
  }
};

class QwenVlLoader final : public ModelLoader {
 public:
  explicit QwenVlLoader(bool qwen25) : qwen25_(qwen25) {}
  std::string_view name() const override { return qwen25_ ? "hf_qwen2_5_vl" : "hf_qwen2_vl"; }
  bool accepts(const Checkpoint& c) const override {
    if (c.gguf) return false;
    const auto p = qwen_prefix(*c.weights);
    return p && gated(*c.weights, *p) == qwen25_;
  }
  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const std::string what = qwen25_ ? "HF Qwen2.5-VL" : "HF Qwen2-VL";
    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    QwenVlRead r(ck, qwen25_, *m);
    c.family = qwen25_ ? VitFamily::qwen2_5_vl : VitFamily::qwen2_vl;
    c.naming = std::string(name());
    c.class_token = false;
    c.final_norm = FinalNorm::none;
    c.ln_eps = 1e-6f;
    c.act = qwen25_ ? Activation::swiglu : Activation::quick_gelu;
    c.native.rms_norm = qwen25_;
    r.read_dims();
    r.read_config();
    r.read_preprocessor();
    c.grid = 0;
    Lookup L(r.w);
    r.bind_tensors(L);
    L.finish(what);
    m->tensors_used = L.used();
    return m;
  }

 private:
  bool qwen25_;
};

}  // namespace

const ModelLoader& hf_qwen2_vl_loader() {
  static const QwenVlLoader loader(false);
  return loader;
}
const ModelLoader& hf_qwen2_5_vl_loader() {
  static const QwenVlLoader loader(true);
  return loader;
}

namespace {
// A processor file's pixel limits: min_pixels / max_pixels (unless `size_only`), else
// size.shortest_edge / longest_edge; each unset when the file gives neither.
std::pair<std::optional<int64_t>, std::optional<int64_t>> pixel_limits(const nlohmann::json& pre, const char* file,
                                                                       bool size_only) {
  std::optional<int64_t> mn, mx;
  if (!size_only) mn = cfg_get<int64_t>(pre, {"min_pixels"}, file), mx = cfg_get<int64_t>(pre, {"max_pixels"}, file);
  if (auto it = pre.find("size"); it != pre.end() && it->is_object()) {
    if (!mn) mn = cfg_get<int64_t>(*it, {"shortest_edge"}, file);
    if (!mx) mx = cfg_get<int64_t>(*it, {"longest_edge"}, file);
  }
  return {mn, mx};
}
}  // namespace

void read_qwen_patch_embed(const WeightSource& w, const std::string& p, VitConfig& c) {
  const std::string& path = w.path();
  auto bad = [&](const std::string& why) { return Error(Errc::corrupt_data, "'" + path + "': " + why); };
  const auto pe = w.info(p + "patch_embed.proj.weight");
  if (pe->shape.size() != 5 || pe->shape[3] != pe->shape[4])
    throw bad(p + "patch_embed.proj.weight is " + shape_str(pe->shape) + ", not a Conv3d kernel [D, C, T, P, P]");
  c.hidden = checked_dim(pe->shape[0], 1 << 16, path, "the tower's width");
  c.channels = checked_dim(pe->shape[1], 16, path, "the input channels");
  c.native.temporal_patch = checked_dim(pe->shape[2], 64, path, "the temporal patch size");
  c.patch_px = checked_dim(pe->shape[3], 1024, path, "the patch size");
  c.layers = c.layers_in_checkpoint = count_layers(w, p + "blocks.");
  if (c.layers < 1) throw bad("no " + p + "blocks.0.* tensors");
}

void read_image_limits(const Checkpoint& ck, VitConfig& c, const InputContract& defaults, int64_t default_min,
                       int64_t default_max) {
  const std::string& path = ck.weights->path();
  auto bad = [&](const std::string& why) { return Error(Errc::corrupt_data, "'" + path + "': " + why); };
  const nlohmann::json& pre = ck.preprocessor;
  const char* pf = "preprocessor_config.json";
  if (!pre.is_null() && !pre.is_object()) throw bad("preprocessor_config.json is not an object");
  c.input = contract_from_preprocessor(pre, defaults);
  c.native.min_pixels = default_min;
  c.native.max_pixels = default_max;
  if (pre.is_object()) {
    const auto [mn, mx] = pixel_limits(pre, pf, false);
    if (mn) c.native.min_pixels = *mn;
    if (mx) c.native.max_pixels = *mx;
    check_agrees(pre, pf, {"patch_size"}, c.patch_px, path, "the tensors' patch size");
    check_agrees(pre, pf, {"merge_size"}, c.native.merge, path, "the tensors' merge size");
    check_agrees(pre, pf, {"temporal_patch_size"}, c.native.temporal_patch, path, "the tensors' temporal patch size");
  }
  if (c.native.min_pixels < 1 || c.native.max_pixels < c.native.min_pixels || c.native.max_pixels > (int64_t(1) << 40))
    throw bad("preprocessor_config.json's pixel limits (min " + std::to_string(c.native.min_pixels) + ", max " +
              std::to_string(c.native.max_pixels) + ") are not 1 <= min_pixels <= max_pixels <= 2^40");
}

void read_video_limits(const Checkpoint& ck, VitConfig& c, int64_t default_min, int64_t default_max, bool size_only) {
  NativeConfig& n = c.native;
  const bool own = ck.video_preprocessor.is_object();
  const nlohmann::json& pre = own ? ck.video_preprocessor : ck.preprocessor;
  const char* pf = own ? "video_preprocessor_config.json" : "preprocessor_config.json";
  const std::string path = ck.weights ? ck.weights->path() : ck.path;
  auto bad = [&](const std::string& why) { return Error(Errc::corrupt_data, "'" + path + "': " + why); };
  if (!ck.video_preprocessor.is_null() && !own) throw bad("video_preprocessor_config.json is not an object");
  n.video_min_pixels = default_min, n.video_max_pixels = default_max;
  n.video_limits_source = "the video processor's defaults";
  if (pre.is_object()) {
    const auto [mn, mx] = pixel_limits(pre, pf, size_only);
    if (mn) n.video_min_pixels = *mn;
    if (mx) n.video_max_pixels = *mx;
    if (mn || mx) n.video_limits_source = pf;
    if (own) {
      check_agrees(pre, pf, {"patch_size"}, c.patch_px, path, "the tower's");
      check_agrees(pre, pf, {"merge_size"}, n.merge, path, "the tower's");
      check_agrees(pre, pf, {"temporal_patch_size"}, n.temporal_patch, path, "the tower's");
    }
  }
  if (n.video_min_pixels < 1 || n.video_max_pixels < n.video_min_pixels || n.video_max_pixels > (int64_t(1) << 40))
    throw bad(std::string(pf) + "'s video pixel limits (min " + std::to_string(n.video_min_pixels) + ", max " +
              std::to_string(n.video_max_pixels) + ") are not 1 <= min <= max <= 2^40");
  n.video_limits_over_frames = size_only;
}

}  // namespace fovea::encoder_detail
