// SigLIP 2 NaFlex against the float64 PyTorch reference of scripts/make_siglip2_fixtures.py: from
// raw pixels (PNG) through the processor's resize rule and PIL's bilinear, the position table
// resized to each image's grid, the tower with padding masks and the pooling head; the resize
// rule against the reference's sweep; hostile preprocessor configs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
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

std::string data(const std::string& f) { return test::source_dir() + "/tests/data/encoder/siglip2_naflex/" + f; }

const char* kImages[] = {"200x120", "97x211", "640x96", "40x40", "300x300", "33x500"};

}  // namespace

TEST(NaflexTower, ResizeRuleEqualsTheReference) {
  nlohmann::json j;
  std::ifstream(data("naflex_sizes.json")) >> j;
  int checked = 0;
  for (const auto& r : j.at("rows")) {
    const int h = r[0], w = r[1], p = r[2], n = r[3], rh = r[4], rw = r[5];
    const NativeSize s = naflex_size(h, w, p, n);
    EXPECT_EQ(s.height, rh) << h << "x" << w << " P " << p << " max " << n;
    EXPECT_EQ(s.width, rw) << h << "x" << w << " P " << p << " max " << n;
    EXPECT_LE(int64_t(s.height / p) * (s.width / p), n);
    ++checked;
  }
  EXPECT_GT(checked, 300);
  EXPECT_THROW(naflex_size(0, 5, 16, 256), Error);
  EXPECT_THROW(naflex_size(5, 5, 0, 256), Error);
  EXPECT_THROW(naflex_size(5, 5, 16, 0), Error);
}

TEST(NaflexTower, BilinearResizeEqualsPil) {
  const ImageU8 src = load_image(data("image_97x211.png"));
  for (const char* size : {"48x112", "160x320", "97x64", "30x211"}) {
    const ImageU8 want = load_image(data(std::string("resize_") + size + ".png"));
    const ImageU8 got = resize_bilinear_pil(src, want.width(), want.height());
    EXPECT_EQ(test::values_differing(got, want), 0) << size;
  }
  EXPECT_THROW(resize_bilinear_pil(src, 0, 4), Error);
}

TEST(NaflexTower, LoaderReadsTheConfiguration) {
  const VitModel m = VitModel::load(data("model.safetensors"));
  const VitConfig& c = m.config();
  EXPECT_EQ(c.naming, "hf_siglip2");
  EXPECT_TRUE(is_naflex(m));
  EXPECT_FALSE(is_native(m));
  EXPECT_EQ(c.native.max_num_patches, 24);
  EXPECT_EQ(c.patch_px, 16);
  EXPECT_EQ(c.grid, 4);
  EXPECT_EQ(c.pos_sampling, PositionSampling::bilinear_antialias);
  EXPECT_NEAR(c.input.mean[0], 0.48f, 1e-6);
  EXPECT_NEAR(c.input.std[2], 0.28f, 1e-6);
  // The directory loads as well, and the text tower's tensors are counted as ignored.
  const VitModel d = VitModel::load(data(""));
  EXPECT_TRUE(is_naflex(d));
  EXPECT_GT(d.tensors_ignored(), 0);
  // A SigLIP tower with a conv patch embedding is not NaFlex.
  EXPECT_FALSE(is_naflex(VitModel::load(test::source_dir() + "/tests/data/encoder/siglip/model.safetensors")));
}

