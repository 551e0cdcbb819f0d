// fovea/encoder.hpp — a ViT from a checkpoint turns a TokenBatch into embeddings.
//
//   fovea::Executor exec;
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("photo.jpg"), {}, {}, exec);
//   fovea::VitModel m = fovea::VitModel::load("clip-vit-b16.safetensors");   // or "random:vit-b16"
//   fovea::Encoding e = fovea::encode(m, t.batch.patches, t.batch.positions,
//                                     {.image_width = t.pyramid.width(), .image_height = t.pyramid.height()}, exec);
//   const fovea::Tensor& emb = e.embeddings;   // [N, D] float32: last hidden state, batch order
//
// Checkpoints (safetensors, F32/F16/BF16) in three namings, detected from tensor names and
// shapes, plus config.json beside the file when present:
//   * HF CLIPVisionModel / CLIPModel: `vision_model.*` (class token, pre_layrnorm, quick_gelu,
//     post_layernorm on the pooled class token, `visual_projection` when present);
//   * HF SigLIP vision tower: `vision_model.*` without class token, patch-embedding bias,
//     tanh-GELU, post_layernorm on every token, attention-pooling `head` when present;
//   * torchvision VisionTransformer: `conv_proj`, `encoder.layers.encoder_layer_N.*`
//     (class token, exact GELU, final `encoder.ln`, `heads.head` when present).
// "random:vit-b16" / "random:vit-s16" build seeded random CLIP-shaped models for benchmarks;
// VitModel::is_random() is true and every output says so.
//
// Foveated input: every token's P×P patch, whatever its mip level, goes through the patch
// embedding. Its positional embedding is the checkpoint's G×G position grid sampled bicubically
// (A = −0.75, clamped taps: PyTorch's F.interpolate(mode="bicubic", align_corners=False), as
// HF's interpolate_pos_encoding) at the token's centre: grid coordinate u = cx·G/W − 0.5,
// v = cy·G/H − 0.5 for an image of W×H pixels. A uniform level-0 grid of an image G·P pixels
// square samples exactly the grid nodes, so it reproduces the original model; a uniform grid at
// any other size reproduces HF's interpolate_pos_encoding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <string_view>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/relevance.hpp"
#include "fovea/tensor.hpp"

namespace fovea {

enum class VitFamily : uint8_t { clip, siglip, torchvision };
enum class Activation : uint8_t {
  quick_gelu,  // x·σ(1.702x) (CLIP)
  gelu_tanh,   // 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) (SigLIP)
  gelu_erf,    // 0.5x(1 + erf(x/√2)) (torchvision)
};
enum class Precision : uint8_t {
  fp32,  // within 1e-4 of PyTorch on the test models
  bf16,  // GEMM inputs rounded to bfloat16, f32 accumulation; cosine to fp32 reported
};

std::string_view to_string(VitFamily f);
std::string_view to_string(Activation a);
std::string_view to_string(Precision p);

enum class FinalNorm : uint8_t {
  none,
  all_tokens,   // SigLIP post_layernorm, torchvision encoder.ln: part of the last hidden state
  pooled_only,  // CLIP post_layernorm: applied to the class token for `pooled` only
};

struct VitConfig {
  VitFamily family = VitFamily::clip;
  int hidden = 768;     // D
  int layers = 12;
  int heads = 12;
  int mlp = 3072;
  int patch_px = 16;    // P
  int grid = 14;        // G: the position grid is G×G (native image G·P pixels square)
  int channels = 3;
  bool class_token = true;
  bool patch_bias = false;
  bool pre_norm = false;  // CLIP pre_layrnorm
  FinalNorm final_norm = FinalNorm::pooled_only;
  Activation act = Activation::quick_gelu;
  float ln_eps = 1e-5f;
  int projection_dim = 0;       // CLIP visual_projection (0: none)
  bool attention_pool = false;  // SigLIP multihead-attention pooling head
  int num_classes = 0;          // torchvision heads.head (0: none)
  int head_dim() const { return hidden / heads; }
  int native_px() const { return grid * patch_px; }
};

// A loaded model: weights in float32 (converted from F16/BF16 at load), shared and immutable;
// bf16 copies are made on first bf16 use. Cheap to copy (shared handle). Thread-compatible:
// encode() calls on one model are serialised internally.
class VitModel {
 public:
  // `spec` is a path to a .safetensors file or "random:vit-b16" / "random:vit-s16"
  // (optionally "random:vit-b16:SEED"). Throws Error(io) for an unreadable file,
  // Error(corrupt_data) for a malformed one, Error(unsupported) for an unknown naming, and
  // Error(corrupt_data) naming every missing or mis-shaped tensor.
  static VitModel load(const std::string& spec);
  // Seeded random weights (normal-ish, std 0.02; LayerNorms identity) for `config`.
  static VitModel random(const VitConfig& config, uint64_t seed, const std::string& name);

  const VitConfig& config() const;
  // e.g. "clip ViT D=768 L=12 H=12 P=16 G=14 (model.safetensors)"; random models start with
  // "RANDOM WEIGHTS".
  std::string describe() const;
  const std::string& source() const;  // the spec it was loaded from
  bool is_random() const;
  // Tensors loaded / ignored (e.g. a CLIPModel's text tower), for reports.
  int tensors_used() const;
  int tensors_ignored() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

struct EncodeParams {
  Precision precision = Precision::fp32;
  int image_width = 0, image_height = 0;  // the original image the positions refer to (> 0)
};

struct Encoding {
  Tensor embeddings;    // [N, D] f32: last hidden state of the N patch tokens, batch order
  Tensor class_token;   // [1, D] last hidden state of the class token (models with one)
  Tensor pooled;        // [1, D] CLIP: post_layernorm(class); SigLIP: attention-pool head;
                        //        torchvision: the normed class token
  Tensor image_embeds;  // [1, E] CLIP visual_projection(pooled)
  Tensor logits;        // [1, K] torchvision heads.head(pooled)
  double encode_ms = 0;
};

// patches [N, C, P, P] float32 or float16 (normalised as the model expects), positions [N, 4]
// float32 (centre x, centre y, side, level: the TokenBatch layout). Throws
// Error(invalid_argument) when the patch size, channels or shapes do not match the model.
Encoding encode(const VitModel& model, const Tensor& patches, const Tensor& positions,
                const EncodeParams& params, Executor& exec);

// The relevance stage's query-embedding hook (RelevanceParams::tile_features). Features come
// from the patch embedding: every finest P×P tile of pyramid level 0, normalised with `norm`,
// through the model's patch-embedding GEMM (no position, no transformer: one GEMM over the
// tiles, cheap enough to run before allocation). For a CLIP model with a visual projection and a
// query of the projection's length, features are mapped as post_layernorm + visual_projection
// (the text-image space); otherwise the query must have D values. Throws
// Error(invalid_argument) from the hook when neither length matches.
TileFeatureFn tile_feature_fn(const VitModel& model, const Normalization& norm, int query_dim, Executor& exec);

// Reads a query embedding: a .npy file (float32/float64/float16, shape [D] or [1, D]) or a
// .safetensors file (the tensor named "query" or "embedding", else the only tensor; F32, F16
// or BF16, [D] or [1, D]). Throws Error(io / corrupt_data / invalid_argument).
std::vector<float> load_query_embedding(const std::string& path);

// Cosine similarity of two equally sized float32 tensors taken as flat vectors, and the mean
// of per-row cosines over the rows of two [N, D] tensors.
double cosine_similarity(const Tensor& a, const Tensor& b);
double mean_row_cosine(const Tensor& a, const Tensor& b);

}  // namespace fovea
