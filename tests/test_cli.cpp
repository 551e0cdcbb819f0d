// The fovea command line, run as a user would: exit codes, one-line errors, outputs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "fovea/image.hpp"
#include "fovea/safetensors.hpp"
#include "test_util.hpp"

namespace fovea {
namespace {

namespace fs = std::filesystem;

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Bad input of any kind: the expected exit code and exactly one line on stderr.
void expect_one_line_error(const test::RunResult& r, int code, const std::string& fragment) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("fovea: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << r.err;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    image = dir + "/in.png";
    save_png(test::gradient_image(200, 120, 3), image);
  }
  std::string dir, image;
};

// The `fovea` launcher (tools/fovea/launcher.cpp) hands fovea-main an environment with the
// OpenMP and OpenBLAS wait policies chosen, unless the caller chose one; an empty variable is no
// choice. A copy of it runs beside a stand-in fovea-main that prints its environment.
TEST(Launcher, ChoosesWaitPoliciesUnlessTheCallerDid) {
  const std::string dir = test::temp_dir("launcher");
  fs::create_directories(dir + "/libexec/fovea");
  fs::copy_file(FOVEA_CLI, dir + "/fovea");
  const std::string main_path = dir + "/libexec/fovea/fovea-main";
  std::ofstream(main_path) << "#!/bin/sh\nexec env\n";
  fs::permissions(main_path, fs::perms::owner_all);
  auto env_of = [&](const std::string& assignments) {
    const std::string out = dir + "/env.txt";
    const std::string cmd = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_THREAD_TIMEOUT " + assignments +
                            " '" + dir + "/fovea' > '" + out + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    return "\n" + std::string(std::istreambuf_iterator<char>(f), {});
  };
  std::string env = env_of("");
  EXPECT_NE(env.find("\nOMP_WAIT_POLICY=PASSIVE\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nOPENBLAS_THREAD_TIMEOUT=4\n"), std::string::npos) << env;
  env = env_of("OMP_WAIT_POLICY= OPENBLAS_THREAD_TIMEOUT=");
  EXPECT_NE(env.find("\nOMP_WAIT_POLICY=PASSIVE\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nOPENBLAS_THREAD_TIMEOUT=4\n"), std::string::npos) << env;
  env = env_of("OMP_WAIT_POLICY=active OPENBLAS_THREAD_TIMEOUT=20");
  EXPECT_NE(env.find("\nOMP_WAIT_POLICY=active\n"), std::string::npos) << env;
  EXPECT_NE(env.find("\nOPENBLAS_THREAD_TIMEOUT=20\n"), std::string::npos) << env;
  env = env_of("GOMP_SPINCOUNT=1000");  // a spin count is a choice too
  EXPECT_EQ(env.find("\nOMP_WAIT_POLICY="), std::string::npos) << env;
}

TEST_F(Cli, HelpListsCommandsAndExitsZero) {
  const auto r = test::run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("tokenize"), std::string::npos);
  const auto t = test::run_cli({"tokenize", "--help"});
  EXPECT_EQ(t.exit_code, 0);
  for (const char* flag : {"--budget", "--patch", "--fixation", "--region", "--weights", "--uniform", "--output",
                           "--overlay", "--seen", "--json", "--threads"})
    EXPECT_NE(t.out.find(flag), std::string::npos) << flag;
}

TEST_F(Cli, BadArgumentsExitTwoWithOneLine) {
  expect_one_line_error(test::run_cli({}), 2, "subcommand is required");
  expect_one_line_error(test::run_cli({"frobnicate"}), 2, "frobnicate");
  expect_one_line_error(test::run_cli({"tokenize"}), 2, "image is required");
  expect_one_line_error(test::run_cli({"tokenize", image, "--budget", "0"}), 2, "--budget");
  expect_one_line_error(test::run_cli({"tokenize", image, "--budget", "abc"}), 2, "--budget");
  expect_one_line_error(test::run_cli({"tokenize", image, "--patch", "1"}), 2, "--patch");
  expect_one_line_error(test::run_cli({"tokenize", image, "--fixation", "1"}), 2, "--fixation needs X,Y");
  expect_one_line_error(test::run_cli({"tokenize", image, "--fixation", "1,nan"}), 2, "not a finite number");
  expect_one_line_error(test::run_cli({"tokenize", image, "--region", "5,5,1,1"}), 2, "X1 > X0");
  expect_one_line_error(test::run_cli({"tokenize", image, "--weights", "query"}), 2, "KEY=VALUE");
  expect_one_line_error(test::run_cli({"tokenize", image, "--weights", "speed=3"}), 2, "unknown key 'speed'");
  expect_one_line_error(test::run_cli({"tokenize", image, "--dtype", "f64"}), 2, "--dtype");
  expect_one_line_error(test::run_cli({"tokenize", image, "--std", "1,0,1"}), 2, "--std");
  expect_one_line_error(test::run_cli({"tokenize", image, "--sharpness", "9"}), 2, "--sharpness");
  expect_one_line_error(test::run_cli({"tokenize", image, "--no-such-flag"}), 2, "--no-such-flag");
  // `-o "$OUT"` with OUT unset: an error, not a run that writes nothing.
  expect_one_line_error(test::run_cli({"tokenize", image, "-o", ""}), 2, "--output was given an empty value");
  expect_one_line_error(test::run_cli({"tokenize", image, "-o", dir + "/t.safetensors", "--seen", ""}), 2,
                        "--seen was given an empty value");
  // The image positional is never swallowed by a repeatable flag: "3,4" is taken as a second
  // input, which makes a batch, and a batch needs an output folder or shard.
  expect_one_line_error(test::run_cli({"tokenize", "--fixation", "1,2", "3,4", image}), 2, "-o DIR");
}

