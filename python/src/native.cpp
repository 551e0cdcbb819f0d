// fovea._fovea's native-resolution towers (fovea/native.hpp): Qwen2-VL, Qwen2.5-VL and Qwen3-VL
// images and videos through the processor and the tower, their windows foveation, and SigLIP 2
// NaFlex images. Results are dicts of numpy
// arrays (fovea.handoff.qwen_* take them).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/native.hpp"
#include "fovea/tokenize.hpp"

namespace py = pybind11;
using namespace fovea;

// module.cpp: fixations (x, y[, radius[, weight]]) and regions (x0, y0, x1, y1[, weight]), checked.
Query make_query(const std::vector<std::vector<float>>& fixations, const std::vector<std::vector<float>>& regions);

namespace {

using U8Array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

// An RGB [H, W, 3] uint8 array, C-contiguous (a copy is made by forcecast otherwise).
ImageViewU8 rgb_view(const U8Array& a) {
  if (a.ndim() != 3 || a.shape(2) != 3 || a.shape(0) < 1 || a.shape(1) < 1 || a.shape(0) > (1 << 30) ||
      a.shape(1) > (1 << 30))
    throw Error(Errc::invalid_argument, "image must be a uint8 numpy array [H, W, 3] (RGB)");
  return ImageViewU8::interleaved(a.data(), int(a.shape(1)), int(a.shape(0)), 3);
}

py::array array_of(Tensor&& t) {
  auto* heap = new Tensor(std::move(t));
  py::capsule owner(heap, [](void* p) { delete static_cast<Tensor*>(p); });
  std::vector<py::ssize_t> shape(heap->shape().begin(), heap->shape().end());
  py::dtype dt = heap->dtype() == DType::i32 ? py::dtype::of<int32_t>() : py::dtype::of<float>();
  return py::array(dt, shape, {}, heap->bytes(), owner);
}

Precision precision_of(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  throw Error(Errc::invalid_argument, "precision must be 'fp32' or 'bf16', got '" + s + "'");
}

py::dict result(NativeEncoding&& e, const VitModel& m) {
  py::dict d;
  d["projected"] = array_of(std::move(e.projected));
  d["embeddings"] = array_of(std::move(e.embeddings));
  d["image_grid_thw"] = array_of(std::move(e.grid_thw));
  d["mrope_positions"] = array_of(std::move(e.mrope_positions));
  py::list deep;
  for (Tensor& t : e.deepstack) deep.append(array_of(std::move(t)));
  d["deepstack"] = deep;
  d["image_rows"] = e.image_rows;
  d["merge_size"] = m.config().native.merge;
  d["precision"] = std::string(to_string(e.precision));
  d["encode_ms"] = e.encode_ms;
  d["frames_reused"] = e.frames_reused;
  return d;
}

// The windows calls' common part: the arguments checked, the query and the plan of a base view
// and full-resolution windows (plan_native_windows), and the image as the tower reads it.
struct WindowsCall {
  ImageViewU8 view;
  Precision precision = Precision::fp32;
  NativeWindowPlan plan;
};

WindowsCall plan_windows(const VitModel& model, const U8Array& image, const std::vector<std::vector<float>>& fixations,
                         const std::vector<std::vector<float>>& regions, int budget_tokens, double base_share,
                         int max_windows, const std::string& precision, int threads) {
  if (threads < 0 || threads > 1024) throw Error(Errc::invalid_argument, "threads must be in [0, 1024]");
  WindowsCall w;
  w.precision = precision_of(precision);
  w.view = rgb_view(image);
  w.plan = plan_native_windows(model, w.view.width(), w.view.height(), make_query(fixations, regions), nullptr,
                               {.budget_tokens = budget_tokens, .base_share = base_share, .max_windows = max_windows});
  return w;
}

// window_boxes (x0, y0, x1, y1) and window_kinds of a plan, the base view first.
void add_windows(py::dict& d, const NativeWindowPlan& plan) {
  py::list boxes, kinds;
  for (const NativeWindow& w : plan.windows) {
    boxes.append(py::make_tuple(w.box[0], w.box[1], w.box[2], w.box[3]));
    kinds.append(std::string(to_string(w.kind)));
  }
  d["window_boxes"] = boxes;
  d["window_kinds"] = kinds;
}

// encode_naflex's dict: a [h*w, D] array per image, its pooled row, spatial_shapes [k, 2].
py::dict naflex_result(std::vector<Encoding>&& e, const std::vector<NaflexInput>& ins, Precision asked) {
  py::list emb, pooled;
  Tensor shapes(DType::i32, {int64_t(ins.size()), 2});
  for (size_t i = 0; i < e.size(); ++i) {
    emb.append(array_of(std::move(e[i].embeddings)));
    pooled.append(e[i].pooled.numel() ? py::object(array_of(std::move(e[i].pooled))) : py::object(py::none()));
    shapes.data<int32_t>()[i * 2] = ins[i].grid.h, shapes.data<int32_t>()[i * 2 + 1] = ins[i].grid.w;
  }
  py::dict d;
  d["embeddings"] = emb;
  d["pooled"] = pooled;
  d["spatial_shapes"] = array_of(std::move(shapes));
  d["encode_ms"] = e.empty() ? 0.0 : e[0].encode_ms;  // every Encoding of one call carries the call's time
  d["precision"] = std::string(to_string(e.empty() ? asked : e[0].precision));
  return d;
}

using Points = std::vector<std::vector<float>>;

// The processor's sizes and the native images and videos of the Qwen-VL towers.
void bind_native_images(py::module_& m) {
  m.def(
      "smart_resize",
      [](int height, int width, int factor, int64_t min_pixels, int64_t max_pixels) {
        const NativeSize s = smart_resize(height, width, factor, min_pixels, max_pixels);
        return py::make_tuple(s.height, s.width);
      },
      py::arg("height"), py::arg("width"), py::arg("factor") = 28, py::arg("min_pixels") = 56 * 56,
      py::arg("max_pixels") = 28 * 28 * 1280,
      "(height, width) the Qwen2-VL processor resizes an image to: multiples of factor within the pixel limits");
  m.def(
      "encode_native",
      [](const VitModel& model, const std::vector<U8Array>& images, const std::string& precision, int threads,
         int64_t min_pixels, int64_t max_pixels) {
        if (threads < 0 || threads > 1024) throw Error(Errc::invalid_argument, "threads must be in [0, 1024]");
        const Precision p = precision_of(precision);
        std::vector<ImageViewU8> views;
        for (const U8Array& a : images) views.push_back(rgb_view(a));
        py::gil_scoped_release nogil;
        Executor exec(ExecConfig{.threads = threads});
        std::vector<NativeInput> ins;
        for (const ImageViewU8& v : views) ins.push_back(prepare_native(model, v, {min_pixels, max_pixels}, exec));
        NativeEncoding e = encode_native(model, ins, {.precision = p}, exec);
        py::gil_scoped_acquire gil;
        return result(std::move(e), model);
      },
      py::arg("model"), py::arg("images"), py::arg("precision") = "fp32", py::arg("threads") = 0,
      py::arg("min_pixels") = 0, py::arg("max_pixels") = 0,
      "Native images (uint8 [H, W, 3] each) through a Qwen2-VL / Qwen2.5-VL tower in one call: a dict with projected "
      "[M, E], embeddings [N, D], image_grid_thw [k, 3], mrope_positions [M, 3], image_rows, merge_size, precision, "
      "encode_ms. Pixel limits 0: the model's preprocessor_config.json");
  m.def(
      "encode_native_video",
      [](const VitModel& model, const std::vector<U8Array>& frames, double fps, const std::string& precision, int threads,
         int64_t min_pixels, int64_t max_pixels, bool cap_pixels_per_frame) {
        if (threads < 0 || threads > 1024) throw Error(Errc::invalid_argument, "threads must be in [0, 1024]");
        const Precision p = precision_of(precision);
        std::vector<ImageViewU8> views;
        for (const U8Array& a : frames) views.push_back(rgb_view(a));
        py::gil_scoped_release nogil;
        Executor exec(ExecConfig{.threads = threads});
        const NativeInput in = prepare_native_video(model, views, fps, {min_pixels, max_pixels, cap_pixels_per_frame}, exec);
        NativeEncoding e = encode_native(model, {&in, 1}, {.precision = p}, exec);
        py::gil_scoped_acquire gil;
        return result(std::move(e), model);
      },
      py::arg("model"), py::arg("frames"), py::arg("fps") = 2.0, py::arg("precision") = "fp32", py::arg("threads") = 0,
      py::arg("min_pixels") = 0, py::arg("max_pixels") = 0, py::arg("cap_pixels_per_frame") = false,
      "Video frames (uint8 [H, W, 3] each, one size) at fps through a Qwen2-VL / Qwen2.5-VL / Qwen3-VL tower: resized "
      "by the family's video processor rule (native_video_size; pixel limits 0: the model's video limits), paired "
      "by the temporal patch into one grid (t > 1), encoded frame pair by frame pair (a repeated pair once: "
      "frames_reused); encode_native's dict with the video's mrope_positions");
  m.def(
      "native_video_size",
      [](const VitModel& model, int frames, int height, int width, int64_t min_pixels, int64_t max_pixels,
         bool cap_pixels_per_frame) {
        const NativeSize s = native_video_size(model, frames, height, width, {min_pixels, max_pixels, cap_pixels_per_frame});
        return py::make_tuple(s.height, s.width);
      },
      py::arg("model"), py::arg("frames"), py::arg("height"), py::arg("width"), py::arg("min_pixels") = 0,
      py::arg("max_pixels") = 0, py::arg("cap_pixels_per_frame") = false,
      "(height, width) the model's video processor resizes `frames` frames of height x width to: Qwen2-VL / "
      "Qwen2.5-VL smart_resize of a frame within the video limits, Qwen3-VL its rule over all frames' pixels "
      "(cap_pixels_per_frame: qwen-vl-utils' per-frame cap). Limits 0: the model's (video_preprocessor_config.json, "
      "else preprocessor_config.json)");
}

// SigLIP 2 NaFlex: its processor's size and its images.
void bind_naflex(py::module_& m) {
  m.def(
      "naflex_size",
      [](int height, int width, int patch_size, int max_num_patches) {
        const NativeSize s = naflex_size(height, width, patch_size, max_num_patches);
        return py::make_tuple(s.height, s.width);
      },
      py::arg("height"), py::arg("width"), py::arg("patch_size") = 16, py::arg("max_num_patches") = 256,
      "(height, width) the SigLIP 2 NaFlex processor resizes an image to: multiples of patch_size, at most "
      "max_num_patches patches, aspect kept (get_image_size_for_max_num_patches)");
  m.def(
      "encode_naflex",
      [](const VitModel& model, const std::vector<U8Array>& images, int max_num_patches, const std::string& precision,
         int threads) {
        if (threads < 0 || threads > 1024) throw Error(Errc::invalid_argument, "threads must be in [0, 1024]");
        const Precision p = precision_of(precision);
        std::vector<ImageViewU8> views;
        for (const U8Array& a : images) views.push_back(rgb_view(a));
        py::gil_scoped_release nogil;
        Executor exec(ExecConfig{.threads = threads});
        std::vector<NaflexInput> ins;
        for (const ImageViewU8& v : views) ins.push_back(prepare_naflex(model, v, max_num_patches));
        std::vector<Encoding> e = encode_naflex(model, ins, {.precision = p}, exec);
        py::gil_scoped_acquire gil;
        return naflex_result(std::move(e), ins, p);
      },
      py::arg("model"), py::arg("images"), py::arg("max_num_patches") = 0, py::arg("precision") = "fp32",
      py::arg("threads") = 0,
      "Images (uint8 [H, W, 3] each) through a SigLIP 2 NaFlex tower in one call, each resized to fit max_num_patches "
      "(0: the model's preprocessor_config.json): a dict with embeddings (a [h*w, D] array per image: "
      "last_hidden_state's valid rows), pooled ([1, D] per image, the attention-pooling head), spatial_shapes [k, 2], "
      "encode_ms and precision");
}

// The foveations: windows (NaFlex and Qwen-VL) and, for experiment, mixed (Qwen-VL).
void bind_native_foveation(py::module_& m) {
  m.def(
      "encode_naflex_windows",
      [](const VitModel& model, const U8Array& image, const Points& fixations, int budget_tokens, double base_share,
         int max_windows, const std::string& precision, int threads, const Points& regions) {
        const WindowsCall w =
            plan_windows(model, image, fixations, regions, budget_tokens, base_share, max_windows, precision, threads);
        py::gil_scoped_release nogil;
        Executor exec(ExecConfig{.threads = threads});
        const std::vector<NaflexInput> ins = naflex_window_inputs(model, w.view, w.plan);
        std::vector<Encoding> e = encode_naflex(model, ins, {.precision = w.precision}, exec);
        py::gil_scoped_acquire gil;
        py::dict d = naflex_result(std::move(e), ins, w.precision);
        add_windows(d, w.plan);
        return d;
      },
      py::arg("model"), py::arg("image"), py::arg("fixations") = Points{}, py::arg("budget_tokens") = 256,
      py::arg("base_share") = 0.25, py::arg("max_windows") = 8, py::arg("precision") = "fp32", py::arg("threads") = 0,
      py::arg("regions") = Points{},
      "The windows foveation of a SigLIP 2 NaFlex tower: a base view at base_share of the budget (patches) and "
      "full-resolution windows on the fixations ((x, y[, radius[, weight]]) pixels) and regions ((x0, y0, x1, y1"
      "[, weight])), each a native image, in one call; encode_naflex's dict (one entry per window, the base view "
      "first) plus window_boxes (x0, y0, x1, y1) and window_kinds");
  m.def(
      "encode_native_windows",
      [](const VitModel& model, const U8Array& image, const Points& fixations, int budget_tokens, double base_share,
         int max_windows, const std::string& precision, int threads, const Points& regions) {
        const WindowsCall w =
            plan_windows(model, image, fixations, regions, budget_tokens, base_share, max_windows, precision, threads);
        py::gil_scoped_release nogil;
        Executor exec(ExecConfig{.threads = threads});
        const std::vector<NativeInput> ins = native_window_inputs(model, w.view, w.plan);
        NativeEncoding e = encode_native(model, ins, {.precision = w.precision}, exec);
        py::gil_scoped_acquire gil;
        py::dict d = result(std::move(e), model);
        add_windows(d, w.plan);
        return d;
      },
      py::arg("model"), py::arg("image"), py::arg("fixations") = Points{}, py::arg("budget_tokens") = 1024,
      py::arg("base_share") = 0.25, py::arg("max_windows") = 8, py::arg("precision") = "fp32", py::arg("threads") = 0,
      py::arg("regions") = Points{},
      "The windows foveation of a native tower: a base view at base_share of the budget (merged tokens) and "
      "full-resolution windows on the fixations ((x, y[, radius[, weight]]) pixels) and regions ((x0, y0, x1, y1"
      "[, weight])), each a native image, in one call; encode_native's dict plus window_boxes (x0, y0, x1, y1) and "
      "window_kinds");
  m.def(
      "encode_native_mixed",
      [](const VitModel& model, const U8Array& image, const Points& fixations, int budget_tokens,
         const std::string& precision, int threads, const Points& regions, int max_level, bool return_input) {
        if (threads < 0 || threads > 1024) throw Error(Errc::invalid_argument, "threads must be in [0, 1024]");
        const Precision p = precision_of(precision);
        const ImageViewU8 view = rgb_view(image);
        const Query query = make_query(fixations, regions);
        TokenizeParams tp;
        tp.patch_px = native_mixed_tile_px(model);
        tp.alloc.budget_tokens = budget_tokens;
        tp.alloc.max_level = max_level;
        tp.extract.norm = normalization(model.config().input);
        py::gil_scoped_release nogil;
        Executor exec(ExecConfig{.threads = threads});
        const Tokenization t = tokenize(view, query, tp, exec);
        const NativeMixedInput in = native_mixed_input(model, t.batch, view.width(), view.height());
        NativeEncoding e = encode_native_mixed(model, in, {.precision = p}, exec);
        py::gil_scoped_acquire gil;
        const int64_t M = in.merged();
        Tensor positions(DType::f32, {M, 4}), levels(DType::i32, {M}), boxes(DType::f32, {M, 4});
        for (int64_t u = 0; u < M; ++u) {
          const auto& b = in.boxes[size_t(u)];
          float* q = positions.data<float>() + u * 4;
          q[0] = (b[0] + b[2]) / 2, q[1] = (b[1] + b[3]) / 2, q[2] = b[2] - b[0], q[3] = float(in.units[size_t(u)].level);
          levels.data<int32_t>()[u] = in.units[size_t(u)].level;
          std::copy(b.begin(), b.end(), boxes.data<float>() + u * 4);
        }
        py::dict d = result(std::move(e), model);
        d["positions"] = array_of(std::move(positions));
        d["levels"] = array_of(std::move(levels));
        d["boxes"] = array_of(std::move(boxes));
        d["unit_level"] = in.unit_level;
        d["experimental"] = true;
        if (return_input) {  // what the tower read: the patches and their rotary positions
          d["patches"] = array_of(in.patches.clone());
          d["patch_positions"] = array_of(in.positions.clone());
        }
        return d;
      },
      py::arg("model"), py::arg("image"), py::arg("fixations") = Points{}, py::arg("budget_tokens") = 1024,
      py::arg("precision") = "fp32", py::arg("threads") = 0, py::arg("regions") = Points{}, py::arg("max_level") = -1,
      py::arg("return_input") = false,
      "For experiment: the mixed foveation of a Qwen-VL tower, one sequence of merge units from several mip levels "
      "(the quadtree on P*merge-px tiles, budget_tokens merged tokens; fovea/native.hpp): encode_native's dict with "
      "image_grid_thw [0, 3] (not a grid), mrope_positions [M, 3] (each unit's centre in merged-token units of the "
      "finest level, rounded half up), positions [M, 4] (centre x, y, side in image pixels, level), levels [M], "
      "boxes [M, 4] (x0, y0, x1, y1) and unit_level (the finest level: the positions' unit); return_input: also "
      "patches [N, C*T*P*P] and patch_positions [N, 2] (each patch's rotary row and column), what the tower read");
}

}  // namespace

void bind_native(py::module_& m) {
  bind_native_images(m);
  bind_naflex(m);
  bind_native_foveation(m);
}
