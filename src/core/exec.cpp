#include "fovea/exec.hpp"

#include "fovea/error.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace fovea {

namespace {
thread_local bool t_inside_pool_body = false;
}

// A fixed set of workers woken per job. Chunks are claimed from an atomic counter, so a slow
// thread never holds up the others; the caller works too and then waits for stragglers.
struct Executor::Pool {
  explicit Pool(int workers) {
    try {
      for (int i = 0; i < workers; ++i) threads.emplace_back([this] { worker(); });
    } catch (const std::system_error& e) {
      // The system refused a thread (EAGAIN: RLIMIT_NPROC, a pids cgroup, address space). The
      // destructor will not run for a half-built Pool: stop and join the workers already
      // started here, or destroying the condition variables they wait on would block forever.
      const size_t started = threads.size();
      stop();
      throw Error(Errc::limit_exceeded, "cannot start " + std::to_string(workers) + " worker threads (the system " +
                                            "refused thread " + std::to_string(started + 1) + ": " + e.what() +
                                            "); ask for fewer threads");
    }
  }
  ~Pool() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (auto& t : threads) t.join();
    threads.clear();
  }

  void run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& body) {
    {
      std::lock_guard lock(mutex);
      job_body = &body;
      job_n = n;
      job_chunk = chunk;
      next.store(0, std::memory_order_relaxed);
      active = static_cast<int>(threads.size());
      error = nullptr;
      ++generation;
    }
    wake.notify_all();
    work();
    std::unique_lock lock(mutex);
    done.wait(lock, [this] { return active == 0; });
    job_body = nullptr;
    if (error) std::rethrow_exception(error);
  }

  void work() {
    const bool was_inside = t_inside_pool_body;
    t_inside_pool_body = true;
    for (;;) {
      const int64_t begin = next.fetch_add(job_chunk, std::memory_order_relaxed);
      if (begin >= job_n) break;
      const int64_t end = std::min(job_n, begin + job_chunk);
      try {
        (*job_body)(begin, end);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
      }
    }
    t_inside_pool_body = was_inside;
  }

  void worker() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
      }
      work();
      {
        std::lock_guard lock(mutex);
        if (--active == 0) done.notify_one();
      }
    }
  }

  std::mutex submit;  // held by the caller for the whole of run()

 private:
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable wake, done;
  bool stopping = false;
  uint64_t generation = 0;
  int active = 0;
  const std::function<void(int64_t, int64_t)>* job_body = nullptr;
  int64_t job_n = 0, job_chunk = 1;
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
};

Executor::Executor(const ExecConfig& config) : config_(config) {
  int n = config.threads;
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = n;
  if (n > 1) pool_ = std::make_unique<Pool>(n - 1);
}

Executor::~Executor() = default;

void Executor::parallel_for(int64_t n, int64_t grain,
                            const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (!pool_ || t_inside_pool_body || n <= grain) {
    body(0, n);
    return;
  }
  // About sixteen chunks per thread: on a shared machine one descheduled thread holding a big
  // chunk would make the whole call wait; claiming a chunk is one atomic add.
  const int64_t target = (n + int64_t(threads_) * 16 - 1) / (int64_t(threads_) * 16);
  const int64_t chunk = std::max(grain, target);
  // One pool job at a time: concurrent callers of the same Executor serialise here.
  std::lock_guard lock(pool_->submit);
  pool_->run(n, chunk, body);
}

}  // namespace fovea
