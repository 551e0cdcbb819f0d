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
  // A linear layer's shapes: W [N, K] with a bias, each thread its own rows of A and of C.
  const int64_t n = 96, k = 128, m = 24;
  const Tensor w = random_f32({n, k}, 1), bias = random_f32({n}, 2);
  const Tensor a_f32[2] = {random_f32({m, k}, 3), random_f32({m, k}, 4)};
  std::vector<DType> types{DType::f32};
  if (Gemm().packs_weights(DType::bf16)) types.push_back(DType::bf16);  // the CPU has bf16 kernels
  // Per type: A as the GEMM reads it, the serial outputs, a fresh engine and the two threads' calls
  // on it, all made before the region.
  struct Case {
    DType adt;
    Tensor a[2], serial[2], together[2];
    Gemm gemm;
    GemmArgs args[2];
  };
  std::vector<Case> cases(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    Case& c = cases[i];
    c.adt = types[i];
    Gemm serial;  // the serial run: one thread, the same engine settings
    serial.pack_on_first_use();
    for (int t = 0; t < 2; ++t) {
      c.a[t] = as_dtype(a_f32[t], c.adt);
      c.serial[t] = Tensor(DType::f32, {m, n});
      c.together[t] = Tensor(DType::f32, {m, n});
      serial.run(encoder_detail::linear_args(c.a[t].bytes(), c.adt, m, w, &bias, c.serial[t].bytes(), DType::f32));
      c.args[t] = encoder_detail::linear_args(c.a[t].bytes(), c.adt, m, w, &bias, c.together[t].bytes(), DType::f32);
    }
    c.gemm.pack_on_first_use();  // the first use makes the packed copy (where the kernels pack)
    c.gemm.reserve_threads(2);
  }
  // One region for every case: a second region would start on libgomp's pooled threads, whose
  // hand-over TSan does not see. Per case, the two threads meet, then call the same engine.
  std::vector<std::atomic<int>> arrived(cases.size());
  int team = 0;
  char region_end[2];
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    if (t == 0) team = omp_get_num_threads();
    for (size_t i = 0; i < cases.size(); ++i) {
      arrived[i].fetch_add(1);
      while (arrived[i].load() < omp_get_num_threads()) {
      }
      cases[i].gemm.run(cases[i].args[t]);
    }
    FOVEA_TEST_TSAN_RELEASE(&region_end[t]);
  }
  FOVEA_TEST_TSAN_ACQUIRE(&region_end[0]);
  FOVEA_TEST_TSAN_ACQUIRE(&region_end[1]);
  ASSERT_EQ(team, 2) << "the region must run two threads for the test to mean anything";
  for (Case& c : cases) {
    SCOPED_TRACE(c.adt == DType::bf16 ? "bf16" : "f32");
    EXPECT_TRUE(same_bytes(c.together[0], c.serial[0]));
    EXPECT_TRUE(same_bytes(c.together[1], c.serial[1]));
    // Where the kernels pack constant weights, both threads read one packed copy, made once.
    if (c.gemm.packs_weights(c.adt)) {
      EXPECT_EQ(c.gemm.packed_stats().weights, 1);
    }
  }
}

}  // namespace fovea
