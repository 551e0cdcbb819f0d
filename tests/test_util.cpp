#include "test_util.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace fovea::test {

namespace {
uint32_t next(uint32_t& s) {
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}
std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

ImageU8 random_image(int w, int h, int channels, uint32_t seed) {
  ImageU8 img(w, h, channels);
  uint32_t s = seed * 2654435761u + 12345u;
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) img.at(c, y, x) = static_cast<uint8_t>(next(s) >> 24);
  return img;
}

ImageF32 random_image_f32(int w, int h, int channels, uint32_t seed) {
  ImageF32 img(w, h, channels);
  uint32_t s = seed * 2654435761u + 777u;
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) img.at(c, y, x) = (next(s) >> 8) * (1.0f / 16777216.0f);
  return img;
}

ImageU8 constant_image(int w, int h, int channels, uint8_t value) {
  ImageU8 img(w, h, channels);
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) img.at(c, y, x) = value;
  return img;
}

ImageU8 gradient_image(int w, int h, int channels) {
  ImageU8 img(w, h, channels);
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        img.at(c, y, x) = static_cast<uint8_t>((x * 255 / std::max(1, w - 1) + y * (c + 1) * 7 + ((x / 8 + y / 8) % 2) * 40) & 255);
  return img;
}

std::string temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  // Every directory handed out is removed when the test process exits.
  static std::vector<fs::path> made;
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      for (const auto& d : made) fs::remove_all(d, ec);
    });
    return true;
  }();
  (void)cleanup;
  fs::path p = fs::temp_directory_path() / ("fovea_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  made.push_back(p);
  return p.string();
}

RunResult run_cli(const std::vector<std::string>& args) {
  const std::string dir = temp_dir("cli_capture");
  const std::string out_path = dir + "/out.txt", err_path = dir + "/err.txt";
  std::vector<std::string> argv_s{FOVEA_CLI};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  RunResult r;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    throw std::runtime_error("cannot spawn the fovea CLI");
  }
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

std::string source_dir() { return FOVEA_SOURCE_DIR; }

}  // namespace fovea::test
