// VideoReader::open_bytes (a whole file in memory, through a custom AVIOContext): the same
// frames as open() on the file, clear errors for bytes that are not a video, and every clip of
// the video fuzz target's seed corpus decodes (so the fuzzer starts from real containers).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/video.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

std::vector<VideoFrame> read_all(VideoReader& r) {
  std::vector<VideoFrame> out;
  VideoFrame f;
  while (r.read(f)) {
    VideoFrame copy;
    copy.image = f.image.clone();
    copy.index = f.index;
    copy.pts_s = f.pts_s;
    out.push_back(std::move(copy));
  }
  return out;
}

TEST(VideoMemory, OpenBytesDecodesTheSameFramesAsOpen) {
  quiet_ffmpeg_log();
  for (const char* name : {"small.mp4", "small.avi"}) {
    SCOPED_TRACE(name);
    const std::string path = test::source_dir() + "/tests/data/video/" + name;
    const std::vector<uint8_t> bytes = read_file(path);
    VideoReader a = VideoReader::open(path, {.threads = 1});
    VideoReader b = VideoReader::open_bytes(bytes, name, {.threads = 1});
    EXPECT_EQ(a.info().width, b.info().width);
    EXPECT_EQ(a.info().height, b.info().height);
    EXPECT_EQ(a.info().codec, b.info().codec);
    EXPECT_EQ(a.info().container, b.info().container);
    EXPECT_EQ(a.info().frame_count, b.info().frame_count);
    const std::vector<VideoFrame> fa = read_all(a), fb = read_all(b);
    ASSERT_EQ(fa.size(), 12u);
    ASSERT_EQ(fa.size(), fb.size());
    for (size_t i = 0; i < fa.size(); ++i) {
      EXPECT_EQ(fa[i].index, fb[i].index);
      EXPECT_EQ(fa[i].pts_s, fb[i].pts_s);
      const ImageU8 &x = fa[i].image, &y = fb[i].image;
      ASSERT_EQ(x.width(), y.width());
      for (int c = 0; c < 3; ++c)
        for (int row = 0; row < x.height(); ++row)
          ASSERT_EQ(0, std::memcmp(x.row(c, row), y.row(c, row), size_t(x.width()))) << "frame " << i;
    }
  }
}

TEST(VideoMemory, BytesThatAreNotAVideoGiveOneClearError) {
  quiet_ffmpeg_log();
  const std::vector<uint8_t> empty, text = {'n', 'o', 't', ' ', 'a', ' ', 'v', 'i', 'd', 'e', 'o'};
  for (const std::vector<uint8_t>* b : {&empty, &text}) {
    try {
      VideoReader::open_bytes(*b, "upload.bin");
      ADD_FAILURE() << "expected an error for " << b->size() << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
      EXPECT_NE(std::string(e.what()).find("upload.bin"), std::string::npos) << e.what();
    }
  }
  // A truncated MP4 (the first third): an error or fewer frames, never a crash.
  const std::vector<uint8_t> mp4 = read_file(test::source_dir() + "/tests/data/video/small.mp4");
  const std::vector<uint8_t> cut(mp4.begin(), mp4.begin() + std::ptrdiff_t(mp4.size() / 3));
  try {
    VideoReader r = VideoReader::open_bytes(cut, "cut.mp4");
    EXPECT_LT(read_all(r).size(), 12u);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.mp4"), std::string::npos) << e.what();
  }
}

TEST(VideoMemory, EveryFuzzSeedClipDecodes) {
  quiet_ffmpeg_log();
  const fs::path dir = fs::path(test::source_dir()) / "fuzz" / "corpus" / "video";
  int clips = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    // regress_*: inputs the fuzzer found (damaged on purpose), replayed by every fuzz run.
    if (e.path().filename().string().rfind("regress_", 0) == 0) continue;
    SCOPED_TRACE(e.path().filename().string());
    const std::vector<uint8_t> bytes = read_file(e.path().string());
    VideoReader r = VideoReader::open_bytes(bytes, e.path().filename().string(), {.threads = 1});
    const std::vector<VideoFrame> frames = read_all(r);
    EXPECT_GE(frames.size(), 2u);
    EXPECT_EQ(r.corrupt_packets(), 0);
    for (const VideoFrame& f : frames) EXPECT_EQ(f.image.width(), r.info().width);
    ++clips;
  }
  EXPECT_GE(clips, 10);
}

}  // namespace
}  // namespace fovea
