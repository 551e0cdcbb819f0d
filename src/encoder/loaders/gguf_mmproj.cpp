// llama.cpp multimodal projector files (mmproj .gguf), as its converters write them
// (tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py, convert_hf_to_gguf.py --mmproj):
//
//   keys     clip.vision.{image_size, patch_size, embedding_length, feed_forward_length,
//            block_count, attention.head_count, attention.layer_norm_epsilon, image_mean,
//            image_std, feature_layer}, clip.projector_type, clip.use_gelu, clip.use_silu
//   tensors  v.patch_embd.weight [D, C, P, P] (ggml ne = [P, P, C, D]), v.patch_embd.bias,
//            v.class_embd, v.position_embd.weight, v.pre_ln, v.post_ln,
//            v.blk.N.{attn_q, attn_k, attn_v, attn_out, ln1, ln2, ffn_up, ffn_down}.{weight,bias},
//            mm.0, mm.2 (the LLaVA MLP projector)
//   projectors  'mlp' runs (→ projected); 'gemma3' and 'idefics3' load their SigLIP tower only
//            (their projectors pool or pixel-shuffle a uniform grid of tokens; VitConfig::
//            ignored_projector says so; idefics3's positions are bucketized, as HF's
//            Idefics3VisionEmbeddings); the other types are refused by name.
//
// The tensors are read as llama.cpp stores them; the computation is the trained model's (HF's
// modeling code): the class token first at position 0 and patch i at position 1 + i, pre_ln when
// present, the blocks, post_ln on every token when present, then the projector over the patch
// tokens (the class token is dropped). Where llama.cpp's LLaVA graph (tools/mtmd/models/llava.cpp)
// differs, fovea follows HF (docs/reference/models.md, "fovea and llama.cpp on the same mmproj
// file"; tests/python/test_encoder_gguf_llava.py pins it):
//   * positions: llama.cpp appends the class token after the patches and adds the position rows
//     in order, so each patch gets the row of the token before it. fovea does not.
//   * which block the projector reads: LLaVA was trained on HF's hidden_states[-2]. The
//     converter already drops the last block (block_count = L − 1, blocks 0..L−2 stored), so
//     fovea runs every stored block. llama.cpp's graph subtracts one more (il_last = n_layer − 1
//     without a feature_layer key), i.e. reads one block short of what the projector was trained on.
//     clip.vision.feature_layer = [f] (granite-vision style) reads hidden_states[f]: f blocks.
//   * ffn_up / ffn_down: the legacy converter wrote HF's fc1 as ffn_down and fc2 as ffn_up;
//     llama.cpp's loader swaps them back when ffn_down's input width is D. fovea does the same when
//     the shapes say so (M ≠ D), and, when M = D, for the mlp projector (the same rule).
//   * the projector's GELU is the exact (erf) GELU of HF's LlavaMultiModalProjector; ggml_gelu
//     is the tanh approximation (a ~1e-3 relative difference on the projector's hidden layer).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "encoder/loaders/loader.hpp"
#include "fovea/error.hpp"
#include "fovea/gguf.hpp"

namespace fovea::encoder_detail {
namespace {

// llama.cpp's projector types (clip-impl.h PROJECTOR_TYPE_NAMES) that fovea does not run.
constexpr const char* kOtherProjectors =
    "mlp_norm, ldp, ldpv2, resampler, adapter, qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger, pixtral, "
    "internvl, llama4, phi4, kimivl, lfm2, cogvlm, janus_pro, glm4v and the audio types";

// A name the file gives, quoted in a message: the first 64 bytes of a long one, so the message
// still ends by saying what is wrong (fovea::Error cuts messages at 4096 bytes).
std::string clipped(const std::string& s) {
  if (s.size() <= 64) return s;
  size_t n = 64;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;  // not inside a UTF-8 character
  return s.substr(0, n) + "... (" + std::to_string(s.size()) + " bytes)";
}

// One mmproj file's keys and tensors, read for the model being loaded: every message names the
// file.
struct MmprojFile {
  const GgufFile& g;
  const WeightSource& w;
  const std::string& path;
  static constexpr int kBig = 1 << 16;

