// The model's input contract and what its outputs mean, in words for reports and metadata.
#include "encoder/encoder_internal.hpp"

namespace fovea {

Normalization normalization(const InputContract& c) {
  // (pixel·r − mean)/std = (pixel/255 − mean/(255·r)) / (std/(255·r)).
  Normalization n;
  n.enabled = true;
  const float k = 255.0f * c.rescale;
  for (int i = 0; i < 3; ++i) {
    n.mean[i] = c.normalize ? c.mean[i] / k : 0.0f;
    n.std[i] = (c.normalize ? c.std[i] : 1.0f) / k;
  }
  return n;
}

std::string_view to_string(ProjectorType p) {
  switch (p) {
    case ProjectorType::none: return "none";
    case ProjectorType::mlp: return "mlp";
    case ProjectorType::linear: return "linear";
  }
  return "?";
}

namespace {

std::string tower_output(const VitConfig& c) {
  if (c.projector != ProjectorType::none) {
    std::string s = "the projector's input: the hidden state after block " + std::to_string(c.layers) + " of the " +
                    std::to_string(c.layers_in_checkpoint) + " in the file";
    return c.final_norm == FinalNorm::all_tokens ? s + ", then post_ln" : s;
  }
  switch (c.final_norm) {
    case FinalNorm::pooled_only: return "last_hidden_state (before post_layernorm, which only the pooled output gets)";
    case FinalNorm::all_tokens:
      if (c.family == VitFamily::torchvision) return "last hidden state after encoder.ln";
      if (c.naming == "timm_vit") return "forward_features (after the final norm)";
      if (c.naming == "open_clip") return "the tokens after ln_post (open_clip's final_ln_after_pool=False)";
      if (c.family == VitFamily::vit || c.family == VitFamily::dinov2) return "last_hidden_state (after the final layernorm)";
      return "last_hidden_state (after post_layernorm)";
    case FinalNorm::none: return "last hidden state (the checkpoint has no final norm)";
  }
  return "?";
}

}  // namespace

std::string embedding_output(const VitConfig& c) {
  const std::string s = tower_output(c);
  if (c.ignored_projector.empty()) return s;
  return s + "; the checkpoint's projector is not applied (" + c.ignored_projector +
         ": it groups a uniform grid of tokens, which foveated tokens are not)";
}

namespace {

// The position-table resize the model's reference uses, as written into output metadata.
std::string positional_interpolation(PositionSampling s) {
  switch (s) {
    case PositionSampling::bicubic:
      return "bicubic A=-0.75 align_corners=False at token centres";
    case PositionSampling::bilinear:
      return "bilinear align_corners=False at token centres";
    case PositionSampling::bicubic_antialias:
      return "bicubic antialias=True (A=-0.5, kernel widened by the token's span in table cells) at token centres";
    case PositionSampling::bilinear_antialias:
      return "bilinear antialias=True (kernel widened by the token's span in table cells) at token centres";
    case PositionSampling::bucketized:
      return "bucketized (no resize: the table cell holding the token's top-left corner, Idefics3's fractional "
             "coordinates)";
  }
  return "?";
}

}  // namespace

std::map<std::string, std::string> encoder_metadata(const VitModel& model, Precision precision,
                                                    const AttentionParams& attention) {
  const VitConfig& mc = model.config();
  std::map<std::string, std::string> meta;
  meta["model"] = model.source();
  meta["model_description"] = model.describe();
  meta["model_family"] = std::string(to_string(mc.family));
  meta["random_weights"] = model.is_random() ? "true" : "false";
  const Precision runs = runnable_precision(precision);
  meta["precision"] = std::string(to_string(runs));
  if (runs != precision) meta["precision_requested"] = std::string(to_string(precision));
  meta["attention"] = attention.mode == AttentionParams::Mode::exact ? "exact" : to_string(attention) + " (approximate)";
  meta["hidden_size"] = std::to_string(mc.hidden);
  meta["positional_interpolation"] = positional_interpolation(mc.pos_sampling);
  meta["model_naming"] = mc.naming;
  meta["embeddings_output"] = embedding_output(mc);
  if (mc.projector != ProjectorType::none) {
    meta["projector"] = std::string(to_string(mc.projector));
    meta["projected_dim"] = std::to_string(mc.projector_dim);
  }
  return meta;
}

}  // namespace fovea
