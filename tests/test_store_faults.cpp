// Token store fault injection: a backend that fails on demand (src/store/
// fault_backend.hpp) in the middle of batches, on the host and the Vulkan backends (lavapipe).
// After every injected failure the store must be exactly as before the call that failed
// (bind_batch, unbind_batch, release: all-or-nothing), its accounting exact, its page tables
// equal to what the device really has mapped (no page half-bound, no physical page mapped
// twice or lost), and the data of every resident token intact. Nothing may leak: this file is
// also built into fovea_store_asan (LeakSanitizer) and runs under the FOVEA_SANITIZE build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <set>

#include "fovea/error.hpp"
#include "fovea/store.hpp"
#include "store/fault_backend.hpp"

#ifdef FOVEA_HAVE_VULKAN
#include "vulkan/store/vulkan_store.hpp"
#endif

namespace fovea {
namespace {

std::vector<std::string> fault_backends() {
  std::vector<std::string> names{"host"};
#ifdef FOVEA_HAVE_VULKAN
  names.insert(names.end(), {"vulkan", "vulkan-image"});
#endif
  return names;
}

// Every Vulkan backend of these tests reports its validation messages here.
const std::shared_ptr<ValidationLog>& fault_validation_log() {
  static const auto log = std::make_shared<ValidationLog>();
  return log;
}

// Vulkan backends with validation on; unavailable ones fail the test with the reason (CI has
// lavapipe), as in test_store.cpp.
std::unique_ptr<StoreBackend> real_backend(const std::string& name) {
  if (name == "host") return make_host_store_backend();
#ifdef FOVEA_HAVE_VULKAN
  std::string why;
  const VulkanStoreOptions options{.device = "", .validation = true, .validation_log = fault_validation_log()};
  auto b = name == "vulkan-image" ? make_vulkan_image_store_backend(&why, options) : make_vulkan_store_backend(&why, options);
  if (!b) throw Error(Errc::device, "the " + name + " store backend is not available: " + why);
  return b;
#else
  throw Error(Errc::invalid_argument, "no " + name + " backend in this build");
#endif
}

int64_t validation_messages_now() { return fault_validation_log()->count(); }

// True when `f` threw what the fault backend injects (Error(device) or std::bad_alloc).
template <typename F> bool injected_failure(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::device) << e.what();
    return true;
  } catch (const std::bad_alloc&) {
    return true;
  }
  return false;
}

// Everything observable about a store: accounting, page tables, the bytes of resident tokens.
struct Snapshot {
  StoreStats stats;
  std::map<SeqId, std::vector<int64_t>> tables;
  std::map<SeqId, std::vector<uint8_t>> resident;
  std::map<SeqId, std::vector<std::byte>> bytes;  // resident tokens only, in order
};

Snapshot snapshot(const TokenStore& store, const std::vector<SeqId>& seqs) {
  Snapshot s;
  s.stats = store.stats();
  for (SeqId id : seqs) {
    s.tables[id] = store.page_table(id);
    auto& r = s.resident[id];
    std::vector<TokenRange> runs;
    for (int64_t t = 0; t < store.capacity(id); ++t) {
      r.push_back(store.is_resident(id, t));
      if (r.back()) runs.push_back({id, t, 1});
    }
    std::vector<std::byte>& b = s.bytes[id];
    b.resize(size_t(int64_t(runs.size()) * store.token_bytes()));
    if (!runs.empty()) store.gather_into(runs, b.data());
  }
  return s;
}

void expect_same(const Snapshot& a, const Snapshot& b) {
  EXPECT_EQ(a.stats.sequences, b.stats.sequences);
  EXPECT_EQ(a.stats.resident_tokens, b.stats.resident_tokens);
  EXPECT_EQ(a.stats.resident_pages, b.stats.resident_pages);
  EXPECT_EQ(a.stats.free_pages, b.stats.free_pages);
  EXPECT_EQ(a.stats.reserved_pages, b.stats.reserved_pages);
  EXPECT_EQ(a.tables, b.tables);
  EXPECT_EQ(a.resident, b.resident);
  EXPECT_TRUE(a.bytes == b.bytes) << "a resident token's bytes changed";
}

