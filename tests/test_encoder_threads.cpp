// Concurrent encodes (issue 19's TSan job): several threads encode on one shared model (its
// encode() calls are serialised by the model) and on models of their own (truly concurrent:
// the GEMM primitive caches, the reordered weights), each with a one-thread executor, and every
// result equals the serial one bit for bit. In the TSan build (label tsan) this is the
// encoder's race check: one-thread executors keep OpenMP, whose runtime is not instrumented,
// from spawning a team.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "fovea/encoder.hpp"

namespace fovea {
namespace {

void tokens(const VitConfig& c, int64_t n, Tensor* patches, Tensor* positions) {
  *patches = Tensor(DType::f32, {n, c.channels, c.patch_px, c.patch_px});
  *positions = Tensor(DType::f32, {n, 4});
  uint32_t s = 777;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return float(s % 100000) / 100000.0f;
  };
  for (int64_t i = 0; i < patches->numel(); ++i) patches->data<float>()[i] = next() * 4 - 2;
  for (int64_t i = 0; i < n; ++i) {
    float* p = positions->data<float>() + i * 4;
    p[0] = next() * 256, p[1] = next() * 256, p[2] = float(c.patch_px), p[3] = 0;
  }
}

TEST(EncoderThreads, ConcurrentEncodesEqualTheSerialOne) {
  const VitModel shared = VitModel::load("random:vit-tiny:5");
  Tensor patches, positions;
  tokens(shared.config(), 40, &patches, &positions);
  const EncodeParams params{.precision = Precision::fp32, .image_width = 256, .image_height = 256};
  Executor one(ExecConfig{.threads = 1});
  const Encoding want = encode(shared, patches, positions, params, one);

  constexpr int kThreads = 3, kRounds = 2;
  std::vector<int> mismatches(kThreads, 0), errors(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      try {
        const VitModel own = VitModel::load("random:vit-tiny:5");  // same weights, its own state
        Executor ex(ExecConfig{.threads = 1});
        for (int r = 0; r < kRounds; ++r)
          for (const VitModel* m : {&shared, &own}) {
            const Encoding e = encode(*m, patches, positions, params, ex);
            if (e.embeddings.size_bytes() != want.embeddings.size_bytes() ||
                std::memcmp(e.embeddings.bytes(), want.embeddings.bytes(), want.embeddings.size_bytes()) != 0)
              ++mismatches[size_t(t)];
          }
      } catch (...) {
        ++errors[size_t(t)];
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[size_t(t)], 0) << "thread " << t;
    EXPECT_EQ(mismatches[size_t(t)], 0) << "thread " << t;
  }
}

}  // namespace
}  // namespace fovea
