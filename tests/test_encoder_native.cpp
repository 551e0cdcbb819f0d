// Native-resolution towers (Qwen2-VL, Qwen2.5-VL) against the float64 PyTorch reference of
// scripts/make_qwen_fixtures.py: from raw pixels (PNG) through the processor's layout, the tower,
// window attention and the merger; smart_resize and PIL's bicubic against the reference's
// values; hostile checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"
#include "reference_compare.hpp"
#include "test_util.hpp"

using namespace fovea;
using test::ref;
using test::rel_err;
namespace fs = std::filesystem;

namespace {

std::string data(const std::string& f) { return test::source_dir() + "/tests/data/encoder/" + f; }

// The checkpoints as users point at them: Qwen2-VL's single file, Qwen2.5-VL's directory
// (model.safetensors.index.json and two shards).
std::string model_path(const std::string& kind) {
  return kind == "qwen2_vl" ? data("qwen2_vl/model.safetensors") : data("qwen2_5_vl");
}

void expect_same_i32(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), DType::i32) << what;
  ASSERT_EQ(b.dtype(), DType::i32) << what;
  EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), size_t(a.numel()) * 4), 0) << what;
}

const char* kSizes[] = {"224x336", "448x448", "644x420"};

}  // namespace

TEST(NativeTowers, SmartResizeEqualsTheReferenceRule) {
  nlohmann::json j;
  std::ifstream(data("qwen_smart_resize.json")) >> j;
  int checked = 0;
  for (const auto& r : j.at("rows")) {
    const int h = r[0], w = r[1], f = r[2];
    const int64_t mn = r[3], mx = r[4];
    const int rh = r[5], rw = r[6];
    if (rh == 0) {
      EXPECT_THROW(smart_resize(h, w, f, mn, mx), Error) << h << "x" << w;
      continue;
    }
    const NativeSize s = smart_resize(h, w, f, mn, mx);
    EXPECT_EQ(s.height, rh) << h << "x" << w << " factor " << f << " [" << mn << ", " << mx << "]";
    EXPECT_EQ(s.width, rw) << h << "x" << w << " factor " << f << " [" << mn << ", " << mx << "]";
    ++checked;
  }
  EXPECT_GT(checked, 150);
  // Halves round to even, as Python's round(): 70 / 28 = 2.5 → 2, 98 / 28 = 3.5 → 4.
  EXPECT_EQ(smart_resize(70, 98, 28, 1, 1 << 30), (NativeSize{56, 112}));
  EXPECT_THROW(smart_resize(0, 10, 28, 1, 100), Error);
  EXPECT_THROW(smart_resize(10, 10, 28, 100, 10), Error);
}

TEST(NativeTowers, BicubicResizeEqualsPil) {
  const ImageU8 src = load_image(data("qwen_images/resize_src_250x187.png"));
  for (const char* size : {"252x196", "98x70", "406x294", "250x70"}) {
    const ImageU8 want = load_image(data(std::string("qwen_images/resize_") + size + ".png"));
    const ImageU8 got = resize_bicubic_pil(src, want.width(), want.height());
    EXPECT_EQ(test::values_differing(got, want), 0) << size;
  }
}

TEST(NativeTowers, LoadersReadTheConfiguration) {
  const VitModel a = VitModel::load(model_path("qwen2_vl"));
  const VitConfig& c = a.config();
  EXPECT_EQ(c.family, VitFamily::qwen2_vl);
  EXPECT_EQ(c.naming, "hf_qwen2_vl");
  EXPECT_EQ(c.hidden, 32);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.patch_px, 14);
  EXPECT_EQ(c.native.merge, 2);
  EXPECT_EQ(c.native.temporal_patch, 2);
  EXPECT_EQ(c.native.window_px, 0);
  EXPECT_FALSE(c.native.rms_norm);
  EXPECT_EQ(c.projector, ProjectorType::patch_merger);
  EXPECT_EQ(c.projector_dim, 24);
  EXPECT_EQ(c.native.min_pixels, 3136);
  EXPECT_EQ(c.native.max_pixels, 12845056);
  EXPECT_EQ(c.input.source, "preprocessor_config.json");
  EXPECT_EQ(a.tensors_ignored(), 2);  // the language model's
  const VitModel b = VitModel::load(model_path("qwen2_5_vl"));
  const VitConfig& d = b.config();
  EXPECT_EQ(d.family, VitFamily::qwen2_5_vl);
  EXPECT_EQ(d.layers, 4);
  EXPECT_EQ(d.mlp, 48);
  EXPECT_EQ(d.act, Activation::swiglu);
  EXPECT_TRUE(d.native.rms_norm);
  EXPECT_EQ(d.native.window_px, 112);
  EXPECT_EQ(d.native.full_attention_blocks, (std::vector<int>{1, 3}));
  EXPECT_EQ(d.native.max_pixels, 12845056);  // size.longest_edge
  EXPECT_EQ(b.tensors_ignored(), 2);
}

