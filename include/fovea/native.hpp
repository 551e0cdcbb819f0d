// fovea/native.hpp — native-resolution towers: Qwen2-VL, Qwen2.5-VL, Qwen3-VL and SigLIP 2 NaFlex.
//
//   fovea::Executor exec;
//   fovea::VitModel m = fovea::VitModel::load("Qwen2.5-VL-7B-Instruct/");   // the VLM's directory
//   fovea::NativeInput in = fovea::prepare_native(m, fovea::load_image("photo.jpg"), {}, exec);
//   fovea::NativeEncoding e = fovea::encode_native(m, {&in, 1}, {}, exec);
//   const fovea::Tensor& rows = e.projected;        // [M, E]: the language model's rows, one per merge unit
//   const fovea::Tensor& grid = e.grid_thw;         // [1, 3] int32: (t, h, w) in patches (image_grid_thw)
//   const fovea::Tensor& ids = e.mrope_positions;   // [M, 3] int32: (t, h, w) ids, as get_rope_index gives them
//
// These towers take any size and aspect ratio: an image is resized (smart_resize) so that both
// sides are multiples of P·merge (28 px for Qwen2-VL's 14-px patches and 2×2 merge) and its area
// lies within [min_pixels, max_pixels], then cut into P×P patches, each of temporal_patch frames
// (a still image is its frame repeated), flattened as (C, T, P, P) in the processor's order:
// merge unit by merge unit (row-major over the merged grid), the merge unit's patches row-major.
// The tower gives every patch a 2-D rotary position (its row and column; Qwen3-VL adds its learned
// position table sampled bilinearly, corners aligned, at the grid), runs attention within
// each image's frame (Qwen2.5-VL: within window_px windows except in full_attention_blocks), and
// the merger turns each merge unit's patches into one row of the language model's width.
//
// Several images (a base view and full-resolution windows, or several photos) run in one call:
// the linear layers over every image's rows at once, attention within each image. Result rows
// are image after image.
//
// Thread safety: as encode() (encoder.hpp).
#pragma once
#include "fovea/export.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/relevance.hpp"
#include "fovea/tensor.hpp"
#include "fovea/view.hpp"

FOVEA_API_BEGIN
namespace fovea {

// An image's patch grid: t frames (temporal patches), h rows, w columns of patches.
struct NativeGrid {
  int t = 1, h = 0, w = 0;
  int64_t patches() const { return int64_t(t) * h * w; }
  int64_t merged(int merge) const { return int64_t(t) * (h / merge) * (w / merge); }
  bool operator==(const NativeGrid&) const = default;
};

struct NativeSize {
  int height = 0, width = 0;
  bool operator==(const NativeSize&) const = default;
};

// The processor's smart_resize (transformers' image_processing_qwen2_vl): both sides rounded to
// the nearest multiple of `factor` (halves to even, as Python's round), then, when the area
// exceeds max_pixels, scaled by √(h·w / max_pixels) and floored to multiples (at least one
// factor); when it is below min_pixels, scaled by √(min_pixels / (h·w)) and ceiled. Throws
// Error(invalid_argument) for non-positive sizes or limits, and for an aspect ratio above 200
// (as the reference does).
NativeSize smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels);

// What the tower reads for one native image: patches [N, C·T·P·P] float32 (normalised, the
// processor's order and layout) and the grid (N = t·h·w).
struct NativeInput {
  Tensor patches;
  NativeGrid grid;
  // Video: frames per second of the frames given, for Qwen2.5-VL's temporal position ids
  // (second_per_grid_t = temporal_patch / fps); the processor's default 2.
  double fps = 2.0;
};

// The processor's resampling: PIL's bicubic (Image.resize(..., BICUBIC) on 8-bit RGB: a = −0.5,
// antialiased when shrinking, horizontal pass then vertical, each rounded to 8 bits with PIL's
// fixed-point weights), which transformers' Qwen2VLImageProcessor applies before rescaling.
// An image already at the size is returned as is.
ImageU8 resize_bicubic_pil(const ImageViewU8& image, int width, int height);

