// Times fovea's ViT encoder; driven by bench/encode_bench.py, which runs torch in the same run.
//
//   build/bench/bench_encode --model random:vit-b16 --n 196,273,1024 --precision fp32 --threads 2 --reps 3
//   build/bench/bench_encode --e2e IMAGE --budget 273 --precision bf16 ...   (tokenize + encode)
//
// Prints one JSON object per line: {"n", "precision", "threads", "median_ms", "min_ms", ...}.
// The first encode of every shape (oneDNN primitive creation, weight packing, first touch of the
// weights) is a warm-up, not in the median; it is reported apart as first_ms (and the model's
// load as load_ms), for bench/oneshot_bench.py.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fovea/encoder.hpp"
#include "fovea/error.hpp"
#include "fovea/exec.hpp"
#include "fovea/image.hpp"
#include "fovea/tokenizer.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

struct Stats {
  double median = 0, min = 0;
};
template <typename F>
Stats time_reps(int reps, F&& fn) {
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    fn();
    ts.push_back(ms_since(t0));
  }
  std::sort(ts.begin(), ts.end());
  return {ts[ts.size() / 2], ts[0]};
}

}  // namespace

int main(int argc, char** argv) {
  // The passive OpenMP wait policy, as the fovea CLI chooses it (tools/fovea/main.cpp): the
  // program owns that choice, and libgomp reads it only at load time, hence the re-exec.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0) {
    ::execv("/proc/self/exe", argv);
    ::unsetenv("OMP_WAIT_POLICY");
  }
  std::string model_spec = "random:vit-b16", ns = "196,273,576,1024,4096", precision = "fp32", e2e_image;
  int threads = 2, reps = 3, budget = 273;
  bool uniform = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_encode: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_spec = next();
    else if (a == "--n") ns = next();
    else if (a == "--precision") precision = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--reps") reps = std::stoi(next());
    else if (a == "--e2e") e2e_image = next();
    else if (a == "--budget") budget = std::stoi(next());
    else if (a == "--uniform") uniform = true;
    else {
      std::fprintf(stderr, "bench_encode: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const auto t_load = Clock::now();
    const fovea::VitModel model = fovea::VitModel::load(model_spec);
    const double load_ms = ms_since(t_load);
    const fovea::VitConfig& c = model.config();
    fovea::Executor exec({.threads = threads});
    const fovea::Precision prec = precision == "bf16" ? fovea::Precision::bf16 : fovea::Precision::fp32;
    if (!e2e_image.empty()) {
      // Decode once (excluded), then tokenize + encode per repetition.
      const fovea::ImageU8 img = fovea::load_image(e2e_image);
      fovea::TokenizeParams params;
      params.alloc.budget_tokens = budget;
      params.patch_px = c.patch_px;
      params.uniform = uniform;
      fovea::Query query;
      query.fixations.push_back({img.width() * 0.5f, img.height() * 0.4f, 1.0f});
      int64_t n = 0;
      auto run = [&] {
        fovea::Tokenization t = fovea::tokenize(img.clone(), query, params, exec);
        const fovea::Encoding e = fovea::encode(model, t.batch.patches, t.batch.positions,
                                                {.precision = prec, .image_width = img.width(), .image_height = img.height()},
                                                exec);
        n = e.embeddings.dim(0);
      };
      run();  // warm-up
      const Stats s = time_reps(reps, run);
      nlohmann::json j{{"mode", uniform ? "uniform" : "foveated"}, {"budget", budget}, {"n", n},
                       {"precision", precision}, {"threads", threads}, {"median_ms", s.median},
                       {"min_ms", s.min}, {"image", e2e_image}, {"model", model.describe()}};
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    for (int n : parse_list(ns)) {
      fovea::Tensor patches(fovea::DType::f32, {n, c.channels, c.patch_px, c.patch_px});
      fovea::Tensor positions(fovea::DType::f32, {n, 4});
      uint32_t s = 1;
      for (int64_t i = 0; i < patches.numel(); ++i) {
        s = s * 1664525u + 1013904223u;
        patches.data<float>()[i] = float(s >> 8) / float(1 << 24) * 4 - 2;
      }
      const int side = int(std::ceil(std::sqrt(double(n))));
      for (int i = 0; i < n; ++i) {
        float* p = positions.data<float>() + i * 4;
        p[0] = (float(i % side) + 0.5f) * c.patch_px, p[1] = (float(i / side) + 0.5f) * c.patch_px;
        p[2] = float(c.patch_px), p[3] = 0;
      }
      const fovea::EncodeParams ep{.precision = prec, .image_width = side * c.patch_px, .image_height = side * c.patch_px};
      const auto t_first = Clock::now();
      fovea::encode(model, patches, positions, ep, exec);  // warm-up: first touch of weights and kernels
      const double first_ms = ms_since(t_first);
      const Stats st = time_reps(reps, [&] { fovea::encode(model, patches, positions, ep, exec); });
      nlohmann::json j{{"mode", "encode"}, {"n", n}, {"precision", precision}, {"threads", threads},
                       {"median_ms", st.median}, {"min_ms", st.min}, {"first_ms", first_ms},
                       {"load_ms", load_ms}, {"model", model.describe()}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  } catch (const fovea::Error& e) {
    std::fprintf(stderr, "bench_encode: %s\n", e.what());
    return 1;
  }
  return 0;
}
