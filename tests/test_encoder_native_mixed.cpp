// The mixed foveation of the native-resolution towers (Qwen2-VL, Qwen2.5-VL, Qwen3-VL; for
// experiment): the quadtree's leaves are merge units of one mip level, the budget counts them,
// and a layout at one level is the native encode of that mip, row for row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/tokenize.hpp"
#include "reference_compare.hpp"
#include "test_util.hpp"

using namespace fovea;
using test::rel_err;
namespace fs = std::filesystem;

namespace {

std::string data(const std::string& f) { return test::source_dir() + "/tests/data/encoder/" + f; }

std::string model_path(const std::string& kind) {
  return kind == "qwen2_vl" ? data("qwen2_vl/model.safetensors") : data(kind);
}

TokenizeParams mixed_params(const VitModel& m, int budget) {
  TokenizeParams tp;
  tp.patch_px = native_mixed_tile_px(m);
  tp.alloc.budget_tokens = budget;
  tp.extract.norm = normalization(m.config().input);
  return tp;
}

void expect_same_i32(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), size_t(a.numel()) * 4), 0) << what;
}

// The mixed encode of a one-level layout against encode_native of `mip` (the same pixels).
void expect_native(const VitModel& m, const NativeMixedInput& in, const ImageViewU8& mip, Executor& exec) {
  const NativeEncoding e = encode_native_mixed(m, in, {}, exec);
  const NativeInput native = native_input(m, {&mip, 1});
  const NativeEncoding r = encode_native(m, {&native, 1}, {}, exec);
  EXPECT_LE(rel_err(e.projected, r.projected), 1e-4);
  EXPECT_LE(rel_err(e.embeddings, r.embeddings), 1e-4);
  ASSERT_EQ(e.deepstack.size(), r.deepstack.size());
  for (size_t k = 0; k < e.deepstack.size(); ++k) EXPECT_LE(rel_err(e.deepstack[k], r.deepstack[k]), 1e-4) << k;
  expect_same_i32(e.mrope_positions, r.mrope_positions, "mrope");
  EXPECT_EQ(e.grid_thw.shape(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(e.image_rows, (std::vector<int64_t>{0, e.projected.dim(0)}));
}

}  // namespace

// Every merge unit at level 0 (a budget of every tile): the native encode of the image, rows in the
// processor's order, for the three families (rotary; window attention; learned table and DeepStack).
TEST(NativeMixed, LevelZeroLayoutIsTheNativeEncode) {
  Executor exec;
  for (const std::string kind : {"qwen2_vl", "qwen2_5_vl", "qwen3_vl"}) {
    SCOPED_TRACE(kind);
    const VitModel m = VitModel::load(model_path(kind));
    const int tile = native_mixed_tile_px(m);
    for (const char* name : {"image_448x448", kind == "qwen3_vl" ? "image_640x416" : "image_644x420"}) {
      SCOPED_TRACE(name);
      const ImageU8 img = load_image(data(std::string("qwen_images/") + name + ".png"));
      ASSERT_EQ(img.width() % tile, 0);
      const int tiles = (img.width() / tile) * (img.height() / tile);
      const Tokenization t = tokenize(ImageViewU8(img), {}, mixed_params(m, tiles), exec);
      const NativeMixedInput in = native_mixed_input(m, t.batch, img.width(), img.height());
      ASSERT_EQ(in.merged(), tiles);
      EXPECT_EQ(in.unit_level, 0);
      for (const Token& u : in.units) EXPECT_EQ(u.level, 0);
      expect_native(m, in, ImageViewU8(img), exec);
    }
  }
}

// Every merge unit at level 1: the native encode of the pyramid's level-1 image (positions in its
// patch units, windows on its grid, the table sampled over its grid).
TEST(NativeMixed, UniformLevelOneLayoutIsTheNativeEncodeOfMipOne) {
  Executor exec;
  for (const std::string kind : {"qwen2_vl", "qwen2_5_vl", "qwen3_vl"}) {
    SCOPED_TRACE(kind);
    const VitModel m = VitModel::load(model_path(kind));
    const int tile = native_mixed_tile_px(m);
    const ImageU8 img = load_image(data("qwen_images/image_448x448.png"));
    TokenizeParams tp = mixed_params(m, 0);
    tp.alloc.max_level = 1;
    tp.alloc.budget_tokens = (img.width() / tile / 2) * (img.height() / tile / 2);  // the coarsest tiling: no split
    const Tokenization t = tokenize(ImageViewU8(img), {}, tp, exec);
    const NativeMixedInput in = native_mixed_input(m, t.batch, img.width(), img.height());
    EXPECT_EQ(in.unit_level, 1);
    for (const Token& u : in.units) EXPECT_EQ(u.level, 1);
    const ImageViewU8 mip1 = t.pyramid.view(1);
    ASSERT_EQ(mip1.width(), img.width() / 2);
    expect_native(m, in, mip1, exec);
  }
}

// A foveated layout: the budget counts merge units (merged tokens, the projected rows); every
// unit's merge² patches are siblings of one level, cut from its mip in the merger's order and
// placed at their centres; the layout tiles the image; the M-RoPE ids are distinct.
TEST(NativeMixed, MergeUnitsAreSiblingsOfOneLevelAndTheBudgetCountsThem) {
  Executor exec;
  const VitModel m = VitModel::load(model_path("qwen2_5_vl"));
  const VitConfig& c = m.config();
  const int P = c.patch_px, mg = c.native.merge, tile = native_mixed_tile_px(m), T = c.native.temporal_patch;
  ASSERT_EQ(tile, 28);
  const ImageU8 img = load_image(data("qwen_images/image_644x420.png"));
  Query q;
  q.fixations.push_back({.x_px = 500, .y_px = 100});
  for (const int budget : {40, 97, 200}) {
    SCOPED_TRACE(budget);
    const Tokenization t = tokenize(ImageViewU8(img), q, mixed_params(m, budget), exec);
    EXPECT_TRUE(check_tiling(t.allocation).exact());
    const NativeMixedInput in = native_mixed_input(m, t.batch, img.width(), img.height());
    EXPECT_LE(in.merged(), budget);
    EXPECT_GE(in.merged(), budget - 2);
    std::set<int> levels;
    for (const Token& u : in.units) levels.insert(u.level);
    EXPECT_GE(levels.size(), 2u);  // mixed
    EXPECT_EQ(in.unit_level, *levels.begin());
    const Normalization norm = normalization(c.input);
    const int64_t K = int64_t(3) * T * P * P;
    ASSERT_EQ(in.patches.dim(0), in.merged() * mg * mg);
    for (int64_t u = 0; u < in.merged(); ++u) {
      const Token& n = in.units[size_t(u)];
      const ImageViewU8 mip = t.pyramid.view(n.level);
      const double s = std::ldexp(1.0, n.level - in.unit_level);
      for (int k = 0; k < mg * mg; ++k) {
        const int my = k / mg, mx = k % mg;
        const int64_t i = u * mg * mg + k;
        // Its position: the centre of patch (y·merge + my, x·merge + mx) of mip ℓ, in patch units of mip ℓ₀.
        EXPECT_EQ(in.positions.data<float>()[i * 2], float((n.y * mg + my + 0.5) * s - 0.5));
        EXPECT_EQ(in.positions.data<float>()[i * 2 + 1], float((n.x * mg + mx + 0.5) * s - 0.5));
        // Its pixels: that patch of mip ℓ (edge-clamped), every temporal frame the same.
        for (int ch = 0; ch < 3; ch += 2)
          for (int f = 0; f < T; ++f)
            for (int y = 0; y < P; y += 5)
              for (int x = 0; x < P; x += 3) {
                const int py = std::min(mip.height() - 1, (n.y * mg + my) * P + y);
                const int px = std::min(mip.width() - 1, (n.x * mg + mx) * P + x);
                const float want = (mip.at(ch, py, px) / 255.0f - norm.mean[ch]) / norm.std[ch];
                const float got = in.patches.data<float>()[i * K + ((int64_t(ch) * T + f) * P + y) * P + x];
                ASSERT_NEAR(got, want, 1e-5f) << "unit " << u << " patch " << k;
              }
      }
    }
    const NativeEncoding e = encode_native_mixed(m, in, {}, exec);
    EXPECT_EQ(e.projected.dim(0), in.merged());
    EXPECT_EQ(e.embeddings.dim(0), in.merged() * mg * mg);
    std::set<std::array<int32_t, 3>> ids;
    for (int64_t u = 0; u < in.merged(); ++u) {
      const int32_t* p = e.mrope_positions.data<int32_t>() + u * 3;
      ids.insert({p[0], p[1], p[2]});
      // The id's cell lies in the unit's box (merged-token units of mip ℓ₀).
      const double cell = double(tile) * std::ldexp(1.0, in.unit_level);
      const auto& b = in.boxes[size_t(u)];
      EXPECT_TRUE(p[1] * cell >= b[1] && p[1] * cell < b[3] && p[2] * cell >= b[0] && p[2] * cell < b[2]) << u;
    }
    EXPECT_EQ(int64_t(ids.size()), in.merged());
    const NativeEncoding bf = encode_native_mixed(m, in, {.precision = Precision::bf16}, exec);
    EXPECT_GE(mean_row_cosine(e.projected, bf.projected), 0.99);
  }
}

TEST(NativeMixed, BadCombinationsAreRefused) {
  Executor exec;
  const VitModel m = VitModel::load(model_path("qwen2_vl"));
  const ImageU8 img = load_image(data("qwen_images/image_448x448.png"));
  auto expect_error = [](auto&& f, const std::string& fragment) {
    try {
      f();
      ADD_FAILURE() << "no error; wanted: " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  TokenizeParams tp = mixed_params(m, 64);
  tp.patch_px = 14;  // a patch, not a merge unit
  const Tokenization wrong_patch = tokenize(ImageViewU8(img), {}, tp, exec);
  expect_error([&] { native_mixed_input(m, wrong_patch.batch, 448, 448); }, "tokenize with patch_px 28");
  tp = mixed_params(m, 64);
  tp.extract.norm = Normalization{};  // CLIP's, not the model's
  const Tokenization wrong_norm = tokenize(ImageViewU8(img), {}, tp, exec);
  if (normalization(m.config().input).mean != Normalization{}.mean)
    expect_error([&] { native_mixed_input(m, wrong_norm.batch, 448, 448); }, "not normalised with the model's");
  tp = mixed_params(m, 64);
  tp.foveation = Foveation::windows;
  tp.windows.grid = 4;
  const Tokenization windows = tokenize(ImageViewU8(img), {}, tp, exec);
  expect_error([&] { native_mixed_input(m, windows.batch, 448, 448); }, "windows token batch");
  const Tokenization ok = tokenize(ImageViewU8(img), {}, mixed_params(m, 64), exec);
  expect_error([&] { native_mixed_input(m, ok.batch, 224, 224); }, "not a quadtree node");
  NativeMixedInput in = native_mixed_input(m, ok.batch, 448, 448);
  in.positions = Tensor(DType::f32, {3, 2});
  expect_error([&] { encode_native_mixed(m, in, {}, exec); }, "native_mixed_input");
  VitConfig vc;
  vc.hidden = 32, vc.heads = 2, vc.mlp = 64, vc.layers = 1, vc.grid = 4;
  const VitModel vit = VitModel::random(vc, 5, "vit");
  expect_error([&] { native_mixed_tile_px(vit); }, "not a Qwen-VL tower");
}

// The CLI: --foveation mixed writes the projected rows, their M-RoPE ids, each unit's level and
// box; --uniform with it is one error line.
TEST(NativeMixed, Cli) {
  const std::string dir = test::temp_dir("native_mixed_cli");
  const std::string img = data("qwen_images/image_644x420.png");
  auto r = test::run_cli({"encode", img, "--model", model_path("qwen2_5_vl"), "--foveation", "mixed", "--fixation",
                          "500,100", "--budget", "120", "-o", dir + "/m.safetensors", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("foveation"), "native_mixed");
  EXPECT_EQ(j.at("experimental"), true);
  const int64_t M = j.at("merged_tokens").get<int64_t>();
  EXPECT_LE(M, 120);
  EXPECT_GE(M, 118);
  {
    const SafetensorsFile f = SafetensorsFile::open(dir + "/m.safetensors");
    EXPECT_EQ(f.find("projected")->shape[0], M);
    EXPECT_EQ(f.find("mrope_positions")->shape, (std::vector<int64_t>{M, 3}));
    EXPECT_EQ(f.find("levels")->shape, (std::vector<int64_t>{M}));
    EXPECT_EQ(f.find("boxes")->shape, (std::vector<int64_t>{M, 4}));
    EXPECT_EQ(f.find("image_grid_thw"), nullptr);
    EXPECT_EQ(f.metadata().at("foveation"), "native_mixed");
  }
  r = test::run_cli({"encode", img, "--model", model_path("qwen2_vl"), "--foveation", "mixed", "--uniform", "-o",
                     dir + "/b.safetensors"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("fovea: error:", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/b.safetensors"));
  r = test::run_cli({"encode", img, "--model", model_path("qwen2_vl"), "--foveation", "mixed", "--budget", "1", "-o",
                     dir + "/b.safetensors"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/b.safetensors"));
}
