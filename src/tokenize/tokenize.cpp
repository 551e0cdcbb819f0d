#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "extract/batch.hpp"
#include "fovea/error.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/version_gen.hpp"

namespace fovea {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
std::string fmt(double v) {
  std::ostringstream s;
  s.precision(8);
  s << v;
  return s.str();
}
}  // namespace

PyramidU8 TokenizeStages::build_pyramid(ImageU8 image, const PyramidParams& params, Executor& exec) {
  return fovea::build_pyramid(std::move(image), params, exec);
}

PyramidU8 TokenizeStages::build_pyramid(const ImageViewU8& image, const PyramidParams& params, Executor& exec) {
  return fovea::build_pyramid(image, params, exec);
}

TokenBatch TokenizeStages::extract(const PyramidU8& pyramid, const Allocation& allocation,
                                   const ExtractParams& params, Executor& exec) {
  return fovea::extract(pyramid, allocation, params, exec);
}

namespace {

// The pipeline behind both entry points; `build` runs the pyramid stage on the image (owned or
// borrowed), `image` gives its extents.
template <typename Build>
Tokenization run_pipeline(const ImageViewU8& image, const Query& query, const TokenizeParams& params, Executor& exec,
                          Build&& build, TokenizeStages& stages) {
  if (params.alloc.budget_tokens < 1)
    throw Error(Errc::invalid_argument,
                "budget must be at least 1 token, got " + std::to_string(params.alloc.budget_tokens));
  const TileGrid grid = TileGrid::make(image.width(), image.height(), params.patch_px);
  const bool windowed = !params.uniform && params.foveation == Foveation::windows;
  const int L = windowed ? 0 : resolve_max_level(grid, params.alloc.max_level);
  check_extract_params(params.extract);  // before any stage runs (a device's upload included)
  WindowParams wp = params.windows;
  wp.budget_tokens = params.alloc.budget_tokens;
  if (windowed && (wp.grid < 1 || wp.grid > 256))
    throw Error(Errc::invalid_argument, "the windows' grid must be 1..256 tokens a side, got " + std::to_string(wp.grid));
  Tokenization t;

  auto t0 = Clock::now();
  // The levels the tokens sample from, and at least those the relevance statistics read.
  const int sampled = params.uniform ? 1
                      : windowed     ? windows_pyramid_levels(image.width(), image.height(), params.patch_px, wp.grid)
                                     : L + 1;
  const int levels = std::max(sampled, params.relevance.stats_level + 1);
  const int w = image.width(), h = image.height(), channels = image.channels();
  t.pyramid = build(PyramidParams{.max_levels = levels});
  if (t.pyramid.width() != w || t.pyramid.height() != h || t.pyramid.channels() != channels ||
      t.pyramid.num_levels() < std::min(levels, full_mip_levels(w, h)))
    throw Error(Errc::internal, "tokenize: the pyramid stage returned " + std::to_string(t.pyramid.num_levels()) +
                                    " levels of " + std::to_string(t.pyramid.width()) + "x" +
                                    std::to_string(t.pyramid.height()) + " for a " + std::to_string(w) + "x" +
                                    std::to_string(h) + " image needing " + std::to_string(levels));
  t.timings.pyramid_ms = ms_since(t0);

  t0 = Clock::now();
  t.relevance = compute_relevance(t.pyramid, params.patch_px, query, params.relevance, exec);
  t.timings.relevance_ms = ms_since(t0);

  t0 = Clock::now();
  if (params.uniform) {
    t.uniform = uniform_grid(grid.image_width, grid.image_height, params.patch_px, params.alloc.budget_tokens);
    t.allocation.budget_tokens = params.alloc.budget_tokens;
    t.allocation.rate_map.grid = grid;
    // The uniform grid's sample spacing, as the nearest mip level, for every tile.
    const double side = std::sqrt(double(grid.image_width) / t.uniform->grid_x * grid.image_height /
                                  t.uniform->grid_y);
    const long lvl = std::lround(std::log2(side / params.patch_px));
    t.allocation.rate_map.level.assign(grid.tiles(), static_cast<uint8_t>(std::clamp(lvl, 0L, 255L)));
  } else if (windowed) {
    t.windows = plan_windows(t.relevance, query, wp);
    t.allocation.budget_tokens = params.alloc.budget_tokens;
    t.allocation.rate_map = t.windows->rate_map();
    t.allocation.max_level = t.windows->pyramid_levels() - 1;
  } else {
    t.allocation = allocate(t.relevance, params.alloc);
  }
  t.timings.allocate_ms = ms_since(t0);

  t0 = Clock::now();
  // The uniform baseline's and the windows' patches are cut on the CPU (from the pyramid every
  // backend hands back on the host).
  t.batch = params.uniform ? extract_uniform(t.pyramid.view(0), *t.uniform, params.patch_px, params.extract, exec)
            : windowed     ? extract_windows(t.pyramid, *t.windows, params.extract, exec)
                           : stages.extract(t.pyramid, t.allocation, params.extract, exec);
  t.timings.extract_ms = ms_since(t0);
  return t;
}

}  // namespace

Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& exec) {
  TokenizeStages cpu;
  return tokenize(std::move(image), query, params, exec, cpu);
}

