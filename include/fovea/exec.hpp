// fovea/exec.hpp — how the stages run, kept apart from what they compute.
//
//   fovea::Executor exec({.threads = 2});                   // a pool of 2 (caller included)
//   std::vector<float> rows(1000);
//   exec.parallel_for(1000, 16, [&](int64_t y0, int64_t y1) { for (int64_t y = y0; y < y1; ++y) rows[y] = 1; });
//
// Every stage is a pure function of its inputs plus an Executor that says how to run it:
// how many threads, which SIMD kernels, which backend. Results never depend on the thread
// count; the scalar reference kernels give the same output as the SIMD ones (tests check).
//
// The thread count is per call: a stage uses the threads of the Executor it is given and
// changes nothing process-wide. The encoder runs oneDNN, which Debian builds on OpenMP
// (DNNL_CPU_RUNTIME == OMP, so oneDNN cannot run on this pool): it sets the calling thread's
// OpenMP team size to threads() for the call and restores the caller's value before returning.
// The OpenMP wait policy (OMP_WAIT_POLICY) belongs to the program, not the library: libgomp
// reads it once when it loads. The fovea CLI chooses PASSIVE (tools/fovea/main.cpp;
// docs/explanation/encoder.md says why).
//
// Thread safety: an Executor may be shared by threads; concurrent parallel_for calls on the
// same Executor run one after another (one pool job at a time). Give each thread its own
// Executor to run calls side by side.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace fovea {

enum class Kernels : uint8_t {
  best,       // SIMD, dispatched at run time to the best target this CPU supports
  reference,  // the plain scalar implementation every SIMD kernel is tested against
};

struct ExecConfig {
  int threads = 0;  // 0: one per hardware thread
  Kernels kernels = Kernels::best;
};

class Executor {
 public:
  explicit Executor(const ExecConfig& config = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const ExecConfig& config() const { return config_; }
  int threads() const { return threads_; }
  bool reference() const { return config_.kernels == Kernels::reference; }

  // Calls body(begin, end) over disjoint chunks covering [0, n), each at least `grain` long
  // (except the last), on up to threads() threads including the caller; returns when all are
  // done. A nested call from inside a body runs serially on the calling thread. The first
  // exception thrown by a body is rethrown here after every chunk has finished.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

 private:
  struct Pool;
  ExecConfig config_;
  int threads_ = 1;
  std::unique_ptr<Pool> pool_;
};

}  // namespace fovea
