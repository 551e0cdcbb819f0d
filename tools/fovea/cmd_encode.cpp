// fovea encode IMAGE --model CKPT [tokenize flags] -o OUT.safetensors [--precision fp32|bf16]
//              [--attention exact|hierarchical[:K[:B]]] [--json]
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include <unistd.h>

#include "batch.hpp"
#include "cli_util.hpp"
#include "command.hpp"
#include "encode_native.hpp"
#include "model_preprocessing.hpp"
#include "fovea/embeddings.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"

namespace fovea::cli {
namespace {

// The attention mode for --json: {"mode": "exact"} or the hierarchical parameters, labelled
// approximate and experimental, with the mean cosine to exact it held on a real tower.
nlohmann::json attention_json(const AttentionParams& a) {
  if (a.mode == AttentionParams::Mode::exact) return {{"mode", "exact"}};
  const AttentionCaveat c = attention_caveat(a);
  return {{"mode", "hierarchical"},
          {"top_k_blocks", a.top_k},
          {"block_tokens", a.block_tokens},
          {"approximate", true},
          {"experimental", c.experimental},
          {"real_tower_mean_cosine", {c.cosine_lo, c.cosine_hi}},
          {"real_tower_measured", c.measured},
          {"caveat", c.text},
          {"spec", to_string(a)}};
}

struct EncodeCommand {
  TokenizeOptions tok;
  ExecOptions exec;
  StoreOptions store;
  std::string model_spec, output, precision = "fp32", query_embedding, attention = "exact";
  bool json = false, check_fp32 = false;
  int max_num_patches = 0;  // SigLIP 2 NaFlex --uniform; 0: preprocessor_config.json's
  CLI::Option* patch_opt = nullptr;
  CLI::Option* max_num_patches_opt = nullptr;

  using Clock = std::chrono::steady_clock;
  static double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }

  // What the options resolve to: checked before the model loads, then fitted to it.
  struct Plan {
    TokenizeParams params;
    Query query;
    Precision asked = Precision::fp32;  // --precision
    Precision prec = Precision::fp32;   // what runs on this CPU
    AttentionParams att;
    std::string norm_source;  // where the mean and std came from (model, options, default)
  };

  // One image's encode and what the summary reports of it.
  struct OneImage {
    Tokenization t;
    Encoding e;
    nlohmann::json backend;
    double load_ms = 0, decode_ms = 0, write_ms = 0;
    int64_t nonfinite = 0;
    bool checked = false;  // --check-fp32 ran its reference (an approximate encode)
    double cosine = -1;    // mean row cosine to the fp32 exact reference, when checked
  };

  int run() const {
    Plan p = plan();
    Executor ex(exec.config());
    if (store.enabled) store.validate(tok.dtype);

    auto t0 = Clock::now();
    const VitModel model = VitModel::load(model_spec);
    const double load_ms = ms_since(t0);
    const VitConfig& mc = model.config();
    note_model(model, model_spec);
    if (max_patches_given() && !mc.native.naflex())
      throw Error(Errc::invalid_argument, "--max-num-patches applies to a SigLIP 2 NaFlex checkpoint; '" + model_spec +
                                              "' is " + std::string(to_string(mc.family)));
    if (mc.native.naflex()) return run_naflex(model, p, ex);  // SigLIP 2 NaFlex (encode_native.hpp)
    if (mc.native.enabled()) return run_native(model, p, ex);  // Qwen2-VL / Qwen2.5-VL (encode_native.hpp)
    fit_to_model(model, p, ex);
    if (is_batch(tok.inputs, output)) return run_many(model, p, ex);
    OneImage one = encode_one(model, p, ex);
    one.load_ms = load_ms;
    const nlohmann::json summary = summarize_one(model, p, ex, one);
    if (json) std::cout << json_text(summary) << '\n';
    else print_one(model, p, one, summary);
    return 0;
  }

  bool max_patches_given() const { return max_num_patches_opt && max_num_patches_opt->count() > 0; }

  // The options that do not need the model. Checked again with the model's own foveation once it
  // is loaded (the windows options are legal until then).
  Plan plan() const {
    Plan p;
    p.params = tok.params(Foveation::windows);
    p.query = tok.query();
    p.asked = precision == "bf16" ? Precision::bf16 : precision == "int8" ? Precision::int8 : Precision::fp32;
    p.prec = runnable_precision_noted(p.asked);
    p.att = parse_attention(attention);
    if (p.params.extract.dtype == DType::u8)
      throw Error(Errc::invalid_argument, "--dtype u8 patches are not normalised; encode needs f32 or f16");
    return p;
  }

