// The Vulkan texture backend against the CPU pipeline, measured in the same run:
//
//   1. pyramid:    CPU build_pyramid  vs  blit chain  vs  compute-shader chain (uint8 RGB);
//   2. extraction: CPU extract()      vs  shader sampling (upload + mips + dispatch + readback);
//   3. batches:    32 images one call each  vs  one 2D array texture of 32 (one upload, one
//                  mip chain, one dispatch).
//
// Every GPU number is split into upload / mips / dispatch / readback (each phase is its own
// submit + fence wait, wall clock). Ratios are CPU time / Vulkan time (> 1: Vulkan faster).
// On lavapipe (llvmpipe) the "GPU" is the same CPU running a software rasteriser's compute
// path: those numbers are CPU numbers and are labelled so.
//
//   build/bench/bench_vulkan [--size 1024] [--batch 32] [--batch-size 512] [--reps 5] [--threads 0]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/extract.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/tokenize.hpp"
#include "fovea/vulkan.hpp"

namespace {

using fovea::VulkanTimings;
using Clock = std::chrono::steady_clock;

fovea::ImageU8 make_image(int w, int h, uint32_t seed) {
  fovea::ImageU8 img(w, h, 3);
  uint32_t s = seed * 0x9E3779B9u + 1;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < h; ++y) {
      uint8_t* row = img.row(c, y);
      for (int x = 0; x < w; ++x) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        // A smooth gradient plus noise: relevance then has structure to allocate by.
        row[x] = uint8_t(((x + y) * 255 / (w + h)) / 2 + (s >> 25));
      }
    }
  return img;
}

// Median wall time (ms) of reps runs of f, and the median run's GPU phase split if any.
struct Measure {
  double ms = 0;
  VulkanTimings split;
};
Measure measure(int reps, const std::function<void()>& f, const fovea::VulkanBackend* gpu = nullptr) {
  f();  // warm-up: pipelines, page faults, allocator
  std::vector<std::pair<double, VulkanTimings>> runs;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    runs.push_back({ms, gpu ? gpu->last_timings() : VulkanTimings{}});
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return {runs[runs.size() / 2].first, runs[runs.size() / 2].second};
}

void row(const char* name, const Measure& m, double cpu_ms, bool gpu) {
  std::printf("  %-34s %9.2f ms", name, m.ms);
  if (gpu)
    std::printf("  [upload %7.2f  mips %7.2f  dispatch %7.2f  readback %7.2f]", m.split.upload_ms, m.split.mips_ms,
                m.split.dispatch_ms, m.split.readback_ms);
  else
    std::printf("  %66s", "");
  std::printf("  CPU/this %6.2fx\n", cpu_ms / m.ms);
}

int arg_int(int argc, char** argv, const char* flag, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return std::atoi(argv[i + 1]);
  return def;
}

// The options and what every section measures with.
struct Bench {
  int size = 1024;        // --size: the square image of sections 1 and 2
  int batch = 32;         // --batch: images in section 3
  int batch_size = 512;   // --batch-size: their side
  int reps = 5;           // --reps: median of
  int threads = 0;        // --threads: the CPU path's (0: all)
  fovea::VulkanBackend* gpu = nullptr;
  fovea::Executor* exec = nullptr;
};

Bench parse_args(int argc, char** argv) {
  Bench b;
  b.size = arg_int(argc, argv, "--size", 1024);
  b.batch = arg_int(argc, argv, "--batch", 32);
  b.batch_size = arg_int(argc, argv, "--batch-size", 512);
  b.reps = std::max(1, arg_int(argc, argv, "--reps", 5));
  b.threads = arg_int(argc, argv, "--threads", 0);
  return b;
}