TEST_F(Cli, BudgetBelowCoarsestTilingExitsTwo) {
  const std::string wide = dir + "/wide.png";
  save_png(test::gradient_image(512, 64, 3), wide);  // coarsest tiling: 8 tokens of 64 px
  expect_one_line_error(test::run_cli({"tokenize", wide, "--budget", "7"}), 2,
                        "budget of 7 tokens is below the coarsest tiling: 8 tokens");
}

TEST_F(Cli, BadInputFilesExitOneAndWriteNothing) {
  const std::string out = dir + "/out.safetensors";
  expect_one_line_error(test::run_cli({"tokenize", dir + "/missing.png", "-o", out}), 1, "missing.png");
  const std::string junk = dir + "/junk.png";
  const std::vector<uint8_t> bytes(300, 0x5a);
  write_file_atomic(junk, bytes);
  expect_one_line_error(test::run_cli({"tokenize", junk, "-o", out}), 1, "junk.png");
  // A directory is a batch input: its output must be a folder or a shard, not one file.
  expect_one_line_error(test::run_cli({"tokenize", dir, "-o", out}), 2, "-o DIR");
  expect_one_line_error(test::run_cli({"tokenize", image, "-o", dir + "/no/such/dir/x.safetensors"}), 1,
                        "cannot write");
  expect_one_line_error(test::run_cli({"tokenize", image, "--max-pixels", "1000", "-o", out}), 1, "pixels");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "in.png" || name == "junk.png") << "left behind: " << name;
  }
}

