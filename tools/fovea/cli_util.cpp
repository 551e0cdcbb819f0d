#include "cli_util.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <iostream>

#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/store.hpp"
#include "fovea/token_cache.hpp"

namespace fovea::cli {

namespace {
Error arg_error(const std::string& m) { return Error(Errc::invalid_argument, m); }

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

float parse_float(const std::string& text, const std::string& flag) {
  const std::string t = trim(text);
  size_t used = 0;
  float v = 0;
  try {
    v = std::stof(t, &used);
  } catch (...) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !std::isfinite(v))
    throw arg_error(flag + ": '" + text + "' is not a finite number");
  return v;
}
}  // namespace

std::vector<float> parse_floats(const std::string& text, const std::string& flag) {
  std::vector<float> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    out.push_back(parse_float(text.substr(start, comma - start), flag));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void ExecOptions::add(CLI::App& app) {
  app.add_option("--threads", threads, "Worker threads (0: one per hardware thread)")
      ->check(CLI::Range(0, 1024))
      ->default_val(0);
  app.add_flag("--reference", reference, "Use the scalar reference kernels instead of SIMD");
  app.add_option("--backend", backend,
                 "Where the pyramid and patch sampling run: cpu, or vulkan (falls back to the CPU with a "
                 "message when there is no Vulkan device)")
      ->check(CLI::IsMember({"cpu", "vulkan"}))
      ->default_val("cpu");
  app.add_option("--device", device, "Vulkan device for --backend vulkan: index or name substring (fovea devices)")
      ->type_name("DEV");
}

std::unique_ptr<VulkanBackend> ExecOptions::vulkan() const {
  if (backend != "vulkan") return nullptr;
  if (!vulkan_built()) {
    std::fprintf(stderr, "fovea: note: this build has no Vulkan backend; using the CPU\n");
    return nullptr;
  }
  if (!vulkan_available()) {
    std::fprintf(stderr, "fovea: note: no usable Vulkan device found; using the CPU\n");
    return nullptr;
  }
  return VulkanBackend::create({.device = device});
}

Tokenization ExecOptions::tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& ex,
                                   nlohmann::json& summary) const {
  std::unique_ptr<VulkanBackend> gpu = vulkan();
  if (gpu && params.uniform) {
    std::fprintf(stderr, "fovea: note: --uniform has no Vulkan sampling (its grid is cut on the CPU); using the CPU\n");
    gpu.reset();
  }
  summary["backend"] = gpu ? "vulkan" : "cpu";
  if (!gpu) return fovea::tokenize(std::move(image), query, params, ex);
  summary["device"] = gpu->device().name;
  return gpu->tokenize(std::move(image), query, params, ex);
}

ExecConfig ExecOptions::config() const {
  return ExecConfig{.threads = threads, .kernels = reference ? Kernels::reference : Kernels::best};
}

