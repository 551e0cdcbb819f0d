// fovea/encoder.hpp — a ViT from a checkpoint turns a TokenBatch into embeddings.
//
//   fovea::Executor exec;
//   fovea::VitModel m = fovea::VitModel::load("clip-vit-b16/model.safetensors");  // or an mmproj .gguf, "random:vit-b16"
//   fovea::TokenizeParams tp;
//   tp.patch_px = m.config().patch_px;
//   tp.extract.norm = fovea::normalization(m.config().input);   // the model's own preprocessing
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("photo.jpg"), {}, tp, exec);
//   fovea::Encoding e = fovea::encode(m, t.batch.patches, t.batch.positions,
//                                     {.image_width = t.pyramid.width(), .image_height = t.pyramid.height()}, exec);
//   const fovea::Tensor& emb = e.embeddings;   // [N, D] float32, batch order (see embedding_output())
//   const fovea::Tensor& llm = e.projected;    // [N, E] when the checkpoint has a projector: the LLM's input
//
// Checkpoints, one loader per naming (src/encoder/loaders/), chosen from the file's contents:
//   * HF CLIPVisionModel / CLIPModel (.safetensors, `vision_model.*`): class token, pre_layrnorm,
//     quick_gelu; `embeddings` is last_hidden_state, BEFORE post_layernorm (which HF applies to
//     the pooled class token only); `visual_projection` → image_embeds when present;
//   * HF SigLIP vision tower (.safetensors): no class token, patch bias, tanh-GELU;
//     last_hidden_state is AFTER post_layernorm; attention-pooling `head` → pooled; SigLIP 2
//     (Siglip2VisionModel: a linear patch embedding, positions resized bilinearly) too, and its
//     NaFlex processor (max_num_patches, several sizes in one call: encode_naflex, fovea/native.hpp);
//   * torchvision VisionTransformer (.safetensors, `conv_proj`, `encoder.layers.*`): class token,
//     exact GELU, `encoder.ln` on every token, `heads.head` → logits;
//   * HF LlavaForConditionalGeneration (.safetensors, `vision_tower.vision_model.*` +
//     `multi_modal_projector.linear_1/2`): the tower up to config.json's vision_feature_layer,
//     then the projector → projected (the language model's tensors are ignored);
//   * llama.cpp mmproj (.gguf, `v.*`, `clip.vision.*` keys): CLIP or SigLIP towers, optionally with
//     the LLaVA MLP projector (`mm.0`, GELU, `mm.2`) → projected;
//   * HF ViTModel / ViTForImageClassification (.safetensors, `[vit.]embeddings.cls_token`,
//     `encoder.layer.N.attention.attention.query`, `layernorm_before`): class token, exact GELU,
//     `layernorm` on every token; `pooler.dense` (tanh) → pooled when present, `classifier` → logits;
//   * timm VisionTransformer / DeiT (.safetensors, `patch_embed.proj`, `blocks.N.attn.qkv`): class
//     token, exact GELU, `norm` on every token, `head` → logits, layer scale (`ls1/ls2.gamma`),
//     no_embed_class (DeiT III), register tokens (`reg_token`) and CLIP towers (`norm_pre`);
//   * HF Dinov2Model / Dinov2WithRegistersModel (.safetensors, `[dinov2.]embeddings.*`,
//     `encoder.layer.N.norm1`, `layer_scale1/2.lambda1`, `embeddings.register_tokens`): as HF ViT
//     with layer scale (and registers, in no output); pooled is the normed class token;
//   * open_clip / OpenAI CLIP (`[visual.]conv1`, `transformer.resblocks.N`), InternViT
//     (`vision_model.encoder.layers.N.attn.qkv`), the Idefics2 / Idefics3 / SmolVLM towers
//     (SigLIP's names, bucketized positions), HF BLIP / BLIP-2 / InstructBLIP
//     (`vision_model.encoder.layers.N.self_attn.qkv`, q_bias / v_bias), HF PaliGemma (SigLIP +
//     `multi_modal_projector.linear` → projected): docs/reference/model-families.md.
//   * HF Qwen2-VL / Qwen2.5-VL / Qwen3-VL (`[model.]visual.*`: the whole VLM's checkpoint, sharded or not, or
//     the tower alone): native-resolution towers with 2-D rotary positions and a 2×2 patch
//     merger, encoded as native images (fovea/native.hpp), not through encode().
// Pixtral, EVA-02 and Llama 4 towers (rotary positions) are refused by name.
// Safetensors (or PyTorch .pt/.pth/.bin): F32/F16/BF16/F64; GGUF: F32/F16/BF16/Q8_0.
//
// The model carries its input contract (VitConfig::input): mean, std and rescale from
// preprocessor_config.json beside the weights (HF), ImageNet's for torchvision, the GGUF keys
// clip.vision.image_mean / image_std, timm's config.json pretrained_cfg, else the family's
// published defaults; `source` says which.
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
//
// Model and context. A VitModel is the weights, loaded once and never changed; an
// EncoderContext is what one encode needs besides them (oneDNN's primitives and scratchpads, the
// attention buffers), owned by the caller, as llama.cpp's llama_model and llama_context:
//
//   fovea::EncoderContext ctx;   // one per thread or request, reused from call to call
//   fovea::Encoding e = fovea::encode(ctx, m, t.batch.patches, t.batch.positions, params, exec);
//
// The calls without a context (encode(m, ...)) borrow one from a pool the model keeps (as many
// contexts as calls ever ran at once on it): the same bytes, and they run in parallel too.
//
// Thread safety: a VitModel is immutable and may be shared by any number of threads (copies
// share the weights). Encodes on one model run in parallel, each on its own context: every
// entry point with an EncoderContext, every one without (a pooled context each), the hook of
// tile_feature_fn and incremental encoders (incremental_encoder.hpp), in any mix. The GEMM-ready
// copies of the weights (see VitModel) are the model's, made once whichever encode needs one
// first and then read by all, never one per context. An EncoderContext serves one call at a
// time: a second call on a context that is in use throws Error(invalid_argument); distinct
// contexts share nothing mutable but the model's packed copies. Each call runs on exec.threads() threads: it sets the
// calling thread's OpenMP team size for the call and restores the caller's value, so two
// concurrent calls with 2 threads each run 4 threads. The OpenMP wait policy is the program's
// (exec.hpp). The hook from tile_feature_fn keeps exec's thread count and kernel choice (not exec
// itself).
#pragma once
#include "fovea/export.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/embeddings.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/relevance.hpp"
#include "fovea/tensor.hpp"
#include "fovea/view.hpp"
#include "fovea/windows.hpp"