TEST(NaflexTower, Fp32MatchesTheReferenceFromRawPixels) {
  Executor exec;
  const VitModel m = VitModel::load(data("model.safetensors"));
  const SafetensorsFile cases = SafetensorsFile::open(data("cases.safetensors"));
  // Every image in one call (the reference: one batch padded to max_num_patches, masked).
  std::vector<NaflexInput> ins;
  for (const char* size : kImages) ins.push_back(prepare_naflex(m, load_image(data(std::string("image_") + size + ".png"))));
  const std::vector<Encoding> all = encode_naflex(m, ins, {}, exec);
  ASSERT_EQ(all.size(), std::size(kImages));
  for (size_t i = 0; i < std::size(kImages); ++i) {
    const std::string name = std::string("image_") + kImages[i];
    SCOPED_TRACE(name);
    const Tensor sp = ref(cases, name + ".spatial");
    EXPECT_EQ(ins[i].grid, (NativeGrid{1, sp.data<int32_t>()[0], sp.data<int32_t>()[1]}));
    EXPECT_LE(rel_err(all[i].embeddings, ref(cases, name + ".hidden")), 1e-4);
    EXPECT_LE(rel_err(all[i].pooled, ref(cases, name + ".pooled")), 1e-4);
  }
  // Each alone, with its own max_num_patches (a grid larger than the table; one of 1 x 7).
  for (const auto& [size, n] : std::vector<std::pair<std::string, int>>{{"200x120", 64}, {"97x211", 64}, {"640x96", 7}}) {
    const std::string name = "image_" + size + ".m" + std::to_string(n);
    SCOPED_TRACE(name);
    const NaflexInput in = prepare_naflex(m, load_image(data("image_" + size + ".png")), n);
    const Tensor sp = ref(cases, name + ".spatial");
    EXPECT_EQ(in.grid, (NativeGrid{1, sp.data<int32_t>()[0], sp.data<int32_t>()[1]}));
    const std::vector<Encoding> e = encode_naflex(m, {&in, 1}, {}, exec);
    EXPECT_LE(rel_err(e[0].embeddings, ref(cases, name + ".hidden")), 1e-4);
    EXPECT_LE(rel_err(e[0].pooled, ref(cases, name + ".pooled")), 1e-4);
  }
}

TEST(NaflexTower, Bf16IsCloseToFp32) {
  Executor exec;
  const VitModel m = VitModel::load(data("model.safetensors"));
  const NaflexInput in = prepare_naflex(m, load_image(data("image_200x120.png")), 64);
  const std::vector<Encoding> fe = encode_naflex(m, {&in, 1}, {}, exec);
  const Encoding& f = fe[0];
  const std::vector<Encoding> be = encode_naflex(m, {&in, 1}, {.precision = Precision::bf16}, exec);
  const Encoding& b = be[0];
  EXPECT_GE(cosine_similarity(f.embeddings, b.embeddings), 0.999);
  EXPECT_GE(mean_row_cosine(f.embeddings, b.embeddings), 0.999);
  EXPECT_GE(cosine_similarity(f.pooled, b.pooled), 0.999);
}

TEST(NaflexTower, ProcessorAndEncodeRefuseWhatDoesNotFit) {
  Executor exec;
  const VitModel m = VitModel::load(data("model.safetensors"));
  const ImageU8 odd(30, 32, 3, true);
  EXPECT_THROW(naflex_input(m, odd), Error);  // 30 is not a multiple of 16
  const NaflexInput in = prepare_naflex(m, odd);
  EXPECT_LE(in.grid.patches(), 24);
  EXPECT_THROW(prepare_naflex(m, odd, -1), Error);
  NaflexInput bad{in.patches.clone(), in.positions.clone(), {1, in.grid.h + 1, in.grid.w}};
  EXPECT_THROW(encode_naflex(m, {&bad, 1}, {}, exec), Error);
  bad = {in.patches.clone(), Tensor(DType::f32, {1, 4}), in.grid};
  EXPECT_THROW(encode_naflex(m, {&bad, 1}, {}, exec), Error);
  EXPECT_THROW(encode_naflex(m, std::span<const NaflexInput>(), {}, exec), Error);
  // Other towers are not NaFlex.
  const VitModel vit = VitModel::load("random:vit-tiny");
  EXPECT_THROW(prepare_naflex(vit, odd), Error);
  EXPECT_THROW(encode_naflex(vit, {&in, 1}, {}, exec), Error);
}

