// fovea tokenize IMAGE [flags] -o OUT.safetensors [--overlay PNG] [--seen PNG] [--json]
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "batch.hpp"
#include "cli_util.hpp"
#include "command.hpp"
#include "fovea/version_gen.hpp"
#if FOVEA_BUILT_WITH_ENCODER
#include "fovea/encoder.hpp"
#include "model_preprocessing.hpp"
#endif
#include "fovea/error.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/viz.hpp"

namespace fovea::cli {
namespace {

struct TokenizeCommand {
  TokenizeOptions tok;
  ExecOptions exec;
  StoreOptions store;
  std::string output, overlay, seen;
  std::string query_embedding, model_spec;  // the relevance stage's embedding term
  CLI::Option* patch_opt = nullptr;
  bool json = false;

  int run() const {
    using Clock = std::chrono::steady_clock;
    // Arguments first: a typo costs nothing, not a decode.
    TokenizeParams params = tok.params();
    Query query = tok.query();
    Executor ex(exec.config());
    if (store.enabled) store.validate(tok.dtype);
    std::string norm_source = tok.no_normalize                      ? "--no-normalize (x/255)"
                              : tok.mean.empty() && tok.std.empty() ? "CLIP defaults"
                              : !tok.mean.empty() && !tok.std.empty() ? "--mean/--std"
                                                                      : "--mean/--std, CLIP defaults for the rest";
    const bool windowed = !params.uniform && params.foveation == Foveation::windows;
    if (!query_embedding.empty() && model_spec.empty())
      throw Error(Errc::invalid_argument, "--query-embedding needs --model CKPT (the tile features come from its patch embedding)");
    if (!model_spec.empty() && query_embedding.empty() && !windowed)
      throw Error(Errc::invalid_argument, "--model is only used with --query-embedding or --foveation windows (use "
                                          "'fovea encode' to encode)");
    if (!model_spec.empty()) {
#if !FOVEA_BUILT_WITH_ENCODER
      throw Error(Errc::unsupported, "--model needs the encoder, and this fovea was built without it "
                                     "(FOVEA_WITH_ENCODER=OFF or oneDNN not found)");
#else
      const VitModel model = VitModel::load(model_spec);
      params = tok.params(Foveation::mixed, model.config().grid);  // windows: the tower's own grid
      // Tokens and tile features both follow the model's preprocessing unless --mean/--std say otherwise.
      norm_source = apply_model_preprocessing(tok, model.config().input, params.extract.norm);
      if (model.config().patch_px != params.patch_px) {
        if (patch_opt && patch_opt->count() > 0)
          throw Error(Errc::invalid_argument, "--patch " + std::to_string(params.patch_px) + " does not match the model's " +
                                                  std::to_string(model.config().patch_px) + "-px patches");
        params.patch_px = model.config().patch_px;
      }
      if (!query_embedding.empty()) {
        // Per-tile features come from the encoder's patch embedding (see fovea/encoder.hpp).
        query.embedding = load_query_embedding(query_embedding);
        params.relevance.tile_features = tile_feature_fn(model, params.extract.norm, int(query.embedding.size()), ex);
      }
#endif
    }

    if (is_batch(tok.inputs, output)) {
      if (!overlay.empty() || !seen.empty() || store.enabled)
        throw Error(Errc::invalid_argument, "--overlay, --seen and --store take one image, not a batch");
      nlohmann::json backend;
      const BatchReport r = run_batch(tok.inputs, output, tok.load_options(), [&](ImageU8 img, const std::string& src) {
        const Tokenization t = exec.tokenize(std::move(img), query, params, ex, backend);
        return serialize_tokens(t, query, params, {{"source", src}, {"preprocessing_source", norm_source}});
      });
      return report_batch(r, output, json, {{"threads", ex.threads()}, {"budget", params.alloc.budget_tokens}});
    }

    auto t0 = Clock::now();
    ImageU8 image = load_image(tok.image, tok.load_options());
    const double decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    warn_query_outside(query, image.width(), image.height());

    nlohmann::json backend;
    Tokenization t = exec.tokenize(std::move(image), query, params, ex, backend);

    t0 = Clock::now();
    if (!output.empty())
      save_tokens(output, t, query, params, {{"source", tok.image}, {"preprocessing_source", norm_source}});
    if (!overlay.empty()) save_png(render_overlay(t.pyramid.view(0), t.relevance, t.batch), overlay);
    if (!seen.empty()) save_png(reconstruct(t.batch, t.pyramid.width(), t.pyramid.height(), ex), seen);
    const double write_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

    nlohmann::json summary = summarize(t, params, query);
    summary["image"]["path"] = tok.image;
    summary["timings_ms"]["decode"] = decode_ms;
    summary["timings_ms"]["write"] = write_ms;
    summary["threads"] = ex.threads();
    summary.update(backend);
    summary["outputs"] = {{"tokens", output}, {"overlay", overlay}, {"seen", seen}};
    if (store.enabled) summary["store"] = store_report(t.batch.patches, summary["full_resolution_tokens"].get<int64_t>(), store);
    if (json) {
      std::cout << json_text(summary) << '\n';
    } else {
      print_summary(summary);
      if (store.enabled) print_store_report(summary["store"]);
      if (!output.empty()) std::printf("  wrote %s\n", output.c_str());
      if (!overlay.empty()) std::printf("  wrote %s\n", overlay.c_str());
      if (!seen.empty()) std::printf("  wrote %s\n", seen.c_str());
    }
    return 0;
  }
};

Runner setup_tokenize(CLI::App& sub) {
  auto cmd = std::make_shared<TokenizeCommand>();
  cmd->tok.add(sub);
  sub.add_option("-o,--output", cmd->output,
                 "Write the tokens here (safetensors: patches, positions, levels, rate_map, relevance; with "
                 "--foveation windows also window, covered and the windows' boxes, grids and levels)")
      ->type_name("OUT.safetensors");
  sub.add_option("--overlay", cmd->overlay, "Write a PNG: token borders coloured by level over a relevance heat map")
      ->type_name("PNG");
  sub.add_option("--seen", cmd->seen, "Write a PNG of what the model sees: every patch stretched over its box")
      ->type_name("PNG");
  sub.add_flag("--json", cmd->json, "Print a JSON summary: tokens per level, coverage, timings per stage");
  cmd->patch_opt = sub.get_option("--patch");
  sub.add_option("--query-embedding", cmd->query_embedding,
                 "Query vector (.npy or .safetensors, [D] or [1, D]) scored against per-tile patch-embedding "
                 "features of --model (relevance weight 'query')")
      ->type_name("FILE");
  sub.add_option("--model,-m", cmd->model_spec,
                 "ViT checkpoint whose patch embedding gives the per-tile features for --query-embedding, and whose "
                 "native grid, patch size and preprocessing --foveation windows follows")
      ->type_name("CKPT");
  cmd->exec.add(sub);
  cmd->store.add(sub);
  sub.footer(
      "Examples:\n"
      "  fovea tokenize photo.jpg --budget 273 --fixation 512,300 -o tokens.safetensors\n"
      "  fovea tokenize page.png --region 100,80,600,140 --overlay overlay.png --seen seen.png --json\n"
      "  fovea tokenize photo.jpg --uniform --budget 256 --seen baseline.png\n"
      "  fovea tokenize photos/ shards/*.tar --budget 273 -o tokens/        (batch: one file per image)");
  return [cmd] { return cmd->run(); };
}

Registration reg_tokenize{{"tokenize", "Turn an image and a query into a budgeted set of multi-scale patches", 10, setup_tokenize}};

}  // namespace
}  // namespace fovea::cli
