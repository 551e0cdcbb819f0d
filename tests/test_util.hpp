// Shared by the tests: synthetic images, temp dirs, running the CLI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fovea/image.hpp"

namespace fovea::test {

// Deterministic pseudo-random images (xorshift): uint8 samples in [0, 255], float in [0, 1).
ImageU8 random_image(int w, int h, int channels, uint32_t seed = 1);
ImageF32 random_image_f32(int w, int h, int channels, uint32_t seed = 1);
// A linear congruential generator for test operands: next(lo, hi) is uniform in [lo, hi).
struct Lcg {
  uint32_t s;
  float next(float lo, float hi) {
    s = s * 1664525u + 1013904223u;
    return lo + (hi - lo) * float(s >> 8) / float(1 << 24);
  }
};
// Constant image.
ImageU8 constant_image(int w, int h, int channels, uint8_t value);
// A smooth gradient with some structure (for visual outputs).
ImageU8 gradient_image(int w, int h, int channels);

// A fresh empty directory under the system temp dir, unique per process and name; removed
// when the test process exits.
std::string temp_dir(const std::string& name);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs the fovea CLI with the given arguments (no shell), captures its output.
RunResult run_cli(const std::vector<std::string>& args);

std::string source_dir();

// Sets an environment variable for a scope (the CLI runs a test starts inherit it) and restores
// the caller's value, or its absence, when the scope ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

// A y4m clip (4:2:0, 8 bit) at fps_num/fps_den with pixel aspect `aspect` ("1:1", "2:1"): frame i
// has luma 16 + (5·i mod 200) everywhere plus a bright square at x = 4·i, so frames differ and
// their order is visible in the pixels.
void write_y4m(const std::string& path, int w, int h, int frames, int fps_num = 25, int fps_den = 1,
               const std::string& aspect = "1:1");

}  // namespace fovea::test
