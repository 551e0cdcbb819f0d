// fovea/exec.hpp — how the stages run, kept apart from what they compute.
//
//   fovea::Executor exec({.threads = 2});                   // a pool of 2 (caller included)
//   std::vector<float> rows(1000);
//   exec.parallel_for(1000, 16, [&](int64_t y0, int64_t y1) { for (int64_t y = y0; y < y1; ++y) rows[y] = 1; });
//
// Every stage is a pure function of its inputs plus an Executor that says how to run it:
// how many threads, which SIMD kernels, which backend. Results never depend on the thread
// count; the scalar reference kernels give the same output as the SIMD ones (tests check).
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

// For programs, first thing in main(): unless the environment already chooses an OpenMP wait
// policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT), re-executes the program once with
// OMP_WAIT_POLICY=PASSIVE, and returns only when it did not (already chosen, or exec failed).
// libgomp reads the policy when it loads, before main, so setting it any later has no effect.
// Its default spins idle threads at every barrier for a while; the encoder (oneDNN and its own
// parallel loops) crosses thousands of barriers, and on cores shared with other work the
// spinning threads take the time the others need. Measured on this project's 2-core machine
// with two busy processes beside it: ViT-B/16 bf16 at N=273 took 412 ms spinning and 206 ms
// passive (the fair share of half the cores); alone, both took the same within noise.
void use_passive_openmp_wait(char** argv);

// The OpenMP wait policy this process runs with: the environment's OMP_WAIT_POLICY, or
// "default".
const char* openmp_wait_policy();

}  // namespace fovea