struct NativeParams {
  // The pixel limits of smart_resize; 0: the model's (preprocessor_config.json; for video the
  // video processor's, NativeConfig::video_min_pixels / video_max_pixels).
  int64_t min_pixels = 0, max_pixels = 0;
  // Qwen3-VL video: cap each frame's pixels as qwen-vl-utils does (transformers'
  // cap_pixels_per_frame): max_pixels becomes frames · max(min(768·factor², max_pixels / frames),
  // ⌊1.05 · min_pixels⌋). Off: transformers' current default, the whole budget over the frames.
  bool cap_pixels_per_frame = false;
};

// Qwen3-VL's video processor's smart_resize (transformers' video_processing_qwen3_vl): a side
// below `factor` is first scaled up (both by max(factor / h, factor / w), truncated); then as
// smart_resize, but the limits count the pixels of every frame: the area test is on
// round(frames / temporal_factor) · temporal_factor · h̄ · w̄ and the scale on frames · h · w.
// Throws Error(invalid_argument) for fewer frames than temporal_factor (as the reference),
// non-positive sizes or limits, and an aspect ratio above 200.
NativeSize smart_resize_video(int frames, int height, int width, int temporal_factor, int factor, int64_t min_pixels,
                              int64_t max_pixels);
// The size the model's video processor resizes `frames` frames of height × width to: Qwen2-VL
// and Qwen2.5-VL (Qwen2VLVideoProcessor) smart_resize of one frame within the video limits;
// Qwen3-VL smart_resize_video over the frames (with params.cap_pixels_per_frame). Limits 0 in
// `params`: the model's video limits. Throws Error(invalid_argument) as those do, or when the
// model is not a Qwen-VL tower.
NativeSize native_video_size(const VitModel& model, int frames, int height, int width, const NativeParams& params);

// One still image (RGB) or video frames (temporal_patch of them per grid step; fewer at the end
// are padded with the last, as the processor does) as the tower reads them: the frames must all
// have one size, which smart_resize keeps (sides multiples of P·merge). Normalised with the
// model's input contract. Throws Error(invalid_argument) otherwise.
NativeInput native_input(const VitModel& model, std::span<const ImageViewU8> frames);
// The processor for one image: smart_resize within the limits, resize_bicubic_pil, native_input.
NativeInput prepare_native(const VitModel& model, const ImageViewU8& image, const NativeParams& params, Executor& exec);
// The same for video frames of one size (RGB) at `fps`: each frame resized to native_video_size
// (the family's video processor's rule and pixel limits; frame sampling is the caller's), then
// native_input (frames paired by temporal_patch, an odd last frame repeated). Throws
// Error(invalid_argument) for no frame, frames of different sizes, a non-positive fps, or (Qwen3-VL)
// fewer frames than temporal_patch.
NativeInput prepare_native_video(const VitModel& model, std::span<const ImageViewU8> frames, double fps,
                                 const NativeParams& params, Executor& exec);

struct NativeEncoding {
  Tensor embeddings;       // [N, D] f32: the tower's last hidden state (before the merger), every
                           // image's patches in the processor's order, image after image
  Tensor projected;        // [M, E] f32: the merger's output (M = N / merge²), image after image
  Tensor grid_thw;         // [k, 3] int32: each image's (t, h, w) in patches (image_grid_thw)
  Tensor mrope_positions;  // [M, 3] int32: (t, h, w) position ids (native_mrope_positions)
  std::vector<Tensor> deepstack;  // Qwen3-VL: [M, E] f32 each, the DeepStack mergers' outputs in the
                                  // order of deepstack_visual_indexes (rows as `projected`)
  std::vector<int64_t> image_rows;  // [k + 1]: image i's rows of `projected` are [image_rows[i], image_rows[i+1])
  Precision precision = Precision::fp32;  // what ran
  double encode_ms = 0, attention_ms = 0;
  int frames_reused = 0;  // frame pairs whose patches equal an earlier one's in the call: encoded once, rows copied
};

// The language model's multimodal rotary position ids of the merged tokens of `grids`, images
// that follow each other with nothing between: image i's token at merged row y, column x of
// frame f gets (f·s, y, x) + start_i, where s is 1 (tokens_per_second 0: Qwen2-VL) or
// tokens_per_second · seconds_per_frame_pair (Qwen2.5-VL video; 0 for images), start_0 = 0 and
// start_{i+1} = the largest id of image i + 1: what get_rope_index gives an image's tokens,
// relative to the position of its first token. Text between images shifts the later ones
// (fovea.handoff.qwen_position_ids lays out a whole prompt). [M, 3] int32.
Tensor native_mrope_positions(std::span<const NativeGrid> grids, int merge, double temporal_step = 1.0);

