// The contact sheet of a video run (fovea::VideoSheet, viz.hpp) and `fovea video --overlay`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fovea/image.hpp"
#include "fovea/viz.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

ImageU8 flat_frame(int w, int h, uint8_t v) {
  ImageU8 img(w, h, 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) img.at(c, y, x) = v;
  return img;
}

// Two tokens side by side on a 64×32 frame: [0, 32) and [32, 64), level 1 and 0.
TokenBatch two_tokens() {
  TokenBatch b;
  b.boxes = {{0, 0, 32, 32}, {32, 0, 64, 32}};
  b.levels = Tensor(DType::i32, {2});
  b.levels.data<int32_t>()[0] = 1, b.levels.data<int32_t>()[1] = 0;
  return b;
}

TEST(VideoSheet, KeepsFewFramesEvenlySpacedWhateverTheLength) {
  Executor exec({.threads = 1});
  VideoSheet sheet(4, 64);
  const TokenBatch b = two_tokens();
  for (int64_t n = 0; n < 1000; ++n) {
    if (sheet.wants(n)) sheet.add_frame(n, flat_frame(64, 32, 100), /*index=*/n * 2, n / 25.0, exec);
    sheet.add_tokens(n, b, {0, 1}, n == 0);
    ASSERT_LE(sheet.kept(), 8) << n;  // 2 · cells at most, at any time
  }
  const std::vector<int64_t> shown = sheet.shown_frames();
  ASSERT_EQ(shown.size(), 4u);
  EXPECT_EQ(shown.front(), 0);
  // Kept frames are multiples of a power-of-two stride: 1000 frames end at stride 256, frames
  // 0, 256, 512, 768 (the index given is 2·n).
  for (size_t i = 1; i < shown.size(); ++i) EXPECT_EQ(shown[i] - shown[i - 1], 2 * 256) << i;
  const ImageU8 img = sheet.render();
  EXPECT_EQ(img.channels(), 3);
  EXPECT_GE(img.width(), 4 * 64);  // four cells in a row
  EXPECT_GT(img.height(), 32);     // a thumbnail and its caption
}

TEST(VideoSheet, RecomputedTokensAreTintedOthersStayGray) {
  Executor exec({.threads = 1});
  VideoSheet sheet(1, 64);  // 64×32 frame at scale 1
  ASSERT_TRUE(sheet.wants(0));
  sheet.add_frame(0, flat_frame(64, 32, 120), 7, 0.28, exec);
  EXPECT_TRUE(sheet.shown_frames().empty()) << "no tokens yet: nothing to show";
  sheet.add_tokens(0, two_tokens(), {0, 1}, false);
  ASSERT_EQ(sheet.shown_frames(), std::vector<int64_t>{7});
  const ImageU8 img = sheet.render();
  // Cells start 4 px in; the tokens' interiors are at (4 + 16, 4 + 16) and (4 + 48, 4 + 16).
  const int y = 4 + 16;
  const int xa = 4 + 16, xb = 4 + 48;
  EXPECT_EQ(img.at(0, y, xa), img.at(1, y, xa));  // gray: not recomputed
  EXPECT_EQ(img.at(1, y, xa), img.at(2, y, xa));
  EXPECT_GT(int(img.at(0, y, xb)), int(img.at(1, y, xb)) + 60);  // magenta: recomputed
  EXPECT_GT(int(img.at(2, y, xb)), int(img.at(1, y, xb)) + 60);
  // The borders are drawn in the level's colour.
  uint8_t l0[3];
  level_colour(0, l0);
  EXPECT_EQ(img.at(0, 4, 4 + 40), l0[0]);
  EXPECT_EQ(img.at(1, 4, 4 + 40), l0[1]);
}

TEST(VideoSheet, TallAndTinyFramesFitTheCell) {
  Executor exec({.threads = 1});
  VideoSheet sheet(2, 64);
  sheet.add_frame(0, flat_frame(3, 4096, 50), 0, 0, exec);  // fits in 64×64: 1×64 (at least 1 px wide)
  sheet.add_frame(1, flat_frame(1, 1, 50), 1, 0.04, exec);
  TokenBatch b;
  b.boxes = {{0, 0, 3, 4096}};
  b.levels = Tensor(DType::i32, {1});
  b.levels.data<int32_t>()[0] = 3;
  sheet.add_tokens(0, b, {1}, true);
  TokenBatch one;
  one.boxes = {{0, 0, 1, 1}};
  one.levels = Tensor(DType::i32, {1});
  one.levels.data<int32_t>()[0] = 0;
  sheet.add_tokens(1, one, {}, false);
  const ImageU8 img = sheet.render();
  EXPECT_LE(img.height(), 64 + 40);
  EXPECT_EQ(sheet.shown_frames(), (std::vector<int64_t>{0, 1}));
}

TEST(VideoSheet, CliOverlayWritesASheetOfTheRun) {
  const std::string dir = test::temp_dir("video_sheet");
  const std::string out = dir + "/v.safetensors", png = dir + "/sheet.png";
  const auto r = test::run_cli({"video", test::source_dir() + "/tests/data/video/small.mp4", "--budget", "12",
                                "--fixation", "30,30", "-o", out, "--overlay", png, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["overlay"]["path"], png);
  const std::vector<int64_t> frames = s["overlay"]["frames"];
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.front(), 0);
  EXPECT_LE(frames.size(), 12u);
  const ImageU8 img = load_image(png);
  EXPECT_EQ(img.channels(), 3);
  EXPECT_GT(img.width(), 64);
  EXPECT_GT(img.height(), 16);
  // A path that cannot be written fails before the run: one error line, and no output file.
  const std::string out2 = dir + "/v2.safetensors";
  const auto bad = test::run_cli({"video", test::source_dir() + "/tests/data/video/small.mp4", "--budget", "12", "-o",
                                  out2, "--overlay", dir + "/no/such/dir/sheet.png"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err.find("fovea: error:"), 0u) << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(out2));
  const auto dec = test::run_cli({"video", test::source_dir() + "/tests/data/video/small.mp4", "--decode-only",
                                  "--overlay", dir + "/d.png"});
  EXPECT_EQ(dec.exit_code, 2) << dec.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/d.png"));
}

}  // namespace
}  // namespace fovea