FOVEA_API_BEGIN
namespace fovea {

namespace encoder_detail {
struct FOVEA_INTERNAL ModelAccess;  // src/encoder and benchmarks: the weights of a model no one shares yet
}

enum class VitFamily : uint8_t {
  clip,
  siglip,
  torchvision,
  vit,     // the original ViT as HF transformers (ViTModel) and timm (VisionTransformer, DeiT) name it
  dinov2,  // DINOv2: ViT with layer scale (HF Dinov2Model)
  // Native-resolution towers with 2-D rotary positions and a 2×2 patch merger (fovea/native.hpp):
  qwen2_vl,    // Qwen2-VL: LayerNorm, QuickGELU MLP
  qwen2_5_vl,  // Qwen2.5-VL: RMSNorm, SiLU-gated MLP, window attention
  qwen3_vl,    // Qwen3-VL: learned positions interpolated to the grid plus rotary, DeepStack mergers
};
enum class Activation : uint8_t {
  quick_gelu,  // x·σ(1.702x) (CLIP)
  gelu_tanh,   // 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) (SigLIP)
  gelu_erf,    // 0.5x(1 + erf(x/√2)) (torchvision)
  swiglu,      // a gated MLP: fc1 gives [x1 | x2] (2·mlp wide), fc2 reads silu(x1)·x2 (DINOv2 giant)
};
// How the G×G position table is read for a token: as the model's own code resizes the table to
// the patch grid of the input (F.interpolate, align_corners=False), for a uniform grid of tokens
// of that token's size, at the token's centre. The antialiased kinds widen PyTorch's
// anti-aliasing kernel to the token's span in table cells when it covers more than one.
enum class PositionSampling : uint8_t {
  bicubic,             // HF CLIP, SigLIP, ViT, DINOv2, torchvision, GGUF (bicubic, a = −0.75)
  bilinear,            // plain bilinear (no loader uses it today)
  bicubic_antialias,   // timm (resample_abs_pos_embed), HF Dinov2WithRegisters (antialias=True)
  bilinear_antialias,  // SigLIP 2 (resize_positional_embeddings: bilinear, antialias=True)
  bucketized,          // Idefics2 / Idefics3 / SmolVLM: no resize; the token's top-left corner, as a
                       // fraction of the image, picks the table cell (torch.bucketize against k/G,
                       // right=True: ⌊G·i/n⌋), as their NaViT-style embeddings do
};
enum class Precision : uint8_t {
  fp32,  // within 1e-4 of PyTorch on the test models
  bf16,  // GEMM inputs rounded to bfloat16, f32 accumulation; cosine to fp32 reported
  int8,  // the layers' linear maps on int8 (weights per output channel, activations per token);
         // attention, LayerNorm and the residual stream as bf16 runs them (fp32 without bf16)
};

// Whether this CPU has the native bfloat16 matrix kernels Precision::bf16 runs on: AVX512_BF16
// (Intel Cooper Lake, AMD Zen 4 and later) or AMX-BF16 (Sapphire Rapids and later). Elsewhere
// bf16 runs fp32: an AVX2-only CPU (AMD Zen 1-3, Intel before Skylake-SP) has no bf16 kernel,
// and plain AVX-512 (Skylake-SP to Ice Lake) only oneDNN's emulated one, several times slower
// than fp32. Asked of oneDNN once per process, so ONEDNN_MAX_CPU_ISA=AVX512_CORE makes a bf16
// machine answer false.
bool bf16_supported();
// Deprecated: internal diagnostics, removed from the API in the next release.
// matrix_kernels() says which kernels an encode runs.
[[deprecated("internal; use fovea::matrix_kernels()")]] bool amx_kernels_enabled();
[[deprecated("internal; use fovea::matrix_kernels()")]] bool avx512bf16_kernels_enabled();
[[deprecated("internal; use fovea::matrix_kernels()")]] bool avx2_kernels_enabled();
// Whether this CPU has a vector int8 kernel for Precision::int8 (int8 dot products: AVX512-VNNI,
// AVX-VNNI or AVX2). FOVEA_INT8_KERNEL=scalar|avx2|avxvnni|vnni256|vnni512 picks one of those the
// CPU has (benchmarks). Asked once per process.
bool int8_supported();
// Which matrix kernels an encode at `p` runs (after runnable_precision): "amx+onednn",
// "avx512bf16+onednn", "avx2+onednn" or "onednn" (`encode --json`'s encoder.kernels); for int8
// "int8-" and the int8 kernel (vnni512, vnni256, avxvnni, avx2) before the others, e.g.
// "int8-vnni512+avx512bf16+onednn".
const char* matrix_kernels(Precision p);
// The precision that runs for a request: `requested`, except bf16 on a CPU without bf16 kernels,
// which runs fp32, and int8 on a CPU without int8 vector kernels (x86-64 AVX2 at least), which
// runs fp32 (bf16 would be no faster there, only less exact). encode() and the
// incremental encoder apply it; Encoding::precision says what ran. Front ends say so once.
Precision runnable_precision(Precision requested);

std::string_view to_string(VitFamily f);
std::string_view to_string(Activation a);
std::string_view to_string(PositionSampling s);
std::string_view to_string(Precision p);
struct VitConfig;
// What `Encoding::embeddings` holds for this model, e.g. "last_hidden_state (before
// post_layernorm)" for HF CLIP, "hidden_states[-2] (the projector's input)" for LLaVA mmproj.
std::string embedding_output(const VitConfig& c);

enum class FinalNorm : uint8_t {
  none,
  all_tokens,   // SigLIP post_layernorm, torchvision encoder.ln, HF ViT / DINOv2 layernorm, timm
                // norm: part of the last hidden state
  pooled_only,  // CLIP post_layernorm: applied to the class token for `pooled` only
};

// How pixels must be prepared for the model: value = (pixel · rescale − mean) / std per channel
// (pixel in 0..255), as HF's image processors do (do_rescale, do_normalize).
struct InputContract {
  std::array<float, 3> mean{0.48145466f, 0.4578275f, 0.40821073f};  // CLIP's
  std::array<float, 3> std{0.26862954f, 0.26130258f, 0.27577711f};
  float rescale = 1.0f / 255.0f;
  bool normalize = true;  // false: value = pixel · rescale
  std::string source = "CLIP defaults";  // where the numbers came from, for reports and metadata
};
// The tokenizer's Normalization that applies `contract` ((x/255 − mean')/std', with the rescale
// folded into mean' and std').
Normalization normalization(const InputContract& contract);

enum class ProjectorType : uint8_t {
  none,
  mlp,     // LLaVA: mm.0 (Linear D → E), GELU (erf), mm.2 (Linear E → E) when present
  linear,  // PaliGemma: one Linear D → E per token (get_image_features' 1/√H folded in)
  patch_merger,  // Qwen2-VL family: ln_q on each token, each 2×2 merge unit's 4 tokens concatenated,
                 // mlp.0 (4D → 4D), exact GELU, mlp.2 (4D → E): one row per merge unit
};
std::string_view to_string(ProjectorType p);

// What a native-resolution tower (fovea/native.hpp: Qwen2-VL, Qwen2.5-VL) adds to a ViT's
// configuration; merge == 0 for every other tower.
struct NativeConfig {
  int merge = 0;           // spatial_merge_size: merge × merge patches become one language-model token
  int temporal_patch = 1;  // temporal_patch_size: frames per patch (a still image is repeated)
  int window_px = 0;       // Qwen2.5-VL window attention: window side in pixels (0: none)
  std::vector<int> full_attention_blocks;  // fullatt_block_indexes: blocks with full attention
  // Qwen3-VL deepstack_visual_indexes: after these blocks, the hidden state goes through a merger
  // of its own (NativeEncoding::deepstack).
  std::vector<int> deepstack_blocks;
  bool rms_norm = false;   // RMSNorm (Qwen2.5-VL) instead of LayerNorm
  double rope_theta = 10000.0;
  int tokens_per_second = 0;  // Qwen2.5-VL video: temporal position ids per second (0: t index)
  // The processor's pixel limits (preprocessor_config.json min_pixels / max_pixels, or
  // size.shortest_edge / longest_edge) and where they came from.
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 28 * 28 * 1280;
  // The video processor's pixel limits: video_preprocessor_config.json's (min_pixels / max_pixels,
  // or size.shortest_edge / longest_edge), else preprocessor_config.json's (transformers falls
  // back to it), else the family's video processor defaults. Qwen2-VL / Qwen2.5-VL apply them to
  // each frame (the image rule); Qwen3-VL (video_limits_over_frames) to the frames' pixels
  // summed over the video (smart_resize_video, fovea/native.hpp).
  int64_t video_min_pixels = 128 * 28 * 28;
  int64_t video_max_pixels = 28 * 28 * 768;
  bool video_limits_over_frames = false;
  std::string video_limits_source;
  // SigLIP 2 NaFlex (Siglip2VisionModel, merge 0): preprocessor_config.json's max_num_patches, the
  // patches an image is resized to fit (naflex_size, fovea/native.hpp); 0 for every other tower.
  int max_num_patches = 0;
  bool enabled() const { return merge > 0; }
  bool naflex() const { return max_num_patches > 0; }
  int factor(int patch_px) const { return patch_px * merge; }  // image sides are multiples of this
};

struct VitConfig {
  VitFamily family = VitFamily::clip;
  // hf_clip, hf_siglip, hf_siglip2, hf_idefics2/3, hf_llava, torchvision, gguf_mmproj, hf_vit, timm_vit, hf_dinov2,
  // hf_dinov2_reg, open_clip, intern_vit, hf_blip, hf_blip2, hf_paligemma, random
  std::string naming = "random";
  InputContract input;
  int hidden = 768;     // D
  int layers = 12;
  int heads = 12;
  int mlp = 3072;  // the MLP's hidden width: fc2's input (fc1 gives twice that with swiglu)
  int patch_px = 16;    // P
  int grid = 14;        // G: the position grid is G×G (native image G·P pixels square)
  int channels = 3;
  bool class_token = true;
  // Register tokens (DINOv2 with registers: HF Dinov2WithRegisters' embeddings.register_tokens,
  // timm's reg_token): learned rows after the class token, without a position embedding, that
  // every token attends to; they are not part of any output.
  int registers = 0;
  bool patch_bias = false;
  bool pre_norm = false;  // CLIP pre_layrnorm
  PositionSampling pos_sampling = PositionSampling::bicubic;
  FinalNorm final_norm = FinalNorm::pooled_only;
  Activation act = Activation::quick_gelu;
  float ln_eps = 1e-5f;
  int projection_dim = 0;       // CLIP visual_projection (0: none)
  bool attention_pool = false;  // SigLIP multihead-attention pooling head
  // BLIP / BLIP-2: HF's pooler_output is post_layernorm applied again to the (normed) class token.
  bool pooled_normed_twice = false;
  int num_classes = 0;          // torchvision heads.head, HF ViT classifier, timm head (0: none)
  // The encoder runs `layers` blocks. For a projector, that is the layer it reads: LLaVA reads
  // HF's hidden_states[-2], which llama.cpp's converter stores as the file's blocks (the last
  // block dropped); clip.vision.feature_layer = [f] selects hidden_states[f] (f blocks).
  int layers_in_checkpoint = 0;  // blocks present in the file (>= layers)
  ProjectorType projector = ProjectorType::none;
  Activation projector_act = Activation::gelu_erf;  // between the projector's two linears
  int projector_hidden = 0;      // mm.0's output width
  int projector_dim = 0;         // E = n_embd of the language model (the `projected` width)
  // A projector in the checkpoint that fovea does not run because it groups a uniform grid of
  // tokens (InternVL's mlp1, Idefics3's connector, Gemma 3's 4×4 pooling, Phi-3-vision's
  // img_projection), in words; empty when
  // none. `embeddings` is then the tower's output, and embedding_output() says so.
  std::string ignored_projector;
  NativeConfig native;  // native-resolution towers only (native.enabled())
  int head_dim() const { return hidden / heads; }
  int native_px() const { return grid * patch_px; }
};

// fovea convert: a safetensors checkpoint (a file, or a directory with model.safetensors and its
// JSON files) rewritten under the same tensor names with its matrices stored as bf16 (vectors as
// float32), so a one-shot process maps them ready to run; with `stored` int8 also the layers'
// matrices quantized for Precision::int8 (per output channel, in the kernels' panel layout, with
// their scales), which an int8 encode then reads where they lie instead of quantizing at load.
// `out` is a file, or a directory (given as one, or when `spec` is one) that gets
// model.safetensors and copies of the JSON files. Throws Error(invalid_argument) for another
// format or precision; the file is written atomically.
struct ConvertResult {
  std::string path;       // the safetensors file written
  size_t bytes = 0;
  int tensors = 0;
  int int8_matrices = 0;  // layer matrices stored as int8
};
ConvertResult convert_checkpoint(const std::string& spec, const std::string& out, Precision stored);

struct ModelLoadOptions {
  // true: F32 and BF16 weight matrices are used where they lie in the checkpoint, which stays
  // mapped read-only while the model lives (no copy: a one-shot encode touches each weight once,
  // so copying it would cost more than using it). The file must then not be truncated or
  // rewritten in place meanwhile (replacing it with a rename is fine): reading a truncated
  // mapping is a SIGBUS, as with llama.cpp's mmap. false: every weight is copied into the
  // model's own memory and the file is closed after loading.
  bool map_weights = true;
};

// A loaded model, shared and immutable. Weight matrices stay in the file's type (F32, BF16; a
// GGUF file's F16 and Q8_0 too, decoded as the GEMMs read them, when mapped; other types are
// decoded to float32 at load), mapped or owned (ModelLoadOptions); the rest
// (norms, biases, embeddings) is float32. GEMM-ready copies (bf16, oneDNN's blocked layouts) are
// made by encode() only when they pay: from a weight's second use on (at the first for a
// context made with expect_reuse), once per model whatever the number of contexts. Cheap to copy
// (shared handle). Thread-safe: any number of threads encode on one model at once (above).
class VitModel {
 public:
  // `spec` is a path to a .safetensors or .gguf file (recognised by content, not by name), an HF
  // sharded checkpoint's model.safetensors.index.json, a directory holding either, or
  // "random:vit-b16" / "random:vit-s16" (optionally "random:vit-b16:SEED"). config.json and
  // preprocessor_config.json beside a .safetensors file are read. Throws Error(io) for an
  // unreadable file, Error(corrupt_data) for a malformed one, Error(unsupported) for an unknown
  // naming, projector or tensor type, and Error(corrupt_data) naming every missing or
  // mis-shaped tensor.
  static VitModel load(const std::string& spec, const ModelLoadOptions& options = {});
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

