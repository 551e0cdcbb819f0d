// Full mip chains of a 4096×4096 RGB image (planar), uint8 and float32, plus the memcpy floor.
// bench/pyramid.py runs this together with OpenCV and torch and prints the ratios.
//
//   Pyramid/<u8|f32>/<simd|reference>/alloc/threads:<n>
//       build_pyramid(level 0) -> 13 levels (4096 ... 1), the 12 new levels allocated on
//       every call, as cv2.resize / avg_pool2d allocate theirs. Level 0 is moved in and moved
//       back out, never copied. (glibc may hand a freed block back, so after the first
//       iteration some levels are not first-touched again: see --first-call for that.)
//   Pyramid/<u8|f32>/<simd|reference>/reuse/threads:<n>
//       rebuild_pyramid into the same pyramid: the steady state of a video or of same-size
//       images, no allocation and no first-touch page fault.
//   MemcpyFloor/<u8|f32>/threads:<n>
//       The least memory traffic any pyramid needs: read level 0 once (R bytes) and write
//       levels 1.. once (W bytes). The floor is the time memcpy takes to move that much,
//       i.e. one memcpy of (R + W) / 2 bytes (it reads and writes that many), split into
//       `n` contiguous pieces on n threads, into a buffer allocated and touched beforehand.
//       For 4096×4096×3: R = 48 MiB, W ≈ 16 MiB (u8) and 4× that for f32.
//
//   bench_pyramid --first-call u8|f32
//       Instead of the benchmarks: the first build_pyramid of this process, with 2 threads
//       (the Executor made beforehand), as one JSON line {"dtype", "threads", "ms"}. The
//       levels are fresh memory, so this is allocation plus first-touch page faults plus the
//       work. Run it in a fresh process each time (pyramid.py does).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/exec.hpp"
#include "fovea/pyramid.hpp"

namespace {

constexpr int kSize = 4096;
constexpr int kChannels = 3;

template <typename T>
fovea::Image<T> make_image() {
  fovea::Image<T> img(kSize, kSize, kChannels);
  uint32_t s = 0x9E3779B9u;
  for (int c = 0; c < kChannels; ++c)
    for (int y = 0; y < kSize; ++y) {
      T* row = img.row(c, y);
      for (int x = 0; x < kSize; ++x) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        if constexpr (sizeof(T) == 1)
          row[x] = static_cast<T>(s >> 24);
        else
          row[x] = static_cast<T>((s >> 8) * (1.0 / 16777216.0));
      }
    }
  return img;
}

// Bytes a full chain must read (level 0) and write (levels 1..), without row padding.
template <typename T>
void pyramid_traffic(size_t* read_bytes, size_t* write_bytes) {
  const int levels = fovea::full_mip_levels(kSize, kSize);
  *read_bytes = size_t(kSize) * kSize * kChannels * sizeof(T);
  *write_bytes = 0;
  for (int l = 1; l < levels; ++l)
    *write_bytes += size_t(fovea::mip_extent(kSize, l)) * fovea::mip_extent(kSize, l) *
                    kChannels * sizeof(T);
}

template <typename T>
fovea::Image<T>& shared_image() {
  static fovea::Image<T> img = make_image<T>();
  return img;
}

template <typename T>
void BM_Pyramid(benchmark::State& state, fovea::Kernels kernels, bool reuse) {
  fovea::Image<T>& img = shared_image<T>();
  fovea::Executor exec({.threads = static_cast<int>(state.range(0)), .kernels = kernels});
  if (reuse) {
    fovea::Pyramid<T> pyr = fovea::build_pyramid(std::move(img), {}, exec);  // allocates, untimed
    for (auto _ : state) {
      fovea::rebuild_pyramid(pyr, {}, exec);
      benchmark::DoNotOptimize(pyr.level(pyr.num_levels() - 1).row(0, 0));
    }
    img = std::move(pyr.level(0));
  } else {
    for (auto _ : state) {
      fovea::Pyramid<T> pyr = fovea::build_pyramid(std::move(img), {}, exec);
      benchmark::DoNotOptimize(pyr.level(pyr.num_levels() - 1).row(0, 0));
      img = std::move(pyr.level(0));
    }
  }
  size_t r = 0, w = 0;
  pyramid_traffic<T>(&r, &w);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(r + w));
  state.counters["levels"] = fovea::full_mip_levels(kSize, kSize);
}

template <typename T>
void BM_MemcpyFloor(benchmark::State& state) {
  size_t r = 0, w = 0;
  pyramid_traffic<T>(&r, &w);
  const size_t n = (r + w) / 2;
  static std::vector<uint8_t> src(n, 1), dst(n, 2);  // touched: no page faults when timed
  const int threads = static_cast<int>(state.range(0));
  fovea::Executor exec({.threads = threads});
  const int64_t pieces = threads;
  const size_t piece = (n + pieces - 1) / pieces;
  for (auto _ : state) {
    exec.parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const size_t off = size_t(i) * piece;
        std::memcpy(dst.data() + off, src.data() + off, std::min(piece, n - off));
      }
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * n));
}

void threads_1_2(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
}

void register_all() {
  using fovea::Kernels;
  for (const bool reuse : {true, false}) {
    const std::string mode = reuse ? "/reuse" : "/alloc";
    for (const Kernels k : {Kernels::best, Kernels::reference}) {
      const std::string kn = k == Kernels::best ? "simd" : "reference";
      threads_1_2(benchmark::RegisterBenchmark(("Pyramid/u8/" + kn + mode).c_str(), BM_Pyramid<uint8_t>, k, reuse));
      threads_1_2(benchmark::RegisterBenchmark(("Pyramid/f32/" + kn + mode).c_str(), BM_Pyramid<float>, k, reuse));
    }
  }
  threads_1_2(benchmark::RegisterBenchmark("MemcpyFloor/u8", BM_MemcpyFloor<uint8_t>));
  threads_1_2(benchmark::RegisterBenchmark("MemcpyFloor/f32", BM_MemcpyFloor<float>));
}

template <typename T>
double first_call_ms(fovea::Executor& exec) {
  fovea::Image<T> img = make_image<T>();
  const auto t0 = std::chrono::steady_clock::now();
  fovea::Pyramid<T> pyr = fovea::build_pyramid(std::move(img), {}, exec);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(pyr.level(pyr.num_levels() - 1).row(0, 0));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--first-call") {
    const std::string_view dtype = argv[2];
    if (dtype != "u8" && dtype != "f32") {
      std::fprintf(stderr, "bench_pyramid: --first-call u8|f32\n");
      return 2;
    }
    fovea::Executor exec({.threads = 2});
    const double ms = dtype == "u8" ? first_call_ms<uint8_t>(exec) : first_call_ms<float>(exec);
    std::printf("{\"dtype\": \"%s\", \"threads\": 2, \"ms\": %.4f}\n", argv[2], ms);
    return 0;
  }
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
