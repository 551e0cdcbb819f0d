// Video inputs real users bring (tests/sweeps/video_sweep.py is the sweep these came from): a display
// matrix, timestamps that repeat or start over, a size change mid-stream, sample aspect, --fps
// over gaps, a damaged raw stream, outputs that cannot be written. The clips are the committed
// fixtures of scripts/make_test_clips.sh --fixtures, or y4m written here.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/files.hpp"
#include "fovea/safetensors.hpp"
#include "fovea/video.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return test::source_dir() + "/tests/data/video/" + name; }


std::vector<VideoFrame> read_all(VideoReader& r) {
  std::vector<VideoFrame> out;
  VideoFrame f;
  while (r.read(f)) {
    VideoFrame c;
    c.image = f.image.clone();
    c.index = f.index;
    c.pts_s = f.pts_s;
    out.push_back(std::move(c));
  }
  return out;
}

class VideoInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { quiet_ffmpeg_log(); }
};

// small_rot90.mp4 is small.mp4's H.264 stream copied with a display matrix ("rotate 90"). Its
// frames come out turned the way ffmpeg's command line and players show them (90° counter-
// clockwise, what ffprobe calls rotation=90): each is small.mp4's frame turned, pixel for pixel,
// and its size is swapped. autorotate = false gives the stored frames. Before, the matrix was
// ignored: a phone video's tokens were made from a sideways picture.
TEST_F(VideoInputs, DisplayMatrixTurnsFramesAsFfmpegShowsThem) {
  VideoReader plain = VideoReader::open(fixture("small.mp4"));
  VideoReader turned = VideoReader::open(fixture("small_rot90.mp4"));
  EXPECT_EQ(plain.info().orientation, 1);
  EXPECT_FALSE(plain.info().rotation_applied);
  EXPECT_EQ(turned.info().orientation, 8);
  EXPECT_TRUE(turned.info().rotation_applied);
  EXPECT_EQ(orientation_name(turned.info().orientation), "rotated 90 degrees counter-clockwise");
  EXPECT_EQ(turned.info().width, plain.info().height);
  EXPECT_EQ(turned.info().height, plain.info().width);
  const std::vector<VideoFrame> a = read_all(plain), b = read_all(turned);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    const ImageU8& s = a[i].image;
    const ImageU8& d = b[i].image;
    ASSERT_EQ(d.width(), s.height());
    ASSERT_EQ(d.height(), s.width());
    EXPECT_EQ(b[i].pts_s, a[i].pts_s);
    int64_t wrong = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < s.height(); ++y)
        for (int x = 0; x < s.width(); ++x) wrong += d.at(c, s.width() - 1 - x, y) != s.at(c, y, x);  // 90° CCW
    EXPECT_EQ(wrong, 0);
  }
  // As stored.
  VideoReaderOptions no;
  no.autorotate = false;
  VideoReader stored = VideoReader::open(fixture("small_rot90.mp4"), no);
  EXPECT_EQ(stored.info().orientation, 8);
  EXPECT_FALSE(stored.info().rotation_applied);
  EXPECT_EQ(stored.info().width, plain.info().width);
  const std::vector<VideoFrame> c = read_all(stored);
  ASSERT_EQ(c.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (int ch = 0; ch < 3; ++ch)
      for (int y = 0; y < a[i].image.height(); ++y)
        ASSERT_EQ(0, std::memcmp(c[i].image.row(ch, y), a[i].image.row(ch, y), size_t(a[i].image.width())));
}