  struct FOVEA_INTERNAL Impl;
  const Impl& impl() const { return *impl_; }

 private:
  friend struct encoder_detail::ModelAccess;
  std::shared_ptr<Impl> impl_;
};

struct EncoderContextParams {
  // Constant weights are packed (converted, reordered for the kernels) at their first use
  // instead of their second: for a caller that runs the model many times, such as a video
  // session, which would otherwise convert every weight twice. A one-shot caller keeps false:
  // its first encode reads the weights where they lie. Either way the model holds the copies.
  bool expect_reuse = false;
  // oneDNN primitives the context keeps, the least recently used dropped first. Each token
  // count and thread count makes its own (ViT-B/16 in bf16: 5, ~0.35 MB each), so a context that
  // sees many image sizes (a service) stays bounded; a dropped primitive is made again when its
  // size returns (the same bytes, a few ms more). oneDNN's own process-wide primitive cache
  // (ONEDNN_PRIMITIVE_CACHE_CAPACITY, 1024 by default) keeps dropped ones too: a service bounds it.
  int max_primitives = 64;
};

// The per-call state of the encoder (see "Model and context" above): oneDNN's primitives per
// shape and thread count with their scratchpads, the attention buffers, kept from one call to
// the next (fresh pages cost a zeroing fault: reuse a context rather than make one per call).
// Not tied to a model: a context may encode with several models in turn. Move-only (a
// moved-from context may only be assigned to or destroyed).
class EncoderContext {
 public:
  explicit EncoderContext(const EncoderContextParams& params = {});
  ~EncoderContext();
  EncoderContext(EncoderContext&&) noexcept;
  EncoderContext& operator=(EncoderContext&&) noexcept;
  EncoderContext(const EncoderContext&) = delete;
  EncoderContext& operator=(const EncoderContext&) = delete;

