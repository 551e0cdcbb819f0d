#include "test_util.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

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

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* v = std::getenv(name)) had_ = true, saved_ = v;
  ::setenv(name, value, 1);
}
ScopedEnv::~ScopedEnv() {
  if (had_) ::setenv(name_.c_str(), saved_.c_str(), 1);
  else ::unsetenv(name_.c_str());
}

void write_y4m(const std::string& path, int w, int h, int frames, int fps_num, int fps_den, const std::string& aspect) {
  std::ofstream f(path, std::ios::binary);
  f << "YUV4MPEG2 W" << w << " H" << h << " F" << fps_num << ":" << fps_den << " Ip A" << aspect << " C420jpeg\n";
  std::vector<uint8_t> y(size_t(w) * h), uv(size_t((w + 1) / 2) * ((h + 1) / 2), 128);
  for (int i = 0; i < frames; ++i) {
    std::fill(y.begin(), y.end(), uint8_t(16 + (5 * i) % 200));
    for (int yy = 0; yy < std::min(h, 8); ++yy)
      for (int xx = (4 * i) % w; xx < std::min(w, (4 * i) % w + 8); ++xx) y[size_t(yy) * w + xx] = 250;
    f << "FRAME\n";
    f.write(reinterpret_cast<const char*>(y.data()), std::streamsize(y.size()));
    f.write(reinterpret_cast<const char*>(uv.data()), std::streamsize(uv.size()));
    f.write(reinterpret_cast<const char*>(uv.data()), std::streamsize(uv.size()));
  }
}

}  // namespace fovea::test
