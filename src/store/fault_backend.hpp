// Private to the store and its tests: a StoreBackend decorator that fails on demand, to prove
// the TokenStore's rollback. It forwards every call to a real backend (host, vulkan,
// vulkan-image) and, when told to, fails one: the Nth call of an operation, or each call with a
// seeded probability. A failing bind, fill_zero or write may first apply part of its work (a
// prefix of the pages, runs or bytes), as a device that fails in the middle of a batch would.
// It also keeps a shadow of every page mapping it passed on, so a test can check that the
// store's page tables match what the device really has mapped: nothing half-bound, no
// physical page mapped twice, none leaked.
//
//   auto faults = std::make_shared<fovea::StoreFaults>();
//   fovea::TokenStore store(cfg, fovea::make_fault_store_backend(fovea::make_host_store_backend(), faults));
//   faults->fail_call(fovea::StoreOp::bind, 1, /*partial=*/true);   // the next bind fails midway
//   store.bind(seq, 0, 100);                                        // throws Error(device)
//   // store.stats() and store.page_table(seq) are exactly as before; faults->mapped() agrees.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "fovea/store.hpp"

namespace fovea {

enum class StoreOp : uint8_t { init, bind, write, fill_zero, gather };
inline constexpr int kStoreOps = 5;
const char* to_string(StoreOp op);

// Shared between a test (which arms it) and the backend (which asks it); thread-safe, since
// gathers run concurrently.
class StoreFaults {
 public:
  // Fails the nth call of `op` from now on (n = 1: the next one). `partial`: a bind, fill_zero
  // or write applies a random prefix of its work first.
  void fail_call(StoreOp op, int64_t n, bool partial = true);
  // From now on, every call of every operation fails with `probability`, drawn from a generator
  // seeded with `seed`; failures are partial half of the time, and one in four is a
  // std::bad_alloc (an allocation refused) instead of Error(device).
  void fail_randomly(uint64_t seed, double probability);
  void disarm();  // no more failures

  int64_t calls(StoreOp op) const;   // calls seen (failed ones included)
  int64_t injected() const;          // failures injected so far
  // The mappings the wrapped backend holds now (virtual page -> physical page), as the
  // decorator passed them on. Throws Error(internal) if a bind ever mapped a physical page
  // that another virtual page still held.
  std::map<int64_t, int64_t> mapped() const;

  // For the decorator.
  struct Decision {
    bool fail = false;
    bool bad_alloc = false;
    double fraction = 0;  // of the work to apply before failing
  };
  Decision next(StoreOp op);
  void record_bind(const PageBind& b);  // one entry that the wrapped backend applied

 private:
  mutable std::mutex mutex_;
  int64_t calls_[kStoreOps] = {};
  int64_t fail_at_[kStoreOps] = {};  // absolute call number to fail, 0: none
  bool partial_[kStoreOps] = {};
  double probability_ = 0;
  std::mt19937_64 rng_;
  int64_t injected_ = 0;
  std::map<int64_t, int64_t> mapped_;
  std::map<int64_t, int64_t> owner_;  // physical page -> virtual page
  std::string conflict_;
};

std::unique_ptr<StoreBackend> make_fault_store_backend(std::unique_ptr<StoreBackend> inner,
                                                       std::shared_ptr<StoreFaults> faults);

}  // namespace fovea
