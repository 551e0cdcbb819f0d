#include "encode_native.hpp"  // fovea encode with a native-resolution tower

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli_util.hpp"
#include "fovea/error.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"

namespace fovea::cli {

int run_native_encode(const VitModel& model, const NativeEncodeArgs& a, Executor& ex) {
  const VitConfig& c = model.config();
  const ImageU8 loaded = load_image(a.image, a.load);
  const ImageU8 rgb = loaded.channels() == 3 ? loaded.clone() : to_rgb(loaded);
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
  const NativeSize full =
      smart_resize(rgb.height(), rgb.width(), c.native.factor(c.patch_px), c.native.min_pixels, c.native.max_pixels);
  const int64_t native_tokens = int64_t(full.height / c.native.factor(c.patch_px)) * (full.width / c.native.factor(c.patch_px));
  Tensor boxes(DType::i32, {int64_t(plan.windows.size()), 4});
  for (size_t i = 0; i < plan.windows.size(); ++i)
    for (int k = 0; k < 4; ++k) boxes.data<int32_t>()[i * 4 + size_t(k)] = plan.windows[i].box[size_t(k)];
  if (!a.output.empty()) {
    std::map<std::string, std::string> meta = encoder_metadata(model, a.asked);
    meta["source"] = a.image;
    meta["foveation"] = a.uniform ? "native" : "native_windows";
    meta["merge_size"] = std::to_string(m);
    meta["mrope_positions"] = "(t, h, w) ids of images back to back from 0, as get_rope_index gives them";
    std::vector<NamedTensor> named = {{"projected", &e.projected},
                                      {"embeddings", &e.embeddings},
                                      {"image_grid_thw", &e.grid_thw},
                                      {"mrope_positions", &e.mrope_positions}};
    if (!a.uniform) named.push_back({"window_boxes", &boxes});
    std::vector<std::string> deep_names;
    for (size_t k = 0; k < e.deepstack.size(); ++k) deep_names.push_back("deepstack_" + std::to_string(k));
    for (size_t k = 0; k < e.deepstack.size(); ++k) named.push_back({deep_names[k], &e.deepstack[k]});
    save_safetensors(a.output, named, meta);
  }
  nlohmann::json j = {{"image", {{"path", a.image}, {"width", rgb.width()}, {"height", rgb.height()}}},
                      {"foveation", a.uniform ? "native" : "native_windows"},
                      {"budget_merged_tokens", a.uniform ? nlohmann::json(nullptr) : nlohmann::json(a.budget)},
                      {"merged_tokens", e.projected.dim(0)},
                      {"native_merged_tokens", native_tokens},
                      {"image_grid_thw", nlohmann::json::array()},
                      {"timings_ms", {{"encode", e.encode_ms}, {"attention", e.attention_ms}}},
                      {"threads", ex.threads()},
                      {"encoder",
                       {{"model", a.model_spec},
                        {"description", model.describe()},
                        {"family", std::string(to_string(c.family))},
                        {"precision", std::string(to_string(e.precision))},
                        {"projected", {e.projected.dim(0), e.projected.dim(1)}},
                        {"embeddings", {e.embeddings.dim(0), e.embeddings.dim(1)}}}},
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

}  // namespace fovea::cli