void TokenizeOptions::add(CLI::App& app) {
  app.add_option("image", inputs,
                 std::string("Input image (") + image_formats() +
                     "); several images, directories of them or WebDataset .tar shards run as a batch "
                     "(-o DIR or -o OUT.tar)")
      ->required()
      ->each([this](const std::string& v) {
        if (image.empty()) image = v;
      });
  budget_opt = app.add_option("--budget,-b", budget,
                              "Token budget B: the output never has more tokens (default 273; with --foveation "
                              "windows two native views, 2*G^2: 392 for a 224-px tower of 16-px patches)")
                   ->check(CLI::Range(1, 1 << 24));
  app.add_option("--patch,-p", patch, "Patch size P in pixels (16 default; 14 for CLIP-L/14 style models)")
      ->check(CLI::Range(2, 256))
      ->default_val(16);
  app.add_option("--fixation,-f", fixations,
                 "Fixation point X,Y in image pixels; X,Y,R adds the radius R (px) of what is looked at, "
                 "X,Y,R,WEIGHT a weight (R = 0: no size hint); repeatable")
      ->type_name("X,Y[,R]")
      ->allow_extra_args(false);  // one value per flag: never swallow the image positional
  app.add_option("--region,-r", regions,
                 "Region of interest X0,Y0,X1,Y1 in image pixels (optionally ,WEIGHT); repeatable")
      ->type_name("X0,Y0,X1,Y1")
      ->allow_extra_args(false);  // one value per flag: never swallow the image positional
  app.add_option("--weights", weights,
                 "Relevance weights, e.g. detail=1,query=8,floor=0.5,information=0,saliency=0 (keys "
                 "may be abbreviated: info, sal, q)")
      ->type_name("K=V,...");
  app.add_option("--e0", e0, "Cortical-magnification half-saturation eccentricity, as a fraction of "
                             "the image's longer side")
      ->default_val(RelevanceParams{}.e0);
  app.add_option("--sharpness", sharpness,
                 "How strongly token size follows relevance: side ~ relevance^-sharpness, in [0.5, 4]")
      ->default_val(AllocParams{}.sharpness);
  app.add_option("--fine-bias", fine_bias,
                 "Rate-distortion: weight of mip j's detail is 2^(-bias*j), in [0, 4]; 0 = plain squared error "
                 "(best PSNR), higher favours fine detail such as text")
      ->default_val(RelevanceParams{}.fine_bias);
  app.add_option("--fine-bias-floor", fine_bias_floor,
                 "The least weight the fine bias gives a mip level's detail, in [0, 1] (higher: better "
                 "whole-image PSNR at small budgets, less fine detail)")
      ->default_val(RelevanceParams{}.fine_bias_floor);
  app.add_option("--detail-focus", detail_focus,
                 "How much a query focuses the detail term: weight (1 + query)^focus, in [0, 4]")
      ->default_val(RelevanceParams{}.detail_focus);
  app.add_option("--fixation-spread", fixation_spread,
                 "Cost of crossing content like the fixated one, relative to flat content, in (0, 1]; "
                 "1 = radial fovea")
      ->default_val(RelevanceParams{}.fixation_spread);
  app.add_option("--lookahead", lookahead,
                 "Levels a split's detail gain is looked ahead, in [1, 8] (deeper reaches fine text sooner)")
      ->check(CLI::Range(1, 8))
      ->default_val(AllocParams{}.lookahead);
  max_level_opt = app.add_option("--max-level", max_level,
                                 "Coarsest mip level of the quadtree (-1: automatic, the coarsest whose P*2^L-px "
                                 "token fits inside the image's shorter side)")
                      ->default_val(-1);
  app.add_flag("--uniform", uniform, "The baseline: resize so a plain grid holds <= budget tokens");
  app.add_option("--foveation", foveation,
                 "windows: a base view of the whole image plus native-size windows where the query looks (or the "
                 "detail is), each encoded as the image the tower was trained on; mixed: one sequence mixing mip "
                 "levels (for towers fine-tuned on such sequences). Default: encode, the model's own (windows for "
                 "every frozen tower); tokenize and video, mixed")
      ->check(CLI::IsMember({"windows", "mixed"}))
      ->type_name("MODE");
  app.add_option("--window-grid", window_grid,
                 "--foveation windows: tokens a side of one native window, G (default: the model's grid with "
                 "--model, else 224/P rounded: 14 for 16-px patches)")
      ->check(CLI::Range(1, 256))
      ->type_name("G");
  app.add_flag("--keep-covered", keep_covered,
               "--foveation windows: also hand on the tokens of coarser windows that a finer window covers (the "
               "budget then counts them too)");
  app.add_option("--dtype", dtype, "Patch dtype: f32, f16 or u8 (u8 is never normalised)")
      ->check(CLI::IsMember({"f32", "f16", "u8"}))
      ->default_val("f32");
  app.add_option("--mean", mean, "Normalisation mean R,G,B (default: the model's own with --model, else CLIP's)")->type_name("R,G,B");
  app.add_option("--std", std, "Normalisation std R,G,B (default: the model's own with --model, else CLIP's)")->type_name("R,G,B");
  app.add_flag("--no-normalize", no_normalize, "Float patches hold x/255 in [0, 1]");
  app.add_option("--max-pixels", max_pixels, "Refuse images with more pixels than this")
      ->default_val(LoadOptions{}.max_pixels);
  app.add_flag("--no-exif", no_exif, "Ignore the JPEG EXIF orientation tag");
}