// The CLI turns the frames too, says so in --json and in the file's metadata; --no-autorotate
// keeps them as stored.
TEST_F(VideoInputs, CliReportsAndAppliesTheRotation) {
  const std::string dir = test::temp_dir("video_inputs_rot");
  const std::string out = dir + "/r.safetensors";
  auto r = test::run_cli({"video", fixture("small_rot90.mp4"), "--budget", "8", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["video"]["width"], 96);
  EXPECT_EQ(s["video"]["height"], 160);
  EXPECT_EQ(s["video"]["orientation"], 8);
  EXPECT_EQ(s["video"]["rotation_applied"], true);
  const SafetensorsFile f = SafetensorsFile::open(out);
  EXPECT_EQ(f.metadata().at("rotation"), "rotated 90 degrees counter-clockwise");
  EXPECT_EQ(f.metadata().at("width"), "96");
  // Token centres lie in the turned frame (96 wide, 160 high).
  const Tensor pos = f.load(*f.find("positions"));
  float max_y = 0;
  for (int64_t i = 0; i < pos.dim(0); ++i) max_y = std::max(max_y, pos.data<float>()[i * 4 + 1]);
  EXPECT_GT(max_y, 96.0f);
  r = test::run_cli({"video", fixture("small_rot90.mp4"), "--budget", "8", "--no-autorotate", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["video"]["width"], 160);
  EXPECT_EQ(s["video"]["rotation_applied"], false);
  EXPECT_EQ(SafetensorsFile::open(out).metadata().count("rotation"), 0u);
}

// dup_pts.mkv's timestamps come in equal pairs (0 0 .04 .04 .08 .08). The output's pts must
// increase (frame_offsets/pts index the file by time): a repeated timestamp moves just after
// the previous one, the others are the stream's. Before, pts repeated as stored.
TEST_F(VideoInputs, RepeatedTimestampsAreMadeIncreasing) {
  VideoReader r = VideoReader::open(fixture("dup_pts.mkv"));
  const std::vector<VideoFrame> f = read_all(r);
  ASSERT_EQ(f.size(), 6u);
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GT(f[i].pts_s, f[i - 1].pts_s) << "frame " << i;
  for (size_t i = 0; i < f.size(); i += 2) EXPECT_NEAR(f[i].pts_s, 0.04 * double(i / 2), 1e-9) << "frame " << i;
  for (size_t i = 1; i < f.size(); i += 2) EXPECT_LT(f[i].pts_s - f[i - 1].pts_s, 0.04 / 8) << "frame " << i;
  EXPECT_EQ(r.timestamps_repaired(), 3);
  const std::vector<std::string> w = r.take_warnings();
  ASSERT_EQ(w.size(), 1u);  // the first repair is reported, the others counted
  EXPECT_NE(w[0].find("frame 1:"), std::string::npos) << w[0];
}

// restart.ts is two MPEG-TS segments joined byte for byte: 4 frames of 48x32, then 4 frames of
// 32x48 whose clock starts over (1.40 1.44 1.48 1.52 | 1.40 ...). The second segment continues
// after the first, keeping its own spacing; the session refreshes on the new size; the file
// holds all 8 frames with increasing pts. Before, pts went back at frame 4 and `--fps` dropped
// every frame after it.
TEST_F(VideoInputs, ClockRestartAndSizeChangeMidStream) {
  VideoReader r = VideoReader::open(fixture("restart.ts"));
  const std::vector<VideoFrame> f = read_all(r);
  ASSERT_EQ(f.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    EXPECT_EQ(f[i].image.width(), i < 4 ? 48 : 32);
    EXPECT_EQ(f[i].image.height(), i < 4 ? 32 : 48);
    EXPECT_NEAR(f[i].pts_s, 1.40 + 0.04 * double(i), 1e-6);  // 1.52, then 1.56: one frame interval on
  }
  EXPECT_EQ(r.timestamps_repaired(), 1);
  bool said = false;
  for (const std::string& w : r.take_warnings()) said = said || w.find("jump back") != std::string::npos;
  EXPECT_TRUE(said);

  // Through the CLI with a model, groups of 3 (the size change lands inside a group), and --fps
  // 12.5 (every other frame by pts, across the restart).
  const std::string dir = test::temp_dir("video_inputs_restart");
  const std::string out = dir + "/e.safetensors";
  auto c = test::run_cli({"video", fixture("restart.ts"), "--model", "random:vit-tiny", "--budget", "6", "--group",
                          "3", "-o", out, "--json", "--threads", "1"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  nlohmann::json s = nlohmann::json::parse(c.out);
  ASSERT_EQ(s["frames"], 8);
  EXPECT_EQ(s["decode"]["timestamps_repaired"], 1);
  EXPECT_EQ(s["per_frame"][4]["refresh_reason"], "size");
  const SafetensorsFile file = SafetensorsFile::open(out);
  const Tensor off = file.load(*file.find("frame_offsets"));
  const Tensor pts = file.load(*file.find("pts"));
  ASSERT_EQ(off.numel(), 9);
  ASSERT_EQ(pts.numel(), 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_LT(off.data<int64_t>()[i], off.data<int64_t>()[i + 1]);
    if (i > 0) {
      EXPECT_GT(pts.data<double>()[i], pts.data<double>()[i - 1]);
    }
  }
  EXPECT_EQ(file.find("embeddings")->shape[0], off.data<int64_t>()[8]);
  c = test::run_cli({"video", fixture("restart.ts"), "--fps", "12.5", "--budget", "6", "-o", out, "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  s = nlohmann::json::parse(c.out);
  ASSERT_EQ(s["frames"], 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s["per_frame"][i]["index"], 2 * i);
}

// --fps keeps the first frame at or after each tick of a 1/F grid. After a gap in the stream the
// ticks it covered are skipped: the old rule (next tick = last tick + 1/F) kept every frame
// after a gap until it caught up, a burst at the stream's full rate.
TEST_F(VideoInputs, FpsSamplerSkipsTheTicksOfAGap) {
  // 25 fps for 1 s, a 10 s gap, 25 fps for 1 s; sampled at 5 fps: 5 frames a second, not a burst.
  std::vector<double> pts;
  for (int i = 0; i < 25; ++i) pts.push_back(0.04 * i);
  for (int i = 0; i < 25; ++i) pts.push_back(11.0 + 0.04 * i);
  FrameFilter keep = frame_sampler(0, 5);
  std::vector<double> kept;
  for (size_t i = 0; i < pts.size(); ++i)
    if (keep(int64_t(i), pts[i])) kept.push_back(pts[i]);
  ASSERT_EQ(kept.size(), 10u);
  for (size_t i = 1; i < kept.size(); ++i) EXPECT_GE(kept[i] - kept[i - 1], 0.2 - 1e-9) << i;
  // Above the stream's rate: every frame; every N-th; neither: no filter.
  keep = frame_sampler(0, 100);
  int n = 0;
  for (size_t i = 0; i < pts.size(); ++i) n += keep(int64_t(i), pts[i]);
  EXPECT_EQ(n, 50);
  keep = frame_sampler(3, 0);
  n = 0;
  for (int64_t i = 0; i < 10; ++i) n += keep(i, 0.0);
  EXPECT_EQ(n, 4);
  EXPECT_FALSE(frame_sampler(0, 0));
  EXPECT_THROW(frame_sampler(2, 5), Error);
  EXPECT_THROW(frame_sampler(-1, 0), Error);
  EXPECT_THROW(frame_sampler(0, std::nan("")), Error);
}

// A pixel aspect other than 1:1 is reported (reader, --json, metadata); the frames are not
// resampled.
TEST_F(VideoInputs, SampleAspectIsReported) {
  const std::string dir = test::temp_dir("video_inputs_sar");
  test::write_y4m(dir + "/a.y4m", 40, 24, 3, 25, 1, "2:1");
  VideoReader r = VideoReader::open(dir + "/a.y4m");
  EXPECT_EQ(r.info().sar_num, 2);
  EXPECT_EQ(r.info().sar_den, 1);
  VideoFrame f;
  ASSERT_TRUE(r.read(f));
  EXPECT_EQ(f.image.width(), 40);
  // --budget 6: the coarsest tiling of 40x24 (no 32-px token fits its 24-px side).
  const auto c = test::run_cli({"video", dir + "/a.y4m", "--budget", "6", "-o", dir + "/a.safetensors", "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(nlohmann::json::parse(c.out)["video"]["sample_aspect_ratio"], "2:1");
  EXPECT_EQ(SafetensorsFile::open(dir + "/a.safetensors").metadata().at("sample_aspect_ratio"), "2:1");
  test::write_y4m(dir + "/b.y4m", 40, 24, 3);
  EXPECT_EQ(VideoReader::open(dir + "/b.y4m").info().sar_num, 1);
}

// Garbage over the middle of a y4m file: the demuxer fails on every read while it looks for the
// next frame (hundreds of errors). They are counted, the run goes on, and stderr gets one line
// for the run of errors, not one per read (before: 100 identical lines, the cap).
TEST_F(VideoInputs, ARunOfReadErrorsIsOneWarning) {
  const std::string dir = test::temp_dir("video_inputs_y4m");
  test::write_y4m(dir + "/c.y4m", 64, 48, 12);
  std::vector<uint8_t> bytes = read_file(dir + "/c.y4m");
  uint32_t s = 7;
  for (size_t i = bytes.size() * 4 / 10; i < bytes.size() * 6 / 10; ++i) {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    bytes[i] = uint8_t(s);
  }
  write_file_atomic(dir + "/c.y4m", bytes);
  VideoReader r = VideoReader::open(dir + "/c.y4m");
  const std::vector<VideoFrame> f = read_all(r);
  EXPECT_GE(f.size(), 4u);
  EXPECT_GT(r.corrupt_packets(), 10);
  const std::vector<std::string> w = r.take_warnings();
  EXPECT_GE(w.size(), 1u);
  EXPECT_LE(w.size(), 3u);
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GT(f[i].pts_s, f[i - 1].pts_s);
}

// An output that cannot be written fails the run before the first frame is decoded (before, the
// writer was made at the first finished frame: a whole group decoded and encoded first), and a
// directory given as the output is refused up front (before: found at the final rename, after
// all the work). One error line, exit 1, nothing left behind.
TEST_F(VideoInputs, UnwritableOutputFailsBeforeAnyFrame) {
  const std::string dir = test::temp_dir("video_inputs_out");
  Executor exec({.threads = 1});
  VideoParams vp;
  vp.tokenize.alloc.budget_tokens = 8;
  for (const std::string& out : {dir + "/no/such/dir/x.safetensors", dir}) {
    SCOPED_TRACE(out);
    VideoReader reader = VideoReader::open(fixture("small.mp4"));
    VideoSession session(vp, nullptr, exec);
    VideoRunOptions o;
    o.source = "small.mp4";
    o.output = out;
    int inputs = 0;
    o.on_input = [&](const VideoFrame&, const Query&) { ++inputs; };
    try {
      (void)run_video(reader, session, o);
      ADD_FAILURE() << "no throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::io) << e.what();
      EXPECT_NE(std::string(e.what()).find(out), std::string::npos) << e.what();
    }
    EXPECT_EQ(inputs, 0);
    EXPECT_EQ(reader.frames_decoded(), 0);
  }
  const auto c = test::run_cli({"video", fixture("small.mp4"), "-o", dir});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_EQ(c.err, "fovea: error: cannot write '" + dir + "': it is a directory\n");
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
    EXPECT_EQ(e.path().string().find(".spill-"), std::string::npos) << e.path();
  }
}

// Arguments the CLI took and did nothing with: a second input (only the first was read, with
// no word about the others), --every 0 and --fps 0 (taken as "every frame"). Now usage errors.
TEST_F(VideoInputs, CliRefusesWhatItWouldIgnore) {
  const std::string dir = test::temp_dir("video_inputs_args");
  const std::string out = dir + "/o.safetensors";
  auto r = test::run_cli({"video", fixture("small.mp4"), fixture("small.avi"), "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fovea: error: fovea video takes one input, got 2 (run it once per video)\n");
  r = test::run_cli({"video", fixture("small.mp4"), "--every", "0", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fovea: error: --every must be >= 1\n");
  r = test::run_cli({"video", fixture("small.mp4"), "--fps", "0", "-o", out});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "fovea: error: --fps must be > 0\n");
  EXPECT_FALSE(fs::exists(out));
  r = test::run_cli({"video", fixture("small.mp4"), "--every", "5", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["frames"], 3);
}

// A file cut inside its headers (a truncated download): libavformat says EIO or EOF; that was
// reported as "cannot open (Input/output error)", as if the disk had failed. Now it names the
// likely cause; a file cut after its headers is read up to the cut.
TEST_F(VideoInputs, FileCutInsideItsHeadersSaysSo) {
  const std::string dir = test::temp_dir("video_inputs_cut");
  const std::vector<uint8_t> mkv = read_file(fixture("dup_pts.mkv"));
  write_file_atomic(dir + "/cut.mkv", std::span<const uint8_t>(mkv.data(), mkv.size() / 10));
  try {
    VideoReader::open(dir + "/cut.mkv");
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt_data) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated or damaged"), std::string::npos) << e.what();
  }
  const std::vector<uint8_t> mp4 = read_file(fixture("small.mp4"));  // moov first (faststart)
  write_file_atomic(dir + "/cut.mp4", std::span<const uint8_t>(mp4.data(), mp4.size() * 9 / 10));
  VideoReader r = VideoReader::open(dir + "/cut.mp4");
  const std::vector<VideoFrame> f = read_all(r);
  EXPECT_GE(f.size(), 2u);
  EXPECT_LT(f.size(), 12u);
  EXPECT_GT(r.corrupt_packets(), 0);
}

// FFmpeg 5.1's libjxl wrapper spins forever on this 29-byte JPEG XL file (found by fuzz_still):
// libavformat probes it as an image stream, so the reader refuses the decoder, and the
// demuxer's codec whitelist keeps avformat_find_stream_info from opening it either.
TEST_F(VideoInputs, JpegXlIsRefusedNotDecoded) {
  const std::string jxl = test::source_dir() + "/tests/data/images/hang_ffmpeg51.jxl";
  const std::vector<uint8_t> bytes = read_file(jxl);
  for (int in_memory = 0; in_memory < 2; ++in_memory) {
    try {
      VideoReader r = in_memory ? VideoReader::open_bytes(bytes, "mem.jxl") : VideoReader::open(jxl);
      ADD_FAILURE() << "opened";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("JPEG XL is not supported"), std::string::npos) << e.what();
    }
  }
}

// A file that is plainly something else (a Git LFS pointer left by a clone without `git lfs
// pull`, a JSON file) is named as such rather than "Invalid data found".
// A fixation off the frame (coordinates in another resolution, usually) is warned about once
// for the run, naming the first frame it was off, not once per frame.
TEST_F(VideoInputs, FixationOffTheFrameIsWarnedAboutOnce) {
  const std::string dir = test::temp_dir("video_inputs_outside");
  const auto r = test::run_cli({"video", fixture("small_rot90.mp4"), "--budget", "8", "--fixation", "500,900",
                                "--max-frames", "4", "-o", dir + "/o.safetensors", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = "fovea: warning: fixation(500,900) (frame 0) lies outside the 96x160 frame";
  const size_t at = r.err.find(line);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("lies outside", at + line.size()), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["frames"], 4);
}

TEST_F(VideoInputs, NonVideosAreNamed) {
  const std::string dir = test::temp_dir("VideoInputs_named");
  const std::string lfs = dir + "/clip.mp4", json = dir + "/clip.mkv";
  std::ofstream(lfs) << "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n";
  std::ofstream(json) << "{\"frames\": []}\n";
  for (const auto& [path, what] : {std::pair{lfs, "a Git LFS pointer"}, std::pair{json, "JSON text"}}) {
    try {
      VideoReader::open(path);
      ADD_FAILURE() << path << " opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::corrupt_data);
      EXPECT_NE(std::string(e.what()).find(std::string("not a video file: it is ") + what), std::string::npos) << e.what();
    }
  }
  // An empty file (was: "not a video file ffmpeg can read, or a damaged one (Invalid data ...)").
  const std::string empty = dir + "/empty.mp4";
  std::ofstream{empty};
  try {
    VideoReader::open(empty);
    ADD_FAILURE() << "an empty file opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::corrupt_data);
    EXPECT_NE(std::string(e.what()).find("not a video file: the file is empty"), std::string::npos) << e.what();
  }
}

// FFmpeg 5.1 has no animated-WebP demuxer: the whole file is one packet its decoder refuses.
// The error says so and points at `fovea tokenize`, which reads the first frame.
TEST_F(VideoInputs, AnimatedWebpSaysWhatToDoInstead) {
  const std::string webp = test::source_dir() + "/tests/data/images/anim.webp";
  const std::string out = test::temp_dir("VideoInputs_webp") + "/out.safetensors";
  const test::RunResult r = test::run_cli({"video", webp, "-o", out});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("fovea: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("animated WebP"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A URL or an ffmpeg protocol said "cannot open (No such file or directory)", which does not say
// why; a file whose name merely has a colon is still "no such file".
TEST_F(VideoInputs, UrlsAreNotFiles) {
  for (const char* url : {"http://example.invalid/clip.mp4", "pipe:0", "concat:a.ts|b.ts", "rtsp://cam/1"}) {
    try {
      VideoReader::open(url);
      ADD_FAILURE() << url << " opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::io);
      EXPECT_NE(std::string(e.what()).find("not a file"), std::string::npos) << e.what();
    }
  }
  try {
    VideoReader::open(test::temp_dir("video_inputs_url") + "/take:2.mp4");
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

// A playlist names other files: a downloaded "video" must not make fovea read (and encode) them.
TEST_F(VideoInputs, PlaylistsDoNotOpenOtherFiles) {
  const std::string dir = test::temp_dir("video_inputs_m3u8");
  const std::string segment = test::source_dir() + "/tests/data/video/restart.ts";  // a clip ffmpeg decodes
  const std::string playlist = dir + "/clip.m3u8";
  const std::string text = "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXTINF:1.0,\n" + segment +
                           "\n#EXT-X-ENDLIST\n";
  {
    std::ofstream f(playlist);
    f << text;
  }
  auto expect_refused = [&](auto&& open) {
    try {
      VideoReader r = open();
      VideoFrame frame;
      while (r.read(frame)) {
      }
      ADD_FAILURE() << "the playlist was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("refers to another file"), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { return VideoReader::open(playlist); });
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  expect_refused([&] { return VideoReader::open_bytes(bytes, "clip.m3u8"); });
  // The segment itself is a video.
  VideoReader seg = VideoReader::open(segment);
  VideoFrame frame;
  EXPECT_TRUE(seg.read(frame));

  const std::string out = dir + "/v.safetensors";
  const auto r = test::run_cli({"video", playlist, "--budget", "8", "-o", out});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("fovea: error:"), 0u) << r.err;
  EXPECT_NE(r.err.find("refers to another file"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace fovea