  const EncoderContextParams& params() const;

  struct FOVEA_INTERNAL Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// How every layer's self-attention runs.
struct AttentionParams {
  enum class Mode : uint8_t {
    exact,         // softmax(Q·Kᵀ/√d)·V over every token (the default)
    hierarchical,  // coarse-to-fine, training-free: an EXPERIMENTAL APPROXIMATION, labelled in
                   // every output with what it cost on a real tower (attention_caveat())
  };
  Mode mode = Mode::exact;
  // hierarchical: tokens are grouped by their positions (centre x, y; Morton order, i.e. quadtree
  // cells) into blocks of block_tokens. Each query block attends exactly to the keys of its
  // top_k key blocks, ranked by the most attention any of its queries could give each block (an
  // upper bound of the scores from the block keys' per-dimension max and min, through a softmax
  // over the blocks), and to the mean key and value of every other block with a log(count)
  // bias, so a pooled key stands for its block's mass. The class token is attended exactly by
  // every query and attends exactly to every key. top_k >= the number of blocks gives exact
  // attention. EXPERIMENTAL: on a model made to attend as peaked as a trained one the default
  // (K=8) held a mean cosine of 0.994 to exact at N=4096, but on a real pretrained ViT-Ti/16 it
  // holds far less (attention_caveat(); docs/explanation/encoder.md, "Hierarchical attention
  // (experimental)").
  int top_k = 8;
  int block_tokens = 64;
};
// What hierarchical attention costs on a real pretrained tower, as every output of an encode
// records it: the range over photos of the mean per-token cosine to exact attention measured
// for this K:B on a ViT-Ti/16 at N=4096 (or, for a K:B not measured, over every K:B that was).
// Exact attention: experimental false and an empty text.
struct AttentionCaveat {
  bool experimental = false;
  double cosine_lo = 1, cosine_hi = 1;
  std::string measured;  // the configuration(s) the range is of, e.g. "hierarchical:8:64"
  std::string text;      // "experimental: mean per-token cosine to exact attention 0.81-0.91 on ..."
};
AttentionCaveat attention_caveat(const AttentionParams& a);
// "exact", "hierarchical", "hierarchical:K" or "hierarchical:K:B" (K >= 1 blocks, B >= 1 tokens
// per block). Throws Error(invalid_argument) naming the accepted forms.
AttentionParams parse_attention(std::string_view spec);
// "exact" or "hierarchical:K:B" (parse_attention reads it back).
std::string to_string(const AttentionParams& a);

// What `Encoding::pooled` holds for this model, in words: "post_layernorm(class token)" (HF
// CLIP), "class_token (identical: the final LayerNorm applies to every token)" (HF ViT without a
// pooler, torchvision, timm, DINOv2, open_clip: pooled is then byte for byte class_token),
// "tanh(pooler.dense(the normed class token))" (HF ViTModel with its pooler), "attention-pool
// head (...)" (SigLIP), ...; empty when encode() gives no pooled output.
std::string pooled_output(const VitModel& model);

// A head encode() runs after the tower, for reports (`fovea model`).
struct ModelHead {
  std::string kind;    // "classifier", "projection", "pooler" or "attention-pool"
  std::string output;  // the Encoding field it fills: "logits", "image_embeds" or "pooled"
  int width = 0;       // the output's width: K classes for a classifier
  std::string input;   // what the output is computed from, in words
  // e.g. "classifier, 200 classes (logits from the normed class token)".
  std::string describe() const;
};
// The model's heads in the order encode() runs them (empty: the tower's outputs only). The
// projector of a VLM checkpoint (VitConfig::projector) is not among them: it maps every token.
std::vector<ModelHead> model_heads(const VitModel& model);

// What an embeddings file records about the model and the precision: model, model_description,
// model_family, random_weights, precision, attention, hidden_size, positional_interpolation,
// model_naming, embeddings_output, pooled_output when the model gives a pooled output, and
// projector / projected_dim when the model has one.
// `fovea encode -o` and the Python binding both write these, so their files agree.
// `attention` (key "attention": "exact" or "hierarchical:K:B (approximate, experimental: ...)",
// attention_caveat()'s text) says how it ran.
// `precision` is the one requested: the file says what ran (runnable_precision) and, when that
// differs, `precision_requested`.
std::map<std::string, std::string> encoder_metadata(const VitModel& model, Precision precision,
                                                    const AttentionParams& attention = {});

struct EncodeParams {
  Precision precision = Precision::fp32;
  int image_width = 0, image_height = 0;  // the original image the positions refer to (> 0)
  AttentionParams attention{};            // exact unless asked
};

struct Encoding {
  Tensor embeddings;    // [N, D] f32: last hidden state of the N patch tokens, batch order
  Tensor class_token;   // [1, D] last hidden state of the class token (models with one)
  Tensor pooled;        // [1, D] CLIP: post_layernorm(class); SigLIP: attention-pool head;
                        //        torchvision, timm, DINOv2, HF ViT without pooler: the normed
                        //        class token, identical to class_token; HF ViTModel with pooler:
                        //        tanh(pooler.dense(it)). pooled_output() says which.
  Tensor image_embeds;  // [1, E] CLIP visual_projection(pooled)
  Tensor logits;        // [1, K] torchvision heads.head / HF ViT classifier / timm head (normed class token)
  Tensor projected;     // [N, E] projector(embeddings): the LLM's input embeddings, batch order
  Precision precision = Precision::fp32;  // what ran: runnable_precision(EncodeParams::precision)
  double encode_ms = 0;
  double attention_ms = 0;  // of encode_ms: the attention op of every layer (Q·Kᵀ, softmax, P·V;
                            // for hierarchical attention also the pooling, ranking and gathers)
  // The windows foveation (encode_windows) only. `rows`: the batch rows that `embeddings` and
  // `projected` hold, in batch order (the tokens no finer window covers). class_token, pooled,
  // image_embeds and logits are the base view's (window 0); window_class_tokens [W, D] holds every
  // window's class token (models with one).
  std::vector<int64_t> rows;
  Tensor window_class_tokens;
};

// patches [N, C, P, P] float32 or float16 (normalised as the model expects), positions [N, 4]
// float32 (centre x, centre y, side, level: the TokenBatch layout). Both are read in place: a
// Tensor or a caller's buffer (TensorView, e.g. a numpy array). Throws
// Error(invalid_argument) when the patch size, channels or shapes do not match the model.
// Every entry point comes twice: with the caller's EncoderContext, and without (a context
// borrowed from the model's pool for the call). Both give the same bytes.
Encoding encode(EncoderContext& ctx, const VitModel& model, const TensorView& patches, const TensorView& positions,
                const EncodeParams& params, Executor& exec);
Encoding encode(const VitModel& model, const TensorView& patches, const TensorView& positions,
                const EncodeParams& params, Executor& exec);

// The foveation a model is fed by default (fovea encode, and Python's tokenize with a model): windows
// for every family fovea loads, since each is a frozen tower trained at one native size, which
// a sequence mixing scales leaves (docs/explanation/fidelity.md: measured on a real ViT-Ti); mixed for the
// random benchmark models, which have no training to leave.
Foveation default_foveation(const VitModel& model);

// One image of a batched encode: `tokens` consecutive rows of the patches and positions, whose
// positions are in this image's own pixels (image_width × image_height).
struct ImageSpan {
  int64_t tokens = 0;
  int image_width = 0, image_height = 0;
};

// Several images in one call, their tokens one image after another. The linear layers run over
// every image's rows at once (the weights are read once for all of them), attention within each
// image; result i equals encode() of image i alone, up to rounding (a GEMM over more rows may
// sum in another order). EncodeParams' image size is not read. Every result carries the whole
// call's encode_ms and attention_ms. Throws as encode(), and Error(invalid_argument) when the
// images' tokens do not add up to the rows of patches.
std::vector<Encoding> encode_batch(EncoderContext& ctx, const VitModel& model, const TensorView& patches,
                                   const TensorView& positions, std::span<const ImageSpan> images,
                                   const EncodeParams& params, Executor& exec);
std::vector<Encoding> encode_batch(const VitModel& model, const TensorView& patches, const TensorView& positions,
                                   std::span<const ImageSpan> images, const EncodeParams& params, Executor& exec);

// The windows foveation (fovea/windows.hpp): every window of `batch` encoded as a standalone image
// of (grid_x·P) × (grid_y·P) pixels, its tokens at their cells' centres, all windows in one call
// (encode_batch); then the covered tokens are dropped (a batch planned with keep_covered has
// none). Returns the kept tokens in batch order (Encoding::rows). EncodeParams' image size is not
// read. Throws Error(invalid_argument) for a batch without windows or whose windows do not add up.
Encoding encode_windows(EncoderContext& ctx, const VitModel& model, const TokenBatch& batch, const EncodeParams& params,
                        Executor& exec);
Encoding encode_windows(const VitModel& model, const TokenBatch& batch, const EncodeParams& params, Executor& exec);

// Encodes `batch` as its foveation needs: encode_windows for a windowed batch, encode() of its
// patches and positions (in an image_width × image_height image) otherwise.
Encoding encode_tokens(EncoderContext& ctx, const VitModel& model, const TokenBatch& batch, const EncodeParams& params,
                       Executor& exec);
Encoding encode_tokens(const VitModel& model, const TokenBatch& batch, const EncodeParams& params, Executor& exec);

// One image of encode_tokens_batch: a tokenization's batch (not owned) and the size of the image
// its positions refer to (not read for a windowed batch, whose windows are images of their own).
struct TokenBatchImage {
  const TokenBatch* batch = nullptr;
  int image_width = 0, image_height = 0;
};

// Several images' batches, windowed or not, in one call: encode_batch over every image (every
// window of a windowed batch), then each batch's result put together as encode_tokens does.
// Result i equals encode_tokens of image i alone up to rounding (a GEMM over more rows may sum
// in another order); one image gives encode_tokens' bytes. Every result carries the whole
// call's encode_ms and attention_ms. EncodeParams' image size is not read. An empty span gives
// an empty result. Throws as encode_tokens, and Error(invalid_argument) for a null batch or
// batches whose patches differ in dtype or size.
std::vector<Encoding> encode_tokens_batch(EncoderContext& ctx, const VitModel& model,
                                          std::span<const TokenBatchImage> images, const EncodeParams& params,
                                          Executor& exec);
std::vector<Encoding> encode_tokens_batch(const VitModel& model, std::span<const TokenBatchImage> images,
                                          const EncodeParams& params, Executor& exec);

// The embeddings file (fovea/embeddings.hpp) of encoding `e` of `batch`: e's tensors (copied), the
// positions and levels of the rows it holds; for the windows foveation also window [N] i32 (each
// token's window), window_boxes, window_grids, window_levels (extract.hpp's window_tensors_of)
// and window_class_tokens [W, D]. `metadata` is taken as is.
EmbeddingsFile embeddings_file(const TokenBatch& batch, const Encoding& e, std::map<std::string, std::string> metadata);

// The relevance stage's query-embedding hook (RelevanceParams::tile_features). Features come
// from the patch embedding: every finest P×P tile of pyramid level 0, normalised with `norm`,
// through the model's patch-embedding GEMM (no position, no transformer: one GEMM over the
// tiles, cheap enough to run before allocation). For a CLIP model with a visual projection and a
// query of the projection's length, features are mapped as post_layernorm + visual_projection
// (the text-image space); otherwise the query must have D values. Throws
// Error(invalid_argument) from the hook when neither length matches.
// With `ctx`, every call of the hook runs on that context: the caller keeps ctx alive as long as
// the hook may be called, and a call of the hook while ctx serves another call (or the other way
// round) throws Error(invalid_argument). Without, each call of the hook borrows a context from
// the model's pool.
TileFeatureFn tile_feature_fn(EncoderContext& ctx, const VitModel& model, const Normalization& norm, int query_dim,
                              Executor& exec);
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
FOVEA_API_END
