// fovea model CKPT [--json]: what fovea reads from a checkpoint and how, without encoding
// anything: the naming and family it was recognised as, the dimensions, the input contract
// (mean, std, where they came from), how the position table is read at other sizes, what
// `embeddings`, `pooled` and `projected` hold, the heads it runs (classifier, projection,
// pooler, attention pool), a projector it does not run, and the tensors used and ignored. A
// checkpoint it cannot read is one `fovea: error:` line, as for `fovea encode`.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.hpp"
#include "command.hpp"
#include "fovea/encoder.hpp"
#include "fovea/gguf.hpp"
#include "fovea/safetensors.hpp"

namespace fovea::cli {
namespace {

// The stored types of a GGUF file's tensors ("Q4_K": 96, "F32": 120 ...), and how fovea runs the
// quantized ones; empty for other formats.
struct StoredTypes {
  std::map<std::string, int> counts;
  bool quantized = false;
  std::string converted;  // fovea convert's "bf16" or "bf16+int8"
  std::string how() const {
    if (converted == "bf16+int8")
      return "written by fovea convert: bf16 matrices for fp32 and bf16, and the layers' int8 matrices, which "
             "--precision int8 uses as stored";
    if (!converted.empty()) return "written by fovea convert: bf16 matrices, everything else float32";
    return quantized ? "Q8_0 matrices whose rows are whole blocks stay Q8_0 and are dequantised as they are read; "
                       "other block-quantized tensors are dequantised to float32 when the model loads; --precision "
                       "int8 quantizes the layers' matrices again, per output channel"
                     : "";
  }
};
StoredTypes stored_types(const std::string& path) {
  StoredTypes s;
  if (!looks_like_gguf(path)) {
    // A checkpoint written by fovea convert says so in its metadata.
    std::error_code ec;
    const std::string file =
        std::filesystem::is_directory(path, ec) ? (std::filesystem::path(path) / "model.safetensors").string() : path;
    if (!file.ends_with(".safetensors") || !std::filesystem::is_regular_file(file, ec)) return s;
    const SafetensorsFile st = SafetensorsFile::open(file);
    const auto it = st.metadata().find("fovea.converted");
    if (it == st.metadata().end()) return s;
    for (const SafetensorsFile::Entry& e : st.entries()) ++s.counts[e.dtype_name];
    s.converted = it->second;
    return s;
  }
  const GgufFile f = GgufFile::open(path);
  for (const GgufTensorInfo& t : f.tensors()) {
    ++s.counts[ggml_type_name(t.type)];
    const GgmlType g = GgmlType(t.type);
    if (g != GgmlType::f32 && g != GgmlType::f16 && g != GgmlType::bf16) s.quantized = true;
  }
  return s;
}

nlohmann::json model_json(const VitModel& m) {
  const VitConfig& c = m.config();
  const Normalization n = normalization(c.input);
  nlohmann::json j = {{"model", m.source()},
                      {"description", m.describe()},
                      {"naming", c.naming},
                      {"family", std::string(to_string(c.family))},
                      {"random_weights", m.is_random()},
                      {"hidden_size", c.hidden},
                      {"layers", c.layers},
                      {"layers_in_checkpoint", c.layers_in_checkpoint},
                      {"heads", c.heads},
                      {"mlp_size", c.mlp},
                      {"patch_size", c.patch_px},
                      {"position_grid", c.grid},
                      {"native_size", c.native_px()},
                      {"class_token", c.class_token},
                      {"register_tokens", c.registers},
                      {"activation", std::string(to_string(c.act))},
                      {"layer_norm_eps", c.ln_eps},
                      {"position_sampling", std::string(to_string(c.pos_sampling))},
                      {"embeddings_output", embedding_output(c)},
                      {"projector", std::string(to_string(c.projector))},
                      {"projected_dim", c.projector_dim},
                      {"ignored_projector", c.ignored_projector},
                      {"attention_pool", c.attention_pool},
                      {"image_embeds_dim", c.projection_dim},
                      {"num_classes", c.num_classes},
                      {"preprocessing",
                       {{"source", c.input.source}, {"mean", n.mean}, {"std", n.std}, {"normalized", n.enabled}}},
                      {"tensors_used", m.tensors_used()},
                      {"tensors_ignored", m.tensors_ignored()},
                      {"bf16_kernels_on_this_cpu", bf16_supported()},
                      {"int8_kernels_on_this_cpu", int8_supported()}};
  if (const StoredTypes st = stored_types(m.source()); !st.counts.empty()) {
    j["stored_types"] = st.counts;
    j["quantized_weights"] = st.quantized || !st.converted.empty() ? nlohmann::json(st.how()) : nlohmann::json(nullptr);
  }
  if (c.native.enabled()) {
    const NativeConfig& nc = c.native;
    j["native"] = {{"merge_size", nc.merge},
                   {"temporal_patch_size", nc.temporal_patch},
                   {"window_size", nc.window_px},
                   {"fullatt_block_indexes", nc.full_attention_blocks},
                   {"deepstack_visual_indexes", nc.deepstack_blocks},
                   {"learned_positions", c.grid > 0 ? nlohmann::json(c.grid) : nlohmann::json(nullptr)},
                   {"norm", nc.rms_norm ? "rmsnorm" : "layernorm"},
                   {"rope_theta", nc.rope_theta},
                   {"tokens_per_second", nc.tokens_per_second},
                   {"min_pixels", nc.min_pixels},
                   {"max_pixels", nc.max_pixels},
                   {"factor", nc.factor(c.patch_px)},
                   {"video",
                    {{"min_pixels", nc.video_min_pixels},
                     {"max_pixels", nc.video_max_pixels},
                     {"limits", nc.video_limits_over_frames ? "over all frames of a video" : "each frame"},
                     {"source", nc.video_limits_source}}},
                   {"outputs", {"projected", "embeddings", "image_grid_thw", "mrope_positions"}},
                   {"foveation", {"windows (default)", "native (--uniform)",
                                  "mixed (--foveation mixed, for experiment: merge units of mixed mip levels in one sequence)"}},
                   {"commands",
                    {"fovea encode IMAGE --model M [--uniform] [--budget MERGED_TOKENS]",
                     "fovea video CLIP --model M [--chunk-frames N]: projected, video_grid_thw, mrope_positions per chunk"}}};
  }
  if (c.native.naflex())
    j["naflex"] = {{"max_num_patches", c.native.max_num_patches},
                   {"patch_size", c.patch_px},
                   {"position_table", c.grid},
                   {"resize", "get_image_size_for_max_num_patches, PIL bilinear"},
                   {"positions", "table resized to each image's patch grid (bilinear, antialias)"},
                   {"foveation", {"windows (default; --budget in patches)", "naflex (--uniform, --max-num-patches)"}}};
  const std::string pooled = pooled_output(m);
  j["pooled_output"] = pooled.empty() ? nlohmann::json(nullptr) : nlohmann::json(pooled);
  j["default_foveation"] = std::string(to_string(default_foveation(m)));
  j["heads"] = nlohmann::json::array();
  for (const ModelHead& h : model_heads(m))
    j["heads"].push_back(
        {{"kind", h.kind}, {"output", h.output}, {"width", h.width}, {"input", h.input}, {"description", h.describe()}});
  return j;
}

struct ModelCommand {
  std::string path;
  bool json = false;

