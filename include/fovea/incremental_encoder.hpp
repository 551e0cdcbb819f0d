// fovea/incremental_encoder.hpp — a ViT that re-encodes only what changed since the last call.
//
//   fovea::Executor exec;
//   fovea::VitModel model = fovea::VitModel::load("random:vit-b16");
//   fovea::Tokenization t = fovea::tokenize(fovea::load_image("frame.png"), {}, {}, exec);
//   fovea::IncrementalEncoder enc(model);
//   fovea::IncrementalParams p{.image_width = t.pyramid.width(), .image_height = t.pyramid.height()};
//   fovea::IncrementalResult r0 = enc.encode(t.batch.patches, t.batch.positions, {}, {}, p, exec);  // full
//   // Next frame: prev_row[i] = token i's row in the previous call (-1: a new token),
//   // patch_dirty[i] = 1 when its patch changed.
//   std::vector<int64_t> prev_row(t.batch.size());
//   std::vector<uint8_t> patch_dirty(t.batch.size());
//   for (int64_t i = 0; i < t.batch.size(); ++i) prev_row[i] = i;
//   fovea::IncrementalResult r1 = enc.encode(t.batch.patches, t.batch.positions, prev_row, patch_dirty, p, exec);
//   const fovea::Tensor& embeddings = r1.embeddings;   // [N, D]
//   // Several frames in one pass (the same results as encode() on each in turn):
//   const fovea::IncrementalFrame group[2] = {{&t.batch.patches, &t.batch.positions, prev_row, patch_dirty},
//                                             {&t.batch.patches, &t.batch.positions, prev_row, patch_dirty}};
//   std::vector<fovea::IncrementalResult> rs = enc.encode_group(group, p, exec);
//
// Two levels of reuse:
//   * patch embeddings (always): a token with prev_row ≥ 0 and patch_dirty 0 keeps its patch
//     embedding row; only the others go through the patch-embedding GEMM. This is exact;
//   * layer states (reuse_layers, after Eventful Transformers, Dutson et al., ICCV 2023): per
//     layer, the encoder keeps every token's layer input as of its last recomputation (the
//     reference), its keys and values, and its layer output. A token is recomputed in a layer
//     when it is new or its input moved from the reference by more than token_threshold
//     (‖x − ref‖₂ / ‖ref‖₂): its LayerNorm, QKV, its attention against every token's keys and
//     values (the cached ones for the others), the output projection and the MLP. The class
//     token is always recomputed;
//   * the attention bound (bound_attention): a kept token's input did not move, but the keys
//     and values it attends to did (the recomputed tokens'). Eventful reuse ignores that, and on
//     a trained tower, whose attention is contextual, the error then grows frame after frame
//     (measured: docs/how-to/video.md). Here every token's query, its softmax normaliser and its
//     attention output are kept per layer and brought up to date whenever keys and values
//     change: for the rows R whose keys and values moved from (k, v) to (k', v'),
//       z = 1 + Σ_R e^(q·k'/√d − lse) − Σ_R e^(q·k/√d − lse),
//       o ← (o + Σ_R e^(q·k'/√d − lse) v' − Σ_R e^(q·k/√d − lse) v) / z,  lse ← lse + log z
//     (two small GEMMs per head over the changed rows: exact, not an estimate). The token's
//     cached layer output was computed from an older o (o_used); the change reuse leaves
//     unapplied to its residual stream is at most ‖W_o‖₂ ‖o − o_used‖₂, and when that exceeds
//     attention_threshold × ‖x‖₂ the token is recomputed from its kept input and its current o
//     (output projection and MLP; its keys and values do not change). So a token never keeps a
//     state whose attention has moved by more than the threshold;
//   * a refresh budget (refresh_tokens): per frame and layer, the kept tokens whose unapplied
//     change (input or attention) is largest are recomputed as well, so what stays below the
//     thresholds does not stay forever.
//     Results say `approximate`, and carry the encoder's own estimate of the error it left
//     (drift_estimate: per token, the sum over layers of the relative changes left unapplied).
//     Full refreshes (reset()) start again from scratch.
// With reuse_layers false, or on the first call after reset(), every layer runs on every token,
// and the result equals fovea::encode (up to the order of float operations in the GEMMs).
//
// Frame groups (encode_group): G consecutive frames in one call give the results G encode()
// calls would give, but layer-major: per layer, the recomputed rows of every frame go through
// one LayerNorm + QKV GEMM, one output projection and one MLP, so the weights are read once per
// group instead of once per frame and the GEMMs get G times the rows. This is exact, not a
// further approximation: frame f at layer l depends only on its own layer-(l−1) output and on
// the layer-l caches as frame f−1 left them; the attention still runs per frame, in order,
// against that frame's keys and values. With the reference kernels (Executor reference()) the
// results are bit for bit those of frame-by-frame calls; oneDNN may pick another kernel for
// another row count, which changes the rounding of a GEMM (not what is computed).
//
// Thread safety: an IncrementalEncoder is one session (a video stream) and runs on an
// EncoderContext of its own (encoder.hpp), made with expect_reuse unless one is given: one call
// at a time per encoder (a call while another runs throws Error(invalid_argument)). Any number
// of encoders, and plain encodes, run at once on one shared VitModel; they share its packed
// weights (made once) and nothing else.
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/exec.hpp"
#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