TEST_F(Cli, WritesTokensOverlaySeenAndJson) {
  const std::string out = dir + "/t.safetensors", ov = dir + "/ov.png", seen = dir + "/seen.png";
  const auto r = test::run_cli({"tokenize", image, "--budget", "40", "--fixation", "150,60", "--region",
                                "10,10,50,40", "-o", out, "--overlay", ov, "--seen", seen, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["mode"], "foveated");
  EXPECT_LE(j["tokens"].get<int>(), 40);
  EXPECT_GE(j["tokens"].get<int>(), 38);
  EXPECT_EQ(j["coverage"]["covered_tiles"], j["coverage"]["tiles"]);
  EXPECT_EQ(j["coverage"]["overlapping_tiles"], 0);
  for (const char* stage : {"decode", "pyramid", "relevance", "allocate", "extract", "tokenize", "write", "total"})
    EXPECT_TRUE(j["timings_ms"].contains(stage)) << stage;
  // tokenize's total is the tokenize stages' sum, and says so.
  EXPECT_EQ(j["timings_total_covers"], nlohmann::json({"pyramid", "relevance", "allocate", "extract"}));
  EXPECT_EQ(j["timings_ms"]["total"], j["timings_ms"]["tokenize"]);

  const SafetensorsFile f = SafetensorsFile::open(out);
  const int64_t n = j["tokens"].get<int64_t>();
  ASSERT_NE(f.find("patches"), nullptr);
  EXPECT_EQ(f.find("patches")->shape, (std::vector<int64_t>{n, 3, 16, 16}));
  EXPECT_EQ(f.find("positions")->shape, (std::vector<int64_t>{n, 4}));
  EXPECT_EQ(f.find("levels")->shape, (std::vector<int64_t>{n}));
  EXPECT_EQ(f.find("rate_map")->shape, (std::vector<int64_t>{8, 13}));
  EXPECT_EQ(f.find("relevance")->shape, (std::vector<int64_t>{8, 13}));
  EXPECT_EQ(f.metadata().at("image_width"), "200");
  EXPECT_EQ(f.metadata().at("image_height"), "120");
  EXPECT_EQ(f.metadata().at("budget"), "40");
  EXPECT_EQ(f.metadata().at("patch_size"), "16");
  EXPECT_EQ(f.metadata().at("query"), "fixation(150,60) region(10,10,50,40)");
  EXPECT_FALSE(f.metadata().at("fovea_version").empty());

  const ImageU8 o = load_image(ov), s = load_image(seen);
  EXPECT_EQ(o.width(), 200);
  EXPECT_EQ(s.height(), 120);
}

// A fixation or region wholly off the image is legal (it pulls the fovea to the nearest
// border) but is most often a coordinate in another resolution: one warning line each, the
// output still written. On the image, or a disc that reaches it: no warning.
TEST_F(Cli, QueryOutsideTheImageIsWarnedAbout) {
  const std::string out = dir + "/t.safetensors";
  auto r = test::run_cli({"tokenize", image, "--budget", "40", "--fixation", "400,60", "--fixation", "150,60",
                          "--region", "10,130,50,200", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err), 2) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: fixation(400,60) lies outside the 200x120 image"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: region(10,130,50,200) lies outside"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(out));
  r = test::run_cli({"tokenize", image, "--budget", "40", "--fixation", "199,119", "--fixation", "210,60,20",
                     "--region", "190,110,300,300", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

// File names are bytes: one that is not UTF-8 (a legacy encoding) is tokenized, its JSON and
// the file's `source` metadata carry U+FFFD for the bad byte; one with an ESC (a downloaded
// shard's member) is quoted as \x1b in the batch's "skipped" line, not sent to the terminal.
TEST_F(Cli, FileNamesThatAreNotUtf8OrHoldControlCharacters) {
  const std::string latin1 = dir + "/caf\xe9.png";
  fs::copy_file(image, latin1);
  const std::string out = dir + "/t.safetensors";
  auto r = test::run_cli({"tokenize", latin1, "--budget", "30", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["image"]["path"], dir + "/caf\xef\xbf\xbd.png");
  EXPECT_EQ(SafetensorsFile::open(out).metadata().at("source"), dir + "/caf\xef\xbf\xbd.png");

  const std::string batch = dir + "/batch";
  fs::create_directories(batch);
  fs::copy_file(image, batch + "/caf\xe9.png");
  std::ofstream(batch + "/bad\x1b[31mred.png") << "not a picture";
  r = test::run_cli({"tokenize", batch, "--budget", "30", "-o", dir + "/outs", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // one image failed
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fovea: warning: skipped " + batch + "/bad\\x1b[31mred.png: "), std::string::npos) << r.err;
  const nlohmann::json b = nlohmann::json::parse(r.out);
  EXPECT_EQ(b["batch"]["ok"], 1);
  EXPECT_TRUE(fs::exists(dir + "/outs/caf\xe9.safetensors"));
}

TEST_F(Cli, UniformAndDtypes) {
  const std::string out = dir + "/u.safetensors";
  const auto r = test::run_cli({"tokenize", image, "--uniform", "--budget", "30", "--dtype", "f16", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafetensorsFile f = SafetensorsFile::open(out);
  EXPECT_EQ(f.metadata().at("mode"), "uniform");
  EXPECT_EQ(f.find("patches")->dtype_name, "F16");
  EXPECT_LE(f.find("patches")->shape[0], 30);
}


// The CLI loads FFmpeg on first use (src/image/libav_lazy.cpp). With a file that is not a
// library first on the search path under FFmpeg's name, a PNG still tokenizes: FFmpeg is loaded
// neither at exec (the dynamic loader would have refused to start the program) nor for PNG. A
// WebP still and a video then need FFmpeg: each fails with one line that names the library, and
// writes nothing.
TEST_F(Cli, FfmpegIsLoadedOnFirstUse) {
#ifndef FOVEA_CLI_LAZY_FFMPEG_LIB
  GTEST_SKIP() << "this CLI links FFmpeg at exec, or has none (shared-library or FFmpeg-free build)";
#else
  const std::string libs = dir + "/libs";
  const std::string webp_in = test::source_dir() + "/tests/data/images/lossless.webp";
  fs::create_directories(libs);
  std::ofstream(libs + "/" FOVEA_CLI_LAZY_FFMPEG_LIB) << "not a shared library\n";
  const char* old = std::getenv("LD_LIBRARY_PATH");
  const std::string saved = old ? old : "";
  ::setenv("LD_LIBRARY_PATH", (libs + (old ? ":" + saved : std::string())).c_str(), 1);
  const auto png = test::run_cli({"tokenize", image, "--budget", "64", "-o", dir + "/png.safetensors"});
  const auto webp = test::run_cli({"tokenize", webp_in, "--budget", "64", "-o", dir + "/webp.safetensors"});
  const auto video = test::run_cli(
      {"video", test::source_dir() + "/tests/data/video/small.mp4", "--budget", "64", "-o", dir + "/video.safetensors"});
  if (old) ::setenv("LD_LIBRARY_PATH", saved.c_str(), 1);
  else ::unsetenv("LD_LIBRARY_PATH");

  EXPECT_EQ(png.exit_code, 0) << png.err;
  EXPECT_TRUE(fs::exists(dir + "/png.safetensors"));
  for (const auto* r : {&webp, &video}) {
    expect_one_line_error(*r, 1, "FFmpeg could not be loaded");
    EXPECT_NE(r->err.find(FOVEA_CLI_LAZY_FFMPEG_LIB), std::string::npos) << r->err;
  }
  EXPECT_FALSE(fs::exists(dir + "/webp.safetensors"));
  EXPECT_FALSE(fs::exists(dir + "/video.safetensors"));

  // And with FFmpeg where it belongs, the same WebP still decodes.
  const auto ok = test::run_cli({"tokenize", webp_in, "--budget", "64", "-o", dir + "/webp.safetensors"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(dir + "/webp.safetensors"));
#endif
}

}  // namespace
}  // namespace fovea