  int run() const {
    const VitModel m = VitModel::load(path);
    const nlohmann::json j = model_json(m);
    if (json) {
      std::cout << json_text(j) << '\n';
      return 0;
    }
    const VitConfig& c = m.config();
    std::printf("%s\n", m.describe().c_str());
    std::printf("  naming: %s (family %s)\n", c.naming.c_str(), std::string(to_string(c.family)).c_str());
    std::printf("  dimensions: hidden %d, %d heads, MLP %d (%s), %d of %d blocks run, layer-norm eps %g\n", c.hidden,
                c.heads, c.mlp, std::string(to_string(c.act)).c_str(), c.layers, c.layers_in_checkpoint,
                double(c.ln_eps));
    if (c.native.enabled()) {
      const NativeConfig& nc = c.native;
      std::printf("  native resolution: %d px patches of %d frames, %dx%d merge units (images resized to multiples of "
                  "%d px within %lld..%lld pixels), 2-D rotary positions, %s\n",
                  c.patch_px, nc.temporal_patch, nc.merge, nc.merge, nc.factor(c.patch_px), (long long)nc.min_pixels,
                  (long long)nc.max_pixels, nc.rms_norm ? "RMSNorm" : "LayerNorm");
      if (nc.window_px > 0) {
        std::string full;
        for (int b : nc.full_attention_blocks) full += (full.empty() ? "" : ", ") + std::to_string(b);
        std::printf("  attention: within %d px windows, full in blocks %s\n", nc.window_px, full.c_str());
      }
      if (c.grid > 0)
        std::printf("  learned positions: a %dx%d table sampled bilinearly (corners aligned) at each grid\n", c.grid, c.grid);
      std::string deep;
      for (size_t k = 0; k < nc.deepstack_blocks.size(); ++k)
        deep += ", deepstack_" + std::to_string(k) + " (after block " + std::to_string(nc.deepstack_blocks[k]) + ")";
      std::printf("  outputs: projected (one row per merge unit), image_grid_thw, mrope_positions (t, h, w)%s\n",
                  deep.c_str());
      std::printf("  video: frames resized within %lld..%lld pixels %s (%s); `fovea video --model` writes projected, "
                  "video_grid_thw and mrope_positions per chunk of frames\n",
                  (long long)nc.video_min_pixels, (long long)nc.video_max_pixels,
                  nc.video_limits_over_frames ? "over all frames of a video" : "a frame", nc.video_limits_source.c_str());
      std::printf("  foveation: windows (a base view and full-resolution windows, each a native image; --budget counts "
                  "merged tokens), --uniform the processor's whole image; --foveation mixed, for experiment, one "
                  "sequence of merge units of mixed mip levels at their centres\n");
    } else {
      std::printf("  patches: %d px, native %d px (a %dx%d position table)%s%s\n", c.patch_px, c.native_px(), c.grid,
                  c.grid, c.class_token ? ", class token" : "",
                  c.registers ? (", " + std::to_string(c.registers) + " register tokens").c_str() : "");
      std::printf("  positions at other sizes: %s\n", std::string(to_string(c.pos_sampling)).c_str());
      if (c.native.naflex())
        std::printf("  NaFlex: any size and aspect ratio, resized to fit %d patches of %d px (PIL bilinear), the %dx%d "
                    "position table resized to each image's patch grid\n",
                    c.native.max_num_patches, c.patch_px, c.grid, c.grid);
      if (c.native.naflex())
        std::printf("  foveation: windows by default (a base view and full-resolution windows, --budget in patches), "
                    "--uniform the processor's resize to --max-num-patches\n");
      else
        std::printf("  foveation: %s by default (fovea encode; --foveation mixed|windows to choose)\n",
                    std::string(to_string(default_foveation(m))).c_str());
    }
    std::printf("  preprocessing: mean %.4g %.4g %.4g, std %.4g %.4g %.4g (%s)\n", double(c.input.mean[0]),
                double(c.input.mean[1]), double(c.input.mean[2]), double(c.input.std[0]), double(c.input.std[1]),
                double(c.input.std[2]), c.input.source.c_str());
    std::printf("  embeddings: %s\n", embedding_output(c).c_str());
    if (const std::string pooled = pooled_output(m); !pooled.empty()) std::printf("  pooled: %s\n", pooled.c_str());
    for (const ModelHead& h : model_heads(m)) std::printf("  head: %s\n", h.describe().c_str());
    if (c.projector != ProjectorType::none)
      std::printf("  projected: %d wide (projector %s): the language model's input\n", c.projector_dim,
                  std::string(to_string(c.projector)).c_str());
    std::printf("  tensors: %d used, %d ignored\n", m.tensors_used(), m.tensors_ignored());
    if (const StoredTypes st = stored_types(m.source()); !st.counts.empty()) {
      std::string types;
      for (const auto& [name, n] : st.counts) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
      const std::string how = st.how();
      std::printf("  stored as: %s%s%s\n", types.c_str(), how.empty() ? "" : "; ", how.c_str());
    }
    return 0;
  }
};

Runner setup_model(CLI::App& sub) {
  auto cmd = std::make_shared<ModelCommand>();
  sub.add_option("CKPT", cmd->path,
                 "A checkpoint: .safetensors (or a sharded index, or a directory), .pt/.pth/.bin, a llama.cpp mmproj "
                 ".gguf, or random:vit-b16")
      ->required();
  sub.add_flag("--json", cmd->json, "Print the description as JSON");
  sub.footer("Examples:\n  fovea model clip-vit-base-patch16/\n  fovea model mmproj-model-f16.gguf --json");
  return [cmd] { return cmd->run(); };
}

Registration reg_model{{"model", "Describe a checkpoint: what fovea reads from it and how (nothing is encoded)", 25,
                        setup_model}};

}  // namespace
}  // namespace fovea::cli
