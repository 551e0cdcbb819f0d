// Private to src/encoder: checkpoint loading. One loader per naming (hf_clip.cpp, hf_siglip.cpp,
// hf_llava.cpp, torchvision.cpp, gguf_mmproj.cpp, hf_vit.cpp, hf_dinov2.cpp, timm_vit.cpp, hf_blip.cpp, ...) behind
// ModelLoader; every loader reads tensors through a WeightSource (safetensors, GGUF or a PyTorch checkpoint) and takes
// them with one Lookup, which checks presence, type and shape and reports every problem of a
// file in one error.
#pragma once

#include <cstring>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "encoder/encoder_internal.hpp"
#include "fovea/error.hpp"

namespace fovea {
class GgufFile;
class SafetensorsFile;
class TorchCheckpoint;

namespace encoder_detail {

// Tensors by name from one checkpoint file, whatever its format. Shapes are row-major
// (PyTorch's order; a GGUF tensor's ggml dims reversed).
class WeightSource {
 public:
  struct Info {
    std::vector<int64_t> shape;
    std::string dtype;  // as the format names it: "BF16", "Q8_0", ...
  };
  virtual ~WeightSource() = default;
  virtual const std::string& path() const = 0;
  virtual std::optional<Info> info(std::string_view name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Why the tensor cannot be decoded to float32 (its type), or nullopt when it can.
  virtual std::optional<std::string> type_problem(std::string_view name) const = 0;
  virtual Tensor load_f32(std::string_view name) const = 0;
  // load_f32 into `dst` (numel floats, e.g. a part of a stacked matrix): decoded straight from
  // the mapped file where the format allows, without a tensor in between.
  virtual void load_f32_into(std::string_view name, float* dst) const {
    const Tensor t = load_f32(name);
    std::memcpy(dst, t.bytes(), t.size_bytes());
  }
  // The tensor's bytes where they lie (the mapped file) when it is F32 or BF16, or F16 or Q8_0
  // (rows of whole blocks: kWeightQ8_0) in a GGUF file: GEMMs read those directly. nullopt for other types (they are decoded with load_f32).
  // (Safetensors and PyTorch F16 matrices are still decoded to f32 at load.)
  struct Raw {
    const void* data;
    DType dtype;
  };
  virtual std::optional<Raw> raw(std::string_view name) const = 0;
  // Whether Lookup::matrix may return views of raw() (ModelLoadOptions::map_weights).
  bool map_weights = true;
};
std::unique_ptr<WeightSource> safetensors_source(const SafetensorsFile& f);  // F32, F16, BF16, F64
std::unique_ptr<WeightSource> gguf_source(const GgufFile& f);                // + Q8_0
std::unique_ptr<WeightSource> torch_source(const TorchCheckpoint& f);        // F32, F16, BF16, F64
// HF sharded checkpoints: `index_path` is model.safetensors.index.json or
// pytorch_model.bin.index.json (owns its shards, safetensors or PyTorch, by content).
std::unique_ptr<WeightSource> sharded_safetensors_source(const std::string& index_path);

// `inner`'s tensors whose names start with `prefix`, named without it (`inner` must outlive it).
std::unique_ptr<WeightSource> prefixed_source(const WeightSource& inner, const std::string& prefix);
// The `most` most frequent leading `components` path components of `names` ("model." for 1,
// "model.backbone." for 2), each shared by at least two names, most frequent first.
std::vector<std::string> common_prefixes(const std::vector<std::string>& names, int components, size_t most);

std::string shape_str(const std::vector<int64_t>& s);

// The one place tensors are taken from a checkpoint.
class Lookup {
 public:
  explicit Lookup(const WeightSource& w) : w_(w) {}
  bool has(const std::string& name) const { return w_.info(name).has_value(); }
  const WeightSource& source() const { return w_; }
  // The tensor as f32 with shape `as` (default `want`, which is the shape the file must hold).
  // A missing optional tensor gives an empty Tensor; problems are collected.
  Tensor get(const std::string& name, const std::vector<int64_t>& want, bool required = true,
             std::vector<int64_t> as = {});
  // A weight matrix of shape `want` ([rows, cols]): a view of the mapped file when raw() gives
  // its bytes (no copy; an owned copy of the same type when the source's map_weights is false),
  // else decoded to f32. Missing (optional) or faulty: an empty matrix, the problem collected as by get().
  WeightMatrix matrix(const std::string& name, const std::vector<int64_t>& want, bool required = true);
  // get() as an owned f32 matrix (empty when get() gives nothing).
  WeightMatrix decoded(const std::string& name, const std::vector<int64_t>& want, bool required = true) {
    Tensor t = get(name, want, required);
    return present(t) ? WeightMatrix(std::move(t)) : WeightMatrix();
  }
  // The matrices `names`, each [rows, cols], stacked into one owned [n·rows, cols] matrix (HF's
  // separate q, k, v projections): in the file's type when all have one raw() gives (BF16, a
  // GGUF's F16 or Q8_0), else f32. Allocated only when
  // the file holds all of them with that shape; otherwise empty, the problems collected.
  WeightMatrix stacked(const std::vector<std::string>& names, int64_t rows, int64_t cols);
  void mark_used(const std::string& name);
  void problem(const std::string& what) { problems_.push_back(what); }
  // Throws naming every missing, mis-shaped or undecodable tensor: Error(unsupported) when the
  // only problems are tensor types, else Error(corrupt_data).
  void finish(const std::string& what) const;
  int used() const { return int(used_.size()); }