  // SigLIP 2 NaFlex: the processor's encode or its windows.
  int run_naflex(const VitModel& model, const Plan& p, Executor& ex) const {
    if (is_batch(tok.inputs, output) || store.enabled || check_fp32 || !query_embedding.empty() || attention != "exact")
      throw Error(Errc::invalid_argument, "a SigLIP 2 NaFlex tower encodes one image, without --store, --check-fp32, "
                                          "--query-embedding or --attention");
    if (tok.no_normalize || !tok.mean.empty() || !tok.std.empty())
      throw Error(Errc::invalid_argument, "the SigLIP 2 NaFlex processor normalises with the model's mean and std; "
                                          "--mean, --std and --no-normalize do not apply");
    if (tok.foveation == "mixed")
      throw Error(Errc::invalid_argument, "a SigLIP 2 NaFlex tower runs --uniform (the processor's encode) or its "
                                          "windows foveation (the default), not --foveation mixed");
    if (max_patches_given() && !tok.uniform)
      throw Error(Errc::invalid_argument, "--max-num-patches sizes the --uniform encode of a SigLIP 2 NaFlex tower; "
                                          "its windows foveation counts patches with --budget");
    const bool budget_given = tok.budget_opt && tok.budget_opt->count() > 0;
    if (budget_given && max_patches_given())  // with --uniform, --budget is max_num_patches too
      throw Error(Errc::invalid_argument, "--budget and --max-num-patches both size the --uniform encode of a "
                                          "SigLIP 2 NaFlex tower; give one");
    if (budget_given && tok.uniform && tok.budget > (1 << 20))
      throw Error(Errc::invalid_argument, "--budget " + std::to_string(tok.budget) +
                                              ": the --uniform encode of a SigLIP 2 NaFlex tower takes 1..1048576 patches");
    if (budget_given && !tok.uniform && tok.budget < 4)
      throw Error(Errc::invalid_argument, "--budget " + std::to_string(tok.budget) +
                                              ": the NaFlex windows foveation needs at least 4 patches");
    NaflexEncodeArgs na;
    na.model_spec = model_spec, na.image = tok.image, na.output = output, na.query = p.query;
    if (budget_given) na.budget = tok.budget;
    na.max_num_patches = budget_given && tok.uniform ? tok.budget : max_num_patches;
    na.uniform = tok.uniform;
    na.asked = p.asked, na.precision = p.prec, na.json = json;
    na.load = tok.load_options();
    return run_naflex_encode(model, na, ex);
  }

  // Qwen2-VL / Qwen2.5-VL: native images.
  int run_native(const VitModel& model, const Plan& p, Executor& ex) const {
    if (is_batch(tok.inputs, output) || store.enabled || check_fp32 || !query_embedding.empty() || attention != "exact")
      throw Error(Errc::invalid_argument, "a native-resolution tower (" + std::string(to_string(model.config().family)) +
                                              ") encodes one image, without --store, --check-fp32, --query-embedding "
                                              "or --attention");
    NativeEncodeArgs na;
    na.model_spec = model_spec, na.image = tok.image, na.output = output, na.query = p.query;
    if (tok.budget_opt && tok.budget_opt->count() > 0) na.budget = tok.budget;
    na.uniform = tok.uniform;
    if (tok.foveation == "mixed") na.mixed = tok.params(Foveation::mixed);
    na.asked = p.asked, na.precision = p.prec, na.json = json;
    na.load = tok.load_options();
    return run_native_encode(model, na, ex);
  }

  // The model's own foveation, grid, patch size and preprocessing unless the options say
  // otherwise, and the query embedding's tile features.
  void fit_to_model(const VitModel& model, Plan& p, Executor& ex) const {
    const VitConfig& mc = model.config();
    p.params = tok.params(default_foveation(model), mc.grid);
    // The model's own preprocessing unless --mean / --std say otherwise (each overrides its half).
    p.norm_source = apply_model_preprocessing(tok, mc.input, p.params.extract.norm);
    if (mc.patch_px != p.params.patch_px) {
      if (patch_opt && patch_opt->count() > 0)
        throw Error(Errc::invalid_argument, "--patch " + std::to_string(p.params.patch_px) + " does not match the model's " +
                                                std::to_string(mc.patch_px) + "-px patches");
      p.params.patch_px = mc.patch_px;
    }
    if (!query_embedding.empty()) {
      p.query.embedding = load_query_embedding(query_embedding);
      p.params.relevance.tile_features = tile_feature_fn(model, p.params.extract.norm, int(p.query.embedding.size()), ex);
    }
  }