Tokenization tokenize(const ImageViewU8& image, const Query& query, const TokenizeParams& params, Executor& exec) {
  TokenizeStages cpu;
  return tokenize(image, query, params, exec, cpu);
}

Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& exec,
                      TokenizeStages& stages) {
  if (image.empty()) throw Error(Errc::invalid_argument, "cannot tokenize an empty image");
  const ImageViewU8 view(image);  // extents only: the pyramid stage takes the Image itself
  return run_pipeline(view, query, params, exec, [&](const PyramidParams& pp) {
    return stages.build_pyramid(std::move(image), pp, exec);
  }, stages);
}

Tokenization tokenize(const ImageViewU8& image, const Query& query, const TokenizeParams& params, Executor& exec,
                      TokenizeStages& stages) {
  image.check();
  return run_pipeline(image, query, params, exec, [&](const PyramidParams& pp) {
    return stages.build_pyramid(image, pp, exec);
  }, stages);
}


std::map<std::string, std::string> token_metadata(const Tokenization& t, const Query& query,
                                                  const TokenizeParams& params) {
  std::map<std::string, std::string> m;
  const TileGrid& g = t.relevance.grid;
  m["format"] = "fovea.tokens";
  m["fovea_version"] = FOVEA_VERSION_STRING;
  m["image_width"] = std::to_string(g.image_width);
  m["image_height"] = std::to_string(g.image_height);
  m["image_channels"] = std::to_string(t.pyramid.channels());
  m["patch_size"] = std::to_string(params.patch_px);
  m["budget"] = std::to_string(params.alloc.budget_tokens);
  m["tokens"] = std::to_string(t.batch.size());
  m["mode"] = t.mode();
  m["query"] = describe(query);
  m["tiles_x"] = std::to_string(g.tiles_x);
  m["tiles_y"] = std::to_string(g.tiles_y);
  m["dtype"] = std::string(dtype_name(params.extract.dtype));
  const Normalization& n = params.extract.norm;
  if (params.extract.dtype != DType::u8 && n.enabled) {
    m["norm_mean"] = fmt(n.mean[0]) + "," + fmt(n.mean[1]) + "," + fmt(n.mean[2]);
    m["norm_std"] = fmt(n.std[0]) + "," + fmt(n.std[1]) + "," + fmt(n.std[2]);
  } else {
    m["norm_mean"] = "none";
    m["norm_std"] = "none";
  }
  if (t.is_windowed()) {
    const WindowPlan& p = *t.windows;
    m["foveation"] = "windows";
    m["windows"] = std::to_string(p.windows.size());
    m["window_grid"] = std::to_string(params.windows.grid);
    m["window_px"] = std::to_string(params.windows.grid * params.patch_px);
    m["tokens_encoded"] = std::to_string(p.encoded_tokens());
    m["tokens_kept"] = std::to_string(p.kept_tokens());
    m["keep_covered"] = params.windows.keep_covered ? "true" : "false";
    std::string kinds;
    for (const TokenWindow& w : p.windows) {
      if (!kinds.empty()) kinds += ',';
      kinds += to_string(w.kind);
    }
    m["window_kinds"] = kinds;
  } else if (!t.is_uniform()) {
    m["foveation"] = "mixed";
  }
  if (t.is_uniform()) {
    m["uniform_grid"] = std::to_string(t.uniform->grid_x) + "x" + std::to_string(t.uniform->grid_y);
    m["uniform_resized"] = std::to_string(t.uniform->resized_width) + "x" + std::to_string(t.uniform->resized_height);
  } else if (!t.is_windowed()) {
    m["max_level"] = std::to_string(t.allocation.max_level);
    std::string runs;
    for (int l = 0; l < t.allocation.layout.num_levels(); ++l) {
      if (l) runs += ',';
      runs += std::to_string(t.allocation.layout.count_at(l));
    }
    m["tokens_per_level"] = runs;
  }
  if (!t.is_uniform()) {
    // Every relevance and allocation parameter that shaped the layout, so a token file says how
    // it was made (and can be remade). A uniform file's layout depends on none of them.
    const RelevanceParams& r = params.relevance;
    const RelevanceWeights& w = r.weights;
    m["relevance_weights"] = "detail=" + fmt(w.detail) + ",query=" + fmt(w.query) + ",floor=" + fmt(w.floor) +
                             ",information=" + fmt(w.information) + ",saliency=" + fmt(w.saliency);
    m["e0"] = fmt(r.e0);
    // The fine bias applies to the bottom-up allocation only (a query sets it to 0).
    m["fine_bias"] = fmt(r.fine_bias);
    m["fine_bias_applied"] = fmt(query.empty() ? r.fine_bias : 0.0);
    m["fine_bias_floor"] = fmt(r.fine_bias_floor);
    m["detail_focus"] = fmt(r.detail_focus);
    m["fixation_spread"] = fmt(r.fixation_spread);
    if (w.information > 0) m["entropy_bins"] = std::to_string(r.entropy_bins);
    if (w.information > 0 || w.saliency > 0) m["stats_level"] = std::to_string(r.stats_level);
    if (!t.is_windowed()) {
      m["sharpness"] = fmt(params.alloc.sharpness);
      m["lookahead"] = std::to_string(params.alloc.lookahead);
      m["max_level_requested"] = std::to_string(params.alloc.max_level);
    }
  }
  return m;
}

