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
    case ProjectorType::patch_merger: return "patch_merger";
  }
  return "?";
}

namespace {

std::string tower_output(const VitConfig& c) {
  if (c.native.enabled())
    return "the last hidden state before the merger (every patch, in the processor's merge-unit order)";
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

namespace encoder_detail {

PooledSource pooled_source(const VitModel::Impl& m) {
  const VitConfig& c = m.config;
  if (c.family == VitFamily::clip) {
    if (!c.class_token) return PooledSource::none;
    if (c.final_norm == FinalNorm::pooled_only) return PooledSource::post_layernorm;
    // open_clip's ln_post normed every token already; a projector's tower has no pooled output.
    if (c.final_norm == FinalNorm::all_tokens && c.projector == ProjectorType::none) return PooledSource::class_token;
    return PooledSource::none;
  }
  if (c.family == VitFamily::torchvision || c.family == VitFamily::vit || c.family == VitFamily::dinov2) {
    if (present(m.pooler_w)) return PooledSource::pooler;
    if (c.pooled_normed_twice && present(m.post_w)) return PooledSource::post_layernorm_again;
    return PooledSource::class_token;
  }
  return c.attention_pool ? PooledSource::attention_pool : PooledSource::none;
}

}  // namespace encoder_detail

namespace {

// What the classifier and the pooler read: the class token after the final norm, if any.
std::string class_token_words(const VitConfig& c) {
  return c.final_norm == FinalNorm::all_tokens ? "the normed class token" : "the class token";
}

}  // namespace

std::string pooled_output(const VitModel& model) {
  using encoder_detail::PooledSource;
  const VitConfig& c = model.config();
  switch (encoder_detail::pooled_source(model.impl())) {
    case PooledSource::none: return "";
    case PooledSource::post_layernorm: return "post_layernorm(class token)";
    case PooledSource::class_token:
      return c.final_norm == FinalNorm::all_tokens
                 ? "class_token (identical: the final LayerNorm applies to every token)"
                 : "class_token (identical: the tower has no final norm and no pooler)";
    case PooledSource::pooler: return "tanh(pooler.dense(" + class_token_words(c) + "))";
    case PooledSource::post_layernorm_again: return "post_layernorm(the normed class token): the final norm applied twice";
    case PooledSource::attention_pool: return "attention-pool head (a learned probe attends to every patch token)";
  }
  return "?";
}

std::string ModelHead::describe() const {
  const std::string size = kind == "classifier" ? std::to_string(width) + " classes" : std::to_string(width) + " wide";
  return kind + ", " + size + " (" + output + " from " + input + ")";
}

std::vector<ModelHead> model_heads(const VitModel& model) {
  using encoder_detail::PooledSource;
  using encoder_detail::present;
  const VitModel::Impl& m = model.impl();
  const VitConfig& c = m.config;
  const PooledSource pooled = encoder_detail::pooled_source(m);
  std::vector<ModelHead> heads;
  if (pooled == PooledSource::pooler)
    heads.push_back({"pooler", "pooled", c.hidden, class_token_words(c) + ", through tanh(pooler.dense)"});
  if (pooled == PooledSource::attention_pool)
    heads.push_back({"attention-pool", "pooled", c.hidden, "every patch token, attended by a learned probe"});
  // As encode() runs them (forward.cpp): the projection reads the pooled output, the classifier
  // the normed class token or the attention pool's output.
  if (c.family == VitFamily::clip && pooled != PooledSource::none && present(m.proj_w))
    heads.push_back({"projection", "image_embeds", int(m.proj_w.dim(0)),
                     pooled == PooledSource::post_layernorm ? "pooled: post_layernorm(class token)"
                                                            : "pooled: " + class_token_words(c)});
  if (present(m.head_w) && (pooled == PooledSource::attention_pool || c.family == VitFamily::torchvision ||
                            c.family == VitFamily::vit || c.family == VitFamily::dinov2))
    heads.push_back({"classifier", "logits", int(m.head_w.dim(0)),
                     pooled == PooledSource::attention_pool ? "the attention pool's output" : class_token_words(c)});
  return heads;
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
  meta["attention"] = attention.mode == AttentionParams::Mode::exact
                          ? "exact"
                          : to_string(attention) + " (approximate, " + attention_caveat(attention).text + ")";
  meta["hidden_size"] = std::to_string(mc.hidden);
  meta["positional_interpolation"] = positional_interpolation(mc.pos_sampling);
  meta["model_naming"] = mc.naming;
  meta["embeddings_output"] = embedding_output(mc);
  if (const std::string pooled = pooled_output(model); !pooled.empty()) meta["pooled_output"] = pooled;
  if (mc.projector != ProjectorType::none) {
    meta["projector"] = std::string(to_string(mc.projector));
    meta["projected_dim"] = std::to_string(mc.projector_dim);
  }
  return meta;
}

}  // namespace fovea