// 1. The full mip chain: CPU vs blit vs compute.
void bench_pyramid(const Bench& b, const fovea::ImageU8& img) {
  fovea::VulkanBackend* gpu = b.gpu;
  fovea::Executor& exec = *b.exec;
  std::printf("1. full mip chain, %dx%d RGB uint8 (%d levels)\n", b.size, b.size, fovea::full_mip_levels(b.size, b.size));
  const Measure cpu_pyr = measure(b.reps, [&] {
    fovea::PyramidU8 p = fovea::build_pyramid(img.clone(), {}, exec);
    if (p.num_levels() == 0) std::abort();
  });
  // The CPU timing includes cloning level 0 (the GPU path's analogue is its upload).
  row("CPU build_pyramid (+ clone)", cpu_pyr, cpu_pyr.ms, false);
  const Measure blit = measure(b.reps, [&] { gpu->build_pyramid(img, {}, fovea::MipMethod::blit); }, gpu);
  row("Vulkan blit chain", blit, cpu_pyr.ms, true);
  const Measure comp = measure(b.reps, [&] { gpu->build_pyramid(img, {}, fovea::MipMethod::compute); }, gpu);
  row("Vulkan compute chain", comp, cpu_pyr.ms, true);
  std::printf("  mips alone: blit %.2f ms, compute %.2f ms; CPU / blit mips %.2fx, CPU / compute mips %.2fx, "
              "blit / compute %.2fx\n\n",
              blit.split.mips_ms, comp.split.mips_ms, cpu_pyr.ms / blit.split.mips_ms,
              cpu_pyr.ms / comp.split.mips_ms, blit.split.mips_ms / comp.split.mips_ms);
}

// Accuracy of section 1, not speed. The CPU rounds at every level, so its chain drifts from the
// exact mean; a float chain rounded once could only reach round(mean), not the CPU pyramid. The
// blit path therefore rounds each level with the CPU's rule (docs/how-to/vulkan.md).
void pyramid_accuracy(const Bench& b, const fovea::ImageU8& img) {
  fovea::VulkanBackend* gpu = b.gpu;
  const int size = b.size;
  const fovea::PyramidU8 want = fovea::build_pyramid(img.clone(), {}, *b.exec);
  const fovea::PyramidU8 got = gpu->build_pyramid(img, {}, fovea::MipMethod::blit);
  const fovea::PyramidU8 exact = gpu->build_pyramid(img, {}, fovea::MipMethod::compute);
  fovea::ImageF32 mean(size, size, 3);  // level 0 as float: the blit f32 chain is the mean
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x) mean.at(c, y, x) = img.at(c, y, x);
  const fovea::PyramidF32 fblit = gpu->build_pyramid(mean, {}, fovea::MipMethod::blit);
  std::vector<std::vector<double>> m(1);  // the exact mean chain, in double
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x) m[0].push_back(img.at(c, y, x));
  std::printf("  accuracy (uint8): compute == CPU: ");
  bool same = true;
  for (int l = 0; l < want.num_levels(); ++l)
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < want.level(l).height(); ++y)
        same &= std::memcmp(exact.level(l).row(c, y), want.level(l).row(c, y), want.level(l).width()) == 0;
  std::printf("%s\n", same ? "bit-exact" : "DIFFERS");
  std::printf("    level  max|blit-CPU|  NMSE(blit,CPU)  | max|CPU-mean|  max|round(mean)-CPU|  "
              "max|f32 blit-mean|\n");
  for (int l = 1; l < want.num_levels(); ++l) {
    const fovea::ImageU8& a = got.level(l);
    const fovea::ImageU8& bl = want.level(l);
    const int w = bl.width(), h = bl.height(), pw = want.level(l - 1).width(), ph = want.level(l - 1).height();
    m.emplace_back(size_t(3) * w * h);
    int max_abs = 0;
    double num = 0, den = 0, drift = 0, round_off = 0, fdev = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) {
          const int x1 = std::min(2 * x + 1, pw - 1), y1 = std::min(2 * y + 1, ph - 1);
          auto p = [&](int yy, int xx) { return m[l - 1][(size_t(c) * ph + yy) * pw + xx]; };
          const double mu = (p(2 * y, 2 * x) + p(2 * y, x1) + p(y1, 2 * x) + p(y1, x1)) / 4;
          m[l][(size_t(c) * h + y) * w + x] = mu;
          const int d = int(a.at(c, y, x)) - int(bl.at(c, y, x));
          max_abs = std::max(max_abs, std::abs(d));
          num += double(d) * d;
          den += double(bl.at(c, y, x)) * bl.at(c, y, x);
          drift = std::max(drift, std::abs(bl.at(c, y, x) - mu));
          round_off = std::max(round_off, std::abs(std::floor(mu + 0.5) - bl.at(c, y, x)));
          fdev = std::max(fdev, std::abs(fblit.level(l).at(c, y, x) - mu));
        }
    std::printf("    L%-2d    %3d           %.2e        | %6.3f         %3.0f                   %.2e\n", l,
                max_abs, num / den, drift, round_off, fdev);
  }
  std::printf("\n");
}