 private:
  const WeightSource& w_;
  std::vector<std::string> missing_, problems_, type_problems_;
  std::set<std::string> used_;
};

// What a loader gets: the weights, the GGUF key/values for .gguf files, and the JSON files
// beside a .safetensors file ({} when absent).
struct Checkpoint {
  std::string path;
  const WeightSource* weights = nullptr;
  const GgufFile* gguf = nullptr;
  nlohmann::json config;        // config.json, reduced to the vision tower's part
  nlohmann::json full_config;   // config.json as written (a VLM's top level: vision_feature_layer, ...)
  nlohmann::json preprocessor;  // preprocessor_config.json
  nlohmann::json video_preprocessor;  // video_preprocessor_config.json (Qwen-VL video processors)
  nlohmann::json open_clip;     // open_clip_config.json (open_clip's hub files: model_cfg, preprocess_cfg)
};

class ModelLoader {
 public:
  virtual ~ModelLoader() = default;
  virtual std::string_view name() const = 0;  // the naming, as VitConfig::naming
  virtual bool accepts(const Checkpoint& c) const = 0;
  // Throws fovea::Error; sets everything but `source`, tensors_ignored.
  virtual std::shared_ptr<VitModel::Impl> load(const Checkpoint& c) const = 0;
};
const ModelLoader& hf_clip_loader();
const ModelLoader& hf_siglip_loader();
const ModelLoader& torchvision_loader();
const ModelLoader& gguf_mmproj_loader();
const ModelLoader& hf_llava_loader();
const ModelLoader& hf_vit_loader();
const ModelLoader& hf_dinov2_loader();
const ModelLoader& timm_vit_loader();
const ModelLoader& open_clip_loader();
const ModelLoader& intern_vit_loader();
const ModelLoader& hf_blip_loader();
const ModelLoader& hf_paligemma_loader();
const ModelLoader& hf_qwen2_vl_loader();    // qwen_vl.cpp
const ModelLoader& hf_qwen2_5_vl_loader();
const ModelLoader& hf_qwen3_vl_loader();    // qwen3_vl.cpp
// The input contract from open_clip_config.json's preprocess_cfg mean / std, else `fallback`.
InputContract open_clip_contract(const nlohmann::json& open_clip, const InputContract& fallback);

// ---- shared by the loaders ------------------------------------------------------------------
nlohmann::json read_json_beside(const std::string& weights_path, const char* file);
nlohmann::json vision_part(nlohmann::json config);  // CLIPModel's vision_config, else itself
// A size a JSON file of the checkpoint at `path` repeats must be the one the loader found: when
// `j` (the file named `file`) holds one of `keys` with a value other than `have`, throws
// Error(corrupt_data) "'<path>': <file> says <first key> = <value> but <whose> is <have>".
void check_agrees(const nlohmann::json& j, const char* file, std::initializer_list<const char*> keys, int64_t have,
                  const std::string& path, const std::string& whose);

template <typename T>
std::optional<T> cfg_get(const nlohmann::json& j, std::initializer_list<const char*> keys, const char* file = "config.json") {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    const auto wrong = [&](const std::string& why) {
      return Error(Errc::corrupt_data, std::string(file) + ": '" + k + "' " + why);
    };
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // An integer, or a float holding one (768.0), in T's range: nlohmann's own conversion
      // casts 1e30 or 3.5 without a word (a float-to-int overflow is undefined behaviour).
      using L = std::numeric_limits<T>;
      if (it->is_number_unsigned()) {
        const uint64_t u = it->template get<uint64_t>();
        if (u > uint64_t(L::max())) throw wrong("= " + std::to_string(u) + " is out of range");
        return T(u);
      }
      if (it->is_number_integer()) {
        const int64_t v = it->template get<int64_t>();
        if (v < int64_t(L::min()) || (v > 0 && uint64_t(v) > uint64_t(L::max())))
          throw wrong("= " + std::to_string(v) + " is out of range");
        return T(v);
      }
      if (it->is_number_float()) {
        const double d = it->template get<double>();
        if (!(d == std::floor(d)) || d < double(L::min()) || d > double(L::max()))
          throw wrong("= " + it->dump() + " is not an integer in range");
        return T(d);
      }
      throw wrong("has the wrong type");
    } else {
      try {
        return it->template get<T>();
      } catch (const nlohmann::json::exception&) {
        throw wrong("has the wrong type");
      }
    }
  }
  return std::nullopt;
}

int default_heads(int hidden);
Activation parse_hf_act(const std::string& s, const std::string& path);
// Number of blocks named PREFIX<N>.* (the largest N + 1). Error(limit_exceeded) naming the tensor
// when N >= kMaxLayers (the largest ViTs have ~50 blocks; an mmproj's block_count is as bounded).
constexpr int kMaxLayers = 4096;
int count_layers(const WeightSource& w, const std::string& prefix);
int square_side(int64_t n, const std::string& path, const std::string& name);
// c.hidden, c.channels and c.patch_px from the patch-embedding conv `name` [D, C, P, P] (present),
// checked: Error(corrupt_data) for another shape, Error(limit_exceeded) out of range.
void patch_embedding_dims(const WeightSource& w, const std::string& name, VitConfig& c);
// A dimension read from a tensor's shape, checked before it is narrowed to int and before
// anything is allocated: Error(limit_exceeded) outside [1, max] (a hostile or broken checkpoint,
// e.g. a sparse file claiming 2^40 elements, instead of a wrapped size or a huge allocation).
int checked_dim(int64_t v, int64_t max, const std::string& path, const std::string& what);
// The shortest prefix before a tensor named PREFIX + `suffix` (a VLM's projector beside its
// tower, e.g. "model." + "multi_modal_projector.linear_1.weight"), or nullopt.
std::optional<std::string> shortest_prefix_of(const WeightSource& w, std::string_view suffix);
// An HF class-token tower's dimensions beyond the patch embedding: c.grid from `pos_name`
// [1, 1 + G·G, D], c.layers (= layers_in_checkpoint) from `blocks`N.*, c.mlp from
// `blocks`0.`fc1`.weight (else 4·D), c.heads from config.json (else the standard table).
void class_token_tower_dims(const WeightSource& w, const nlohmann::json& cfg, const std::string& pos_name,
                            const std::string& blocks, const std::string& fc1, VitConfig& c);
// Splits a [G·G + 1, D] position table (class position first) into class_pos and pos_grid.
void split_class_position(Tensor all, int64_t D, VitModel::Impl& m);

// The HF vision tower's prefix ("vision_model." normally, longer inside a VLM checkpoint), or
// nullopt when there is no `...embeddings.patch_embedding.weight`.
std::optional<std::string> hf_vision_prefix(const WeightSource& w);
// HF CLIP and SigLIP share the embeddings and the encoder blocks (hf_common.cpp): hf_configure
// fills `m.config` from the tensor shapes and config.json (checking they agree) and returns the
// tower's prefix; hf_load_tower takes the patch and position embeddings, the blocks and
// post_layernorm.
std::string hf_configure(const Checkpoint& c, bool clip, VitModel::Impl& m);
void hf_load_tower(Lookup& L, const std::string& prefix, VitModel::Impl& m);
// SigLIP 2 NaFlex: preprocessor_config.json's max_num_patches (siglip2_naflex.cpp).
void naflex_configure(const Checkpoint& ck, VitConfig& c);
// The checks every HF-style loader makes once the dimensions are known: config.json's
// hidden_size, patch_size, num_hidden_layers, intermediate_size and image_size must agree with
// the tensors (when present), there is at least one block (`blocks` names them), and the head
// count divides the width.
void check_dims(const nlohmann::json& cfg, const std::string& path, const VitConfig& c, const std::string& blocks);
// q, k, v weights [D, D] and biases [D] stacked into ly.qkv_w [3D, D] and ly.qkv_b [3D].
void stack_qkv(Lookup& L, const std::string (&w)[3], const std::string (&b)[3], int64_t D, VitLayer& ly);
// The first `blocks` encoder blocks `PREFIX encoder.layers.N.*` into m.layers.
void hf_load_blocks(Lookup& L, const std::string& prefix, int blocks, int64_t D, int64_t M, VitModel::Impl& m);

// HF ViTModel and Dinov2Model share the embeddings (`embeddings.{cls_token, position_embeddings,
// patch_embeddings.projection}`), the attention (`encoder.layer.N.attention.attention.{query,
// key,value}`, `attention.output.dense`) and the final `layernorm` (hf_vit_common.cpp); their
// blocks differ in the norm and MLP names and DINOv2's layer scale.
struct HfVitNaming {
  const char* what;        // "HF ViT", for messages
  const char* naming;      // VitConfig::naming
  VitFamily family;
  const char* marker;      // a block tensor only this naming has: "layernorm_before.weight", "norm1.weight"
  const char* ln1;         // block norms, without ".weight"
  const char* ln2;
  const char* fc1;         // MLP linears, without ".weight"
  const char* fc2;
  bool layer_scale;        // layer_scale1/2.lambda1
  bool registers;          // embeddings.register_tokens may be present (Dinov2WithRegistersModel)
  float ln_eps;            // when config.json has no layer_norm_eps
  std::vector<const char*> model_types;  // config.json model_type values that are this naming
};
// The prefix ("", "vit.", "dinov2.", ...) of a checkpoint in `n`'s naming, or nullopt.
std::optional<std::string> hf_vit_prefix(const WeightSource& w, const HfVitNaming& n);
// Configures and loads the whole model (embeddings, blocks, final layernorm); the caller adds
// its heads and calls L.finish.
std::string hf_vit_load(const Checkpoint& ck, const HfVitNaming& n, const InputContract& defaults, Lookup& L,
                        VitModel::Impl& m);

// Layer scale (DINOv2's layer_scaleN.lambda1, timm's lsN.gamma): y = γ ⊙ (W·x + b) is folded
// into the linear as (diag(γ)·W)·x + γ ⊙ b, an owned f32 matrix (the forward pass is unchanged).
// `gamma` names γ [D]; an optional one (required false) that the file lacks changes nothing, and
// so does a γ whose w or b is missing or faulty (the Lookup has recorded why).
void fold_layer_scale(Lookup& L, const std::string& gamma, int64_t D, bool required, WeightMatrix& w, Tensor& b);

// A pre-norm block whose attention has one fused q|k|v linear (timm, torchvision, open_clip,
// InternViT), its tensors named relative to the block's prefix: the norms and linears without
// ".weight" / ".bias", the fused projection by its two full names (nn.MultiheadAttention's
// in_proj_weight / in_proj_bias), the layer scales γ [D] by full name (nullptr: none).
struct FusedBlockNames {
  const char* ln1;
  const char* qkv_w;
  const char* qkv_b;
  const char* out;
  const char* ln2;
  const char* fc1;
  const char* fc2;
  const char* ls1 = nullptr;
  const char* ls2 = nullptr;
  bool ls_required = false;
};
// Block `prefix` in naming `n`: fc1 is fc1_width(c) wide, fc2 reads c.mlp; layer scales folded.
// n.qkv_b null: the caller sets the qkv bias (BLIP-2's q_bias | 0 | v_bias).
VitLayer load_fused_block(Lookup& L, const std::string& prefix, const FusedBlockNames& n, const VitConfig& c);

// The input contract: preprocessor_config.json if present, else `fallback`.
// `file` names the JSON in messages and becomes the contract's source.
InputContract contract_from_preprocessor(const nlohmann::json& pre, const InputContract& fallback,
                                         const char* file = "preprocessor_config.json");

// A Qwen-VL tower's patch embedding (<p>patch_embed.proj.weight, a Conv3d kernel [D, C, T, P, P])
// and block count (<p>blocks.*): c.hidden, channels, native.temporal_patch, patch_px and layers.
// Throws Error(corrupt_data) for a malformed kernel or no block.
void read_qwen_patch_embed(const WeightSource& w, const std::string& p, VitConfig& c);

// A Qwen-VL tower's input contract and image pixel limits (NativeConfig::min_pixels ...) from
// `ck`'s preprocessor_config.json (image_mean, image_std, rescale; min_pixels / max_pixels, or
// size.shortest_edge / longest_edge), else `defaults` and the limits given. The file's
// patch_size, merge_size and temporal_patch_size must agree with `c`. Throws
// Error(corrupt_data) for limits out of range or a disagreement.
void read_image_limits(const Checkpoint& ck, VitConfig& c, const InputContract& defaults, int64_t default_min,
                       int64_t default_max);

// A Qwen-VL tower's video pixel limits (NativeConfig::video_min_pixels ...): `ck`'s
// video_preprocessor_config.json, else its preprocessor_config.json (the file transformers'
// video processor falls back to), else the defaults given. `size_only`: the video processor
// reads size.shortest_edge / longest_edge alone (Qwen3-VL), not min_pixels / max_pixels, which
// override them (Qwen2-VL). The file's patch_size, merge_size and temporal_patch_size must
// agree with `c`. Throws Error(corrupt_data) for limits out of range or a disagreement.
void read_video_limits(const Checkpoint& ck, VitConfig& c, int64_t default_min, int64_t default_max, bool size_only);
InputContract clip_defaults();
InputContract siglip_defaults();
InputContract imagenet_defaults();
// ImageNet's mean and std with another `source` (DINOv2, timm without pretrained_cfg).
InputContract imagenet_contract(const std::string& source);

}  // namespace encoder_detail
}  // namespace fovea