// fp32: every output within 1e-4 of the largest reference value; grids and M-RoPE ids equal.
TEST(NativeTowers, Fp32MatchesTheReferenceFromRawPixels) {
  Executor exec;
  for (const std::string kind : {"qwen2_vl", "qwen2_5_vl"}) {
    SCOPED_TRACE(kind);
    const VitModel m = VitModel::load(model_path(kind));
    const SafetensorsFile cases = SafetensorsFile::open(data(kind + "/cases.safetensors"));
    std::vector<NativeInput> all;
    for (const char* size : kSizes) {
      SCOPED_TRACE(size);
      const std::string name = std::string("image_") + size;
      const ImageU8 img = load_image(data("qwen_images/" + name + ".png"));
      NativeInput in = prepare_native(m, img, {}, exec);
      const NativeEncoding e = encode_native(m, {&in, 1}, {}, exec);
      EXPECT_LE(rel_err(e.projected, ref(cases, name + ".projected")), 1e-4);
      EXPECT_LE(rel_err(e.embeddings, ref(cases, name + ".hidden")), 1e-4);
      expect_same_i32(e.grid_thw, ref(cases, name + ".grid_thw"), "grid_thw");
      expect_same_i32(e.mrope_positions, ref(cases, name + ".mrope"), "mrope");
      EXPECT_EQ(e.image_rows, (std::vector<int64_t>{0, e.projected.dim(0)}));
      all.push_back(std::move(in));
    }
    // The three images in one call: attention within each, rows image after image.
    const NativeEncoding e = encode_native(m, all, {}, exec);
    EXPECT_LE(rel_err(e.projected, ref(cases, "batch.projected")), 1e-4);
    expect_same_i32(e.grid_thw, ref(cases, "batch.grid_thw"), "grid_thw");
    expect_same_i32(e.mrope_positions, ref(cases, "batch.mrope"), "mrope");
    ASSERT_EQ(e.image_rows.size(), 4u);
  }
}

TEST(NativeTowers, Bf16IsCloseToFp32) {
  Executor exec;
  for (const std::string kind : {"qwen2_vl", "qwen2_5_vl"}) {
    const VitModel m = VitModel::load(model_path(kind));
    NativeInput in = prepare_native(m, load_image(data("qwen_images/image_644x420.png")), {}, exec);
    const NativeEncoding f = encode_native(m, {&in, 1}, {}, exec);
    const NativeEncoding b = encode_native(m, {&in, 1}, {.precision = Precision::bf16}, exec);
    EXPECT_GE(cosine_similarity(f.projected, b.projected), 0.999) << kind;
    EXPECT_GE(mean_row_cosine(f.projected, b.projected), 0.999) << kind;
  }
}

TEST(NativeTowers, ProcessorAndEncodeRefuseWhatDoesNotFit) {
  Executor exec;
  const VitModel m = VitModel::load(model_path("qwen2_vl"));
  // A side that is not a multiple of 28 must be resized first.
  const ImageU8 odd(30, 28, 3, true);
  EXPECT_THROW(native_input(m, {std::array<ImageViewU8, 1>{ImageViewU8(odd)}}), Error);
  // prepare_native resizes it: 30x28 → 84x56, the area raised to min_pixels 3136 (56²).
  const NativeInput in = prepare_native(m, odd, {}, exec);
  EXPECT_EQ(in.grid, (NativeGrid{1, 4, 6}));
  // Grids and patches that disagree.
  NativeInput bad = {in.patches.clone(), {1, 4, 4}};
  EXPECT_THROW(encode_native(m, {&bad, 1}, {}, exec), Error);
  bad.grid = {1, 3, 6};
  EXPECT_THROW(encode_native(m, {&bad, 1}, {}, exec), Error);
  EXPECT_THROW(encode_native(m, std::span<const NativeInput>(), {}, exec), Error);
  // encode() of a token batch is refused with the way to go.
  Tensor patches(DType::f32, {4, 3, 14, 14}), pos(DType::f32, {4, 4});
  try {
    encode(m, patches, pos, {.image_width = 28, .image_height = 28}, exec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("encode_native"), std::string::npos) << e.what();
  }
  // A plain ViT is not a native tower.
  const VitModel vit = VitModel::load("random:vit-tiny");
  EXPECT_THROW(encode_native(vit, {&in, 1}, {}, exec), Error);
}