// 1b. Non-power-of-two extents: the blit chain is padded to powers of two so the driver's
// normalised coordinates are exact (VulkanOptions::pad_blit_chains); a second backend without
// padding (`plain`) is the fallback (and the previous design), in the same run.
void bench_odd_sizes(const Bench& b, fovea::VulkanBackend* plain, const fovea::ImageU8& odd) {
  fovea::VulkanBackend* gpu = b.gpu;
  std::printf("1b. blit chain at non-power-of-two sizes, RGB uint8: padded to powers of two vs the image's "
              "extents\n");
  // (size + 2)^2 is the padding's worst case: level 1 has size / 2 + 1 texels a side, so
  // the first blit's power-of-two box is 2·size a side, 4x the data.
  for (const int side : {0, b.size + 2}) {
    const fovea::ImageU8 im = side ? make_image(side, side, 3) : odd.clone();
    const std::string tag = std::to_string(im.width()) + "x" + std::to_string(im.height());
    const Measure cpu_odd = measure(b.reps, [&] {
      fovea::PyramidU8 p = fovea::build_pyramid(im.clone(), {}, *b.exec);
      if (p.num_levels() == 0) std::abort();
    });
    row(("CPU build_pyramid (+ clone) " + tag).c_str(), cpu_odd, cpu_odd.ms, false);
    const Measure padded = measure(b.reps, [&] { gpu->build_pyramid(im, {}, fovea::MipMethod::blit); }, gpu);
    row(("Vulkan blit, padded " + tag).c_str(), padded, cpu_odd.ms, true);
    const Measure unpadded = measure(b.reps, [&] { plain->build_pyramid(im, {}, fovea::MipMethod::blit); }, plain);
    row(("Vulkan blit, unpadded " + tag).c_str(), unpadded, cpu_odd.ms, true);
    std::printf("  mips: padded / unpadded %.2fx\n", padded.split.mips_ms / unpadded.split.mips_ms);
  }
}

// Accuracy of section 1b against the CPU pyramid: uint8 samples off (and by how much), float
// relative, padded and unpadded.
void odd_size_accuracy(const Bench& b, fovea::VulkanBackend* plain, const fovea::ImageU8& odd) {
  struct Case {
    const char* name;
    fovea::ImageU8 img;
  };
  std::vector<Case> cases;
  cases.push_back({"odd above", odd.clone()});
  cases.push_back({"8191x5 noise", make_image(8191, 5, 3)});
  fovea::ImageU8 stripes(16383, 3, 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 16383; ++x) stripes.at(c, y, x) = uint8_t((x + c) % 2 ? 255 : 0);
  cases.push_back({"16383x3 stripes", std::move(stripes)});
  std::printf("    %-16s  %-28s  %-28s\n", "image", "padded: u8 off / f32 rel", "unpadded: u8 off / f32 rel");
  for (const Case& c : cases) {
    const fovea::PyramidU8 want = fovea::build_pyramid(c.img.clone(), {}, *b.exec);
    fovea::ImageF32 f(c.img.width(), c.img.height(), 3);  // values in [0, 1]
    for (int ch = 0; ch < 3; ++ch)
      for (int y = 0; y < f.height(); ++y)
        for (int x = 0; x < f.width(); ++x) f.at(ch, y, x) = c.img.at(ch, y, x) / 255.0f + 1.0f / 512;
    const fovea::PyramidF32 fwant = fovea::build_pyramid(f.clone(), {}, *b.exec);
    std::printf("    %-16s", c.name);
    for (fovea::VulkanBackend* be : {b.gpu, plain}) {
      const fovea::PyramidU8 got = be->build_pyramid(c.img, {}, fovea::MipMethod::blit);
      const fovea::PyramidF32 fgot = be->build_pyramid(f, {}, fovea::MipMethod::blit);
      long off = 0, total = 0;
      int worst = 0;
      double rel = 0;
      for (int l = 0; l < want.num_levels(); ++l)
        for (int ch = 0; ch < 3; ++ch)
          for (int y = 0; y < want.level(l).height(); ++y)
            for (int x = 0; x < want.level(l).width(); ++x) {
              const int d = std::abs(int(got.level(l).at(ch, y, x)) - int(want.level(l).at(ch, y, x)));
              off += d != 0;
              worst = std::max(worst, d);
              ++total;
              const float fw = fwant.level(l).at(ch, y, x);
              rel = std::max(rel, double(std::abs(fgot.level(l).at(ch, y, x) - fw)) / std::abs(fw));
            }
      std::printf("  %6ld/%-8ld (max %d)  %.1e ", off, total, worst, rel);
    }
    std::printf("\n");
  }
  std::printf("\n");
}