std::vector<uint8_t> serialize_tokens(const Tokenization& t, const Query& query, const TokenizeParams& params,
                                      const std::map<std::string, std::string>& extra) {
  const TileGrid& g = t.relevance.grid;
  Tensor rate(DType::u8, {g.tiles_y, g.tiles_x});
  std::copy(t.allocation.rate_map.level.begin(), t.allocation.rate_map.level.end(), rate.data<uint8_t>());
  Tensor rel(DType::f32, {g.tiles_y, g.tiles_x});
  std::copy(t.relevance.score.begin(), t.relevance.score.end(), rel.data<float>());
  std::map<std::string, std::string> meta = token_metadata(t, query, params);
  for (const auto& [k, v] : extra) meta[k] = v;
  std::vector<NamedTensor> tensors = {{"patches", &t.batch.patches},
                                      {"positions", &t.batch.positions},
                                      {"levels", &t.batch.levels},
                                      {"rate_map", &rate},
                                      {"relevance", &rel}};
  std::map<std::string, Tensor> window_tensors;
  if (t.batch.windowed()) {
    window_tensors = window_tensors_of(t.batch.windows);
    tensors.push_back({"window", &t.batch.window});
    tensors.push_back({"covered", &t.batch.covered});
    for (const auto& [name, tensor] : window_tensors) tensors.push_back({name, &tensor});
  }
  return serialize_safetensors(tensors, meta);
}

void save_tokens(const std::string& path, const Tokenization& t, const Query& query,
                 const TokenizeParams& params, const std::map<std::string, std::string>& extra) {
  write_file_atomic(path, serialize_tokens(t, query, params, extra));
}

}  // namespace fovea
