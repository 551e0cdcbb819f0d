#include "encode_native.hpp"  // fovea encode with a native-resolution tower

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli_util.hpp"
#include "fovea/embeddings.hpp"
#include "fovea/error.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"

namespace fovea::cli {

void save_native_encoding(const std::string& path, const Tensor& projected, const Tensor& embeddings,
                          const Tensor& grid_thw, const std::string& grid_name, const Tensor& mrope,
                          const std::vector<Tensor>& deepstack, const std::vector<NamedTensor>& extra,
                          const std::map<std::string, std::string>& meta) {
  std::vector<NamedTensor> named = {{"projected", &projected}, {"embeddings", &embeddings}};
  if (grid_thw.numel() > 0) named.push_back({grid_name, &grid_thw});
  named.push_back({"mrope_positions", &mrope});
  named.insert(named.end(), extra.begin(), extra.end());
  std::vector<std::string> deep_names;
  for (size_t k = 0; k < deepstack.size(); ++k) deep_names.push_back("deepstack_" + std::to_string(k));
  for (size_t k = 0; k < deepstack.size(); ++k) named.push_back({deep_names[k], &deepstack[k]});
  save_safetensors(path, named, meta);
}

nlohmann::json encoder_summary(const VitModel& model, const std::string& spec, Precision ran, nlohmann::json shapes) {
  shapes["model"] = spec;
  shapes["description"] = model.describe();
  shapes["family"] = std::string(to_string(model.config().family));
  shapes["precision"] = std::string(to_string(ran));
  return shapes;
}

namespace {

// encoder_summary of a native encoding: the shapes of its projected rows and embeddings.
nlohmann::json native_encoder_summary(const VitModel& model, const std::string& spec, const NativeEncoding& e) {
  return encoder_summary(model, spec, e.precision,
                         {{"projected", {e.projected.dim(0), e.projected.dim(1)}},
                          {"embeddings", {e.embeddings.dim(0), e.embeddings.dim(1)}}});
}

// The merged tokens of the whole image's native encode (smart_resize within the model's limits).
int64_t native_merged_tokens(const VitConfig& c, const ImageU8& rgb) {
  const int f = c.native.factor(c.patch_px);
  const NativeSize full = smart_resize(rgb.height(), rgb.width(), f, c.native.min_pixels, c.native.max_pixels);
  return int64_t(full.height / f) * (full.width / f);
}

// --foveation mixed (for experiment): the quadtree on merge-unit tiles, one sequence of mixed levels.
int run_native_mixed(const VitModel& model, const NativeEncodeArgs& a, const ImageU8& rgb, Executor& ex) {
  const VitConfig& c = model.config();
  if (a.uniform) throw Error(Errc::invalid_argument, "--uniform and --foveation mixed exclude each other");
  TokenizeParams tp = *a.mixed;
  tp.patch_px = native_mixed_tile_px(model);
  tp.uniform = false, tp.foveation = Foveation::mixed;
  tp.alloc.budget_tokens = a.budget;
  tp.extract.dtype = DType::f32, tp.extract.norm = normalization(c.input);
  const Tokenization t = tokenize(ImageViewU8(rgb), a.query, tp, ex);
  const NativeMixedInput in = native_mixed_input(model, t.batch, rgb.width(), rgb.height());
  NativeEncoding e = encode_native_mixed(model, in, {.precision = a.precision}, ex);
  const int64_t M = in.merged(), native_tokens = native_merged_tokens(c, rgb);
  // Each unit's centre, side (image pixels) and level, as the other embeddings files; its box.
  Tensor positions(DType::f32, {M, 4}), levels(DType::i32, {M}), boxes(DType::f32, {M, 4});
  std::vector<int64_t> per_level;
  for (int64_t u = 0; u < M; ++u) {
    const auto& b = in.boxes[size_t(u)];
    const int l = in.units[size_t(u)].level;
    float* p = positions.data<float>() + u * 4;
    p[0] = (b[0] + b[2]) / 2, p[1] = (b[1] + b[3]) / 2, p[2] = b[2] - b[0], p[3] = float(l);
    levels.data<int32_t>()[u] = l;
    std::copy(b.begin(), b.end(), boxes.data<float>() + u * 4);
    if (int(per_level.size()) <= l) per_level.resize(size_t(l) + 1, 0);
    ++per_level[size_t(l)];
  }
  if (!a.output.empty()) {
    std::map<std::string, std::string> meta = encoder_metadata(model, a.asked);
    meta["source"] = a.image;
    meta["foveation"] = "native_mixed";
    meta["experimental"] = "true";
    meta["merge_size"] = std::to_string(c.native.merge);
    meta["budget"] = std::to_string(a.budget);
    meta["image_width"] = std::to_string(rgb.width()), meta["image_height"] = std::to_string(rgb.height());
    meta["unit_level"] = std::to_string(in.unit_level);
    meta["mrope_positions"] = "(0, h, w): each merge unit's centre in merged-token units of mip " +
                              std::to_string(in.unit_level) + ", minus 1/2, rounded half up; ids from 0, not a grid";
    save_native_encoding(a.output, e.projected, e.embeddings, e.grid_thw, "image_grid_thw", e.mrope_positions,
                         e.deepstack, {{"positions", &positions}, {"levels", &levels}, {"boxes", &boxes}}, meta);
  }
  nlohmann::json j = {{"image", {{"path", a.image}, {"width", rgb.width()}, {"height", rgb.height()}}},
                      {"foveation", "native_mixed"},
                      {"experimental", true},
                      {"budget_merged_tokens", a.budget},
                      {"merged_tokens", M},
                      {"native_merged_tokens", native_tokens},
                      {"unit_level", in.unit_level},
                      {"merged_tokens_per_level", per_level},
                      {"timings_ms", {{"tokenize", t.timings.total_ms()}, {"encode", e.encode_ms}, {"attention", e.attention_ms}}},
                      {"threads", ex.threads()},
                      {"encoder", native_encoder_summary(model, a.model_spec, e)},
                      {"outputs", {{"embeddings", a.output}}}};
  if (a.json) {
    std::cout << json_text(j) << '\n';
    return 0;
  }
  std::printf("%s: %dx%d, %s\n", a.image.c_str(), rgb.width(), rgb.height(), model.describe().c_str());
  std::printf("  mixed (experimental): %lld merged tokens, budget %d (the native encode: %lld), %.1f ms %s\n",
              (long long)M, a.budget, (long long)native_tokens, e.encode_ms, std::string(to_string(e.precision)).c_str());
  std::string runs;
  for (size_t l = 0; l < per_level.size(); ++l)
    runs += (l ? ", " : "") + std::string("level ") + std::to_string(l) + ": " + std::to_string(per_level[l]);
  std::printf("  merge units: %s (positions in patch units of mip %d)\n", runs.c_str(), in.unit_level);
  if (!a.output.empty()) std::printf("  wrote %s\n", a.output.c_str());
  return 0;
}

}  // namespace

int run_native_encode(const VitModel& model, const NativeEncodeArgs& a, Executor& ex) {
  const VitConfig& c = model.config();
  const ImageU8 loaded = load_image(a.image, a.load);
  const ImageU8 rgb = loaded.channels() == 3 ? loaded.clone() : to_rgb(loaded);
  if (a.mixed) return run_native_mixed(model, a, rgb, ex);
  const int m = c.native.merge;
  std::vector<NativeInput> ins;
  NativeWindowPlan plan;
  if (a.uniform) {
    ins.push_back(prepare_native(model, rgb, {}, ex));
  } else {
    plan = plan_native_windows(model, rgb.width(), rgb.height(), a.query, nullptr, {.budget_tokens = a.budget});
    ins = native_window_inputs(model, rgb, plan);
  }
  NativeEncoding e = encode_native(model, ins, {.precision = a.precision}, ex);
  const int64_t native_tokens = native_merged_tokens(c, rgb);
  Tensor boxes(DType::i32, {int64_t(plan.windows.size()), 4});
  for (size_t i = 0; i < plan.windows.size(); ++i)
    for (int k = 0; k < 4; ++k) boxes.data<int32_t>()[i * 4 + size_t(k)] = plan.windows[i].box[size_t(k)];
  if (!a.output.empty()) {
    std::map<std::string, std::string> meta = encoder_metadata(model, a.asked);
    meta["source"] = a.image;
    meta["foveation"] = a.uniform ? "native" : "native_windows";
    meta["merge_size"] = std::to_string(m);
    meta["mrope_positions"] = "(t, h, w) ids of images back to back from 0, as get_rope_index gives them";
    std::vector<NamedTensor> extra;
    if (!a.uniform) extra.push_back({"window_boxes", &boxes});
    save_native_encoding(a.output, e.projected, e.embeddings, e.grid_thw, "image_grid_thw", e.mrope_positions,
                         e.deepstack, extra, meta);
  }
  nlohmann::json j = {{"image", {{"path", a.image}, {"width", rgb.width()}, {"height", rgb.height()}}},
                      {"foveation", a.uniform ? "native" : "native_windows"},
                      {"budget_merged_tokens", a.uniform ? nlohmann::json(nullptr) : nlohmann::json(a.budget)},
                      {"merged_tokens", e.projected.dim(0)},
                      {"native_merged_tokens", native_tokens},
                      {"image_grid_thw", nlohmann::json::array()},
                      {"timings_ms", {{"encode", e.encode_ms}, {"attention", e.attention_ms}}},
                      {"threads", ex.threads()},
                      {"encoder", native_encoder_summary(model, a.model_spec, e)},
                      {"outputs", {{"embeddings", a.output}}}};
  for (int64_t i = 0; i < e.grid_thw.dim(0); ++i)
    j["image_grid_thw"].push_back({e.grid_thw.data<int32_t>()[i * 3], e.grid_thw.data<int32_t>()[i * 3 + 1],
                                   e.grid_thw.data<int32_t>()[i * 3 + 2]});
  if (!a.uniform) {
    j["windows"] = nlohmann::json::array();
    for (const NativeWindow& w : plan.windows)
      j["windows"].push_back({{"box", w.box}, {"kind", std::string(to_string(w.kind))}, {"grid", {w.grid.t, w.grid.h, w.grid.w}}});
  }
  if (a.json) {
    std::cout << json_text(j) << '\n';
  } else {
    std::printf("%s: %dx%d, %s\n", a.image.c_str(), rgb.width(), rgb.height(), model.describe().c_str());
    std::printf("  %s: %lld merged tokens (the native encode: %lld) in %zu image(s), %.1f ms %s\n",
                a.uniform ? "native" : "windows", (long long)e.projected.dim(0), (long long)native_tokens, ins.size(),
                e.encode_ms, std::string(to_string(e.precision)).c_str());
    for (int64_t i = 0; i < e.grid_thw.dim(0); ++i) {
      const int32_t* g = e.grid_thw.data<int32_t>() + i * 3;
      if (a.uniform) {
        std::printf("  image: grid_thw (%d, %d, %d)\n", g[0], g[1], g[2]);
      } else {
        const NativeWindow& w = plan.windows[size_t(i)];
        std::printf("  %s: [%d, %d, %d, %d) grid_thw (%d, %d, %d)\n", std::string(to_string(w.kind)).c_str(), w.box[0],
                    w.box[1], w.box[2], w.box[3], g[0], g[1], g[2]);
      }
    }
    if (!a.output.empty()) std::printf("  wrote %s\n", a.output.c_str());
  }
  return 0;
}

namespace {

// The NaFlex images of one encode: the --uniform image or the windows' (the base view first),
// with the plan that places them in the original image.
struct NaflexRun {
  std::vector<NaflexInput> ins;
  NativeWindowPlan plan;
  std::vector<Encoding> enc;
  int max_patches = 0, budget = 0;
};

NaflexRun naflex_run(const VitModel& model, const NaflexEncodeArgs& a, const ImageU8& rgb, Executor& ex) {
  const VitConfig& c = model.config();
  const int W = rgb.width(), H = rgb.height();
  NaflexRun r;
  r.max_patches = a.max_num_patches > 0 ? a.max_num_patches : c.native.max_num_patches;
  r.budget = a.budget > 0 ? a.budget : c.native.max_num_patches;
  if (a.uniform) {
    r.ins.push_back(prepare_naflex(model, rgb, r.max_patches));
    NativeWindow whole;
    whole.box = {0, 0, W, H};
    whole.grid = r.ins[0].grid;
    r.plan.windows.push_back(whole);
    r.plan.image_width = W, r.plan.image_height = H;
  } else {
    r.plan = plan_native_windows(model, W, H, a.query, nullptr, {.budget_tokens = r.budget});
    r.ins = naflex_window_inputs(model, rgb, r.plan);
  }
  r.enc = encode_naflex(model, r.ins, {.precision = a.precision}, ex);
  return r;
}

// The embeddings file's tensors: every image's rows back to back (the base view first), each
// token's centre and side in the original image's pixels (a window's crop is at full
// resolution, the base view or the --uniform image is scaled by its resize), its level log2 of
// that scale; per image its spatial shape, box, first row and pooled row.
struct NaflexRows {
  EmbeddingsFile f;
  Tensor spatial, boxes, rows, pooled_all;
  bool have_pooled = false;
  int64_t n = 0;
  double encode_ms = 0, attention_ms = 0;
};

NaflexRows naflex_rows(const VitConfig& c, const NaflexRun& run) {
  const int P = c.patch_px;
  const int64_t k = int64_t(run.enc.size()), D = c.hidden;
  NaflexRows o;
  for (const NaflexInput& in : run.ins) o.n += in.grid.h * int64_t(in.grid.w);
  EmbeddingsFile& f = o.f;
  f.embeddings = Tensor(DType::f32, {o.n, D});
  f.positions = Tensor(DType::f32, {o.n, 4});
  f.levels = Tensor(DType::i32, {o.n});
  o.spatial = Tensor(DType::i32, {k, 2}), o.boxes = Tensor(DType::i32, {k, 4}), o.rows = Tensor(DType::i64, {k + 1});
  o.pooled_all = Tensor(DType::f32, {k, D});
  // A projector's rows (a NaFlex tower under a language model's projector), image after image.
  int64_t E = k > 0 && run.enc[0].projected.rank() == 2 ? run.enc[0].projected.dim(1) : 0;
  for (const Encoding& e : run.enc)  // one projected row per patch row, or none written
    if (e.projected.rank() != 2 || e.projected.dim(0) != e.embeddings.dim(0) || e.projected.dim(1) != E) E = 0;
  if (E > 0) f.projected = Tensor(DType::f32, {o.n, E});
  o.have_pooled = k > 0 && run.enc[0].pooled.numel() == D;
  int64_t r = 0;
  for (int64_t i = 0; i < k; ++i) {
    const NaflexInput& in = run.ins[size_t(i)];
    const Encoding& e = run.enc[size_t(i)];
    const auto [x0, y0, x1, y1] = run.plan.windows[size_t(i)].box;
    const double sx = double(x1 - x0) / (in.grid.w * P), sy = double(y1 - y0) / (in.grid.h * P);
    const double scale = std::sqrt(sx * sy);
    const int level = std::max(0, int(std::lround(std::log2(scale))));
    const int64_t ni = e.embeddings.dim(0);
    std::copy_n(e.embeddings.data<float>(), ni * D, f.embeddings.data<float>() + r * D);
    for (int64_t j = 0; j < ni; ++j) {
      const float* src = in.positions.data<float>() + j * 4;
      float* dst = f.positions.data<float>() + (r + j) * 4;
      dst[0] = float(x0 + src[0] * sx), dst[1] = float(y0 + src[1] * sy), dst[2] = float(P * scale), dst[3] = float(level);
      f.levels.data<int32_t>()[r + j] = level;
    }
    if (E > 0) std::copy_n(e.projected.data<float>(), ni * E, f.projected.data<float>() + r * E);
    if (o.have_pooled) std::copy_n(e.pooled.data<float>(), D, o.pooled_all.data<float>() + i * D);
    o.spatial.data<int32_t>()[i * 2] = in.grid.h, o.spatial.data<int32_t>()[i * 2 + 1] = in.grid.w;
    for (int q = 0; q < 4; ++q) o.boxes.data<int32_t>()[i * 4 + q] = run.plan.windows[size_t(i)].box[size_t(q)];
    o.rows.data<int64_t>()[i] = r;
    r += ni;
    o.encode_ms = e.encode_ms, o.attention_ms = e.attention_ms;  // each image carries the one call's times
  }
  o.rows.data<int64_t>()[k] = r;
  return o;
}

}  // namespace

int run_naflex_encode(const VitModel& model, const NaflexEncodeArgs& a, Executor& ex) {
  const VitConfig& c = model.config();
  const ImageU8 loaded = load_image(a.image, a.load);
  const ImageU8 rgb = loaded.channels() == 3 ? loaded.clone() : to_rgb(loaded);
  const int W = rgb.width(), H = rgb.height(), P = c.patch_px;
  const NaflexRun run = naflex_run(model, a, rgb, ex);
  NaflexRows o = naflex_rows(c, run);
  const int64_t k = int64_t(run.enc.size()), D = c.hidden, n = o.n;
  const Precision ran = run.enc.empty() ? a.precision : run.enc[0].precision;
  const std::string foveation = a.uniform ? "naflex" : "naflex_windows";
  nlohmann::json shapes = nlohmann::json::array();
  for (int64_t i = 0; i < k; ++i) shapes.push_back({o.spatial.data<int32_t>()[i * 2], o.spatial.data<int32_t>()[i * 2 + 1]});

  if (!a.output.empty()) {
    EmbeddingsFile& f = o.f;
    f.metadata = encoder_metadata(model, a.asked);
    f.metadata["source"] = a.image;
    f.metadata["preprocessing_source"] = "model: " + c.input.source;
    f.metadata["foveation"] = foveation;
    f.metadata["encode_path"] = a.uniform ? "encode_naflex (the NaFlex processor: resized to fit max_num_patches, aspect kept)"
                                          : "encode_naflex on naflex_window_inputs (a base view and full-resolution windows)";
    // (h, w) patches of the image (--uniform) or of the base view
    f.metadata["grid"] = std::to_string(o.spatial.data<int32_t>()[0]) + "," + std::to_string(o.spatial.data<int32_t>()[1]);
    f.metadata["spatial_shapes"] = shapes.dump();
    f.metadata["image_width"] = std::to_string(W);
    f.metadata["image_height"] = std::to_string(H);
    f.metadata["patch_size"] = std::to_string(P);
    if (a.uniform) f.metadata["max_num_patches"] = std::to_string(run.max_patches);
    else f.metadata["budget_tokens"] = std::to_string(run.budget);
    if (o.have_pooled) {
      f.pooled = Tensor(DType::f32, {1, D});
      std::copy_n(o.pooled_all.data<float>(), D, f.pooled.data<float>());
      f.extra["pooled_per_image"] = std::move(o.pooled_all);
    }
    f.extra["spatial_shapes"] = o.spatial.clone();
    f.extra["image_rows"] = o.rows.clone();
    if (!a.uniform) f.extra["window_boxes"] = o.boxes.clone();
    save_embeddings(a.output, f);
  }
  nlohmann::json j = {{"image", {{"path", a.image}, {"width", W}, {"height", H}}},
                      {"foveation", foveation},
                      {"max_num_patches", a.uniform ? nlohmann::json(run.max_patches) : nlohmann::json(nullptr)},
                      {"budget_tokens", a.uniform ? nlohmann::json(nullptr) : nlohmann::json(run.budget)},
                      {"tokens", n},
                      {"spatial_shapes", shapes},
                      {"timings_ms", {{"encode", o.encode_ms}, {"attention", o.attention_ms}}},
                      {"threads", ex.threads()},
                      {"encoder", encoder_summary(model, a.model_spec, ran, {{"embeddings", {n, D}}})},
                      {"outputs", {{"embeddings", a.output}}}};
  if (!a.uniform) {
    j["windows"] = nlohmann::json::array();
    for (const NativeWindow& w : run.plan.windows)
      j["windows"].push_back({{"box", w.box}, {"kind", std::string(to_string(w.kind))}, {"grid", {w.grid.h, w.grid.w}}});
  }
  if (a.json) {
    std::cout << json_text(j) << '\n';
    return 0;
  }
  std::printf("%s: %dx%d, %s\n", a.image.c_str(), W, H, model.describe().c_str());
  if (a.uniform)
    std::printf("  naflex: %lld tokens, grid %d x %d patches (max_num_patches %d), %.1f ms %s\n", (long long)n,
                run.ins[0].grid.h, run.ins[0].grid.w, run.max_patches, o.encode_ms, std::string(to_string(ran)).c_str());
  else
    std::printf("  naflex windows: %lld tokens (budget %d) in %lld image(s), %.1f ms %s\n", (long long)n, run.budget,
                (long long)k, o.encode_ms, std::string(to_string(ran)).c_str());
  if (!a.uniform)
    for (int64_t i = 0; i < k; ++i) {
      const NativeWindow& w = run.plan.windows[size_t(i)];
      std::printf("  %s: [%d, %d, %d, %d) grid %d x %d\n", std::string(to_string(w.kind)).c_str(), w.box[0], w.box[1],
                  w.box[2], w.box[3], w.grid.h, w.grid.w);
    }
  if (!a.output.empty()) std::printf("  wrote %s\n", a.output.c_str());
  return 0;
}

}  // namespace fovea::cli