namespace {

// The Qwen2-VL fixture copied into `dir` with config.json and preprocessor_config.json edited.
std::string edited(const std::string& dir, const std::function<void(nlohmann::json&, nlohmann::json&)>& edit) {
  fs::create_directories(dir);
  fs::copy_file(data("qwen2_vl/model.safetensors"), dir + "/model.safetensors", fs::copy_options::overwrite_existing);
  nlohmann::json cfg, pre;
  std::ifstream(data("qwen2_vl/config.json")) >> cfg;
  std::ifstream(data("qwen2_vl/preprocessor_config.json")) >> pre;
  edit(cfg, pre);
  std::ofstream(dir + "/config.json") << cfg.dump();
  std::ofstream(dir + "/preprocessor_config.json") << pre.dump();
  return dir + "/model.safetensors";
}

void expect_one_line_error(const std::string& path, const std::string& fragment) {
  try {
    VitModel::load(path);
    FAIL() << "loaded " << path << " (expected: " << fragment << ")";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(fragment), std::string::npos) << w;
    EXPECT_EQ(w.find('\n'), std::string::npos) << w;
  }
}

}  // namespace

TEST(NativeTowers, HostileConfigsGiveOneClearError) {
  const std::string dir = test::temp_dir("native_hostile");
  using J = nlohmann::json;
  struct Case {
    const char* name;
    std::function<void(J&, J&)> edit;
    const char* says;
  } cases[] = {
      {"heads", [](J& c, J&) { c["vision_config"]["num_heads"] = 3; }, "num_heads = 3"},
      {"heads0", [](J& c, J&) { c["vision_config"]["num_heads"] = 0; }, "num_heads = 0"},
      {"heads_str", [](J& c, J&) { c["vision_config"]["num_heads"] = "two"; }, "wrong type"},
      {"depth", [](J& c, J&) { c["vision_config"]["depth"] = 5; }, "depth = 5"},
      {"patch", [](J& c, J&) { c["vision_config"]["patch_size"] = 16; }, "patch_size = 16"},
      {"merge", [](J& c, J&) { c["vision_config"]["spatial_merge_size"] = 3; }, "spatial_merge_size = 3"},
      {"act", [](J& c, J&) { c["vision_config"]["hidden_act"] = "relu"; }, "hidden_act 'relu'"},
      {"vision_cfg", [](J& c, J&) { c["vision_config"] = 7; }, "vision_config"},
      {"pre_patch", [](J&, J& p) { p["patch_size"] = 16; }, "patch_size = 16"},
      {"pre_merge", [](J&, J& p) { p["merge_size"] = 4; }, "merge_size = 4"},
      {"pre_limits", [](J&, J& p) { p["min_pixels"] = 100000; p["max_pixels"] = 10; }, "pixel limits"},
      {"pre_neg", [](J&, J& p) { p["max_pixels"] = -5; }, "pixel limits"},
      {"pre_huge", [](J&, J& p) { p["max_pixels"] = 1e30; }, "max_pixels"},
      {"pre_std", [](J&, J& p) { p["image_std"] = {0, 1, 1}; }, "image_std"},
      {"pre_mean", [](J&, J& p) { p["image_mean"] = "x"; }, "image_mean"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_one_line_error(edited(dir + "/" + c.name, c.edit), c.says);
  }
  // Qwen2.5-VL's window settings.
  const std::string d25 = dir + "/q25";
  fs::create_directories(d25);
  for (const auto& f : fs::directory_iterator(data("qwen2_5_vl")))
    fs::copy_file(f.path(), d25 + "/" + f.path().filename().string(), fs::copy_options::overwrite_existing);
  nlohmann::json cfg;
  std::ifstream(data("qwen2_5_vl/config.json")) >> cfg;
  for (const auto& [key, value, says] :
       std::vector<std::tuple<std::string, J, std::string>>{{"fullatt_block_indexes", J{1, 9}, "fullatt_block_indexes holds 9"},
                                                           {"fullatt_block_indexes", J("x"), "not a list"},
                                                           {"window_size", J(0), "window_size = 0"},
                                                           {"intermediate_size", J(50), "intermediate_size = 50"},
                                                           {"out_hidden_size", J(8), "out_hidden_size = 8"}}) {
    J c = cfg;
    c["vision_config"][key] = value;
    std::ofstream(d25 + "/config.json") << c.dump();
    expect_one_line_error(d25, says);
  }
  // A truncated config.json.
  std::ofstream(d25 + "/config.json") << cfg.dump().substr(0, 40);
  expect_one_line_error(d25, "config.json");
  // A truncated shard: an error, never a crash.
  std::ofstream(d25 + "/config.json") << cfg.dump();
  fs::resize_file(d25 + "/model-00002-of-00002.safetensors", 1000);
  try {
    VitModel::load(d25);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

namespace {

// A 2592x1944 test photo: gradients, stripes and noise.
ImageU8 big_photo() {
  ImageU8 img(2592, 1944, 3);
  uint32_t s = 12345;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < img.height(); ++y)
      for (int x = 0; x < img.width(); ++x) {
        s = s * 1664525u + 1013904223u;
        const double v = 128 + 60 * std::sin(x / (17.0 + 5 * c)) * std::cos(y / 23.0) + 40.0 * x / img.width() +
                         double(s >> 28) - 8;
        img.at(c, y, x) = uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return img;
}

}  // namespace

// The windows foveation: base view + a full-resolution window on the fixation, in one call. The
// window's rows equal the crop encoded alone; the budget bounds the merged tokens; the M-RoPE ids
// are the images' back to back.
TEST(NativeTowers, WindowsFoveationIsBudgetedAndWindowsAreTheirCrops) {
  Executor exec;
  const VitModel m = VitModel::load(model_path("qwen2_5_vl"));
  const ImageU8 img = big_photo();
  Query q;
  q.fixations.push_back({.x_px = 2000, .y_px = 600});
  const NativeWindowPlan plan = plan_native_windows(m, img.width(), img.height(), q, nullptr, {.budget_tokens = 1024});
  ASSERT_EQ(plan.windows.size(), 2u);
  EXPECT_LE(plan.tokens(2), 1024);
  EXPECT_GE(plan.tokens(2), 900);  // the budget is spent, not wasted
  const NativeWindow& w = plan.windows[1];
  EXPECT_EQ(w.kind, TokenWindow::Kind::query);
  EXPECT_TRUE(2000 >= w.box[0] && 2000 < w.box[2] && 600 >= w.box[1] && 600 < w.box[3]);
  EXPECT_EQ((w.box[2] - w.box[0]) % 28, 0);
  // The native encode of the whole photo, for the record: far more tokens.
  const NativeSize full = smart_resize(img.height(), img.width(), 28, m.config().native.min_pixels, m.config().native.max_pixels);
  EXPECT_GT(int64_t(full.height / 28) * (full.width / 28), 6 * plan.tokens(2));
  const std::vector<NativeInput> ins = native_window_inputs(m, img, plan);
  const NativeEncoding e = encode_native(m, ins, {}, exec);
  EXPECT_EQ(e.projected.dim(0), plan.tokens(2));
  std::vector<NativeGrid> grids;
  for (const NativeWindow& x : plan.windows) grids.push_back(x.grid);
  const Tensor want_ids = native_mrope_positions(grids, 2);
  expect_same_i32(e.mrope_positions, want_ids, "mrope");
  // The window alone.
  const ImageViewU8 crop(img.row(0, w.box[1]) + w.box[0], w.box[2] - w.box[0], w.box[3] - w.box[1], 3, 1,
                         ptrdiff_t(img.stride()), ptrdiff_t(img.plane_stride()));
  const NativeInput alone = native_input(m, {&crop, 1});
  const NativeEncoding a = encode_native(m, {&alone, 1}, {}, exec);
  const int64_t r0 = e.image_rows[1], n = e.image_rows[2] - r0, E = e.projected.dim(1);
  ASSERT_EQ(n, a.projected.dim(0));
  Tensor rows(DType::f32, {n, E});
  std::memcpy(rows.data<float>(), e.projected.data<float>() + r0 * E, size_t(n * E) * 4);
  EXPECT_GE(mean_row_cosine(rows, a.projected), 0.999);
  EXPECT_LE(rel_err(rows, a.projected), 1e-4);
  // No query and no relevance: the base view only; bad parameters refused.
  EXPECT_EQ(plan_native_windows(m, 2592, 1944, {}, nullptr, {}).windows.size(), 1u);
  EXPECT_THROW(plan_native_windows(m, 2592, 1944, q, nullptr, {.budget_tokens = 2}), Error);
  EXPECT_THROW(plan_native_windows(m, 2592, 1944, q, nullptr, {.base_share = 0}), Error);
  EXPECT_THROW(plan_native_windows(m, 0, 1944, q, nullptr, {}), Error);
}

// The CLI: `fovea model` describes the native tower; `fovea encode` writes projected,
// image_grid_thw, mrope_positions (and the windows' boxes); bad input is one error line.
TEST(NativeTowers, Cli) {
  const std::string dir = test::temp_dir("native_cli");
  auto r = test::run_cli({"model", model_path("qwen2_5_vl"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("family"), "qwen2_5_vl");
  EXPECT_EQ(j.at("native").at("merge_size"), 2);
  EXPECT_EQ(j.at("native").at("window_size"), 112);
  EXPECT_EQ(j.at("native").at("fullatt_block_indexes"), (nlohmann::json{1, 3}));
  EXPECT_EQ(j.at("projector"), "patch_merger");
  r = test::run_cli({"model", model_path("qwen2_vl")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("native resolution: 14 px patches"), std::string::npos) << r.out;
  const std::string img = data("qwen_images/image_644x420.png");
  r = test::run_cli({"encode", img, "--model", model_path("qwen2_vl"), "--uniform", "-o", dir + "/u.safetensors"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    const SafetensorsFile f = SafetensorsFile::open(dir + "/u.safetensors");
    const SafetensorsFile cases = SafetensorsFile::open(data("qwen2_vl/cases.safetensors"));
    EXPECT_LE(rel_err(f.load(*f.find("projected")), ref(cases, "image_644x420.projected")), 1e-4);
    expect_same_i32(f.load(*f.find("mrope_positions")), ref(cases, "image_644x420.mrope"), "mrope");
    EXPECT_EQ(f.metadata().at("model_family"), "qwen2_vl");
  }
  r = test::run_cli({"encode", img, "--model", model_path("qwen2_5_vl"), "--fixation", "500,100", "--budget", "200",
                     "-o", dir + "/w.safetensors", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json w = nlohmann::json::parse(r.out);
  EXPECT_LE(w.at("merged_tokens").get<int>(), 200);
  EXPECT_EQ(w.at("windows").size(), 2u);
  {
    const SafetensorsFile f = SafetensorsFile::open(dir + "/w.safetensors");
    EXPECT_EQ(f.find("window_boxes")->shape, (std::vector<int64_t>{2, 4}));
    EXPECT_EQ(f.find("image_grid_thw")->shape, (std::vector<int64_t>{2, 3}));
  }
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"encode", img, "--model", model_path("qwen2_vl"), "--budget", "2", "-o", dir + "/b.safetensors"},
        std::vector<std::string>{"encode", img, "--model", model_path("qwen2_vl"), "--check-fp32", "-o", dir + "/b.safetensors"}}) {
    r = test::run_cli(bad);
    EXPECT_EQ(r.exit_code, 2);  // invalid arguments
    EXPECT_EQ(r.err.rfind("fovea: error:", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dir + "/b.safetensors"));
  }
}

// Qwen3-VL: 16-px patches, the learned position table interpolated to each grid, tanh-GELU
// blocks, the merger and the DeepStack mergers, against the float64 reference from raw pixels.
TEST(NativeTowers, Qwen3VlWithDeepStackMatchesTheReference) {
  Executor exec;
  const VitModel m = VitModel::load(data("qwen3_vl"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.family, VitFamily::qwen3_vl);
  EXPECT_EQ(c.patch_px, 16);
  EXPECT_EQ(c.grid, 8);
  EXPECT_EQ(c.native.deepstack_blocks, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.native.min_pixels, 65536);
  EXPECT_EQ(c.input.mean[0], 0.5f);
  const SafetensorsFile cases = SafetensorsFile::open(data("qwen3_vl/cases.safetensors"));
  std::vector<NativeInput> all;
  for (const char* size : {"224x320", "448x448", "640x416"}) {
    SCOPED_TRACE(size);
    const std::string name = std::string("image_") + size;
    NativeInput in = prepare_native(m, load_image(data("qwen_images/" + name + ".png")), {}, exec);
    const NativeEncoding e = encode_native(m, {&in, 1}, {}, exec);
    EXPECT_LE(rel_err(e.projected, ref(cases, name + ".projected")), 1e-4);
    EXPECT_LE(rel_err(e.embeddings, ref(cases, name + ".hidden")), 1e-4);
    ASSERT_EQ(e.deepstack.size(), 2u);
    EXPECT_LE(rel_err(e.deepstack[0], ref(cases, name + ".deepstack_0")), 1e-4);
    EXPECT_LE(rel_err(e.deepstack[1], ref(cases, name + ".deepstack_1")), 1e-4);
    expect_same_i32(e.grid_thw, ref(cases, name + ".grid_thw"), "grid_thw");
    expect_same_i32(e.mrope_positions, ref(cases, name + ".mrope"), "mrope");
    const NativeEncoding b = encode_native(m, {&in, 1}, {.precision = Precision::bf16}, exec);
    EXPECT_GE(mean_row_cosine(b.projected, e.projected), 0.999);
    EXPECT_GE(mean_row_cosine(b.deepstack[1], e.deepstack[1]), 0.999);
    all.push_back(std::move(in));
  }
  const NativeEncoding e = encode_native(m, all, {}, exec);
  EXPECT_LE(rel_err(e.projected, ref(cases, "batch.projected")), 1e-4);
  EXPECT_LE(rel_err(e.deepstack[0], ref(cases, "batch.deepstack_0")), 1e-4);
  EXPECT_LE(rel_err(e.deepstack[1], ref(cases, "batch.deepstack_1")), 1e-4);
  expect_same_i32(e.mrope_positions, ref(cases, "batch.mrope"), "mrope");
  // Hostile: DeepStack indexes that do not match the file.
  const std::string dir = test::temp_dir("native_qwen3");
  fs::copy_file(data("qwen3_vl/model.safetensors"), dir + "/model.safetensors");
  nlohmann::json cfg;
  std::ifstream(data("qwen3_vl/config.json")) >> cfg;
  for (const auto& [key, value, says] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"deepstack_visual_indexes", nlohmann::json{0}, "DeepStack mergers"},
           {"deepstack_visual_indexes", nlohmann::json{0, 7}, "holds 7"},
           {"num_position_embeddings", nlohmann::json(100), "num_position_embeddings = 100"},
           {"hidden_act", nlohmann::json("relu"), "hidden_act 'relu'"}}) {
    nlohmann::json c2 = cfg;
    c2["vision_config"][key] = value;
    std::ofstream(dir + "/config.json") << c2.dump();
    expect_one_line_error(dir + "/model.safetensors", says);
  }
}

// Video: five frames (A, B, A, B, C) paired by the temporal patch into a grid of t = 3 (the last
// frame repeated), against the reference's video grid: tower, merger, DeepStack, the M-RoPE ids
// of a video (Qwen2.5-VL: 2 fps, tokens_per_second 2; Qwen3-VL: frame pairs split into t = 1),
// and the repeated frame pair (A, B) encoded once.
TEST(NativeTowers, VideoMatchesTheReference) {
  Executor exec;
  for (const auto& [kind, size] : std::vector<std::pair<std::string, std::string>>{{"qwen2_5_vl", "224x336"},
                                                                                   {"qwen3_vl", "224x320"}}) {
    SCOPED_TRACE(kind);
    const VitModel m = VitModel::load(kind == "qwen3_vl" ? data("qwen3_vl") : model_path(kind));
    const SafetensorsFile cases = SafetensorsFile::open(data(kind + "/cases.safetensors"));
    const ImageU8 a = load_image(data("qwen_images/image_" + size + ".png"));
    const ImageU8 b = load_image(data("qwen_images/video_b_" + size + ".png"));
    const ImageU8 c = load_image(data("qwen_images/video_c_" + size + ".png"));
    const std::vector<ImageViewU8> frames = {a, b, a, b, c};
    const NativeInput in = prepare_native_video(m, frames, 2.0, {}, exec);
    EXPECT_EQ(in.grid.t, 3);
    const NativeEncoding e = encode_native(m, {&in, 1}, {}, exec);
    expect_same_i32(e.grid_thw, ref(cases, "video.grid_thw"), "grid_thw");
    expect_same_i32(e.mrope_positions, ref(cases, "video.mrope"), "mrope");
    EXPECT_LE(rel_err(e.embeddings, ref(cases, "video.hidden")), 1e-4);
    EXPECT_LE(rel_err(e.projected, ref(cases, "video.projected")), 1e-4);
    for (size_t k = 0; k < e.deepstack.size(); ++k)
      EXPECT_LE(rel_err(e.deepstack[k], ref(cases, "video.deepstack_" + std::to_string(k))), 1e-4) << k;
    EXPECT_EQ(e.deepstack.size(), kind == "qwen3_vl" ? 2u : 0u);
    EXPECT_EQ(e.frames_reused, 1);
    EXPECT_EQ(e.image_rows, (std::vector<int64_t>{0, e.projected.dim(0)}));
    const NativeEncoding eb = encode_native(m, {&in, 1}, {.precision = Precision::bf16}, exec);
    EXPECT_GE(cosine_similarity(e.projected, eb.projected), 0.999);
    // The ids alone, from the inputs.
    expect_same_i32(native_mrope_positions(m, {&in, 1}), ref(cases, "video.mrope"), "native_mrope_positions");
  }
  // Qwen2-VL steps the temporal id by one per frame pair; Qwen2.5-VL by tokens_per_second ·
  // temporal_patch / fps (1 fps here: 4 per pair).
  const VitModel q2 = VitModel::load(model_path("qwen2_vl"));
  NativeInput v{Tensor(DType::f32, {2 * 2 * 2, 3 * 2 * 14 * 14}), {2, 2, 2}};
  const Tensor ids = native_mrope_positions(q2, {&v, 1});
  EXPECT_EQ(ids.data<int32_t>()[3], 1);  // the second frame pair's t id
  const VitModel q25 = VitModel::load(model_path("qwen2_5_vl"));
  v.fps = 1.0;
  EXPECT_EQ(native_mrope_positions(q25, {&v, 1}).data<int32_t>()[3], 4);
  v.fps = 0;
  EXPECT_THROW(native_mrope_positions(q25, {&v, 1}), Error);
  // A video grid that does not match its patches, or with sides that are not multiples of merge.
  v.fps = 2.0;
  v.grid = {3, 2, 2};
  EXPECT_THROW(encode_native(q25, {&v, 1}, {}, exec), Error);
  NativeInput odd{Tensor(DType::f32, {2 * 3 * 3, 3 * 2 * 14 * 14}), {2, 3, 3}};
  EXPECT_THROW(encode_native(q25, {&odd, 1}, {}, exec), Error);
  odd.grid = {2, -3, -3};
  EXPECT_THROW(encode_native(q25, {&odd, 1}, {}, exec), Error);
  EXPECT_THROW(prepare_native_video(q25, {}, 2.0, {}, exec), Error);
  const ImageU8 f1(56, 56, 3, true), f2(84, 56, 3, true);
  const std::vector<ImageViewU8> mixed = {f1, f2};
  EXPECT_THROW(prepare_native_video(q25, mixed, 2.0, {}, exec), Error);
  EXPECT_THROW(prepare_native_video(q25, {&mixed[0], 1}, -1.0, {}, exec), Error);
}

// The video processors' own resize rules (scripts/make_qwen_video_resize.py, from transformers'
// video_processing_qwen2_vl.py / video_processing_qwen3_vl.py): Qwen2-VL / Qwen2.5-VL resize each
// frame within the video limits; Qwen3-VL counts the pixels of every frame, optionally capped
// per frame as qwen-vl-utils does. native_video_size on a sweep of sizes, aspect ratios, frame
// counts and limits, and prepare_native_video's grids on a sample of them.
TEST(NativeTowers, VideoProcessorsResizeAsTheReference) {
  nlohmann::json j;
  std::ifstream(data("qwen_video_resize.json")) >> j;
  const VitModel q2 = VitModel::load(model_path("qwen2_vl")), q3 = VitModel::load(data("qwen3_vl"));
  Executor exec;
  int checked = 0, refused = 0, grids = 0;
  for (const auto& r : j.at("rows")) {
    const std::string family = r[0];
    const int frames = r[1], h = r[2], w = r[3];
    const int64_t mn = r[4], mx = r[5];
    const bool cap = r[6];
    const int rh = r[7], rw = r[8], gt = r[9];
    const VitModel& m = family == "qwen3_vl" ? q3 : q2;
    const NativeParams p{.min_pixels = mn, .max_pixels = mx, .cap_pixels_per_frame = cap};
    const std::string what = family + " " + std::to_string(frames) + " frames of " + std::to_string(w) + "x" +
                             std::to_string(h) + " [" + std::to_string(mn) + ", " + std::to_string(mx) + "]" +
                             (cap ? " capped" : "");
    if (rh == 0) {
      EXPECT_THROW(native_video_size(m, frames, h, w, p), Error) << what;
      ++refused;
      continue;
    }
    const NativeSize s = native_video_size(m, frames, h, w, p);
    EXPECT_EQ(s, (NativeSize{rh, rw})) << what << ": " << s.width << "x" << s.height;
    if (family == "qwen3_vl" && !cap) {
      EXPECT_EQ(smart_resize_video(frames, h, w, 2, 32, mn, mx), (NativeSize{rh, rw})) << what;
    }
    ++checked;
    // The processor itself on small ones: the grid is (ceil(frames / 2), rh / P, rw / P).
    if (frames <= 5 && int64_t(h) * w <= 360 * 640 && int64_t(rh) * rw <= 640 * 640 && grids < 24) {
      const ImageU8 frame(w, h, 3, true);
      const ImageViewU8 fv(frame);
      const std::vector<ImageViewU8> v(size_t(frames), fv);
      const NativeInput in = prepare_native_video(m, v, 2.0, p, exec);
      EXPECT_EQ(in.grid, (NativeGrid{gt, rh / m.config().patch_px, rw / m.config().patch_px})) << what;
      ++grids;
    }
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(refused, 100);  // Qwen3-VL refuses a single frame; both refuse aspect ratios above 200
  EXPECT_GE(grids, 12);
  // Not a Qwen-VL tower; no frame.
  EXPECT_THROW(native_video_size(VitModel::load("random:vit-tiny"), 4, 100, 100, {}), Error);
  EXPECT_THROW(native_video_size(q3, 0, 100, 100, {}), Error);
  EXPECT_THROW(smart_resize_video(4, 100, 100, 2, 32, 100, 10), Error);
}

// Where the video limits come from: video_preprocessor_config.json, else preprocessor_config.json
// (transformers' fallback), else the video processor's defaults; a file that disagrees with the
// tower, or limits out of order, is one clear error.
TEST(NativeTowers, VideoLimitsFromTheVideoProcessorConfig) {
  const VitModel q2 = VitModel::load(model_path("qwen2_vl"));
  nlohmann::json pre2;
  std::ifstream(data("qwen2_vl/preprocessor_config.json")) >> pre2;
  EXPECT_EQ(q2.config().native.video_min_pixels, q2.config().native.min_pixels);
  EXPECT_EQ(q2.config().native.video_max_pixels, q2.config().native.max_pixels);
  EXPECT_FALSE(q2.config().native.video_limits_over_frames);
  const VitModel q3 = VitModel::load(data("qwen3_vl"));
  EXPECT_EQ(q3.config().native.video_min_pixels, 65536);  // the fixture's preprocessor_config.json
  EXPECT_EQ(q3.config().native.video_max_pixels, 16777216);
  EXPECT_TRUE(q3.config().native.video_limits_over_frames);
  EXPECT_EQ(q3.config().native.video_limits_source, "preprocessor_config.json");

  const std::string dir = test::temp_dir("native_video_limits");
  for (const char* f : {"model.safetensors", "config.json", "preprocessor_config.json"})
    fs::copy_file(data(std::string("qwen3_vl/") + f), dir + "/" + f, fs::copy_options::overwrite_existing);
  auto with_video_config = [&](const std::string& text) {
    std::ofstream(dir + "/video_preprocessor_config.json") << text;
    return dir;
  };
  // Qwen3-VL's released video_preprocessor_config.json: size over all frames.
  with_video_config(R"({"size": {"longest_edge": 25165824, "shortest_edge": 4096}, "patch_size": 16,
                        "temporal_patch_size": 2, "merge_size": 2, "min_pixels": 1})");
  {
    const VitModel m = VitModel::load(dir);
    EXPECT_EQ(m.config().native.video_min_pixels, 4096);  // Qwen3-VL's video processor reads size alone
    EXPECT_EQ(m.config().native.video_max_pixels, 25165824);
    EXPECT_EQ(m.config().native.video_limits_source, "video_preprocessor_config.json");
    EXPECT_EQ(m.config().native.min_pixels, 65536);  // images keep their own
    // 64 frames of 1080p: 64 · h · w within 25165824 pixels.
    const NativeSize s = native_video_size(m, 64, 1080, 1920, {});
    EXPECT_EQ(s, smart_resize_video(64, 1080, 1920, 2, 32, 4096, 25165824));
    EXPECT_LE(int64_t(64) * s.height * s.width, 25165824);
  }
  with_video_config("{}");  // neither: the class defaults
  EXPECT_EQ(VitModel::load(dir).config().native.video_max_pixels, 32 * 32 * 768);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"patch_size": 14})", "patch_size = 14"},
           {R"({"temporal_patch_size": 1})", "temporal_patch_size = 1"},
           {R"({"size": {"shortest_edge": 5000, "longest_edge": 10}})", "video pixel limits"},
           {R"({"size": {"shortest_edge": -1}})", "video pixel limits"},
           {R"({"size": {"longest_edge": "big"}})", "longest_edge"},
           {"[1, 2]", "video_preprocessor_config.json' is not a valid JSON object"}}) {
    SCOPED_TRACE(text);
    expect_one_line_error(with_video_config(text), says);
  }
  // Qwen2-VL: min_pixels / max_pixels override size, as Qwen2VLVideoProcessor's constructor does.
  const std::string d2 = test::temp_dir("native_video_limits2");
  fs::copy_file(data("qwen2_vl/model.safetensors"), d2 + "/model.safetensors", fs::copy_options::overwrite_existing);
  for (const char* f : {"config.json", "preprocessor_config.json"})
    fs::copy_file(data(std::string("qwen2_vl/") + f), d2 + "/" + f, fs::copy_options::overwrite_existing);
  std::ofstream(d2 + "/video_preprocessor_config.json")
      << R"({"size": {"shortest_edge": 3136, "longest_edge": 9999999}, "max_pixels": 200704})";
  const VitModel m2 = VitModel::load(d2 + "/model.safetensors");
  EXPECT_EQ(m2.config().native.video_min_pixels, 3136);
  EXPECT_EQ(m2.config().native.video_max_pixels, 200704);
  EXPECT_EQ(native_video_size(m2, 8, 1080, 1920, {}), smart_resize(1080, 1920, 28, 3136, 200704));
}