// The store's page tables against the device's real mappings (the fault backend's shadow):
// the same physical pages, each once, and as many as the store counts resident.
void expect_mappings_match(const TokenStore& store, const StoreFaults& faults, const std::vector<SeqId>& seqs) {
  std::multiset<int64_t> store_phys;
  for (SeqId id : seqs)
    for (int64_t p : store.page_table(id))
      if (p >= 0) store_phys.insert(p);
  std::multiset<int64_t> device_phys;
  for (const auto& [v, p] : faults.mapped()) device_phys.insert(p);
  EXPECT_EQ(store_phys, device_phys) << "the store's page tables and the device's mappings differ";
  EXPECT_EQ(int64_t(device_phys.size()), store.stats().resident_pages);
  EXPECT_EQ(store.stats().free_pages, store.config().pool_pages - int64_t(device_phys.size()));
}

class StoreFaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { messages_ = validation_messages_now(); }
  void TearDown() override { EXPECT_EQ(validation_messages_now(), messages_) << "Vulkan validation messages"; }
  // 4 KiB pages (64 KiB blocks on the image backend).
  int64_t page() const { return GetParam() == "vulkan-image" ? 65536 : 4096; }
  // f16 tokens of 3/8 page (they straddle pages), a pool of 24 pages.
  StoreConfig straddling(BindMode mode) const {
    StoreConfig cfg;
    cfg.dim = page() / 2 / 2 * 3 / 4;
    cfg.page_bytes = page();
    cfg.pool_pages = 24;
    cfg.bind_mode = mode;
    return cfg;
  }
  static std::string failure_point(BindMode mode, StoreOp op, int64_t nth, bool partial) {
    return std::string(to_string(mode)) + " " + to_string(op) + " call " + std::to_string(nth) +
           (partial ? " partial" : " whole");
  }
  int64_t messages_ = 0;
};