// The M-RoPE ids encode_native gives `images` (back to back, as above): Qwen2-VL steps the
// temporal id by 1 per frame pair; Qwen2.5-VL by tokens_per_second · temporal_patch / fps (its
// get_rope_index's second_per_grid_t), truncated; Qwen3-VL gives every frame pair of a video the
// ids of an image of its own (its get_rope_index splits video grids into t = 1, timestamps
// between them). [M, 3] int32.
Tensor native_mrope_positions(const VitModel& model, std::span<const NativeInput> images);

// Encodes native images (native_input / prepare_native) in one call. A video (t > 1) is encoded
// frame pair by frame pair, which is exact (attention, rotary and learned positions never cross a
// frame pair), and a frame pair identical to an earlier one of the call is encoded once. Throws
// Error(invalid_argument) when the model is not a native-resolution tower, or an input's patches
// or grid do not match the model (sides not multiples of merge, N ≠ t·h·w, wrong patch width).
NativeEncoding encode_native(EncoderContext& ctx, const VitModel& model, std::span<const NativeInput> images,
                             const EncodeParams& params, Executor& exec);
NativeEncoding encode_native(const VitModel& model, std::span<const NativeInput> images, const EncodeParams& params,
                             Executor& exec);

// ---- foveation: a base view and full-resolution windows, each a native image ------------------
// The budget counts merged tokens (the language model's rows). The base view is the whole image
// through smart_resize with max_pixels = base tokens · (P·merge)²; each window is a crop of the
// original image at full resolution whose sides are multiples of P·merge, encoded as a native
// image of its own (its own grid_thw), so its tokens are exactly that crop's. Windows go, in
// this order, while the budget lasts: on every fixation and every region's centre (the budget
// left after the base view shared among them; a focus inside a window already placed is
// skipped), then, with no query, on the tiles of the relevance map with the highest score not
// yet covered. A window is at most the image and at least one merge unit; the last tokens of
// the budget that make no window stay unspent.
struct NativeWindowParams {
  int budget_tokens = 1024;  // merged tokens handed on: base view + windows (>= 4)
  double base_share = 0.25;  // the base view's share of the budget (0 < share <= 1)
  int max_windows = 8;       // windows besides the base view (0..64)
};
struct NativeWindow {
  std::array<int, 4> box{};  // [x0, y0, x1, y1) in original-image pixels
  NativeGrid grid;           // in patches
  TokenWindow::Kind kind = TokenWindow::Kind::base;
};
struct NativeWindowPlan {
  std::vector<NativeWindow> windows;  // the base view first
  int image_width = 0, image_height = 0;
  int64_t tokens(int merge) const;    // merged tokens of every window
};
// `relevance` may be null (no query-free windows then). A SigLIP 2 NaFlex tower is planned the
// same way with merge 1 (naflex_window_inputs). Throws Error(invalid_argument) for parameters out
// of range or a model that is neither.
NativeWindowPlan plan_native_windows(const VitModel& model, int width, int height, const Query& query,
                                     const RelevanceMap* relevance, const NativeWindowParams& params);
// The plan's windows as the tower reads them: the base view resized (resize_bicubic_pil), every
// other window cut from `image` (which must be the plan's size).
std::vector<NativeInput> native_window_inputs(const VitModel& model, const ImageViewU8& image,
                                              const NativeWindowPlan& plan);