  // The embeddings file's metadata (fovea/embeddings.hpp: the library owns the layout), for one
  // image or each of a batch.
  std::map<std::string, std::string> embeddings_metadata(const VitModel& model, const Plan& p, const Tokenization& t,
                                                         const std::string& source) const {
    std::map<std::string, std::string> meta = token_metadata(t, p.query, p.params);
    meta["source"] = source;
    for (auto& [k, v] : encoder_metadata(model, p.asked, p.att)) meta[k] = v;  // as the Python binding writes
    meta["preprocessing_source"] = p.norm_source;
    return meta;
  }

  // A batch: folders, tar shards or lists of images, the model loaded once (batch.hpp).
  int run_many(const VitModel& model, const Plan& p, Executor& ex) const {
    if (store.enabled || check_fp32) throw Error(Errc::invalid_argument, "--store and --check-fp32 take one image, not a batch");
    nlohmann::json backend;
    bool warned_nonfinite = false;  // once a run: bad weights spoil every image alike
    const BatchReport r = run_batch(tok.inputs, output, tok.load_options(), [&](ImageU8 img, const std::string& src) {
      const int w = img.width(), h = img.height();
      const Tokenization t = exec.tokenize(std::move(img), p.query, p.params, ex, backend);
      Encoding e = encode_tokens(model, t.batch,
                                 EncodeParams{.precision = p.prec, .image_width = w, .image_height = h, .attention = p.att}, ex);
      if (!warned_nonfinite)
        warned_nonfinite = warn_nonfinite(e.embeddings, "the embeddings of " + src + " (further images not checked)",
                                          isatty(fileno(stderr)) ? "\r\x1b[K" : "") > 0;
      // The encoding's tensors are moved in.
      return serialize_embeddings(embeddings_file(t.batch, e, embeddings_metadata(model, p, t, src)));
    });
    return report_batch(r, output, json,
                        {{"threads", ex.threads()},
                         {"budget", p.params.alloc.budget_tokens},
                         {"foveation", p.params.uniform ? "uniform" : std::string(to_string(p.params.foveation))},
                         {"encoder", {{"model", model_spec}, {"description", model.describe()},
                                      {"random_weights", model.is_random()}, {"precision", std::string(to_string(p.prec))},
                                      {"attention", attention_json(p.att)}}}});
  }

  // One image: decode, tokenize, encode, the --check-fp32 reference, and the embeddings file.
  OneImage encode_one(const VitModel& model, const Plan& p, Executor& ex) const {
    OneImage one;
    auto t0 = Clock::now();
    ImageU8 image = load_image(tok.image, tok.load_options());
    one.decode_ms = ms_since(t0);
    const int width = image.width(), height = image.height();
    warn_query_outside(p.query, width, height);

    one.t = exec.tokenize(std::move(image), p.query, p.params, ex, one.backend);
    EncodeParams ep{.precision = p.prec, .image_width = width, .image_height = height, .attention = p.att};
    one.e = encode_tokens(model, one.t.batch, ep, ex);
    one.nonfinite = warn_nonfinite(one.e.embeddings, "the embeddings");
    if (one.nonfinite == 0) one.nonfinite = warn_nonfinite(one.e.projected, "the projected embeddings");

    // The reference of --check-fp32: fp32 with exact attention.
    const bool approximate = p.prec != Precision::fp32 || p.att.mode != AttentionParams::Mode::exact;
    if (check_fp32 && approximate) {
      EncodeParams ep32 = ep;
      ep32.precision = Precision::fp32;
      ep32.attention = AttentionParams{};
      const Encoding ref = encode_tokens(model, one.t.batch, ep32, ex);
      one.cosine = mean_row_cosine(one.e.embeddings, ref.embeddings);
      one.checked = true;
    }

    t0 = Clock::now();
    if (!output.empty()) save_embeddings(output, embeddings_file(one.t.batch, one.e, embeddings_metadata(model, p, one.t, tok.image)));
    one.write_ms = ms_since(t0);
    return one;
  }

