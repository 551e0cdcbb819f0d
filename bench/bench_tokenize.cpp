// Full tokenize (decode excluded) of a 1024×1024 photo at B = 273 and B = 1024, foveated and
// uniform, with per-stage times as counters. bench/tokenize_bench.py runs this beside Python
// competitors and prints the ratios.
#include <benchmark/benchmark.h>

#include "fovea/image.hpp"
#include "fovea/tokenize.hpp"

namespace {

const fovea::ImageU8& photo_1024() {
  static const fovea::ImageU8 img = [] {
    fovea::Executor exec;
    const fovea::ImageU8 src = fovea::load_image(FOVEA_SOURCE_DIR "/data/astronaut.jpg");
    return fovea::resize_area(src, 1024, 1024, exec);
  }();
  return img;
}

void BM_Tokenize(benchmark::State& state) {
  const int budget = static_cast<int>(state.range(0));
  const bool uniform = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  fovea::Executor exec({.threads = threads});
  fovea::TokenizeParams p;
  p.alloc.budget_tokens = budget;
  p.uniform = uniform;
  fovea::Query q;
  q.fixations.push_back({500, 240});
  fovea::StageTimings sum;
  int64_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    fovea::ImageU8 img = photo_1024().clone();  // tokenize consumes its input
    state.ResumeTiming();
    fovea::Tokenization t = fovea::tokenize(std::move(img), uniform ? fovea::Query{} : q, p, exec);
    benchmark::DoNotOptimize(t.batch.patches.bytes());
    sum.pyramid_ms += t.timings.pyramid_ms;
    sum.relevance_ms += t.timings.relevance_ms;
    sum.allocate_ms += t.timings.allocate_ms;
    sum.extract_ms += t.timings.extract_ms;
    tokens = t.batch.size();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["pyramid_ms"] = sum.pyramid_ms / n;
  state.counters["relevance_ms"] = sum.relevance_ms / n;
  state.counters["allocate_ms"] = sum.allocate_ms / n;
  state.counters["extract_ms"] = sum.extract_ms / n;
}

// Args: budget, uniform, threads.
BENCHMARK(BM_Tokenize)
    ->ArgNames({"budget", "uniform", "threads"})
    ->Args({273, 0, 2})
    ->Args({1024, 0, 2})
    ->Args({273, 1, 2})
    ->Args({1024, 1, 2})
    ->Args({273, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
