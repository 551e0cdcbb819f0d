// One Gemm (one context's GEMM engine) used by two threads of one OpenMP parallel region, as the
// video encoder's row chunks use it: both threads make the first use of the same constant weight
// at the same moment, so both look up, pack and record its packed copy at once. The Gemm's
// record of what it looked up is read and written under its mutex; the test checks that the
// outputs equal a serial run's bit for bit, and, in the TSan build (label tsan), that no access
// to that record races.
//
// OpenMP's runtime (libgomp) is not instrumented, so TSan does not see the happens-before of the
// region's start and end. The region is therefore the process's first OpenMP team (everything
// before it runs with one OpenMP thread, so no team exists yet and libgomp creates the two
// threads, which TSan sees), and its end is annotated (__tsan_release / __tsan_acquire). The two
// threads are ordered by nothing but the Gemm's own locks: the rendezvous before the calls
// (an atomic counter) orders what comes before it, not the calls.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "encoder/encoder_internal.hpp"
#include "fovea/tensor.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define FOVEA_TEST_TSAN_RELEASE(p) __tsan_release(p)
#define FOVEA_TEST_TSAN_ACQUIRE(p) __tsan_acquire(p)
#else
#define FOVEA_TEST_TSAN_RELEASE(p) ((void)(p))
#define FOVEA_TEST_TSAN_ACQUIRE(p) ((void)(p))
#endif

namespace fovea {
namespace {

using encoder_detail::Gemm;
using encoder_detail::GemmArgs;

Tensor random_f32(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t(DType::f32, std::move(shape));
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = float(s >> 8) / float(1 << 24) * 2 - 1;
  }
  return t;
}

// A as the GEMM reads it: f32, or rounded to bf16.
Tensor as_dtype(const Tensor& a, DType dt) {
  if (dt == DType::f32) return a.clone();
  Tensor out(DType::bf16, a.shape());
  encoder_detail::to_bf16_row(a.data<float>(), out.data<uint16_t>(), a.numel());
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.bytes(), b.bytes(), a.size_bytes()) == 0;
}

}  // namespace

TEST(GemmThreads, FirstUseOfOneConstantWeightFromTwoThreadsOfARegion) {
  // Nothing before the region may start an OpenMP team (see the top of the file).
  const encoder_detail::OmpThreadsScope one_thread(1);
  // A linear layer's shapes: W [N, K] with a bias, each thread its own rows of A and of C. Several
  // weights, each a first use by both threads at once: whether two first uses overlap in the
  // racy way depends on how the threads interleave, so each weight is another chance.
  const int64_t n = 96, k = 128, m = 24;
  const int kWeights = 16;
  std::vector<Tensor> w;
  for (int i = 0; i < kWeights; ++i) w.push_back(random_f32({n, k}, 10 + uint32_t(i)));
  const Tensor bias = random_f32({n}, 2);
  const Tensor a_f32[2] = {random_f32({m, k}, 3), random_f32({m, k}, 4)};
  std::vector<DType> types{DType::f32};
  if (Gemm().packs_weights(DType::bf16)) types.push_back(DType::bf16);  // the CPU has bf16 kernels
  // Per type: A as the GEMM reads it, a fresh engine, and per weight the serial outputs and the two
  // threads' calls, all made before the region.
  struct Use {
    Tensor serial[2], together[2];
    GemmArgs args[2];
  };
  struct Case {
    DType adt;
    Tensor a[2];
    Gemm gemm;
    std::vector<Use> uses;
  };
  std::vector<Case> cases(types.size());
  for (size_t c = 0; c < types.size(); ++c) {
    Case& cs = cases[c];
    cs.adt = types[c];
    for (int t = 0; t < 2; ++t) cs.a[t] = as_dtype(a_f32[t], cs.adt);
    Gemm serial;  // the serial run: one thread, the same engine settings
    serial.pack_on_first_use();
    cs.uses.resize(kWeights);
    for (int i = 0; i < kWeights; ++i)
      for (int t = 0; t < 2; ++t) {
        Use& u = cs.uses[size_t(i)];
        u.serial[t] = Tensor(DType::f32, {m, n});
        u.together[t] = Tensor(DType::f32, {m, n});
        serial.run(encoder_detail::linear_args(cs.a[t].bytes(), cs.adt, m, w[size_t(i)], &bias, u.serial[t].bytes(),
                                               DType::f32));
        u.args[t] = encoder_detail::linear_args(cs.a[t].bytes(), cs.adt, m, w[size_t(i)], &bias, u.together[t].bytes(),
                                                DType::f32);
      }
    cs.gemm.pack_on_first_use();  // the first use makes the packed copy (where the kernels pack)
    cs.gemm.reserve_threads(2);
  }
  // One region for every case: a second region would start on libgomp's pooled threads, whose
  // hand-over TSan does not see. Per use, the two threads meet, then call the same engine.
  std::vector<std::atomic<int>> arrived(cases.size() * kWeights);
  int team = 0;
  char region_end[2];
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    if (t == 0) team = omp_get_num_threads();
    for (size_t c = 0; c < cases.size(); ++c)
      for (int i = 0; i < kWeights; ++i) {
        std::atomic<int>& met = arrived[c * kWeights + size_t(i)];
        met.fetch_add(1);
        while (met.load() < omp_get_num_threads()) {
        }
        cases[c].gemm.run(cases[c].uses[size_t(i)].args[t]);
      }
    FOVEA_TEST_TSAN_RELEASE(&region_end[t]);
  }
  FOVEA_TEST_TSAN_ACQUIRE(&region_end[0]);
  FOVEA_TEST_TSAN_ACQUIRE(&region_end[1]);
  ASSERT_EQ(team, 2) << "the region must run two threads for the test to mean anything";
  for (Case& cs : cases) {
    SCOPED_TRACE(cs.adt == DType::bf16 ? "bf16" : "f32");
    for (const Use& u : cs.uses) {
      EXPECT_TRUE(same_bytes(u.together[0], u.serial[0]));
      EXPECT_TRUE(same_bytes(u.together[1], u.serial[1]));
    }
    // Where the kernels pack constant weights, both threads read one packed copy per weight.
    if (cs.gemm.packs_weights(cs.adt)) {
      EXPECT_EQ(cs.gemm.packed_stats().weights, kWeights);
    }
  }
}

}  // namespace fovea