// The tokenization sections 2 and 3 extract: 273 tokens of 16 px.
fovea::TokenizeParams extraction_params() {
  fovea::TokenizeParams tp;
  tp.patch_px = 16;
  tp.alloc.budget_tokens = 273;
  return tp;
}

// 2. Foveated extraction: CPU extract vs the shader's sampling.
void bench_extraction(const Bench& b, const fovea::ImageU8& img, const fovea::TokenizeParams& tp) {
  fovea::VulkanBackend* gpu = b.gpu;
  fovea::Executor& exec = *b.exec;
  fovea::Query q;
  q.fixations.push_back({b.size * 0.3f, b.size * 0.4f, 1.0f});
  const fovea::Tokenization t = fovea::tokenize(img.clone(), q, tp, exec);
  std::printf("2. foveated extraction, %d tokens of %dx%d (levels 0..%d), f32 normalised\n",
              int(t.allocation.layout.tokens.size()), tp.patch_px, tp.patch_px, t.allocation.max_level);
  const fovea::PyramidU8 pyr = fovea::build_pyramid(img.clone(), {.max_levels = t.allocation.max_level + 1}, exec);
  const Measure cpu_ex = measure(b.reps, [&] { fovea::extract(pyr, t.allocation, tp.extract, exec); });
  row("CPU extract (pyramid given)", cpu_ex, cpu_ex.ms, false);
  const Measure cpu_both = measure(b.reps, [&] {
    fovea::PyramidU8 p = fovea::build_pyramid(img.clone(), {.max_levels = t.allocation.max_level + 1}, exec);
    fovea::extract(p, t.allocation, tp.extract, exec);
  });
  row("CPU pyramid + extract", cpu_both, cpu_both.ms, false);
  const Measure gex = measure(b.reps, [&] { gpu->extract(img, t.allocation, tp.extract); }, gpu);
  row("Vulkan upload+mips+sample", gex, cpu_both.ms, true);
  std::printf("  sampling dispatch alone %.2f ms: CPU extract / dispatch %.2fx\n\n", gex.split.dispatch_ms,
              cpu_ex.ms / gex.split.dispatch_ms);
}