// ---- mixed foveation (for experiment): one sequence of merge units from several mip levels ------
// The quadtree tokenizer (fovea/tokenize.hpp) run on tiles of P·merge pixels (native_mixed_params)
// has leaves that are merge units: a level-ℓ leaf is one (P·merge)-px patch of mip ℓ, that is
// merge × merge P-px patches of one level, siblings never split across levels, and the budget counts
// the leaves, i.e. the merged tokens the language model reads. native_mixed_input cuts every leaf
// into its merge² patches, row-major (the order the merger concatenates them; a still image's
// temporal patch is the patch repeated, as native_input does), and places them: with ℓ₀ the
// layout's finest level (0 whenever the budget reaches full resolution), a level-ℓ patch at row r,
// column c of mip ℓ's patch grid has its centre at ((r + ½)·2^(ℓ−ℓ₀), (c + ½)·2^(ℓ−ℓ₀)) in patch
// units of mip ℓ₀, and its rotary position is that centre minus ½: a level-ℓ₀ patch is at (r, c)
// as in a native encode of mip ℓ₀, a coarser one at a fractional position. encode_native_mixed
// runs the tower on that one sequence as encode_native runs an image:
//  - rotary angles: position × frequency, with the real-valued positions;
//  - Qwen3-VL's learned table: sampled bilinearly at position·(G−1)/(n−1) on each axis, n the
//    patches of mip ℓ₀'s padded grid on that axis (where encode_native samples linspace(0, G−1, n)),
//    clamped to the table;
//  - Qwen2.5-VL's window attention: windows of window_px pixels of mip ℓ₀ (window_px / (P·merge)
//    merge units a side, on the grid encode_native uses for mip ℓ₀); a merge unit joins the window
//    that holds its centre (a unit wider than a window joins one of those it covers); full
//    attention over the whole sequence in the full-attention blocks;
//  - mrope_positions for the language model: (0, y, x), y and x the unit's centre in merged-token
//    units of mip ℓ₀ minus ½, rounded half up (⌊v + ½⌋): a level-ℓ₀ unit's merged row and column as
//    get_rope_index gives them, and distinct for every unit (the rounded centre lies in its box).
//    The ids start at 0, as one image's; they are not a grid, so vLLM's image_grid_thw route does
//    not apply (grid_thw is [0, 3]): hand them on as position ids (fovea.handoff.qwen_hf_inputs).
// A layout whose units are all at level ℓ₀, of an image whose sides are multiples of
// P·merge·2^ℓ₀, is therefore encode_native of mip ℓ₀, row for row (rows in the layout's order,
// which is the processor's). Coarser units are a sequence no Qwen-VL tower was trained on: the
// mode is for experiment; windows foveation (plan_native_windows) keeps every image in
// distribution.

// The tile side of a native tower's mixed foveation, P·merge pixels (28 for Qwen2-VL): tokenize
// (fovea/tokenize.hpp) with patch_px = this, foveation mixed, the budget in merged tokens, float32
// patches normalised with the model's mean and std (normalization(model.config().input)):
//   fovea::TokenizeParams tp;
//   tp.patch_px = fovea::native_mixed_tile_px(m);
//   tp.alloc.budget_tokens = 256;
//   tp.extract.norm = fovea::normalization(m.config().input);
//   fovea::Tokenization t = fovea::tokenize(image, query, tp, exec);
//   fovea::NativeMixedInput in = fovea::native_mixed_input(m, t.batch, t.pyramid.width(), t.pyramid.height());
//   fovea::NativeEncoding e = fovea::encode_native_mixed(m, in, {}, exec);
// Throws Error(invalid_argument) when the model is not a Qwen-VL tower.
int native_mixed_tile_px(const VitModel& model);

struct NativeMixedInput {
  Tensor patches;    // [N, C·T·P·P] f32: unit after unit (the layout's order: level, y, x), each
                     // unit's merge² patches row-major, each as native_input lays a patch out
  Tensor positions;  // [N, 2] f32: each patch's rotary (row, column), in patch units of mip ℓ₀
  std::vector<Token> units;                 // [M]: each merge unit's node (x, y) and level
  std::vector<std::array<float, 4>> boxes;  // [M]: each unit's box [x0, y0, x1, y1) in image pixels
  int unit_level = 0;                       // ℓ₀: the layout's finest level
  int grid_h = 0, grid_w = 0;               // patches of mip ℓ₀'s padded grid (tiles at ℓ₀ · merge)
  int image_width = 0, image_height = 0;
  int64_t merged() const { return int64_t(units.size()); }
};
// A mixed token batch of an image_width × image_height image (tokenize as above) as the tower
// reads it. Throws Error(invalid_argument) when the model is not a Qwen-VL tower or the batch does
// not fit it (a windows or uniform batch, another patch size, dtype or normalisation, no token).
NativeMixedInput native_mixed_input(const VitModel& model, const TokenBatch& batch, int image_width, int image_height);
// The M-RoPE ids of a mixed input's merge units ([M, 3] int32, rule above).
Tensor native_mixed_mrope_positions(const VitModel& model, const NativeMixedInput& input);
// Encodes a mixed input in one sequence (rules above): projected [M, E] and deepstack rows in the
// units' order, embeddings [N, D] in the patches' order, mrope_positions [M, 3], grid_thw [0, 3],
// image_rows {0, M}. Throws Error(invalid_argument) when the model is not a Qwen-VL tower or the
// input does not match it.
NativeEncoding encode_native_mixed(EncoderContext& ctx, const VitModel& model, const NativeMixedInput& input,
                                   const EncodeParams& params, Executor& exec);