  nlohmann::json summarize_one(const VitModel& model, const Plan& p, const Executor& ex, const OneImage& one) const {
    const VitConfig& mc = model.config();
    const Tokenization& t = one.t;
    const Encoding& e = one.e;
    nlohmann::json summary = summarize(t, p.params, p.query);
    summary["image"]["path"] = tok.image;
    summary["timings_ms"]["decode"] = one.decode_ms;
    summary["timings_ms"]["model_load"] = one.load_ms;
    summary["timings_ms"]["encode"] = e.encode_ms;
    summary["timings_ms"]["attention"] = e.attention_ms;  // of encode
    // total: the tokenize stages and the encode (not decode, model_load, write, nor the reference
    // encode of --check-fp32); timings_total_covers names them.
    summary["timings_ms"]["total"] = t.timings.total_ms() + e.encode_ms;
    summary["timings_ms"]["tokenize_and_encode"] = t.timings.total_ms() + e.encode_ms;  // the same, as before
    summary["timings_total_covers"].push_back("encode");
    summary["timings_ms"]["write"] = one.write_ms;
    summary["threads"] = ex.threads();
    summary.update(one.backend);
    summary["encoder"] = {{"model", model_spec},
                          {"description", model.describe()},
                          {"random_weights", model.is_random()},
                          {"family", std::string(to_string(mc.family))},
                          {"hidden_size", mc.hidden},
                          {"layers", mc.layers},
                          {"heads", mc.heads},
                          {"patch_size", mc.patch_px},
                          {"position_grid", mc.grid},
                          {"register_tokens", mc.registers},
                          {"precision", std::string(to_string(p.prec))},
                          {"foveation", p.params.uniform ? "uniform" : std::string(to_string(p.params.foveation))},
                          {"foveation_default", std::string(to_string(default_foveation(model)))},
                          // Which matrix kernels ran: fovea's AMX tiles for bf16, or its AVX2 kernel
                          // for fp32, where the CPU has them.
                          {"kernels", matrix_kernels(p.prec)},
                          {"attention", attention_json(p.att)},
                          {"openmp_wait_policy", openmp_wait_policy()},
                          {"embeddings", {e.embeddings.dim(0), e.embeddings.dim(1)}},
                          {"tensors_used", model.tensors_used()},
                          {"tensors_ignored", model.tensors_ignored()},
                          {"naming", mc.naming},
                          {"embeddings_output", embedding_output(mc)},
                          {"preprocessing", {{"source", p.norm_source},
                                             {"mean", p.params.extract.norm.mean},
                                             {"std", p.params.extract.norm.std},
                                             {"normalized", p.params.extract.norm.enabled}}}};
    if (p.prec != p.asked) summary["encoder"]["precision_requested"] = precision;
    summary["encoder"]["nonfinite_values"] = one.nonfinite;
    if (mc.projector != ProjectorType::none)
      summary["encoder"]["projected"] = {e.projected.dim(0), e.projected.dim(1)};
    if (e.window_class_tokens.rank() > 0)
      summary["encoder"]["window_class_tokens"] = {e.window_class_tokens.dim(0), e.window_class_tokens.dim(1)};
    if (one.checked) summary["encoder"]["cosine_vs_fp32"] = one.cosine;
    summary["outputs"] = {{"embeddings", output}};
    if (store.enabled)
      summary["store"] = store_report(e.embeddings, summary["full_resolution_tokens"].get<int64_t>(), store);
    return summary;
  }

