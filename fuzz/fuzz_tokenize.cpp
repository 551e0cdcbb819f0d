// fovea::tokenize on an in-memory image with fuzzed parameters: image extents (1..160) and pixels, patch
// size, budget, max level, sharpness, relevance weights, e0, entropy bins, stats level,
// fixations and regions (any float bits: NaN, inf, huge), dtype, normalisation, uniform mode,
// threads. Bad parameters must be a fovea::Error before any stage runs; accepted ones must give
// a batch that keeps the documented invariants (checked below, each a finding when broken).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fovea/tokenize.hpp"
#include "fuzz_util.hpp"

namespace {

// Mostly valid, sometimes anything: a raw value half the time and a value in `lo..hi` otherwise,
// so the fuzzer reaches deep into the pipeline and still probes every check.
int pick(fovea::fuzz::Bytes& in, int lo, int hi) {
  const uint8_t mode = in.u8();
  const int32_t raw = int32_t(in.u32());
  if (mode < 40) return raw;
  return lo + int(uint32_t(raw) % uint32_t(hi - lo + 1));
}

float pickf(fovea::fuzz::Bytes& in, float lo, float hi) {
  const uint8_t mode = in.u8();
  const float raw = in.f32();
  if (mode < 40) return raw;
  return lo + (hi - lo) * float(in.u16()) / 65535.0f;
}

// Image sides: 1..300 from the input as before, folded into 1..160 (sides up to 160 are kept as
// they are, so every seed, the regression inputs included, maps to the same image). Every stage
// is linear in the pixels and nothing branches on an image being larger: the pyramid has up to 8
// levels (max_level still asks for up to 12, so the clamp is reached), the tile grid up to
// 160x160 tiles at patch 1 and partial edge tiles at every patch size up to 40, and the 2x2
// reduction from 160 to 80 pixels runs its 32-lane AVX2 loop twice, then the 16-lane loop and
// the scalar tail. A 300x300 input cost ~4x a 160x160 one.
constexpr int kMaxSide = 160;
int side(uint16_t v) {
  const int s = 1 + int(v % 300);
  return s <= kMaxSide ? s : 1 + (s - 1) % kMaxSide;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One executor per thread count for the whole run (as a program keeps its Executor): making
  // and joining a worker thread for every input cost more than small images' whole pipeline.
  static fovea::Executor exec1(fovea::ExecConfig{.threads = 1});
  static fovea::Executor exec2(fovea::ExecConfig{.threads = 2});
  fovea::fuzz::Bytes in{data, size};
  const int width = side(in.u16());
  const int height = side(in.u16());
  const int channels = in.u8() % 2 ? 3 : 1;

  fovea::TokenizeParams p;
  p.patch_px = pick(in, 1, 40);
  p.uniform = in.u8() % 4 == 0;
  p.alloc.budget_tokens = pick(in, 1, 2000);
  p.alloc.max_level = pick(in, -1, 12);
  p.alloc.sharpness = pickf(in, 0.5f, 4.0f);
  p.relevance.weights.information = pickf(in, 0, 4);
  p.relevance.weights.saliency = pickf(in, 0, 4);
  p.relevance.weights.query = pickf(in, 0, 16);
  p.relevance.weights.floor = pickf(in, 0, 1);
  p.relevance.e0 = pickf(in, 0.001f, 1);
  p.relevance.entropy_bins = pick(in, 2, 256);
  p.relevance.stats_level = pick(in, 0, 3);
  const uint8_t dt = in.u8() % 4;
  p.extract.dtype = dt == 0 ? fovea::DType::u8 : dt == 1 ? fovea::DType::f16 : dt == 2 ? fovea::DType::f32 : fovea::DType::i32;
  p.extract.norm.enabled = in.u8() % 2;
  for (int c = 0; c < 3; ++c) {
    p.extract.norm.mean[size_t(c)] = pickf(in, 0, 1);
    p.extract.norm.std[size_t(c)] = pickf(in, 0.01f, 1);
  }
  fovea::Query q;
  const int fixations = in.u8() % 4, regions = in.u8() % 3;
  for (int i = 0; i < fixations; ++i)
    q.fixations.push_back({pickf(in, -50, float(width) + 50), pickf(in, -50, float(height) + 50), pickf(in, 0, 4)});
  for (int i = 0; i < regions; ++i) {
    const float x0 = pickf(in, -20, float(width)), y0 = pickf(in, -20, float(height));
    q.regions.push_back({x0, y0, x0 + pickf(in, 0, float(width)), y0 + pickf(in, 0, float(height)), pickf(in, 0, 4)});
  }
  const int threads = 1 + in.u8() % 2;

  fovea::ImageU8 img(width, height, channels);
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < height; ++y) {
      uint8_t* row = img.row(c, y);
      for (int x = 0; x < width; ++x) row[x] = in.left() ? in.u8() : uint8_t((x * 7 + y * 13 + c * 50) & 255);
    }

  fovea::fuzz::expect_only_fovea_errors([&] {
    fovea::Executor& exec = threads == 1 ? exec1 : exec2;
    const fovea::Tokenization t = fovea::tokenize(std::move(img), q, p, exec);
    const fovea::TokenBatch& b = t.batch;
    const int64_t n = b.size();
    if (n < 1 || n > p.alloc.budget_tokens) __builtin_trap();  // never more tokens than the budget
    if (b.positions.dim(0) != n || b.levels.dim(0) != n || int64_t(b.boxes.size()) != n) __builtin_trap();
    if (b.patches.dim(1) != 3 || b.patches.dim(2) != p.patch_px || b.patches.dim(3) != p.patch_px) __builtin_trap();
    for (const auto& box : b.boxes)
      if (!(box[2] > box[0]) || !(box[3] > box[1])) __builtin_trap();
  });
  return 0;
}