NativeEncoding encode_native_mixed(const VitModel& model, const NativeMixedInput& input, const EncodeParams& params,
                                   Executor& exec);

// Whether `model` is a native-resolution tower (VitConfig::native.enabled()).
inline bool is_native(const VitModel& model) { return model.config().native.enabled(); }

// ---- SigLIP 2 NaFlex: any size and aspect ratio, up to max_num_patches patches -----------------
// Siglip2ImageProcessor resizes an image (PIL's bilinear) to the size naflex_size gives, cuts it
// into P×P patches row-major and pads the run to max_num_patches with masked patches;
// Siglip2VisionModel resizes its √n × √n position table to the image's patch grid (bilinear,
// antialias, corners not aligned) and masks the padding in attention and in the pooling head.
// fovea runs each image as a sequence of its own patches (attention within the image, which is
// what the masks compute), through encode_batch: `embeddings` are last_hidden_state's rows of
// the image's patches, `pooled` the head's pooler_output.
//
// get_image_size_for_max_num_patches: the largest scale s found by bisection (s in
// [1e-6, 100], until the interval is below 1e-5) for which ⌈s·h / P⌉·⌈s·w / P⌉ (each at least 1)
// is at most max_num_patches; returns those sides times P. Throws Error(invalid_argument) for
// non-positive arguments.
NativeSize naflex_size(int height, int width, int patch_px, int max_num_patches);
// Pillow's Image.resize(..., BILINEAR) on 8-bit channels (antialiased when shrinking, horizontal
// pass then vertical, each rounded to 8 bits), the NaFlex processor's resampling.
ImageU8 resize_bilinear_pil(const ImageViewU8& image, int width, int height);

struct NaflexInput {
  Tensor patches;    // [N, C, P, P] f32, normalised with the model's contract, row-major over the grid
  Tensor positions;  // [N, 4] f32: (centre x, centre y, P, 0) in the resized image's pixels
  NativeGrid grid;   // t 1, h × w patches (the processor's spatial_shapes), N = h·w
};
// An image whose sides are multiples of the patch size, as the tower reads it. Throws
// Error(invalid_argument) when the model is not a NaFlex tower or a side is not a multiple.
NaflexInput naflex_input(const VitModel& model, const ImageViewU8& image);
// The processor for one image: naflex_size with `max_num_patches` (0: the model's,
// preprocessor_config.json), resize_bilinear_pil, naflex_input.
NaflexInput prepare_naflex(const VitModel& model, const ImageViewU8& image, int max_num_patches = 0);
// Encodes NaFlex images in one call (one Encoding per image, as encode_batch). Throws
// Error(invalid_argument) when the model is not a NaFlex tower or an input does not match it.
std::vector<Encoding> encode_naflex(EncoderContext& ctx, const VitModel& model, std::span<const NaflexInput> images,
                                    const EncodeParams& params, Executor& exec);
std::vector<Encoding> encode_naflex(const VitModel& model, std::span<const NaflexInput> images,
                                    const EncodeParams& params, Executor& exec);
// Windows foveation on a NaFlex tower: plan_native_windows plans it with a token = a patch (the
// base view through naflex_size at the base tokens; windows whose sides are multiples of P);
// this gives the plan's windows as the tower reads them (the base view resized with
// resize_bilinear_pil, every other window cut from `image`, which must be the plan's size).
std::vector<NaflexInput> naflex_window_inputs(const VitModel& model, const ImageViewU8& image,
                                              const NativeWindowPlan& plan);
// Whether `model` is a SigLIP 2 NaFlex tower (VitConfig::native.naflex()).
inline bool is_naflex(const VitModel& model) { return model.config().native.naflex(); }

}  // namespace fovea
FOVEA_API_END