// 3. A batch: image by image on the CPU, one call per image, one array texture.
void bench_batches(const Bench& b, const fovea::TokenizeParams& tp) {
  fovea::VulkanBackend* gpu = b.gpu;
  fovea::Executor& exec = *b.exec;
  const int batch = b.batch, batch_size = b.batch_size;
  std::vector<fovea::ImageU8> imgs;
  std::vector<fovea::Tokenization> toks;
  for (int i = 0; i < batch; ++i) {
    imgs.push_back(make_image(batch_size, batch_size, 100 + i));
    fovea::Query qi;
    qi.fixations.push_back({float((i * 37) % batch_size), float((i * 91) % batch_size), 1.0f});
    toks.push_back(fovea::tokenize(imgs.back().clone(), qi, tp, exec));
  }
  std::vector<const fovea::ImageU8*> ip;
  std::vector<const fovea::Allocation*> ap;
  for (int i = 0; i < batch; ++i) {
    ip.push_back(&imgs[i]);
    ap.push_back(&toks[i].allocation);
  }
  std::printf("3. batch of %d images %dx%d RGB, pyramid + extraction each\n", batch, batch_size, batch_size);
  const Measure cpu_b = measure(b.reps, [&] {
    for (int i = 0; i < batch; ++i) {
      fovea::PyramidU8 p = fovea::build_pyramid(imgs[i].clone(), {.max_levels = toks[i].allocation.max_level + 1}, exec);
      fovea::extract(p, toks[i].allocation, tp.extract, exec);
    }
  });
  row("CPU, image by image", cpu_b, cpu_b.ms, false);
  VulkanTimings sum;
  const Measure one_by_one = measure(b.reps, [&] {
    sum = {};
    for (int i = 0; i < batch; ++i) {
      gpu->extract(imgs[i], toks[i].allocation, tp.extract);
      const VulkanTimings& s = gpu->last_timings();
      sum.upload_ms += s.upload_ms;
      sum.mips_ms += s.mips_ms;
      sum.dispatch_ms += s.dispatch_ms;
      sum.readback_ms += s.readback_ms;
    }
  });
  Measure obo = one_by_one;
  obo.split = sum;  // the last run's sum, close to the median's
  const std::string calls = "Vulkan, " + std::to_string(batch) + " calls of 1 image";
  row(calls.c_str(), obo, cpu_b.ms, true);
  const Measure arr = measure(b.reps, [&] { gpu->extract_batch(ip, ap, tp.extract); }, gpu);
  row("Vulkan, one array texture", arr, cpu_b.ms, true);
  std::printf("  per image: CPU %.2f ms, Vulkan single %.2f ms, Vulkan array %.2f ms; single / array %.2fx\n",
              cpu_b.ms / batch, one_by_one.ms / batch, arr.ms / batch, one_by_one.ms / arr.ms);
}

}  // namespace

int main(int argc, char** argv) {
  Bench b = parse_args(argc, argv);
  if (!fovea::vulkan_available()) {
    std::printf("bench_vulkan: no Vulkan device (or a build without Vulkan): nothing to compare\n");
    return 0;
  }
  try {
    auto gpu = fovea::VulkanBackend::create({});
    const fovea::VulkanDeviceInfo& dev = gpu->device();
    fovea::Executor exec({.threads = b.threads});
    b.gpu = gpu.get();
    b.exec = &exec;
    std::printf("device: %s (%s), driver %s\n", dev.name.c_str(), dev.type.c_str(), dev.driver.c_str());
    if (dev.type == "cpu")
      std::printf("NOTE: %s is a CPU implementation of Vulkan (lavapipe): every 'Vulkan' number below is a CPU\n"
                  "      number, on the same cores as the CPU path; they show overheads and correctness, not GPU "
                  "speed.\n",
                  dev.name.c_str());
    std::printf("CPU path: %d threads. Median of %d runs after one warm-up. Ratio: CPU time / this time.\n\n",
                exec.threads(), b.reps);

    const fovea::ImageU8 img = make_image(b.size, b.size, 1);
    bench_pyramid(b, img);
    pyramid_accuracy(b, img);
    {
      auto plain = fovea::VulkanBackend::create({.device = "", .validation = false, .pad_blit_chains = false});
      const int w = b.size - b.size / 41, h = b.size - b.size / 23;  // 1000x980 for --size 1024
      const fovea::ImageU8 odd = make_image(w, h, 2);
      bench_odd_sizes(b, plain.get(), odd);
      odd_size_accuracy(b, plain.get(), odd);
    }
    const fovea::TokenizeParams tp = extraction_params();
    bench_extraction(b, img, tp);
    bench_batches(b, tp);
    if (gpu->validation_errors() != 0) std::printf("WARNING: validation messages were reported\n");
  } catch (const fovea::Error& e) {
    std::fprintf(stderr, "bench_vulkan: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