TokenizeParams TokenizeOptions::params(Foveation dflt, int grid) const {
  TokenizeParams p;
  p.patch_px = patch;
  p.uniform = uniform;
  p.foveation = foveation.empty() ? dflt : parse_foveation(foveation);
  if (uniform && foveation == "windows") throw arg_error("--uniform and --foveation windows exclude each other");
  const bool windowed = !uniform && p.foveation == Foveation::windows;
  if (!windowed && (window_grid > 0 || keep_covered))
    throw arg_error(std::string(window_grid > 0 ? "--window-grid" : "--keep-covered") + " needs --foveation windows");
  if (windowed && max_level_opt && max_level_opt->count() > 0)
    throw arg_error("--max-level shapes the mixed foveation's quadtree; --foveation windows has none");
  p.windows.grid = window_grid > 0 ? window_grid : grid > 0 ? grid : std::max(1, int(std::lround(224.0 / patch)));
  p.windows.keep_covered = keep_covered;
  const bool budget_given = budget_opt && budget_opt->count() > 0;
  p.alloc.budget_tokens = budget_given ? budget : windowed ? 2 * p.windows.grid * p.windows.grid : 273;
  p.alloc.max_level = max_level;
  if (!(sharpness >= 0.5f && sharpness <= 4.0f)) throw arg_error("--sharpness must be in [0.5, 4]");
  p.alloc.sharpness = sharpness;
  p.alloc.lookahead = lookahead;
  auto in_range = [&](float v, float lo, float hi, bool open_lo, const char* flag) {
    if (!std::isfinite(v) || v > hi || (open_lo ? v <= lo : v < lo))
      throw arg_error(std::string(flag) + " must be in " + (open_lo ? "(" : "[") + std::to_string(int(lo)) + ", " +
                std::to_string(int(hi)) + "]");
  };
  in_range(fine_bias, 0, 4, false, "--fine-bias");
  in_range(detail_focus, 0, 4, false, "--detail-focus");
  in_range(fine_bias_floor, 0, 1, false, "--fine-bias-floor");
  p.relevance.fine_bias_floor = fine_bias_floor;
  in_range(fixation_spread, 0, 1, true, "--fixation-spread");
  p.relevance.fine_bias = fine_bias;
  p.relevance.detail_focus = detail_focus;
  p.relevance.fixation_spread = fixation_spread;
  if (max_level < -1 || max_level > 24) throw arg_error("--max-level must be in [-1, 24]");
  if (!std::isfinite(e0) || e0 <= 0) throw arg_error("--e0 must be a number > 0");
  p.relevance.e0 = e0;
  if (!weights.empty()) {
    size_t start = 0;
    for (;;) {
      const size_t comma = weights.find(',', start);
      const std::string item = weights.substr(start, comma - start);
      const size_t eq = item.find('=');
      if (eq == std::string::npos) throw arg_error("--weights: '" + item + "' is not KEY=VALUE");
      const std::string key = trim(item.substr(0, eq));
      const float v = parse_float(item.substr(eq + 1), "--weights " + key);
      if (v < 0) throw arg_error("--weights: " + key + " must be >= 0");
      RelevanceWeights& w = p.relevance.weights;
      if (key == "information" || key == "info" || key == "entropy") w.information = v;
      else if (key == "saliency" || key == "sal") w.saliency = v;
      else if (key == "query" || key == "q") w.query = v;
      else if (key == "floor") w.floor = v;
      else if (key == "detail") w.detail = v;
      else throw arg_error("--weights: unknown key '" + key + "' (detail, information, saliency, query, floor)");
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (dtype == "f32") p.extract.dtype = DType::f32;
  else if (dtype == "f16") p.extract.dtype = DType::f16;
  else if (dtype == "u8") p.extract.dtype = DType::u8;
  else throw arg_error("--dtype must be f32, f16 or u8");
  p.extract.norm.enabled = !no_normalize;
  auto rgb = [&](const std::string& text, const char* flag, std::array<float, 3>& out) {
    if (text.empty()) return;
    const std::vector<float> v = parse_floats(text, flag);
    if (v.size() != 3) throw arg_error(std::string(flag) + " needs three values R,G,B");
    std::copy(v.begin(), v.end(), out.begin());
  };
  rgb(mean, "--mean", p.extract.norm.mean);
  rgb(std, "--std", p.extract.norm.std);
  for (float s : p.extract.norm.std)
    if (!(s > 0)) throw arg_error("--std values must be > 0");
  return p;
}

Query TokenizeOptions::query() const {
  Query q;
  for (const std::string& f : fixations) {
    const std::vector<float> v = parse_floats(f, "--fixation");
    if (v.size() < 2 || v.size() > 4) throw arg_error("--fixation needs X,Y, X,Y,R or X,Y,R,WEIGHT, got '" + f + "'");
    if (v.size() >= 3 && v[2] < 0) throw arg_error("--fixation radius must be >= 0");
    if (v.size() == 4 && v[3] < 0) throw arg_error("--fixation weight must be >= 0");
    q.fixations.push_back({v[0], v[1], v.size() == 4 ? v[3] : 1.0f, v.size() >= 3 ? v[2] : 0.0f});
  }
  for (const std::string& r : regions) {
    const std::vector<float> v = parse_floats(r, "--region");
    if (v.size() != 4 && v.size() != 5) throw arg_error("--region needs X0,Y0,X1,Y1 or X0,Y0,X1,Y1,WEIGHT, got '" + r + "'");
    if (!(v[2] > v[0]) || !(v[3] > v[1])) throw arg_error("--region needs X1 > X0 and Y1 > Y0, got '" + r + "'");
    if (v.size() == 5 && v[4] < 0) throw arg_error("--region weight must be >= 0");
    q.regions.push_back({v[0], v[1], v[2], v[3], v.size() == 5 ? v[4] : 1.0f});
  }
  return q;
}

LoadOptions TokenizeOptions::load_options() const {
  LoadOptions o;
  o.max_pixels = max_pixels;
  o.apply_exif_orientation = !no_exif;
  return o;
}

nlohmann::json summarize(const Tokenization& t, const TokenizeParams& params, const Query& query) {
  using nlohmann::json;
  const TileGrid& g = t.relevance.grid;
  json j;
  j["image"] = {{"width", g.image_width}, {"height", g.image_height}, {"channels", t.pyramid.channels()}};
  j["mode"] = t.mode();
  j["budget"] = params.alloc.budget_tokens;
  j["tokens"] = t.batch.kept();  // handed on: the windows foveation drops the covered ones
  j["patch_size"] = params.patch_px;
  j["query"] = describe(query);
  j["full_resolution_tokens"] = g.tiles();
  if (t.is_uniform()) {
    j["uniform"] = {{"grid", {t.uniform->grid_x, t.uniform->grid_y}},
                    {"resized", {t.uniform->resized_width, t.uniform->resized_height}}};
  } else if (t.is_windowed()) {
    const WindowPlan& plan = *t.windows;
    j["tokens_encoded"] = plan.encoded_tokens();
    j["window_grid"] = params.windows.grid;
    j["keep_covered"] = params.windows.keep_covered;
    json ws = json::array();
    for (size_t i = 0; i < plan.windows.size(); ++i) {
      const TokenWindow& w = plan.windows[i];
      int64_t kept = 0;
      for (uint8_t c : plan.covered[i]) kept += c == 0;
      ws.push_back({{"kind", std::string(to_string(w.kind))},
                    {"box", {w.box[0], w.box[1], w.box[2], w.box[3]}},
                    {"grid", {w.grid_x, w.grid_y}},
                    {"level", w.level},
                    {"scale", w.scale},
                    {"tokens_kept", kept}});
    }
    j["windows"] = ws;
  } else {
    const TokenLayout& lay = t.allocation.layout;
    json per_level = json::array();
    for (int l = 0; l < lay.num_levels(); ++l) per_level.push_back(lay.count_at(l));
    j["max_level"] = t.allocation.max_level;
    j["coarsest_tokens"] = t.allocation.coarsest_tokens;
    j["tokens_per_level"] = per_level;
    // Coverage in finest tiles (1 token everywhere = exact tiling), and the share of the
    // image's area resolved at each level.
    const TilingReport cov = check_tiling(t.allocation);
    j["coverage"] = {{"tiles", cov.tiles},
                     {"covered_tiles", cov.covered},
                     {"overlapping_tiles", cov.overlapping},
                     {"exact", cov.exact()},
                     {"area_fraction_per_level", cov.area_per_level}};
  }
  j["timings_ms"] = {{"pyramid", t.timings.pyramid_ms},
                     {"relevance", t.timings.relevance_ms},
                     {"allocate", t.timings.allocate_ms},
                     {"extract", t.timings.extract_ms},
                     {"tokenize", t.timings.total_ms()},
                     {"total", t.timings.total_ms()}};
  // The stages timings_ms.total sums (a command that times more into its total, e.g. encode,
  // appends them); decode, model_load and write are timed apart and left out.
  j["timings_total_covers"] = {"pyramid", "relevance", "allocate", "extract"};
  return j;
}

void warn_query_outside(const Query& query, int width, int height, const OutsideWarning& how) {
  for (const std::string& q : query_outside(query, width, height)) {
    if (how.seen && !how.seen->insert(q).second) continue;
    if (how.frame < 0)
      std::fprintf(stderr,
                   "%sfovea: warning: %s lies outside the %dx%d image (coordinates are the image's own pixels, after "
                   "EXIF orientation)\n",
                   how.prefix, q.c_str(), width, height);
    else
      std::fprintf(stderr,
                   "%sfovea: warning: %s (frame %lld) lies outside the %dx%d frame (coordinates are the frame's own "
                   "pixels, after rotation)\n",
                   how.prefix, q.c_str(), how.frame, width, height);
  }
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

int64_t warn_nonfinite(const Tensor& values, const std::string& what, const char* prefix) {
  if (values.empty() || values.dtype() != DType::f32) return 0;
  const float* v = values.data<float>();
  const int64_t n = values.numel();  // out of line: read once, so that the loop vectorises
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(v[i]);
  if (bad > 0 && !what.empty())
    std::fprintf(stderr,
                 "%sfovea: warning: %s: %lld of %lld values are NaN or infinite (does the checkpoint hold non-finite "
                 "or huge weights?)\n",
                 prefix, Error::printable(what).c_str(), (long long)bad, (long long)values.numel());
  return bad;
}

void print_summary(const nlohmann::json& j) {
  std::printf("%s %dx%d: %lld tokens (budget %d, %lld at full resolution), patch %d px\n",
              j["mode"].get<std::string>().c_str(), j["image"]["width"].get<int>(),
              j["image"]["height"].get<int>(), j["tokens"].get<long long>(), j["budget"].get<int>(),
              j["full_resolution_tokens"].get<long long>(), j["patch_size"].get<int>());
  if (j.contains("tokens_per_level")) {
    std::printf("  tokens per level:");
    const auto& per = j["tokens_per_level"];
    const auto& area = j["coverage"]["area_fraction_per_level"];
    for (size_t l = 0; l < per.size(); ++l)
      if (per[l].get<long long>() > 0)
        std::printf("  L%zu %lld (%.1f%% of area)", l, per[l].get<long long>(), 100.0 * area[l].get<double>());
    std::printf("\n");
  } else if (j.contains("uniform")) {
    std::printf("  uniform grid %dx%d from a %dx%d resize\n", j["uniform"]["grid"][0].get<int>(),
                j["uniform"]["grid"][1].get<int>(), j["uniform"]["resized"][0].get<int>(),
                j["uniform"]["resized"][1].get<int>());
  } else if (j.contains("windows")) {
    std::printf("  %zu windows of %dx%d tokens, %lld tokens encoded, %lld handed on:\n", j["windows"].size(),
                j["window_grid"].get<int>(), j["window_grid"].get<int>(), j["tokens_encoded"].get<long long>(),
                j["tokens"].get<long long>());
    for (const auto& w : j["windows"]) {
      const int level = w["level"].get<int>();
      std::printf("    %-6s [%g, %g, %g, %g) %s, %lld kept\n", w["kind"].get<std::string>().c_str(),
                  w["box"][0].get<double>(), w["box"][1].get<double>(), w["box"][2].get<double>(),
                  w["box"][3].get<double>(),
                  level >= 0 ? ("mip level " + std::to_string(level)).c_str()
                             : ("resized, " + std::to_string(w["scale"].get<double>()) + " px a pixel").c_str(),
                  w["tokens_kept"].get<long long>());
    }
  }
  std::printf("  query: %s\n", j["query"].get<std::string>().c_str());
  const auto& tm = j["timings_ms"];
  std::printf("  time: pyramid %.2f ms, relevance %.2f ms, allocate %.2f ms, extract %.2f ms (tokenize %.2f ms)\n",
              tm["pyramid"].get<double>(), tm["relevance"].get<double>(), tm["allocate"].get<double>(),
              tm["extract"].get<double>(), tm["tokenize"].get<double>());
}

void StoreOptions::add(CLI::App& app) {
  app.add_flag("--store", enabled,
               "Report what a paged token store would hold for this image's tokens (encode: its embeddings): "
               "pages, resident vs dense bytes");
  app.add_option("--store-page-bytes", page_bytes, "Page size of the --store report (a multiple of 4096)")
      ->default_val(64 << 10);
  app.add_option("--store-backend", backend,
                 "Backend of the --store report: host, vulkan (sparse buffer) or vulkan-image (sparse 2D image, "
                 "pages a multiple of 64 KiB on lavapipe); without a capable device the host serves")
      ->check(CLI::IsMember({"host", "vulkan", "vulkan-image"}))
      ->default_val("host");
}

void StoreOptions::validate(const std::string& token_dtype) const {
  if (token_dtype == "u8") throw arg_error("--store needs float tokens: use --dtype f32 or f16, not u8");
  if (page_bytes < 4096 || page_bytes > (int64_t(1) << 30) || page_bytes % 4096 != 0)
    throw arg_error("--store-page-bytes must be a multiple of 4096 in [4096, 1 GiB], got " + std::to_string(page_bytes));
}

nlohmann::json store_report(const Tensor& tokens, int64_t dense_tokens, const StoreOptions& o) {
  o.validate();
  if (tokens.dtype() != DType::f32 && tokens.dtype() != DType::f16 && tokens.dtype() != DType::bf16)
    throw Error(Errc::unsupported, "--store needs f32, f16 or bf16 tokens, not " + std::string(dtype_name(tokens.dtype())) +
                                       " (use --dtype f32 or f16)");
  const int64_t n = tokens.empty() ? 0 : tokens.dim(0);
  const int64_t dim = n > 0 ? tokens.numel() / n : 1;
  dense_tokens = std::max(dense_tokens, std::max<int64_t>(n, 1));
  StoreConfig cfg;
  cfg.dim = dim;
  cfg.dtype = tokens.dtype();
  cfg.page_bytes = o.page_bytes;
  const int64_t token_bytes = dim * int64_t(dtype_size(cfg.dtype));
  const int64_t dense_pages = (dense_tokens * token_bytes + o.page_bytes - 1) / o.page_bytes;
  cfg.pool_pages = std::max<int64_t>(dense_pages, 1);
  cfg.virtual_pages = dense_pages + 1;
  std::unique_ptr<StoreBackend> backend;
  if (o.backend != "host") {
    std::string why;
    backend = o.backend == "vulkan" ? make_vulkan_store_backend(&why) : make_vulkan_image_store_backend(&why);
    if (!backend)
      std::fprintf(stderr, "fovea: note: the %s store backend is not available (%s); the host backend serves\n",
                   o.backend.c_str(), why.c_str());
  }
  TokenStore store(cfg, backend ? std::move(backend) : make_host_store_backend());
  const SeqId seq = store.reserve(dense_tokens);
  bool roundtrip = true;
  std::string digest;
  if (n > 0) {
    store.bind(seq, 0, n);
    store.write_bytes(seq, 0, n, tokens.bytes());
    const TokenRange all{seq, 0, n};
    const Tensor back = store.gather({&all, 1});
    roundtrip = std::memcmp(back.bytes(), tokens.bytes(), tokens.size_bytes()) == 0;
    // What came back, for a check outside this process (the tests hash the written file).
    Blake2b h(32);
    h.update(back.bytes(), back.size_bytes());
    uint8_t d[32];
    h.final(d);
    char hex[3];
    for (uint8_t b : d) {
      std::snprintf(hex, sizeof hex, "%02x", b);
      digest += hex;
    }
  }
  if (!roundtrip) throw Error(Errc::internal, "--store: the store did not return the tokens written to it");
  const StoreStats st = store.stats();
  store.release(seq);
  nlohmann::json j;
  j["backend"] = std::string(store.backend_name());
  j["dtype"] = cfg.dtype == DType::f32 ? "f32" : cfg.dtype == DType::f16 ? "f16" : "bf16";
  j["dim"] = dim;
  j["token_bytes"] = token_bytes;
  j["page_bytes"] = o.page_bytes;
  j["tokens_per_page"] = double(o.page_bytes) / double(token_bytes);
  j["dense_tokens"] = dense_tokens;
  j["kept_tokens"] = n;
  j["pages"] = st.resident_pages;
  j["reserved_pages"] = st.reserved_pages;
  j["resident_bytes"] = st.resident_bytes;
  j["payload_bytes"] = st.payload_bytes;
  j["dense_bytes"] = st.dense_bytes;
  j["saved_fraction"] = st.dense_bytes > 0 ? 1.0 - double(st.resident_bytes) / double(st.dense_bytes) : 0.0;
  j["page_overhead"] = st.payload_bytes > 0 ? double(st.resident_bytes) / double(st.payload_bytes) - 1.0 : 0.0;
  j["roundtrip_ok"] = roundtrip;
  j["gathered_blake2b"] = digest;  // BLAKE2b-256 of the tokens read back from the store
  return j;
}

void print_store_report(const nlohmann::json& s) {
  std::printf("  store (%s, %lld KiB pages): %lld of %lld dense tokens, %lld bytes a token (%s x %lld)\n",
              s["backend"].get<std::string>().c_str(), s["page_bytes"].get<long long>() >> 10,
              s["kept_tokens"].get<long long>(), s["dense_tokens"].get<long long>(), s["token_bytes"].get<long long>(),
              s["dtype"].get<std::string>().c_str(), s["dim"].get<long long>());
  std::printf("    %lld pages = %.1f KiB resident vs %.1f KiB dense: %.1f%% saved; payload %.1f KiB, "
              "whole pages add %.1f%%\n",
              s["pages"].get<long long>(), s["resident_bytes"].get<double>() / 1024.0,
              s["dense_bytes"].get<double>() / 1024.0, 100.0 * s["saved_fraction"].get<double>(),
              s["payload_bytes"].get<double>() / 1024.0, 100.0 * s["page_overhead"].get<double>());
}

const char* openmp_wait_policy() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  return p ? p : "default";
}

bool& check_arguments_only() {
  static bool only = false;
  return only;
}

}  // namespace fovea::cli