struct IncrementalParams {
  Precision precision = Precision::fp32;
  int image_width = 0, image_height = 0;  // the frame the positions refer to (> 0)
  bool reuse_layers = true;               // false: exact (patch embeddings reused, every layer full)
  // The fidelity knob: the relative change of a token's layer input (or, with bound_attention,
  // of its residual stream through attention) above which the token is recomputed. Smaller is
  // closer to a full encode and slower.
  float token_threshold = 0.07f;
  // Advanced. false: a kept token does not see other tokens' new keys and values (Eventful
  // reuse as published: no tracking cost, unbounded drift on trained towers).
  bool bound_attention = true;
  // The attention bound's threshold; < 0 (the default): token_threshold / 0.7 (0.1 at the
  // default 0.07). The bound is an upper bound (through ‖W_o‖₂, the largest a change of attention
  // can be amplified), looser than the measured input change the token threshold applies to;
  // on the pretrained ViT-Ti this ratio held the same fidelity targets as 1 with 17 % less work
  // (docs/how-to/video.md).
  float attention_threshold = -1;
  // Advanced, with bound_attention: the MLP gate (Eventful Transformers gate every module). A
  // token recomputed for its input or its attention keeps its MLP's last output while the MLP's
  // input (its residual stream after attention) moved by less than this (relative L2) since
  // then; < 0 (the default): no gate, every such MLP runs. On the pretrained ViT-Ti it saved less
  // work per fidelity lost than a larger token_threshold (docs/how-to/video.md).
  float mlp_threshold = -1;
  int refresh_tokens = 0;          // per frame and layer, the stalest kept tokens also recomputed
  // The attention bound's threshold in effect (attention_threshold, or its default).
  float attention_bound_threshold() const {
    return attention_threshold < 0 ? token_threshold / 0.7f : attention_threshold;
  }
  // The MLP gate's threshold in effect; < 0: no gate.
  float mlp_gate_threshold() const {
    return mlp_threshold < 0 ? -1.0f : mlp_threshold;
  }
};

// One frame of a group: the arguments of encode() for that frame. prev_row refers to the rows of
// the group's previous frame (the previous call's last frame for the first one).
struct IncrementalFrame {
  const Tensor* patches = nullptr;    // [N, C, P, P] (required)
  const Tensor* positions = nullptr;  // [N, 4] (required)
  std::span<const int64_t> prev_row;  // N entries, or empty (everything new)
  std::span<const uint8_t> patch_dirty;
};

struct IncrementalResult {
  Tensor embeddings;                     // [N, D] f32, last hidden state, in input order
  // [N, E] f32 when the model has a projector (LLaVA's MLP, Encoding::projected): per token,
  // so a token whose last hidden state did not change keeps its projection (exact reuse).
  Tensor projected;
  std::vector<uint8_t> recomputed;       // [N] 1: patch embedding or any layer recomputed for the token
  int64_t patch_embeddings_computed = 0;
  std::vector<int64_t> layer_tokens;     // per layer: patch tokens recomputed
  double flops_fraction = 1;             // share of a full encode's multiply-adds done (GEMMs, attention)
  bool approximate = false;              // some layer reused cached states
  // The encoder's estimate of the error reuse left in this frame: per patch token, the sum over
  // layers of the relative changes it did not apply (its input's, below token_threshold; its
  // attention's, below attention_threshold, through ‖W_o‖₂); the mean and the largest over
  // tokens. 0 when nothing was reused. Tracked with bound_attention only (else input changes).
  double drift_estimate = 0, drift_estimate_max = 0;
  int64_t attention_tokens = 0;          // patch-token layer recomputations due to the attention bound
  double encode_ms = 0;                  // for a group: the group's time divided by its frames
};

class IncrementalEncoder {
 public:
  // A session on `model` with a context of its own that packs the weights at their first use.
  explicit IncrementalEncoder(const VitModel& model);
  // A session on `model` running on `context` (moved in: the session owns it, and its params
  // stay as given).
  IncrementalEncoder(const VitModel& model, EncoderContext context);
  ~IncrementalEncoder();
  IncrementalEncoder(const IncrementalEncoder&) = delete;
  IncrementalEncoder& operator=(const IncrementalEncoder&) = delete;

  // Forget every cached state: the next encode() is a full one.
  void reset();
  // The session's context (benchmarks: attach a probe; not to be used by another call meanwhile).
  EncoderContext& context();
  // patches [N, C, P, P] f32/f16 normalised for the model, positions [N, 4] f32. prev_row and
  // patch_dirty have N entries, or are empty (everything new). Throws Error(invalid_argument)
  // for shapes that do not match the model or a prev_row outside the previous call's rows or
  // used twice. A change of image size or precision resets.
  IncrementalResult encode(const Tensor& patches, const Tensor& positions, std::span<const int64_t> prev_row,
                           std::span<const uint8_t> patch_dirty, const IncrementalParams& params, Executor& exec);
  // Frames in order, as if encode() were called on each in turn (see "Frame groups" above).
  // Everything is checked before any state changes. A frame whose layout changed (prev_row not
  // the identity), or any frame with reuse_layers false, starts a new layer-major run inside the
  // group; a caller that wants a fresh start calls reset() before the group.
  std::vector<IncrementalResult> encode_group(std::span<const IncrementalFrame> frames, const IncrementalParams& params,
                                              Executor& exec);

 private:
  struct FOVEA_INTERNAL State;
  std::unique_ptr<State> s_;
};

}  // namespace fovea
FOVEA_API_END