  Error fail(Errc code, const std::string& why) const { return Error(code, "'" + path + "': " + why); }
  const GgufValue& key(const char* k) const {
    const GgufValue* v = g.find_kv(k);
    if (!v) throw fail(Errc::corrupt_data, "missing GGUF key " + std::string(k) + " (not a llama.cpp mmproj file?)");
    return *v;
  }
  int int_key(const char* k, int64_t lo, int64_t hi) const {
    // GgufValue::as_int takes a BOOL as 0 or 1; a size or a count stored as one is corrupt.
    if (key(k).type == GgufType::boolean) throw fail(Errc::corrupt_data, std::string(k) + " is a BOOL, expected an integer");
    const int64_t v = key(k).as_int(k);
    if (v < lo || v > hi)
      throw fail(Errc::corrupt_data, std::string(k) + " = " + std::to_string(v) + " is out of range [" +
                                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return int(v);
  }
  bool opt_bool(const char* k) const {
    const GgufValue* v = g.find_kv(k);
    return v ? v->as_bool(k) : false;
  }
  std::array<float, 3> three(const char* k) const {
    const std::vector<double> x = key(k).as_floats(k);
    if (x.size() != 3)
      throw Error(Errc::corrupt_data, "'" + path + "': " + k + " has " + std::to_string(x.size()) + " values, expected 3");
    return {float(x[0]), float(x[1]), float(x[2])};
  }

  // Throws unless the file is a vision tower's (llama.cpp's 'clip' architecture).
  void check_vision_tower() const {
    if (const GgufValue* a = g.find_kv("general.architecture"); a && a->as_string("general.architecture") != "clip")
      throw fail(Errc::unsupported, "GGUF architecture '" + clipped(a->as_string("general.architecture")) +
                                        "' is not a vision tower (llama.cpp mmproj files say 'clip'); pass the "
                                        "mmproj file, not the language model");
    if (const GgufValue* v = g.find_kv("clip.has_vision_encoder"); v && !v->as_bool("clip.has_vision_encoder"))
      throw fail(Errc::unsupported, "clip.has_vision_encoder is false: the file holds no vision tower");
  }

  // The projector type: the one fovea runs, one whose tower alone it runs, or an error.
  void read_projector(VitConfig& c) const {
    std::string ptype;
    for (const char* k : {"clip.vision.projector_type", "clip.projector_type"})
      if (const GgufValue* v = g.find_kv(k)) {
        ptype = v->as_string(k);
        break;
      }
    if (ptype.empty() && (opt_bool("clip.has_llava_projector") || w.info("mm.0.weight"))) ptype = "mlp";
    if (ptype == "mlp") {
      c.projector = ProjectorType::mlp;
    } else if (ptype == "gemma3") {  // a SigLIP tower; the projector pools 4x4 blocks of the grid
      c.ignored_projector = "llama.cpp's gemma3 projector: 4x4 average pooling of the patch grid, RMSNorm, a linear layer";
    } else if (ptype == "idefics3") {  // SmolVLM / Idefics3: a SigLIP tower with bucketized positions
      c.ignored_projector = "llama.cpp's idefics3 projector: pixel shuffle of s x s neighbours, then a linear layer";
      c.pos_sampling = PositionSampling::bucketized;
    } else if (!ptype.empty())
      throw fail(Errc::unsupported, "projector type '" + clipped(ptype) + "' is not supported: fovea runs 'mlp' (LLaVA's " +
                                        "MLP projector), the towers of 'gemma3' and 'idefics3' (their projectors " +
                                        "group a uniform grid: not run) and towers without a projector; llama.cpp's " +
                                        kOtherProjectors + " are not");
  }

  // The tower's sizes, activation and input normalisation. Returns the block count.
  int read_hyper_parameters(VitConfig& c) const {
    c.hidden = int_key("clip.vision.embedding_length", 1, kBig);
    c.mlp = int_key("clip.vision.feed_forward_length", 1, 1 << 20);
    const int blocks = int_key("clip.vision.block_count", 1, 4096);
    c.heads = int_key("clip.vision.attention.head_count", 1, kBig);
    c.patch_px = int_key("clip.vision.patch_size", 1, 4096);
    const int image_size = int_key("clip.vision.image_size", 1, 1 << 20);
    c.ln_eps = float(key("clip.vision.attention.layer_norm_epsilon").as_float("clip.vision.attention.layer_norm_epsilon"));
    if (!(c.ln_eps > 0) || c.ln_eps > 1) throw fail(Errc::corrupt_data, "clip.vision.attention.layer_norm_epsilon is out of range");
    if (c.hidden % c.heads != 0)
      throw fail(Errc::corrupt_data, "clip.vision.attention.head_count = " + std::to_string(c.heads) +
                                         " does not divide clip.vision.embedding_length " + std::to_string(c.hidden) +
                                         " (the heads split the width)");
    if (image_size % c.patch_px != 0)
      throw fail(Errc::unsupported, "image_size " + std::to_string(image_size) + " is not a multiple of patch_size " +
                                        std::to_string(c.patch_px));
    c.grid = image_size / c.patch_px;
    const bool gelu = opt_bool("clip.use_gelu");
    if (opt_bool("clip.use_silu")) throw fail(Errc::unsupported, "clip.use_silu (SiLU MLP blocks) is not supported");
    // ggml_gelu is the tanh approximation: SigLIP's gelu_pytorch_tanh.
    c.act = gelu ? Activation::gelu_tanh : Activation::quick_gelu;

    c.input.mean = three("clip.vision.image_mean");
    c.input.std = three("clip.vision.image_std");
    for (float s : c.input.std)
      if (!(s > 0) || !std::isfinite(s)) throw fail(Errc::corrupt_data, "clip.vision.image_std values must be finite and > 0");
    for (float v : c.input.mean)
      if (!std::isfinite(v)) throw fail(Errc::corrupt_data, "clip.vision.image_mean values must be finite");
    c.input.rescale = 1.0f / 255.0f;
    c.input.normalize = true;
    c.input.source = "GGUF clip.vision.image_mean / image_std";
    return blocks;
  }

  // The blocks the tower runs: the projector reads the output of the last.
  void read_feature_layer(VitConfig& c, int blocks) const {
    c.layers_in_checkpoint = count_layers(w, "v.blk.");
    c.layers = blocks;
    if (const GgufValue* fl = g.find_kv("clip.vision.feature_layer")) {
      const std::vector<int64_t> layers = fl->as_ints("clip.vision.feature_layer");
      if (layers.size() != 1)
        throw fail(Errc::unsupported, "clip.vision.feature_layer lists " + std::to_string(layers.size()) +
                                          " layers; concatenated features from several layers are not supported");
      if (layers[0] < 0 || layers[0] > blocks)
        throw fail(Errc::corrupt_data, "clip.vision.feature_layer " + std::to_string(layers[0]) +
                                           " is outside the " + std::to_string(blocks) + " blocks");
      c.layers = int(layers[0]);
    }
  }

  // What the tensors present say: channels, class token, patch bias, the norms.
  void read_tensor_layout(VitConfig& c) const {
    const auto pe = w.info("v.patch_embd.weight");
    if (!pe)
      throw fail(Errc::corrupt_data, "missing tensor v.patch_embd.weight (not a vision mmproj file?)");
    if (pe->shape.size() != 4 || pe->shape[0] != c.hidden || pe->shape[2] != c.patch_px || pe->shape[3] != c.patch_px)
      throw fail(Errc::corrupt_data, "v.patch_embd.weight has shape " + shape_str(pe->shape) + ", expected [" +
                                         std::to_string(c.hidden) + ", C, " + std::to_string(c.patch_px) + ", " +
                                         std::to_string(c.patch_px) + "] (ggml ne reversed)");
    c.channels = int(pe->shape[1]);
    c.class_token = w.info("v.class_embd").has_value();
    c.family = c.class_token ? VitFamily::clip : VitFamily::siglip;
    c.patch_bias = w.info("v.patch_embd.bias").has_value();
    // A norm is there when either of its tensors is: the other one is then required (a bias
    // without its weight is a damaged file, not a model without the norm).
    auto either = [&](const std::string& n) { return w.info(n + ".weight") || w.info(n + ".bias"); };
    c.pre_norm = either("v.pre_ln");
    c.final_norm = either("v.post_ln") ? FinalNorm::all_tokens : FinalNorm::none;
  }

  // Block i's tensors (v.blk.i.*), fc1 and fc2 as the shapes say (the legacy converter swapped them).
  VitLayer bind_block(Lookup& L, const VitConfig& c, int i) const {
    const int64_t D = c.hidden, M = c.mlp;
    const std::string l = "v.blk." + std::to_string(i) + ".";
    VitLayer ly;
    ly.ln1_w = L.get(l + "ln1.weight", {D});
    ly.ln1_b = L.get(l + "ln1.bias", {D});
    const char* names[3] = {"attn_q", "attn_k", "attn_v"};
    ly.qkv_w = L.stacked({l + "attn_q.weight", l + "attn_k.weight", l + "attn_v.weight"}, D, D);
    if (present(ly.qkv_w)) ly.qkv_b = Tensor(DType::f32, {3 * D});
    for (int j = 0; j < 3; ++j) {
      const Tensor b = L.get(l + names[j] + ".bias", {D}, /*required=*/false);
      if (present(ly.qkv_w) && present(b)) std::memcpy(ly.qkv_b.bytes() + size_t(j * D) * 4, b.bytes(), size_t(D) * 4);
    }
    ly.out_w = L.matrix(l + "attn_out.weight", {D, D});
    ly.out_b = L.get(l + "attn_out.bias", {D}, false);
    ly.ln2_w = L.get(l + "ln2.weight", {D});
    ly.ln2_b = L.get(l + "ln2.bias", {D});
    std::string up = l + "ffn_up.", down = l + "ffn_down.";
    const auto dn = w.info(down + "weight");
    if (dn && dn->shape.size() == 2 && dn->shape[1] == D && (M != D || c.projector == ProjectorType::mlp)) {
      std::swap(up, down);  // the legacy converter's fc1 → ffn_down, fc2 → ffn_up
    }
    ly.fc1_w = L.matrix(up + "weight", {M, D});
    ly.fc1_b = L.get(up + "bias", {M}, false);
    ly.fc2_w = L.matrix(down + "weight", {D, M});
    ly.fc2_b = L.get(down + "bias", {D}, false);
    return ly;
  }

  // The tower's tensors: embeddings, norms and blocks.
  void bind_tower(Lookup& L, VitModel::Impl& m) const {
    const VitConfig& c = m.config;
    const int64_t D = c.hidden, C = c.channels, P = c.patch_px, G = c.grid;
    m.patch_w = L.get("v.patch_embd.weight", {D, C, P, P}, true, {D, C * P * P});
    if (c.patch_bias) m.patch_b = L.get("v.patch_embd.bias", {D});
    if (c.class_token) {
      m.class_emb = L.get("v.class_embd", {D});
      split_class_position(L.get("v.position_embd.weight", {G * G + 1, D}), D, m);
    } else {
      m.pos_grid = L.get("v.position_embd.weight", {G * G, D});
    }
    if (c.pre_norm) {
      m.pre_w = L.get("v.pre_ln.weight", {D});
      m.pre_b = L.get("v.pre_ln.bias", {D});
    }
    for (int i = 0; i < c.layers; ++i) m.layers.push_back(bind_block(L, c, i));
    if (c.final_norm == FinalNorm::all_tokens) {
      m.post_w = L.get("v.post_ln.weight", {D});
      m.post_b = L.get("v.post_ln.bias", {D});
    }
  }

  // The MLP projector's layers (mm.0, and mm.2 when present), their widths from the tensors.
  void bind_mlp_projector(Lookup& L, VitModel::Impl& m) const {
    VitConfig& c = m.config;
    const int64_t D = c.hidden;
    // The widths come from the tensors (the weight's rows, else the bias's length); a zero
    // width would be a projector that outputs nothing.
    auto width = [&](const char* name) -> int64_t {
      const std::string n = name;
      const auto wt = w.info(n + ".weight");
      const auto b = w.info(n + ".bias");
      const int64_t e = wt && wt->shape.size() == 2 ? wt->shape[0] : b && b->shape.size() == 1 ? b->shape[0] : -1;
      if (e < 0)
        throw fail(Errc::corrupt_data, "the projector is an MLP (projector type 'mlp' or LLaVA's keys) but the file "
                                       "has no " + n + ".weight or " + n + ".bias");
      if (e == 0 || e > kBig)
        throw fail(Errc::corrupt_data, "the projector's " + n + " has width " + std::to_string(e) + ", outside [1, " +
                                           std::to_string(kBig) + "]");
      return e;
    };
    const int64_t E1 = width("mm.0");
    m.mm0_w = L.matrix("mm.0.weight", {E1, D});
    m.mm0_b = L.get("mm.0.bias", {E1});
    c.projector_hidden = int(E1);
    c.projector_dim = int(E1);
    if (w.info("mm.2.weight") || w.info("mm.2.bias")) {  // the second layer; both of its tensors
      const int64_t E = width("mm.2");
      m.mm2_w = L.matrix("mm.2.weight", {E, E1});
      m.mm2_b = L.get("mm.2.bias", {E});
      c.projector_dim = int(E);
    }
  }
};

class GgufMmprojLoader final : public ModelLoader {
 public:
  std::string_view name() const override { return "gguf_mmproj"; }
  bool accepts(const Checkpoint& c) const override { return c.gguf != nullptr; }

  std::shared_ptr<VitModel::Impl> load(const Checkpoint& ck) const override {
    const MmprojFile f{*ck.gguf, *ck.weights, ck.gguf->path()};
    f.check_vision_tower();
    auto m = std::make_shared<VitModel::Impl>();
    VitConfig& c = m->config;
    c.naming = "gguf_mmproj";
    f.read_projector(c);
    const int blocks = f.read_hyper_parameters(c);
    f.read_feature_layer(c, blocks);
    f.read_tensor_layout(c);
    Lookup L(f.w);
    f.bind_tower(L, *m);
    if (c.projector == ProjectorType::mlp) f.bind_mlp_projector(L, *m);
    L.finish(c.projector == ProjectorType::mlp ? "llama.cpp LLaVA mmproj" : "llama.cpp mmproj vision");
    m->tensors_used = L.used();
    return m;
  }
};

}  // namespace

const ModelLoader& gguf_mmproj_loader() {
  static const GgufMmprojLoader loader;
  return loader;
}

}  // namespace fovea::encoder_detail
