// `fovea video --model` with a native-resolution tower (Qwen2.5-VL, Qwen3-VL fixtures of
// scripts/make_qwen_fixtures.py): the sampled frames in chunks, each chunk one video through the
// family's video processor, its rows, video_grid_thw and mrope_positions as the library gives
// them for the same frames; bad arguments give one error line and no file.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "fovea/encoder.hpp"
#include "fovea/native.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/video.hpp"
#include "test_util.hpp"

using namespace fovea;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& f) { return test::source_dir() + "/tests/data/encoder/" + f; }

// Frames [first, first + n) of the clip as the CLI decodes them.
std::vector<ImageU8> decoded(const std::string& clip, int first, int n) {
  VideoReader r = VideoReader::open(clip);
  std::vector<ImageU8> out;
  VideoFrame f;
  for (int i = 0; r.read(f) && i < first + n; ++i)
    if (i >= first) out.push_back(f.image.clone());
  return out;
}

Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1) {
  Tensor out(t.dtype(), {r1 - r0, t.dim(1)});
  const size_t row = t.size_bytes() / size_t(t.dim(0));
  std::copy_n(t.bytes() + size_t(r0) * row, size_t(r1 - r0) * row, out.bytes());
  return out;
}

double max_rel(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return 1e9;
  double err = 0, mx = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    err = std::max(err, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    mx = std::max(mx, double(std::fabs(b.data<float>()[i])));
  }
  return err / mx;
}

}  // namespace

TEST(NativeVideo, CliWritesChunksAsTheLibraryEncodesThem) {
  const std::string dir = test::temp_dir("native_video_cli");
  const std::string clip = dir + "/clip.y4m";
  test::write_y4m(clip, 224, 168, 10);  // 25 fps
  Executor exec;
  for (const std::string kind : {"qwen2_5_vl", "qwen3_vl"}) {
    SCOPED_TRACE(kind);
    const std::string model = fixture(kind);
    const std::string out = dir + "/" + kind + ".safetensors";
    const test::RunResult r = test::run_cli({"video", clip, "--model", model, "--chunk-frames", "4", "--max-frames", "9",
                                             "-o", out, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("foveation"), "native_video");
    EXPECT_EQ(j.at("frames"), 9);
    ASSERT_EQ(j.at("chunks").size(), 3u);  // 4 + 4 + 1 frames (the last one repeated to a pair)
    EXPECT_EQ(j.at("chunks")[2].at("frames"), 1);
    EXPECT_EQ(j.at("chunks")[2].at("video_grid_thw")[0], 1);
    const SafetensorsFile f = SafetensorsFile::open(out);
    const Tensor projected = f.load(*f.find("projected")), mrope = f.load(*f.find("mrope_positions"));
    const Tensor grid = f.load(*f.find("video_grid_thw")), rows = f.load(*f.find("chunk_rows"));
    ASSERT_EQ(grid.shape(), (std::vector<int64_t>{3, 3}));
    ASSERT_EQ(rows.dim(0), 4);
    EXPECT_EQ(rows.data<int64_t>()[3], projected.dim(0));
    EXPECT_EQ(f.metadata().at("model_family"), kind);
    EXPECT_EQ(f.find("deepstack_0") != nullptr, kind == "qwen3_vl");
    // Chunk 1 (frames 4..7) through the library: the same grid, rows and M-RoPE ids.
    const VitModel m = VitModel::load(model);
    const std::vector<ImageU8> frames = decoded(clip, 4, 4);
    const std::vector<ImageViewU8> views(frames.begin(), frames.end());
    const NativeInput in = prepare_native_video(m, views, 25.0, {}, exec);
    const NativeEncoding e = encode_native(m, {&in, 1}, {}, exec);
    EXPECT_EQ(grid.data<int32_t>()[3], in.grid.t);
    EXPECT_EQ(grid.data<int32_t>()[4], in.grid.h);
    EXPECT_EQ(grid.data<int32_t>()[5], in.grid.w);
    const int64_t r0 = rows.data<int64_t>()[1], r1 = rows.data<int64_t>()[2];
    EXPECT_LE(max_rel(rows_of(projected, r0, r1), e.projected), 1e-5);
    const Tensor ids = rows_of(mrope, r0, r1);
    ASSERT_EQ(ids.shape(), e.mrope_positions.shape());
    EXPECT_EQ(std::memcmp(ids.bytes(), e.mrope_positions.bytes(), ids.size_bytes()), 0);
  }
  // Qwen3-VL with qwen-vl-utils' per-frame cap: the whole clip (--chunk-frames 0) at the size
  // native_video_size gives with the cap.
  {
    const std::string out = dir + "/capped.safetensors";
    const test::RunResult r = test::run_cli({"video", clip, "--model", fixture("qwen3_vl"), "--chunk-frames", "0",
                                             "--cap-pixels-per-frame", "-o", out, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.at("chunks").size(), 1u);
    const VitModel m = VitModel::load(fixture("qwen3_vl"));
    const NativeSize s = native_video_size(m, 10, 168, 224, {.cap_pixels_per_frame = true});
    EXPECT_EQ(j.at("chunks")[0].at("resized"), (nlohmann::json{s.width, s.height}));
    EXPECT_EQ(j.at("chunks")[0].at("video_grid_thw"), (nlohmann::json{5, s.height / 16, s.width / 16}));
  }
  // `fovea model` says how the video is resized and where the limits come from.
  const test::RunResult desc = test::run_cli({"model", fixture("qwen3_vl"), "--json"});
  ASSERT_EQ(desc.exit_code, 0) << desc.err;
  const nlohmann::json dj = nlohmann::json::parse(desc.out);
  EXPECT_EQ(dj.at("native").at("video").at("limits"), "over all frames of a video");
  EXPECT_EQ(dj.at("native").at("video").at("source"), "preprocessor_config.json");
}

TEST(NativeVideo, BadArgumentsGiveOneLineAndNoFile) {
  const std::string dir = test::temp_dir("native_video_bad");
  const std::string clip = dir + "/clip.y4m";
  test::write_y4m(clip, 112, 84, 4);
  const std::string out = dir + "/bad.safetensors";
  const std::string q25 = fixture("qwen2_5_vl");
  for (const auto& [args, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"video", clip, "--model", q25, "--chunk-frames", "3", "-o", out}, "multiple of it"},
           {{"video", clip, "--model", q25, "--chunk-frames", "-2", "-o", out}, "--chunk-frames"},
           {{"video", clip, "--model", q25, "--fixation", "10,10", "-o", out}, "--fixation"},
           {{"video", clip, "--model", q25, "--check", "-o", out}, "--check"},
           {{"video", clip, "--model", q25, "--cap-pixels-per-frame", "-o", out}, "Qwen3-VL"},
           {{"video", clip, "--model", fixture("hf_vit"), "--chunk-frames", "4", "-o", out}, "native-resolution"},
           {{"video", clip, "--chunk-frames", "4", "-o", out}, "native-resolution"}}) {
    SCOPED_TRACE(args[5]);
    const test::RunResult r = test::run_cli(args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_EQ(r.err.rfind("fovea: error:", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
}
