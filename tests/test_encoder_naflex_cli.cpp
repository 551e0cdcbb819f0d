// `fovea encode` on a SigLIP 2 NaFlex checkpoint: --uniform runs the processor's encode
// (encode_naflex after prepare_naflex), the default runs the NaFlex windows foveation; the file's
// rows equal the library's and the float64 PyTorch reference's, the metadata names the path and
// the grid; bad options give one error line.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "fovea/embeddings.hpp"
#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/image.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"
#include "reference_compare.hpp"
#include "test_util.hpp"

using namespace fovea;
using test::rel_err;

namespace {

std::string data(const std::string& f) { return test::source_dir() + "/tests/data/encoder/siglip2_naflex/" + f; }

// Rows [r0, r1) of a [N, D] f32 tensor.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1) {
  Tensor out(DType::f32, {r1 - r0, t.dim(1)});
  std::copy_n(t.data<float>() + r0 * t.dim(1), out.numel(), out.data<float>());
  return out;
}

void expect_one_line_error(const test::RunResult& r, const std::string& fragment) {
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << r.err;
}

}  // namespace

TEST(NaflexCli, UniformRowsEqualTheLibraryAndTheReference) {
  const std::string dir = test::temp_dir("naflex_cli_uniform");
  const VitModel m = VitModel::load(data("model.safetensors"));
  const SafetensorsFile cases = SafetensorsFile::open(data("cases.safetensors"));
  Executor exec;
  // The model's max_num_patches (24), then overridden (--max-num-patches, and --budget, which says
  // the same with --uniform).
  struct Case {
    std::string size;
    std::vector<std::string> flags;
    int max_patches;
    std::string ref;
  };
  const std::vector<Case> cases_run = {
      {"200x120", {}, 0, "image_200x120"},
      {"97x211", {}, 0, "image_97x211"},
      {"200x120", {"--max-num-patches", "64"}, 64, "image_200x120.m64"},
      {"640x96", {"--budget", "7"}, 7, "image_640x96.m7"},
  };
  for (const Case& c : cases_run) {
    SCOPED_TRACE(c.ref);
    const std::string out = dir + "/" + c.ref + ".safetensors";
    std::vector<std::string> args = {"encode", data("image_" + c.size + ".png"), "--model", data("model.safetensors"),
                                     "--uniform", "-o", out};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const auto r = test::run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const EmbeddingsFile f = load_embeddings(out);

    const NaflexInput in = prepare_naflex(m, load_image(data("image_" + c.size + ".png")), c.max_patches);
    const std::vector<Encoding> e = encode_naflex(m, {&in, 1}, {}, exec);
    EXPECT_LE(rel_err(f.embeddings, e[0].embeddings), 1e-6);
    EXPECT_LE(rel_err(f.pooled, e[0].pooled), 1e-6);
    EXPECT_LE(rel_err(f.embeddings, cases.load(*cases.find(c.ref + ".hidden"))), 1e-4);
    EXPECT_LE(rel_err(f.pooled, cases.load(*cases.find(c.ref + ".pooled"))), 1e-4);

    const Tensor sp = cases.load(*cases.find(c.ref + ".spatial"));
    const std::string grid = std::to_string(sp.data<int32_t>()[0]) + "," + std::to_string(sp.data<int32_t>()[1]);
    EXPECT_EQ(f.metadata.at("foveation"), "naflex");
    EXPECT_EQ(f.metadata.at("grid"), grid);
    EXPECT_EQ(f.metadata.at("max_num_patches"), std::to_string(c.max_patches ? c.max_patches : 24));
    EXPECT_NE(f.metadata.at("encode_path").find("encode_naflex"), std::string::npos);
    const Tensor& shapes = f.extra.at("spatial_shapes");
    ASSERT_EQ(shapes.shape(), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(shapes.data<int32_t>()[0], in.grid.h);
    EXPECT_EQ(shapes.data<int32_t>()[1], in.grid.w);
    // Positions in the original image's pixels: every centre inside it.
    for (int64_t i = 0; i < f.tokens(); ++i) {
      const float* p = f.positions.data<float>() + i * 4;
      EXPECT_GT(p[0], 0);
      EXPECT_GT(p[1], 0);
      EXPECT_LT(p[0], float(load_image(data("image_" + c.size + ".png")).width()));
    }
  }
}

TEST(NaflexCli, WindowsRowsEqualTheLibrary) {
  const std::string dir = test::temp_dir("naflex_cli_windows");
  const std::string image = data("image_640x96.png"), out = dir + "/w.safetensors";
  const auto r = test::run_cli({"encode", image, "--model", data("model.safetensors"), "--fixation", "500,40", "--budget",
                                "40", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("foveation"), "naflex_windows");
  EXPECT_LE(j.at("tokens").get<int64_t>(), 40);
  const EmbeddingsFile f = load_embeddings(out);
  EXPECT_EQ(f.metadata.at("foveation"), "naflex_windows");
  EXPECT_EQ(f.metadata.at("budget_tokens"), "40");

  const VitModel m = VitModel::load(data("model.safetensors"));
  const ImageU8 img = load_image(image);
  Query q;
  q.fixations.push_back({.x_px = 500, .y_px = 40});
  const NativeWindowPlan plan = plan_native_windows(m, img.width(), img.height(), q, nullptr, {.budget_tokens = 40});
  ASSERT_GE(plan.windows.size(), 2u);  // the base view and a window on the fixation
  const std::vector<NaflexInput> ins = naflex_window_inputs(m, img, plan);
  Executor exec;
  const std::vector<Encoding> e = encode_naflex(m, ins, {}, exec);
  const Tensor& rows = f.extra.at("image_rows");
  ASSERT_EQ(rows.numel(), int64_t(e.size()) + 1);
  ASSERT_EQ(f.extra.at("window_boxes").dim(0), int64_t(e.size()));
  for (size_t i = 0; i < e.size(); ++i) {
    SCOPED_TRACE(i);
    const int64_t r0 = rows.data<int64_t>()[i], r1 = rows.data<int64_t>()[i + 1];
    EXPECT_LE(rel_err(rows_of(f.embeddings, r0, r1), e[i].embeddings), 1e-6);
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(f.extra.at("window_boxes").data<int32_t>()[i * 4 + size_t(k)], plan.windows[i].box[size_t(k)]);
    EXPECT_EQ(f.extra.at("spatial_shapes").data<int32_t>()[i * 2], ins[i].grid.h);
    EXPECT_EQ(f.extra.at("spatial_shapes").data<int32_t>()[i * 2 + 1], ins[i].grid.w);
  }
  EXPECT_EQ(f.metadata.at("grid"), std::to_string(ins[0].grid.h) + "," + std::to_string(ins[0].grid.w));
  // A full-resolution window's tokens sit at full resolution around the fixation (level 0, side P).
  const int64_t w0 = rows.data<int64_t>()[1];
  EXPECT_EQ(f.levels.data<int32_t>()[w0], 0);
  EXPECT_FLOAT_EQ(f.positions.data<float>()[w0 * 4 + 2], float(m.config().patch_px));
}

TEST(NaflexCli, BadOptionsGiveOneErrorLine) {
  const std::string dir = test::temp_dir("naflex_cli_bad");
  const std::string image = data("image_200x120.png"), model = data("model.safetensors"), out = dir + "/o.safetensors";
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"encode", image, "--model", model, "-o", out};
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_cli(args);
  };
  expect_one_line_error(run({"--uniform", "--max-num-patches", "0"}), "--max-num-patches");
  expect_one_line_error(run({"--uniform", "--max-num-patches", "abc"}), "--max-num-patches");
  expect_one_line_error(run({"--uniform", "--max-num-patches", "2000000"}), "--max-num-patches");
  expect_one_line_error(run({"--max-num-patches", "16"}), "--uniform");
  expect_one_line_error(run({"--uniform", "--max-num-patches", "16", "--budget", "16"}), "give one");
  expect_one_line_error(run({"--uniform", "--budget", "2000000"}), "1..1048576");
  expect_one_line_error(run({"--budget", "2"}), "at least 4 patches");
  expect_one_line_error(run({"--attention", "hierarchical"}), "NaFlex");
  expect_one_line_error(run({"--check-fp32"}), "NaFlex");
  expect_one_line_error(run({"--foveation", "mixed"}), "--uniform");
  expect_one_line_error(run({"--uniform", "--mean", "0.5,0.5,0.5"}), "--mean");
  // Not a NaFlex checkpoint: a SigLIP (1) tower.
  const std::string siglip = test::source_dir() + "/tests/data/encoder/siglip/model.safetensors";
  expect_one_line_error(test::run_cli({"encode", image, "--model", siglip, "--uniform", "--max-num-patches", "16"}),
                        "NaFlex");
  EXPECT_FALSE(std::filesystem::exists(out));
}