// Every call of every mutating operation, failing at each point in turn (whole and partial):
// the store comes back exactly as it was, and the same call then succeeds.
TEST_P(StoreFaultTest, EveryFailurePointRollsBack) {
  int64_t failures = 0;
  for (BindMode mode : {BindMode::merged, BindMode::batched, BindMode::single}) {
    for (StoreOp op : {StoreOp::bind, StoreOp::fill_zero}) {
      for (int64_t nth = 1; nth <= 4; ++nth) {
        for (bool partial : {false, true}) {
          SCOPED_TRACE(failure_point(mode, op, nth, partial));
          const StoreConfig cfg = straddling(mode);
          auto faults = std::make_shared<StoreFaults>();
          TokenStore store(cfg, make_fault_store_backend(real_backend(GetParam()), faults));
          const SeqId a = store.reserve(40), b = store.reserve(40);
          store.bind_batch({{a, 0, 10}, {b, 5, 3}});
          Tensor data(DType::f16, {10, cfg.dim});
          for (size_t i = 0; i < data.size_bytes(); ++i) data.bytes()[i] = std::byte(i * 7 + 1);
          store.write(a, 0, data);
          const std::vector<SeqId> seqs{a, b};
          const Snapshot before = snapshot(store, seqs);

          // bind: new pages in a and b, and tokens of pages already bound (zeroed ones).
          faults->fail_call(op, nth, partial);
          const bool failed = injected_failure([&] { store.bind_batch({{a, 8, 20}, {b, 0, 12}, {b, 30, 6}}); });
          faults->disarm();
          failures += failed;
          if (failed) {
            expect_same(before, snapshot(store, seqs));
            expect_mappings_match(store, *faults, seqs);
            store.bind_batch({{a, 8, 20}, {b, 0, 12}, {b, 30, 6}});
          }
          expect_mappings_match(store, *faults, seqs);
          // Newly resident tokens read as 0, old ones kept their bytes.
          const Tensor g = store.gather({{a, 0, 28}});
          EXPECT_EQ(std::memcmp(g.bytes(), data.bytes(), data.size_bytes()), 0);
          for (size_t i = data.size_bytes(); i < g.size_bytes(); ++i) ASSERT_EQ(g.bytes()[i], std::byte{0}) << i;

          // unbind and release (binds only): pages go back as they were, with their bytes.
          if (op == StoreOp::bind) {
            const Snapshot mid = snapshot(store, seqs);
            faults->fail_call(op, nth, partial);
            const bool unbind_failed = injected_failure([&] { store.unbind_batch({{a, 2, 20}, {b, 0, 40}}); });
            faults->disarm();
            failures += unbind_failed;
            if (unbind_failed) expect_same(mid, snapshot(store, seqs));
            expect_mappings_match(store, *faults, seqs);
            const Snapshot mid2 = snapshot(store, seqs);
            faults->fail_call(op, nth, partial);
            const bool release_failed = injected_failure([&] { store.release(a); });
            faults->disarm();
            failures += release_failed;
            if (release_failed) {
              expect_same(mid2, snapshot(store, seqs));
              store.release(a);
            }
            expect_mappings_match(store, *faults, {b});
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
  // Single mode submits page by page: every failure point there is reached.
  EXPECT_GE(failures, 40);
  std::printf("%lld injected failures, each rolled back exactly\n", (long long)failures);
}

// update_frame failing at every device call it makes (the read of the bound pages, the binds,
// the zeroing, the writes; whole and partial) as a frame grows, shrinks and changes in place:
// the sequence comes back exactly as it was, residency and bytes, the other sequence is
// untouched, the device's mappings match, and the same update then succeeds.
TEST_P(StoreFaultTest, UpdateFrameIsAllOrNothing) {
  int64_t failures = 0;
  for (BindMode mode : {BindMode::merged, BindMode::single}) {
    for (StoreOp op : {StoreOp::gather, StoreOp::bind, StoreOp::fill_zero, StoreOp::write}) {
      for (int64_t nth = 1; nth <= 3; ++nth) {
        for (bool partial : {false, true}) {
          SCOPED_TRACE(failure_point(mode, op, nth, partial));
          const StoreConfig cfg = straddling(mode);
          auto faults = std::make_shared<StoreFaults>();
          TokenStore store(cfg, make_fault_store_backend(real_backend(GetParam()), faults));
          const SeqId a = store.reserve(40), b = store.reserve(40);
          auto frame = [&](int64_t n, int salt) {
            Tensor f(DType::f16, {n, cfg.dim});
            for (size_t i = 0; i < f.size_bytes(); ++i) f.bytes()[i] = std::byte((i / 64 * 31 + size_t(salt)) & 0xff);
            return f;
          };
          store.update_frame(a, frame(20, 1));
          store.bind(b, 5, 3);
          store.write(b, 5, frame(3, 9));
          const std::vector<SeqId> seqs{a, b};
          std::vector<Tensor> nexts;
          nexts.push_back(frame(20, 1));  // one token changed in place
          nexts.back().bytes()[7 * store.token_bytes() + 5] ^= std::byte{0x5a};
          nexts.push_back(frame(32, 2));  // grown
          nexts.push_back(frame(8, 3));   // shrunk
          for (const Tensor& next : nexts) {
            const Snapshot before = snapshot(store, seqs);
            faults->fail_call(op, nth, partial);
            const bool failed = injected_failure([&] { store.update_frame(a, next); });
            faults->disarm();
            failures += failed;
            if (failed) {
              expect_same(before, snapshot(store, seqs));
              expect_mappings_match(store, *faults, seqs);
              store.update_frame(a, next);
            }
            expect_mappings_match(store, *faults, seqs);
            const int64_t n = next.dim(0);
            for (int64_t t = 0; t < 40; ++t) ASSERT_EQ(store.is_resident(a, t), t < n) << "token " << t;
            const Tensor g = store.gather({{a, 0, n}});
            EXPECT_EQ(std::memcmp(g.bytes(), next.bytes(), next.size_bytes()), 0) << "the frame's bytes";
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GE(failures, 30);
  std::printf("%lld injected failures in update_frame, each rolled back exactly\n", (long long)failures);
}

// The pool's allocation refused: the constructor throws, nothing leaks (LeakSanitizer).
TEST_P(StoreFaultTest, InitFailureThrowsAndLeaksNothing) {
  auto faults = std::make_shared<StoreFaults>();
  faults->fail_call(StoreOp::init, 1);
  StoreConfig cfg;
  cfg.page_bytes = page();
  cfg.pool_pages = 8;
  EXPECT_TRUE(injected_failure([&] { TokenStore store(cfg, make_fault_store_backend(real_backend(GetParam()), faults)); }));
  TokenStore ok(cfg, make_fault_store_backend(real_backend(GetParam()), faults));
  EXPECT_EQ(ok.stats().free_pages, 8);
}

// Model check under seeded random failures: reserve, release, bind and unbind batches, writes,
// frames and gathers against a plain model, with every backend call failing with some
// probability (partially or not, as Error(device) or std::bad_alloc). A failure during the
// rollback itself makes the store unusable: then every call must say so, and a new store
// takes over.
struct Tok {
  bool resident = false;
  bool known = true;  // false after a failed write: its bytes are unspecified
  std::vector<std::byte> bytes;
};

// One seed of RandomFaultsMatchModel: the store under random faults, the plain model it must
// match, one method per operation, and the checks after each step. Failures go to GoogleTest;
// run() stops at the first.
class RandomFaultRun {
 public:
  RandomFaultRun(std::string backend, int64_t page, uint64_t seed) : backend_(std::move(backend)), seed_(seed), rng_(seed) {
    cfg_.dim = seed == 2 ? page / 4 * 3 / 2 : page / 2 / 5;  // f16: 3/4 page (straddling) or 1/5 page
    cfg_.page_bytes = page;
    cfg_.pool_pages = 32;
    cfg_.virtual_pages = 256;
    cfg_.bind_mode = seed == 1 ? BindMode::merged : seed == 2 ? BindMode::batched : BindMode::single;
    fresh();
    tb_ = store_->token_bytes();
  }

  int64_t injected = 0, rollbacks_ok = 0, stores_broken = 0;

  void run(int steps) {
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const std::optional<bool> failed = random_op();
      if (!failed) continue;  // an operation the pool cannot take: nothing was called
      injected += *failed;
      // A failed rollback leaves the store unusable, and it must say so on every call.
      faults_->disarm();
      if (!usable()) {
        ++stores_broken;
        EXPECT_TRUE(*failed);
        fresh();
        continue;
      }
      // Accounting and mappings exact after every step, failed or not.
      expect_consistent();
      if (::testing::Test::HasFailure()) return;
      if (*failed) ++rollbacks_ok;
      faults_->fail_randomly(seed_ * 7919 + uint64_t(step), 0.08);
    }
    // Everything released: every page back in the pool, nothing mapped.
    faults_->disarm();
    for (SeqId id : seqs()) store_->release(id);
    EXPECT_EQ(store_->stats().free_pages, cfg_.pool_pages);
    EXPECT_TRUE(faults_->mapped().empty());
  }

 private:
  // A new store (and fault backend) in place of the old one, and an empty model.
  void fresh() {
    store_.reset();
    faults_ = std::make_shared<StoreFaults>();
    store_.emplace(cfg_, make_fault_store_backend(real_backend(backend_), faults_));
    faults_->fail_randomly(seed_ * 7919, 0.08);
    model_.clear();
  }

  int64_t pick(int64_t n) { return int64_t(rng_() % uint64_t(n)); }
  std::vector<SeqId> seqs() const {
    std::vector<SeqId> v;
    for (const auto& [id, t] : model_) v.push_back(id);
    return v;
  }
  SeqId any_seq() { return std::next(model_.begin(), pick(int64_t(model_.size())))->first; }
  TokenRange range(SeqId id) {
    const int64_t cap = int64_t(model_.at(id).size());
    const int64_t first = pick(cap);
    return {id, first, 1 + pick(std::min<int64_t>(cap - first, 40))};
  }
  // Pages a bind would add, from the model's residency and the store's page tables.
  int64_t pages_needed(const std::vector<TokenRange>& rs) const {
    std::set<std::pair<SeqId, int64_t>> need;
    for (const TokenRange& r : rs) {
      const auto table = store_->page_table(r.seq);
      for (int64_t p = r.first * tb_ / cfg_.page_bytes; p <= ((r.first + r.count) * tb_ - 1) / cfg_.page_bytes; ++p)
        if (table[size_t(p)] < 0) need.insert({r.seq, p});
    }
    return int64_t(need.size());
  }

  // One operation, picked at random: whether it failed, or nothing when it was skipped.
  std::optional<bool> random_op() {
    const int op = int(pick(100));
    try {
      if (model_.empty() || op < 8) return reserve();
      if (op < 14) return release();
      if (op < 45) return bind();
      if (op < 60) return unbind();
      if (op < 75) return write();
      if (op < 82) return update_frame();
      return gather();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::device) << e.what();
    } catch (const std::bad_alloc&) {
    }
    return true;
  }

  bool reserve() {
    const int64_t cap = 1 + pick(120);
    try {
      const SeqId id = store_->reserve(cap);
      model_[id] = std::vector<Tok>(size_t(cap));
    } catch (const Error& e) {
      if (e.code() != Errc::out_of_memory) throw;  // a full virtual space is allowed
    }
    return false;
  }

  bool release() {
    const SeqId id = any_seq();
    const bool failed = injected_failure([&] { store_->release(id); });
    if (!failed) model_.erase(id);
    return failed;
  }

  bool bind() {
    std::vector<TokenRange> rs;
    for (int i = 0, n = 1 + int(pick(3)); i < n; ++i) rs.push_back(range(any_seq()));
    if (pages_needed(rs) > store_->stats().free_pages) {
      try {
        store_->bind_batch(rs);
        ADD_FAILURE() << "bind beyond the pool succeeded";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::out_of_memory);
      }
      return false;
    }
    const bool failed = injected_failure([&] { store_->bind_batch(rs); });
    if (!failed)
      for (const TokenRange& r : rs)
        for (int64_t t = r.first; t < r.first + r.count; ++t) {
          Tok& k = model_.at(r.seq)[size_t(t)];
          if (!k.resident) k = Tok{true, true, std::vector<std::byte>(size_t(tb_), std::byte{0})};
        }
    return failed;
  }

  bool unbind() {
    std::vector<TokenRange> rs;
    for (int i = 0, n = 1 + int(pick(2)); i < n; ++i) rs.push_back(range(any_seq()));
    const bool failed = injected_failure([&] { store_->unbind_batch(rs); });
    if (!failed)
      for (const TokenRange& r : rs)
        for (int64_t t = r.first; t < r.first + r.count; ++t) model_.at(r.seq)[size_t(t)] = Tok{};
    return failed;
  }

  bool write() {
    const TokenRange r = range(any_seq());
    auto& toks = model_.at(r.seq);
    bool all = true;
    for (int64_t t = r.first; t < r.first + r.count; ++t) all &= toks[size_t(t)].resident;
    if (!all) return false;
    std::vector<std::byte> data(size_t(r.count * tb_));
    for (auto& x : data) x = std::byte(rng_());
    const bool failed = injected_failure([&] { store_->write_bytes(r.seq, r.first, r.count, data.data()); });
    for (int64_t t = r.first; t < r.first + r.count; ++t) {
      Tok& k = toks[size_t(t)];
      k.known = !failed;
      if (!failed) k.bytes.assign(data.begin() + (t - r.first) * tb_, data.begin() + (t - r.first + 1) * tb_);
    }
    return failed;
  }

  // Skipped (nothing) when the frame would need more pages than the pool has.
  std::optional<bool> update_frame() {
    const SeqId id = any_seq();
    auto& toks = model_.at(id);
    const int64_t n = pick(int64_t(toks.size()) + 1);
    Tensor frame(DType::f16, {n, cfg_.dim});
    for (size_t i = 0; i < frame.size_bytes(); ++i) frame.bytes()[i] = std::byte(rng_());
    int64_t grow = 0;
    const auto table = store_->page_table(id);
    const int64_t keep = store_->pages_for_tokens(n);
    int64_t shrink = 0;
    for (size_t p = 0; p < table.size(); ++p) {
      if (int64_t(p) < keep) grow += table[p] < 0;
      else shrink += table[p] >= 0;
    }
    if (grow > store_->stats().free_pages + shrink) return std::nullopt;
    const bool failed = injected_failure([&] { store_->update_frame(id, frame); });
    if (!failed) {
      for (int64_t t = 0; t < int64_t(toks.size()); ++t)
        toks[size_t(t)] = t < n ? Tok{true, true, std::vector<std::byte>(frame.bytes() + t * tb_, frame.bytes() + (t + 1) * tb_)}
                                : Tok{};
    }  // failed: all-or-nothing, the model stays as it was (checked below, bytes by later gathers)
    return failed;
  }

  bool gather() {
    std::vector<TokenRange> rs{range(any_seq())};
    std::vector<std::byte> want;
    bool all = true, known = true;
    for (const TokenRange& r : rs)
      for (int64_t t = r.first; t < r.first + r.count; ++t) {
        const Tok& k = model_.at(r.seq)[size_t(t)];
        all &= k.resident;
        known &= k.known;
        want.insert(want.end(), k.bytes.begin(), k.bytes.end());
      }
    if (!all) return false;
    std::optional<Tensor> got;
    const bool failed = injected_failure([&] { got = store_->gather(rs); });
    if (!failed && known && !want.empty()) {
      EXPECT_TRUE(std::memcmp(got->bytes(), want.data(), want.size()) == 0) << "gathered bytes differ";
    }
    return failed;
  }

  // False when the store says it is unusable (after a failed rollback), as it must on every call.
  bool usable() {
    try {
      if (model_.empty()) model_[store_->reserve(1)] = std::vector<Tok>(1);
      else (void)store_->capacity(model_.begin()->first);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::device);
      EXPECT_NE(std::string(e.what()).find("unusable"), std::string::npos) << e.what();
      return false;
    }
    return true;
  }

  void expect_consistent() const {
    int64_t resident = 0;
    for (const auto& [id, toks] : model_)
      for (const Tok& k : toks) resident += k.resident;
    const StoreStats now = store_->stats();
    ASSERT_EQ(now.sequences, int64_t(model_.size()));
    ASSERT_EQ(now.resident_tokens, resident);
    for (const auto& [id, toks] : model_)
      for (int64_t t = 0; t < int64_t(toks.size()); ++t)
        ASSERT_EQ(store_->is_resident(id, t), toks[size_t(t)].resident) << "token " << t;
    expect_mappings_match(*store_, *faults_, seqs());
  }

  const std::string backend_;
  const uint64_t seed_;
  std::mt19937_64 rng_;
  StoreConfig cfg_;
  std::shared_ptr<StoreFaults> faults_;
  std::optional<TokenStore> store_;
  std::map<SeqId, std::vector<Tok>> model_;
  int64_t tb_ = 0;  // the store's token bytes
};

TEST_P(StoreFaultTest, RandomFaultsMatchModel) {
  const bool host = GetParam() == "host";
  const int steps = host ? 3000 : 500;
  int64_t injected = 0, rollbacks_ok = 0, stores_broken = 0;
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    RandomFaultRun run(GetParam(), page(), seed);
    run.run(steps);
    injected += run.injected, rollbacks_ok += run.rollbacks_ok, stores_broken += run.stores_broken;
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(injected, 20);
  EXPECT_GT(rollbacks_ok, 10);
  std::printf("fault injection on %s: %lld failures, %lld consistent afterwards, %lld stores unusable after a failed rollback\n",
              GetParam().c_str(), (long long)injected, (long long)rollbacks_ok, (long long)stores_broken);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreFaultTest, ::testing::ValuesIn(fault_backends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace fovea
