// The checkpoint loaders (VitModel::load) on a checkpoint directory made of the input: a
// config.json, a preprocessor_config.json and a model.safetensors, so that the config readers and
// the tensor-shape checks of every loader (the native-resolution towers' included) see hostile
// values. Input layout: u16 config length, config bytes, u16 preprocessor length, preprocessor
// bytes (also video_preprocessor_config.json's when the input's size is odd), then the
// safetensors bytes. A loaded native tower also gets its processor's rules
// (smart_resize, M-RoPE ids) and a window plan, with sizes taken from the input; a SigLIP 2 NaFlex
// tower its resize rule and a small image through its processor.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fovea/encoder.hpp"
#include "fovea/image.hpp"
#include "fovea/native.hpp"
#include "fuzz_util.hpp"

namespace {

const std::string& dir() {
  static const std::string d = [] {
    const std::string p = (std::filesystem::temp_directory_path() / ("fovea-fuzz-model-" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(p);
    return p;
  }();
  return d;
}

void write(const std::string& name, const uint8_t* p, size_t n) {
  std::ofstream f(dir() + "/" + name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(p), std::streamsize(n));
}

size_t take(const uint8_t*& p, size_t& left) {
  if (left < 2) return 0;
  size_t n = size_t(p[0]) | size_t(p[1]) << 8;
  p += 2, left -= 2;
  return n < left ? n : left;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* p = data;
  size_t left = size;
  const size_t nc = take(p, left);
  write("config.json", p, nc);
  p += nc, left -= nc;
  const size_t np = take(p, left);
  write("preprocessor_config.json", p, np);
  // Odd sizes: the same bytes as the video processor's file too (read_video_limits); even: none.
  if (size & 1) write("video_preprocessor_config.json", p, np);
  else std::filesystem::remove(dir() + "/video_preprocessor_config.json");
  p += np, left -= np;
  write("model.safetensors", p, left);
  fovea::fuzz::expect_only_fovea_errors([&] {
    const fovea::VitModel m = fovea::VitModel::load(dir() + "/model.safetensors");
    (void)m.describe();
    if (fovea::is_naflex(m)) {  // SigLIP 2 NaFlex: the resize rule and one small image through the processor
      const fovea::VitConfig& c = m.config();
      const int w = 1 + int(size % 3000), h = 1 + int(size * 5 % 3000);
      fovea::fuzz::expect_only_fovea_errors([&] {
        (void)fovea::naflex_size(h, w, c.patch_px, c.native.max_num_patches);
        const fovea::ImageU8 img(1 + w % 97, 1 + h % 61, 3, true);
        (void)fovea::prepare_naflex(m, img, 1 + int(size % 64));
      });
      return;
    }
    if (!fovea::is_native(m)) return;
    const fovea::VitConfig& c = m.config();
    const int w = 1 + int(size % 5000), h = 1 + int(size * 7 % 5000);
    fovea::fuzz::expect_only_fovea_errors([&] {
      (void)fovea::smart_resize(h, w, c.native.factor(c.patch_px), c.native.min_pixels, c.native.max_pixels);
    });
    fovea::fuzz::expect_only_fovea_errors([&] {  // the video processor's rule, frames from the input
      (void)fovea::native_video_size(m, int(size % 1000), h, w, {.cap_pixels_per_frame = (size & 2) != 0});
    });
    fovea::fuzz::expect_only_fovea_errors([&] {
      fovea::Query q;
      q.fixations.push_back({.x_px = float(w) / 3, .y_px = float(h) / 2});
      const fovea::NativeWindowPlan plan = fovea::plan_native_windows(m, w, h, q, nullptr, {.budget_tokens = 64});
      std::vector<fovea::NativeGrid> grids;
      for (const fovea::NativeWindow& x : plan.windows) grids.push_back(x.grid);
      (void)fovea::native_mrope_positions(grids, c.native.merge);
    });
  });
  return 0;
}