  void print_one(const VitModel& model, const Plan& p, const OneImage& one, const nlohmann::json& summary) const {
    const Encoding& e = one.e;
    const ProjectorType projector = model.config().projector;
    print_summary(summary);
    std::printf("  encoder: %s\n", model.describe().c_str());
    std::printf("  encode: %lld x %d embeddings, %s, %.2f ms (tokenize + encode %.2f ms)\n",
                (long long)e.embeddings.dim(0), int(e.embeddings.dim(1)), std::string(to_string(p.prec)).c_str(), e.encode_ms,
                one.t.timings.total_ms() + e.encode_ms);
    std::printf("  preprocessing: %s\n", p.norm_source.c_str());
    if (p.att.mode != AttentionParams::Mode::exact)
      std::printf("  attention: %s (APPROXIMATE: coarse-to-fine, not the model's exact attention; %s)\n",
                  to_string(p.att).c_str(), attention_caveat(p.att).text.c_str());
    if (projector != ProjectorType::none)
      std::printf("  projected: %lld x %d (projector %s)\n", (long long)e.projected.dim(0), int(e.projected.dim(1)),
                  std::string(to_string(projector)).c_str());
    if (one.checked) std::printf("  mean cosine vs fp32 exact: %.6f\n", one.cosine);
    if (store.enabled) print_store_report(summary["store"]);
    if (!output.empty()) std::printf("  wrote %s\n", output.c_str());
  }
};

Runner setup_encode(CLI::App& sub) {
  auto cmd = std::make_shared<EncodeCommand>();
  cmd->tok.add(sub);
  cmd->patch_opt = sub.get_option("--patch");
  sub.add_option("--model,-m", cmd->model_spec,
                 "ViT checkpoint: .safetensors (HF CLIP/SigLIP/LLaVA, HF ViT/DINOv2, timm ViT/DeiT or "
                 "torchvision ViT; a sharded "
                 "model.safetensors.index.json or its directory; config.json and preprocessor_config.json beside "
                 "it are read), a PyTorch .pt/.pth/pytorch_model.bin of the same (read without running its "
                 "pickle), a llama.cpp mmproj .gguf, or random:vit-b16 / "
                 "random:vit-s16 (random weights, benchmarks only). Its preprocessing (mean, std) is used "
                 "unless --mean/--std are given")
      ->required()
      ->type_name("CKPT");
  sub.add_option("-o,--output", cmd->output,
                 "Write embeddings [N, D], positions, levels (and class_token, pooled, image_embeds, logits, "
                 "projected [N, E] when the model has them) as safetensors")
      ->type_name("OUT.safetensors");
  sub.add_option("--precision", cmd->precision, "fp32 (exact), bf16 (fast; GEMM inputs in bfloat16) or int8 (faster; the layers' linear maps on "
                 "int8 weights and activations, the rest as bf16)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}))
      ->default_val("fp32");
  sub.add_option("--query-embedding", cmd->query_embedding,
                 "Query vector (.npy or .safetensors, [D] or [1, D]) scored against per-tile patch-embedding "
                 "features in the relevance stage")
      ->type_name("FILE");
  sub.add_option("--attention", cmd->attention,
                 "exact (default), or hierarchical[:K[:B]]: an EXPERIMENTAL APPROXIMATION, training-free. Tokens "
                 "are grouped by position into blocks of B (default 64); each query block attends exactly to the K "
                 "key blocks (default 8) its queries could attend to most and to the mean key/value of the others. "
                 "What it costs on a real pretrained ViT-Ti/16 at 4096 tokens (mean per-token cosine to exact): "
                 "K=8 (the default) 0.818-0.918 at 2.5-2.8x the exact encode's speed, K=16 0.886-0.965 at 2.0-2.1x, "
                 "K=32 0.970-0.996 at 1.5x (docs/explanation/encoder.md). Recorded, with that cost, in the output's metadata and --json")
      ->type_name("MODE")
      ->default_val("exact");
  cmd->max_num_patches_opt =
      sub.add_option("--max-num-patches", cmd->max_num_patches,
                     "SigLIP 2 NaFlex checkpoints with --uniform: the processor's encode, the image resized to fit N "
                     "patches, aspect kept (1..1048576; default: preprocessor_config.json's max_num_patches; --budget "
                     "says the same). Without --uniform a NaFlex checkpoint runs its windows foveation (a base view and "
                     "full-resolution windows) with --budget patches (default: max_num_patches)")
          ->check(CLI::Range(1, 1 << 20))
          ->type_name("N");
  sub.add_flag("--check-fp32", cmd->check_fp32,
               "With --precision bf16 or --attention hierarchical: also run fp32 with exact attention and report "
               "the mean per-token cosine");
  sub.add_flag("--json", cmd->json, "Print a JSON summary (tokenization, encoder, timings)");
  cmd->exec.add(sub);
  cmd->store.add(sub);
  sub.footer(
      "Examples:\n"
      "  fovea encode photo.jpg --model clip-vit-b16/model.safetensors --fixation 512,300 -o emb.safetensors\n"
      "  fovea encode photo.jpg --model mmproj-model-f16.gguf --uniform -o emb.safetensors   # + projected\n"
      "  fovea encode photo.jpg --model random:vit-b16 --budget 273 --precision bf16 --json\n"
      "  fovea encode photos/ shards/*.tar --model CKPT --precision bf16 -o emb/   (batch: model loaded once)");
  return [cmd] { return cmd->run(); };
}

Registration reg_encode{{"encode", "Tokenize an image and encode the tokens with a ViT checkpoint", 20, setup_encode}};

}  // namespace
}  // namespace fovea::cli