TEST(NaflexTower, HostileConfigsGiveOneClearError) {
  const std::string dir = test::temp_dir("naflex_hostile");
  using J = nlohmann::json;
  struct Case {
    const char* name;
    std::function<void(J&, J&)> edit;
    const char* says;
  } cases[] = {
      {"max0", [](J&, J& p) { p["max_num_patches"] = 0; }, "max_num_patches = 0"},
      {"max_neg", [](J&, J& p) { p["max_num_patches"] = -4; }, "max_num_patches = -4"},
      {"max_huge", [](J&, J& p) { p["max_num_patches"] = 1e30; }, "max_num_patches"},
      {"max_str", [](J&, J& p) { p["max_num_patches"] = "many"; }, "max_num_patches"},
      {"max_frac", [](J&, J& p) { p["max_num_patches"] = 2.5; }, "max_num_patches"},
      {"pre_patch", [](J&, J& p) { p["patch_size"] = 14; }, "patch_size = 14"},
      {"pre_array", [](J&, J& p) { p = J::array({1, 2}); }, "preprocessor_config.json"},
      {"num_patches", [](J& c, J&) { c["vision_config"]["num_patches"] = 25; }, "num_patches = 25"},
      {"heads", [](J& c, J&) { c["vision_config"]["num_attention_heads"] = 3; }, "3 heads"},
      {"patch", [](J& c, J&) { c["vision_config"]["patch_size"] = 14; }, "patch size 14"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string d = dir + "/" + c.name;
    fs::create_directories(d);
    fs::copy_file(data("model.safetensors"), d + "/model.safetensors", fs::copy_options::overwrite_existing);
    J cfg, pre;
    std::ifstream(data("config.json")) >> cfg;
    std::ifstream(data("preprocessor_config.json")) >> pre;
    c.edit(cfg, pre);
    std::ofstream(d + "/config.json") << cfg.dump();
    std::ofstream(d + "/preprocessor_config.json") << pre.dump();
    try {
      VitModel::load(d + "/model.safetensors");
      FAIL() << "loaded " << c.name;
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(c.says), std::string::npos) << w;
      EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    }
  }
  // A truncated preprocessor_config.json and a truncated weight file: errors, never a crash.
  const std::string d = dir + "/trunc";
  fs::create_directories(d);
  fs::copy_file(data("model.safetensors"), d + "/model.safetensors", fs::copy_options::overwrite_existing);
  fs::copy_file(data("config.json"), d + "/config.json", fs::copy_options::overwrite_existing);
  std::ofstream(d + "/preprocessor_config.json") << "{\"max_num_patches\": 2";
  EXPECT_THROW(VitModel::load(d + "/model.safetensors"), Error);
  fs::copy_file(data("preprocessor_config.json"), d + "/preprocessor_config.json", fs::copy_options::overwrite_existing);
  fs::resize_file(d + "/model.safetensors", 5000);
  EXPECT_THROW(VitModel::load(d + "/model.safetensors"), Error);
}

// Windows foveation on NaFlex: a base view (naflex_size at the base tokens) and a full-resolution
// window on the fixation, in one call; the budget counts patches; the window's rows are its crop
// encoded alone.
TEST(NaflexTower, WindowsFoveationIsBudgetedAndWindowsAreTheirCrops) {
  Executor exec;
  const VitModel m = VitModel::load(data("model.safetensors"));
  const ImageU8 img = load_image(data("image_300x300.png"));
  Query q;
  q.fixations.push_back({.x_px = 220, .y_px = 80});
  const NativeWindowPlan plan = plan_native_windows(m, img.width(), img.height(), q, nullptr, {.budget_tokens = 40});
  ASSERT_EQ(plan.windows.size(), 2u);
  EXPECT_LE(plan.tokens(1), 40);
  EXPECT_EQ(plan.windows[0].kind, TokenWindow::Kind::base);
  const auto& box = plan.windows[1].box;
  EXPECT_TRUE(220 >= box[0] && 220 < box[2] && 80 >= box[1] && 80 < box[3]);
  EXPECT_EQ((box[2] - box[0]) % 16, 0);
  const std::vector<NaflexInput> ins = naflex_window_inputs(m, img, plan);
  const std::vector<Encoding> e = encode_naflex(m, ins, {}, exec);
  ASSERT_EQ(e.size(), 2u);
  int64_t rows = 0;
  for (const Encoding& x : e) rows += x.embeddings.dim(0);
  EXPECT_EQ(rows, plan.tokens(1));
  // The window alone, cut by hand.
  ImageU8 crop(box[2] - box[0], box[3] - box[1], 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < crop.height(); ++y)
      for (int x = 0; x < crop.width(); ++x) crop.at(c, y, x) = img.at(c, box[1] + y, box[0] + x);
  const NaflexInput alone = naflex_input(m, crop);
  EXPECT_LE(rel_err(e[1].embeddings, encode_naflex(m, {&alone, 1}, {}, exec)[0].embeddings), 1e-5);
  EXPECT_THROW(naflex_window_inputs(VitModel::load("random:vit-tiny"), img, plan), Error);
}
