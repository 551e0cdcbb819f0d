// Token store: random operation sequences against a plain model (sequence -> token vector) on
// every backend, exact accounting, all-or-nothing batches, errors, threads, and the cache.
//
// Backends: host, and in a Vulkan build always vulkan (sparse buffer), vulkan-image (sparse 2D
// image) and vulkan-split (the buffer backend with tiny descriptor windows and output batches,
// so gathers are cut everywhere). A Vulkan backend the device cannot serve FAILS its tests with
// the reason rather than skipping: CI has lavapipe. Vulkan backends run with the validation
// layer on and every test fails on any validation message (tests/test_vulkan.cpp's rule).
// This file also builds into fovea_store_asan (AddressSanitizer + LeakSanitizer, tests/CMake):
// it uses nothing but the store, the tensor and, in Vulkan builds, the Vulkan layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string_view>
#include <thread>

#include "fovea/error.hpp"
#include "fovea/store.hpp"
#include "store_bench.hpp"
#include "fovea/token_cache.hpp"

#ifdef FOVEA_HAVE_VULKAN
#include "vulkan/store/vulkan_store.hpp"
#endif

namespace fovea {
namespace {

std::vector<std::string> test_backends() {
  std::vector<std::string> names{"host"};
#ifdef FOVEA_HAVE_VULKAN
  names.insert(names.end(), {"vulkan", "vulkan-image", "vulkan-split"});
#endif
  return names;
}

// Every Vulkan backend of these tests reports its validation messages here.
const std::shared_ptr<ValidationLog>& test_validation_log() {
  static const auto log = std::make_shared<ValidationLog>();
  return log;
}

// A backend for the tests: Vulkan ones with validation on. Throws (failing the test) with the
// reason when a Vulkan backend is unavailable.
std::unique_ptr<StoreBackend> make_test_backend(const std::string& name) {
  if (name == "host") return make_host_store_backend();
#ifdef FOVEA_HAVE_VULKAN
  std::string why;
  const VulkanStoreOptions options{.device = "", .validation = true, .validation_log = test_validation_log()};
  std::unique_ptr<StoreBackend> b = name == "vulkan-image" ? make_vulkan_image_store_backend(&why, options)
                                                           : make_vulkan_store_backend(&why, options);
  if (!b) throw Error(Errc::device, "the " + name + " store backend is not available: " + why);
  if (name == "vulkan-split") {
    auto& v = dynamic_cast<vulkan_store::VulkanStoreBase&>(*b);
    v.set_window_bytes(12 << 10);       // windows of 12 KiB every 6 KiB: pages and tokens straddle them
    v.set_gather_batch_bytes(4100);     // output batches cut mid-token
  }
  return b;
#else
  throw Error(Errc::invalid_argument, "no " + name + " backend in this build");
#endif
}

// Page sizes in the tests are written for 4 KiB sparse pages; the image backend's pages are
// 64 KiB blocks, so its tests scale page size and token width by this factor (same pages and
// token counts, same expectations).
int64_t scale_of(const std::string& name) { return name == "vulkan-image" ? 16 : 1; }

int64_t validation_messages_now() { return test_validation_log()->count(); }

std::string validation_report() {
  std::string all;
  for (const std::string& m : test_validation_log()->messages()) all += "  " + m + "\n";
  return all;
}

template <typename F> Errc error_code(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected a fovea::Error";
  return Errc::internal;
}

template <typename F> std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a fovea::Error";
  return {};
}

// ---------------------------------------------------------------------------------------------
// The model: per sequence, a vector of optional tokens (bytes). Page residency is derived.
struct ModelSeq {
  int64_t capacity = 0;
  std::vector<std::optional<std::vector<std::byte>>> tokens;
};

struct Model {
  int64_t token_bytes = 0, page_bytes = 0, pool_pages = 0;
  std::map<SeqId, ModelSeq> seqs;
  std::set<SeqId> released;

  std::set<int64_t> pages_of(const ModelSeq& s) const {
    std::set<int64_t> p;
    for (int64_t t = 0; t < s.capacity; ++t)
      if (s.tokens[size_t(t)])
        for (int64_t q = t * token_bytes / page_bytes; q <= ((t + 1) * token_bytes - 1) / page_bytes; ++q) p.insert(q);
    return p;
  }
  int64_t resident_pages() const {
    int64_t n = 0;
    for (const auto& [id, s] : seqs) n += int64_t(pages_of(s).size());
    return n;
  }
  // New pages a bind of these ranges needs.
  int64_t pages_needed(const std::vector<TokenRange>& rs) const {
    std::set<std::pair<SeqId, int64_t>> need;
    for (const TokenRange& r : rs) {
      if (r.count == 0) continue;
      const auto cur = pages_of(seqs.at(r.seq));
      for (int64_t q = r.first * token_bytes / page_bytes; q <= ((r.first + r.count) * token_bytes - 1) / page_bytes; ++q)
        if (!cur.count(q)) need.insert({r.seq, q});
    }
    return int64_t(need.size());
  }
};

struct Scenario {
  int64_t dim;
  DType dtype;
  int64_t page_bytes;
  int64_t pool_pages;
  BindMode mode;
};

std::vector<std::byte> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(rng() & 0xff);
  return v;
}

// Random operations on a store, each checked against the model (one method per operation), and a
// digest of every gather's bytes so backends can be compared with each other too.
class RandomOps {
 public:
  RandomOps(const std::string& backend, const Scenario& sc, uint64_t seed)
      : sc_(sc), store_(config(sc), make_test_backend(backend)), m_{store_.token_bytes(), sc.page_bytes, sc.pool_pages, {}, {}},
        tb_(store_.token_bytes()), rng_(seed) {}

  uint64_t digest = 1469598103934665603ULL;

  // Returns false when a check failed (GoogleTest has it).
  bool run(int steps) {
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      if (!random_op()) continue;  // an allowed refusal: nothing changed
      check_accounting();
      if (::testing::Test::HasFailure()) return false;
    }
    check_page_tables();
    for (const auto& [id, s] : m_.seqs) store_.release(id);
    EXPECT_EQ(store_.stats().free_pages, sc_.pool_pages);
    return true;
  }

 private:
  static StoreConfig config(const Scenario& sc) {
    StoreConfig cfg;
    cfg.dim = sc.dim;
    cfg.dtype = sc.dtype;
    cfg.page_bytes = sc.page_bytes;
    cfg.pool_pages = sc.pool_pages;
    cfg.virtual_pages = sc.pool_pages * 8;
    cfg.bind_mode = sc.mode;
    return cfg;
  }

  int64_t pick(int64_t n) { return int64_t(rng_() % uint64_t(n)); }
  SeqId any_seq() {
    auto it = m_.seqs.begin();
    std::advance(it, pick(int64_t(m_.seqs.size())));
    return it->first;
  }
  TokenRange random_range(SeqId id) {
    const int64_t cap = m_.seqs.at(id).capacity;
    const int64_t first = pick(cap + 1);
    const int64_t count = pick(std::min<int64_t>(cap - first, 1 + pick(64)) + 1);
    return {id, first, count};
  }

  // One operation, picked at random; false when it was refused as allowed and the step ends there.
  bool random_op() {
    const int op = int(pick(100));
    if (m_.seqs.empty() || op < 8) return reserve();
    if (op < 12 || m_.seqs.size() > 12) return release();
    if (op < 40) bind();
    else if (op < 55) unbind();
    else if (op < 72) write();
    else if (op < 80) update_frame();
    else gather();
    return true;
  }

  bool reserve() {
    const int64_t cap = 1 + pick(200);
    SeqId id = 0;
    try {
      id = store_.reserve(cap);
    } catch (const Error& e) {  // the virtual space is full (or too fragmented): allowed
      EXPECT_EQ(e.code(), Errc::out_of_memory);
      return false;
    }
    EXPECT_FALSE(m_.seqs.count(id) || m_.released.count(id));
    m_.seqs[id] = ModelSeq{cap, std::vector<std::optional<std::vector<std::byte>>>(size_t(cap))};
    return true;
  }

  // Sometimes twice, or one already released.
  bool release() {
    if (!m_.released.empty() && pick(3) == 0) {
      const SeqId gone = *std::next(m_.released.begin(), pick(int64_t(m_.released.size())));
      EXPECT_NE(error_message([&] { store_.release(gone); }).find("was released"), std::string::npos);
      EXPECT_EQ(error_code([&] { store_.gather({{gone, 0, 1}}); }), Errc::invalid_argument);
      return false;
    }
    const SeqId id = any_seq();
    store_.release(id);
    m_.seqs.erase(id);
    m_.released.insert(id);
    return true;
  }

  // A bind batch over 1..3 sequences.
  void bind() {
    std::vector<TokenRange> rs;
    for (int i = 0, n = 1 + int(pick(3)); i < n; ++i) rs.push_back(random_range(any_seq()));
    if (pick(20) == 0) {  // out of range: nothing may change
      rs.push_back({rs[0].seq, m_.seqs.at(rs[0].seq).capacity, 1});
      EXPECT_EQ(error_code([&] { store_.bind_batch(rs); }), Errc::invalid_argument);
    } else if (m_.pages_needed(rs) > sc_.pool_pages - m_.resident_pages()) {
      EXPECT_EQ(error_code([&] { store_.bind_batch(rs); }), Errc::out_of_memory);
    } else {
      store_.bind_batch(rs);
      for (const TokenRange& r : rs)
        for (int64_t t = r.first; t < r.first + r.count; ++t) {
          auto& tok = m_.seqs.at(r.seq).tokens[size_t(t)];
          if (!tok) tok = std::vector<std::byte>(size_t(tb_), std::byte{0});
        }
    }
  }

  void unbind() {
    std::vector<TokenRange> rs;
    for (int i = 0, n = 1 + int(pick(2)); i < n; ++i) rs.push_back(random_range(any_seq()));
    store_.unbind_batch(rs);
    for (const TokenRange& r : rs)
      for (int64_t t = r.first; t < r.first + r.count; ++t) m_.seqs.at(r.seq).tokens[size_t(t)].reset();
  }

  void write() {
    const TokenRange r = random_range(any_seq());
    auto& s = m_.seqs.at(r.seq);
    const std::vector<std::byte> data = random_bytes(rng_, size_t(r.count * tb_));
    bool all = true;
    for (int64_t t = r.first; t < r.first + r.count; ++t) all &= s.tokens[size_t(t)].has_value();
    if (!all) {
      EXPECT_EQ(error_code([&] { store_.write_bytes(r.seq, r.first, r.count, data.data()); }), Errc::invalid_argument);
    } else {
      store_.write_bytes(r.seq, r.first, r.count, data.data());
      for (int64_t t = r.first; t < r.first + r.count; ++t)
        s.tokens[size_t(t)] = std::vector<std::byte>(data.begin() + (t - r.first) * tb_, data.begin() + (t - r.first + 1) * tb_);
    }
  }

  // A new frame, partly equal to the old one.
  void update_frame() {
    const SeqId id = any_seq();
    auto& s = m_.seqs.at(id);
    const int64_t n = pick(s.capacity + 1);
    Tensor frame(sc_.dtype, {n, sc_.dim});
    for (int64_t t = 0; t < n; ++t) {
      const auto& old = s.tokens[size_t(t)];
      if (old && pick(4) != 0) std::memcpy(frame.bytes() + t * tb_, old->data(), size_t(tb_));
      else {
        const auto b = random_bytes(rng_, size_t(tb_));
        std::memcpy(frame.bytes() + t * tb_, b.data(), size_t(tb_));
      }
    }
    ModelSeq next{s.capacity, std::vector<std::optional<std::vector<std::byte>>>(size_t(s.capacity))};
    for (int64_t t = 0; t < n; ++t)
      next.tokens[size_t(t)] = std::vector<std::byte>(frame.bytes() + t * tb_, frame.bytes() + (t + 1) * tb_);
    Model after = m_;
    after.seqs[id] = next;
    if (after.resident_pages() > sc_.pool_pages) {
      EXPECT_EQ(error_code([&] { store_.update_frame(id, frame); }), Errc::out_of_memory);
    } else {
      const FrameDelta d = store_.update_frame(id, frame);
      EXPECT_EQ(d.pages_bound + d.pages_written + d.pages_unchanged, store_.pages_for_tokens(n));
      s = next;
    }
  }

  // A gather over 1..4 ranges, and a residency query.
  void gather() {
    std::vector<TokenRange> rs;
    for (int i = 0, n = 1 + int(pick(4)); i < n; ++i) rs.push_back(random_range(any_seq()));
    bool all = true;
    std::vector<std::byte> want;
    for (const TokenRange& r : rs)
      for (int64_t t = r.first; t < r.first + r.count; ++t) {
        const auto& tok = m_.seqs.at(r.seq).tokens[size_t(t)];
        all &= tok.has_value();
        if (tok) want.insert(want.end(), tok->begin(), tok->end());
      }
    if (!all) {
      EXPECT_EQ(error_code([&] { store_.gather(rs); }), Errc::invalid_argument);
    } else {
      const Tensor got = store_.gather(rs);
      EXPECT_EQ(got.size_bytes(), want.size());
      // (memcmp with an empty vector's null data() is UB even for 0 bytes: UBSan says so)
      EXPECT_TRUE(got.size_bytes() == want.size() && (want.empty() || std::memcmp(got.bytes(), want.data(), want.size()) == 0));
      for (std::byte b : want) digest = (digest ^ uint64_t(b)) * 1099511628211ULL;
    }
    const TokenRange& r = rs[0];
    if (r.count > 0) {
      EXPECT_EQ(store_.is_resident(r.seq, r.first), m_.seqs.at(r.seq).tokens[size_t(r.first)].has_value());
    }
  }

  void check_accounting() const {
    const StoreStats st = store_.stats();
    int64_t resident = 0, dense = 0, reserved = 0;
    for (const auto& [id, s] : m_.seqs) {
      for (const auto& t : s.tokens) resident += t.has_value();
      dense += s.capacity * tb_;
      reserved += store_.pages_for_tokens(s.capacity);
    }
    const int64_t pages = m_.resident_pages();
    ASSERT_EQ(st.sequences, int64_t(m_.seqs.size()));
    ASSERT_EQ(st.resident_tokens, resident);
    ASSERT_EQ(st.resident_pages, pages);
    ASSERT_EQ(st.resident_bytes, pages * sc_.page_bytes);
    ASSERT_EQ(st.payload_bytes, resident * tb_);
    ASSERT_EQ(st.dense_bytes, dense);
    ASSERT_EQ(st.reserved_pages, reserved);
    ASSERT_EQ(st.free_pages, sc_.pool_pages - pages);
  }

  // Page tables agree with the model, and no physical page is used twice.
  void check_page_tables() const {
    std::set<int64_t> used;
    for (const auto& [id, s] : m_.seqs) {
      const auto pages = m_.pages_of(s);
      const auto table = store_.page_table(id);
      for (size_t p = 0; p < table.size(); ++p) {
        EXPECT_EQ(table[p] >= 0, pages.count(int64_t(p)) == 1);
        if (table[p] >= 0) {
          EXPECT_TRUE(used.insert(table[p]).second);
        }
      }
    }
  }

  const Scenario sc_;
  TokenStore store_;
  Model m_;
  const int64_t tb_;
  std::mt19937_64 rng_;
};

// Runs `steps` random operations, checking each against the model; returns a digest of every
// gather's bytes so backends can be compared with each other too (0 when a check failed).
uint64_t run_random_ops(const std::string& backend, const Scenario& sc, uint64_t seed, int steps) {
  RandomOps ops(backend, sc, seed);
  return ops.run(steps) ? ops.digest : 0;
}

const Scenario kScenarios[] = {
    {200, DType::f16, 4096, 48, BindMode::merged},     // tokens straddle pages, pool runs out often
    {3000, DType::f32, 8192, 64, BindMode::batched},   // a token spans several pages
    {256, DType::bf16, 65536, 16, BindMode::single},   // 128 tokens per 64 KiB page
};

// The scenario on a backend with bigger sparse pages (vulkan-image: 64 KiB blocks): pages
// rounded up to them, the pool keeping its bytes (at least 4 pages), so it still runs out.
Scenario for_backend(Scenario sc, const std::string& backend) {
  const int64_t unit = 4096 * scale_of(backend);
  const int64_t page = (sc.page_bytes + unit - 1) / unit * unit;
  sc.pool_pages = std::max<int64_t>(4, sc.pool_pages * sc.page_bytes / page);
  sc.page_bytes = page;
  return sc;
}

class StoreBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { messages_ = validation_messages_now(); }
  void TearDown() override {
    EXPECT_EQ(validation_messages_now(), messages_) << "validation messages:\n" << validation_report();
  }
  std::unique_ptr<StoreBackend> backend() const { return make_test_backend(GetParam()); }
  // Page size and token width multiplier of this backend (see scale_of).
  int64_t k() const { return scale_of(GetParam()); }
  int64_t messages_ = 0;
};

TEST_P(StoreBackendTest, RandomOpsMatchModel) {
  for (size_t i = 0; i < std::size(kScenarios); ++i) {
    SCOPED_TRACE("scenario " + std::to_string(i));
    run_random_ops(GetParam(), for_backend(kScenarios[i], GetParam()), 1234 + i, 1500);
    if (HasFatalFailure()) return;
  }
}

TEST_P(StoreBackendTest, SeedTableAccounting) {
  // Seed 000: 8 images of 1024 dense tokens, kept 410/820/.../560; D=1024 f16 -> 2 KiB a token,
  // 32 tokens per 64 KiB page; kept tokens are compacted to [0, kept).
  StoreConfig cfg;
  cfg.pool_pages = 256;
  TokenStore store(cfg, backend());
  const int64_t kept[8] = {410, 820, 310, 650, 180, 920, 450, 560};
  std::vector<TokenRange> rs;
  for (int64_t k : kept) rs.push_back({store.reserve(1024), 0, k});
  store.bind_batch(rs);
  const StoreStats st = store.stats();
  EXPECT_EQ(st.resident_tokens, 4300);
  EXPECT_EQ(st.resident_pages, 13 + 26 + 10 + 21 + 6 + 29 + 15 + 18);  // ceil(kept / 32)
  EXPECT_EQ(st.dense_bytes, 8 * 1024 * 2048);
  EXPECT_EQ(st.reserved_bytes, st.dense_bytes);
  EXPECT_EQ(st.resident_bytes, 138 * 65536);
  EXPECT_EQ(st.payload_bytes, 4300 * 2048);
  EXPECT_EQ(st.bind_calls, 1);
  EXPECT_EQ(st.bind_entries, 8);  // one merged entry per image: contiguous physical pages
}

TEST_P(StoreBackendTest, BatchIsAllOrNothing) {
  StoreConfig cfg;
  cfg.dim = 512 * k();  // f16: 1 KiB tokens, 4 per 4 KiB page (x k)
  cfg.page_bytes = 4096 * k();
  cfg.pool_pages = 10;
  TokenStore store(cfg, backend());
  const SeqId a = store.reserve(40), b = store.reserve(40);
  store.bind(a, 0, 16);  // 4 pages
  Tensor ones(DType::f16, {16, cfg.dim});
  std::memset(ones.bytes(), 0x11, ones.size_bytes());
  store.write(a, 0, ones);
  const auto before = store.stats();
  const auto table_a = store.page_table(a);
  // 4 + 4 pages would fit; 4 + 4 + 1 (a's 17th token) = 9 > 6 free: nothing may change.
  EXPECT_NE(error_message([&] { store.bind_batch({{b, 0, 16}, {b, 20, 8}, {a, 16, 1}}); }).find("nothing was bound"),
            std::string::npos);
  const auto after = store.stats();
  EXPECT_EQ(after.resident_pages, before.resident_pages);
  EXPECT_EQ(after.free_pages, before.free_pages);
  EXPECT_EQ(after.bind_calls, before.bind_calls);
  EXPECT_EQ(store.resident_tokens(b), 0);
  EXPECT_EQ(store.page_table(a), table_a);
  const Tensor g = store.gather({{a, 0, 16}});
  EXPECT_EQ(std::memcmp(g.bytes(), ones.bytes(), ones.size_bytes()), 0);
  // An invalid range anywhere in the batch: nothing changes either.
  EXPECT_EQ(error_code([&] { store.bind_batch({{b, 0, 4}, {b, 38, 3}}); }), Errc::invalid_argument);
  EXPECT_EQ(store.resident_tokens(b), 0);
  store.bind_batch({{b, 0, 16}, {b, 20, 4}});  // 5 pages of the 6 free
  EXPECT_EQ(store.stats().free_pages, 1);
}

TEST_P(StoreBackendTest, ErrorsNameTheProblem) {
  StoreConfig cfg;
  cfg.dim = 64 * k();
  cfg.page_bytes = 4096 * k();
  cfg.pool_pages = 8;
  TokenStore store(cfg, backend());
  const SeqId s = store.reserve(100);
  EXPECT_EQ(error_message([&] { store.bind(s, 90, 20); }),
            "token store bind: tokens [90, 110) are out of range for sequence " + std::to_string(s) + " of 100 tokens");
  EXPECT_EQ(error_message([&] { store.gather({{s, 0, 1}}); }),
            "token store gather: token 0 of sequence " + std::to_string(s) + " is not resident");
  store.release(s);
  EXPECT_EQ(error_message([&] { store.release(s); }), "token store release: sequence " + std::to_string(s) + " was released");
  EXPECT_EQ(error_message([&] { store.bind(s, 0, 1); }), "token store bind: sequence " + std::to_string(s) + " was released");
  EXPECT_EQ(error_message([&] { store.release(999); }), "token store release: no sequence 999");
  EXPECT_EQ(error_code([&] { store.reserve(0); }), Errc::invalid_argument);
  Tensor wrong(DType::f32, {1, cfg.dim});
  const SeqId t = store.reserve(4);
  store.bind(t, 0, 4);
  EXPECT_EQ(error_code([&] { store.write(t, 0, wrong); }), Errc::invalid_argument);
  // Virtual space exhausted: a clear out_of_memory, not a crash.
  EXPECT_EQ(error_code([&] { store.reserve(1 << 20); }), Errc::out_of_memory);
}

TEST_P(StoreBackendTest, UnbindZeroesAndFreesPages) {
  StoreConfig cfg;
  cfg.dim = 1000 * k();  // f16: 2000-byte tokens straddle 4 KiB pages (x k)
  cfg.page_bytes = 4096 * k();
  cfg.pool_pages = 16;
  TokenStore store(cfg, backend());
  const int64_t tb = store.token_bytes();
  const SeqId s = store.reserve(20);
  store.bind(s, 0, 20);
  EXPECT_EQ(store.resident_pages(s), store.pages_for_tokens(20));
  Tensor data(DType::f16, {20, cfg.dim});
  std::memset(data.bytes(), 0x5a, data.size_bytes());
  store.write(s, 0, data);
  store.unbind(s, 3, 1);  // its pages stay bound (neighbours resident)
  EXPECT_EQ(store.resident_pages(s), store.pages_for_tokens(20));
  EXPECT_FALSE(store.is_resident(s, 3));
  store.bind(s, 3, 1);
  const Tensor g = store.gather({{s, 3, 1}, {s, 4, 1}});
  for (int64_t i = 0; i < tb; ++i) ASSERT_EQ(g.bytes()[i], std::byte{0}) << i;  // re-bound token reads 0
  for (int64_t i = tb; i < 2 * tb; ++i) ASSERT_EQ(g.bytes()[i], std::byte{0x5a}) << i;
  store.unbind(s, 0, 20);
  EXPECT_EQ(store.resident_pages(s), 0);
  EXPECT_EQ(store.stats().free_pages, 16);
}

TEST_P(StoreBackendTest, UpdateFrameTouchesOnlyChangedPages) {
  StoreConfig cfg;
  cfg.dim = 1024 * k();  // f16: 2 KiB tokens, 2 per 4 KiB page (x k)
  cfg.page_bytes = 4096 * k();
  cfg.pool_pages = 64;
  TokenStore store(cfg, backend());
  const int64_t D = cfg.dim;
  const SeqId s = store.reserve(64);
  Tensor f0(DType::f16, {40, D});
  for (size_t i = 0; i < f0.size_bytes(); ++i) f0.bytes()[i] = std::byte(i * 31 % 251);
  FrameDelta d = store.update_frame(s, f0);
  EXPECT_EQ(d.pages_bound, 20);
  Tensor f1 = f0.clone();
  f1.data<uint16_t>()[5 * D + 7] ^= 1;  // token 5 -> page 2
  f1.data<uint16_t>()[30 * D] ^= 1;     // token 30 -> page 15
  d = store.update_frame(s, f1);
  EXPECT_EQ(d.pages_written, 2);
  EXPECT_EQ(d.pages_unchanged, 18);
  EXPECT_EQ(d.pages_bound + d.pages_unbound, 0);
  Tensor f2(DType::f16, {25, D});
  std::memcpy(f2.bytes(), f1.bytes(), f2.size_bytes());
  d = store.update_frame(s, f2);  // shrink: 13 pages; the 13th keeps token 24 and zeroes 25
  EXPECT_EQ(d.pages_unbound, 7);
  EXPECT_EQ(d.pages_written, 0);
  EXPECT_EQ(store.resident_tokens(s), 25);
  const Tensor g = store.gather({{s, 0, 25}});
  EXPECT_EQ(std::memcmp(g.bytes(), f2.bytes(), f2.size_bytes()), 0);
}

TEST_P(StoreBackendTest, ConcurrentReadersOneWriter) {
  StoreConfig cfg;
  cfg.dim = 256;
  cfg.dtype = DType::f32;  // 1 KiB tokens
  cfg.page_bytes = 4096 * k();
  cfg.pool_pages = 256;
  TokenStore store(cfg, backend());
  const SeqId still = store.reserve(64), video = store.reserve(128);
  Tensor base(DType::f32, {64, 256});
  for (int64_t i = 0; i < base.numel(); ++i) base.data<float>()[i] = float(i);
  store.update_frame(still, base);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> gathers{0};
  std::atomic<int> bad{0};
  auto reader = [&] {
    while (!stop.load()) {
      const Tensor a = store.gather({{still, 0, 64}});
      if (std::memcmp(a.bytes(), base.bytes(), base.size_bytes()) != 0) ++bad;
      // A video frame is seen whole: every token of one frame carries the same value.
      try {
        const int64_t n = store.resident_tokens(video);
        if (n == 0) continue;
        const Tensor f = store.gather({{video, 0, std::min<int64_t>(n, 8)}});
        const float v = f.data<float>()[0];
        for (int64_t i = 0; i < f.numel(); ++i)
          if (f.data<float>()[i] != v) ++bad;
      } catch (const Error&) {
        // The frame shrank between the two calls: allowed, the store said so cleanly.
      }
      ++gathers;
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader);
  std::mt19937 rng(7);
  // At least 200 frames, and on until the readers have overlapped with the writer a while.
  for (int frame = 0; frame < 200 || (gathers.load() < 30 && frame < 200000); ++frame) {
    const int64_t n = 8 + int64_t(rng() % 120);
    Tensor f(DType::f32, {n, 256});
    std::fill(f.data<float>(), f.data<float>() + f.numel(), float(frame));
    store.update_frame(video, f);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(gathers.load(), 0);
}

// The documented contract: one writer at a time, store-wide. Several threads writing their own
// sequences concurrently (the lock serialises them) with readers alongside: every sequence
// ends with exactly its writer's last frame and the accounting adds up.
TEST_P(StoreBackendTest, WriterPerSequenceThreads) {
  StoreConfig cfg;
  cfg.dim = 128;
  cfg.dtype = DType::f32;  // 512-byte tokens, 8 per page (x k)
  cfg.page_bytes = 4096 * k();
  cfg.pool_pages = 128;
  TokenStore store(cfg, backend());
  constexpr int kWriters = 3;
  SeqId seqs[kWriters];
  for (SeqId& s : seqs) s = store.reserve(256);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!stop.load())
      for (SeqId s : seqs) {
        try {
          const int64_t n = store.resident_tokens(s);
          if (n == 0) continue;
          const Tensor f = store.gather({{s, 0, std::min<int64_t>(n, 4)}});
          for (int64_t i = 1; i < f.numel(); ++i)
            if (f.data<float>()[i] != f.data<float>()[0]) ++bad;
        } catch (const Error&) {
        }
      }
  });
  std::vector<std::thread> writers;
  std::vector<int64_t> last_n(kWriters);
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      std::mt19937 rng(100 + w);
      for (int frame = 0; frame < 60; ++frame) {
        const int64_t n = 1 + int64_t(rng() % 256);
        Tensor f(DType::f32, {n, 128});
        std::fill(f.data<float>(), f.data<float>() + f.numel(), float(w * 1000 + frame));
        store.update_frame(seqs[w], f);
        if (frame % 7 == 3) {  // drop the second half and bind/write it again
          const int64_t half = n / 2;
          store.unbind(seqs[w], half, n - half);
          store.bind(seqs[w], half, n - half);
          Tensor t(DType::f32, {n - half, 128});
          std::fill(t.data<float>(), t.data<float>() + t.numel(), float(w * 1000 + frame));
          store.write(seqs[w], half, t);
        }
        last_n[size_t(w)] = n;
      }
    });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  int64_t pages = 0;
  for (int w = 0; w < kWriters; ++w) {
    const int64_t n = last_n[size_t(w)];
    EXPECT_EQ(store.resident_tokens(seqs[w]), n);
    EXPECT_EQ(store.resident_pages(seqs[w]), store.pages_for_tokens(n));
    pages += store.pages_for_tokens(n);
    const Tensor g = store.gather({{seqs[w], 0, n}});
    for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(g.data<float>()[i], float(w * 1000 + 59)) << w;
  }
  EXPECT_EQ(store.stats().resident_pages, pages);
  EXPECT_EQ(store.stats().free_pages, 128 - pages);
}

// A virtual space beyond one storage-buffer descriptor (maxStorageBufferRange, 128 MiB on
// lavapipe): sequences far into it and one straddling the first window's end gather right.
TEST_P(StoreBackendTest, LargeVirtualSpaceBeyondOneDescriptor) {
  StoreConfig cfg;  // D=1024 f16: 2 KiB tokens, 64 KiB pages (whole blocks for vulkan-image too)
  cfg.pool_pages = 96;
  cfg.virtual_pages = 4096;  // 256 MiB
  TokenStore store(cfg, backend());
  const int64_t tb = store.token_bytes();
  // 127.5 MiB of address space first, then 64 tokens (4 MiB) straddling 128 MiB, then one at 200 MiB.
  const SeqId filler = store.reserve((int64_t(255) << 19) / tb);
  const SeqId straddle = store.reserve(64 * 32);
  const SeqId gap = store.reserve((int64_t(70) << 20) / tb);
  const SeqId far = store.reserve(64);
  store.bind_batch({{filler, 0, 3}, {straddle, 0, 64 * 32}, {far, 0, 64}});
  std::vector<std::byte> want;
  std::mt19937_64 rng(5);
  for (auto [seq, n] : {std::pair<SeqId, int64_t>{straddle, 64 * 32}, {far, 64}, {filler, 3}}) {
    std::vector<std::byte> bytes(size_t(n * tb));
    for (auto& b : bytes) b = std::byte(rng() & 0xff);
    store.write_bytes(seq, 0, n, bytes.data());
    want.insert(want.end(), bytes.begin(), bytes.end());
  }
  const Tensor got = store.gather({{straddle, 0, 64 * 32}, {far, 0, 64}, {filler, 0, 3}});
  ASSERT_EQ(got.size_bytes(), want.size());
  EXPECT_EQ(std::memcmp(got.bytes(), want.data(), want.size()), 0);
  // Pieces in another order, odd token counts: still the model's bytes.
  const Tensor part = store.gather({{far, 5, 7}, {straddle, 1000, 100}, {filler, 1, 1}});
  std::vector<std::byte> want_part;
  auto at = [&](int64_t off, int64_t n) { want_part.insert(want_part.end(), want.begin() + off, want.begin() + off + n); };
  at((64 * 32 + 5) * tb, 7 * tb);
  at(1000 * tb, 100 * tb);
  at((64 * 32 + 64 + 1) * tb, tb);
  ASSERT_EQ(part.size_bytes(), want_part.size());
  EXPECT_EQ(std::memcmp(part.bytes(), want_part.data(), want_part.size()), 0);
  EXPECT_TRUE(store.is_live(gap));
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreBackendTest, ::testing::ValuesIn(test_backends()), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

// The same seeded operation sequences give the same bytes on every backend (a digest of every
// gather), each backend at its own page size compared with the host at that page size.
TEST(StoreBackends, IdenticalResultsOnEveryBackend) {
  const auto names = test_backends();
  if (names.size() < 2) GTEST_SKIP() << "fovea was built without Vulkan: only the host backend exists";
  const int64_t messages = validation_messages_now();
  for (const Scenario& base : kScenarios)
    for (size_t i = 1; i < names.size(); ++i) {
      const Scenario sc = for_backend(base, names[i]);
      const uint64_t host = run_random_ops("host", sc, 99, 600);
      EXPECT_NE(host, 0u);
      EXPECT_EQ(run_random_ops(names[i], sc, 99, 600), host) << names[i];
    }
  EXPECT_EQ(validation_messages_now(), messages) << validation_report();
}

// The validation log a caller passes to Vulkan store backends: every message counted, the
// first 64 texts kept, safe to fill from several threads.
TEST(ValidationLogTest, CountsEveryMessageKeepsTheFirst64) {
  ValidationLog log;
  EXPECT_EQ(log.count(), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&log, t] {
      for (int i = 0; i < 50; ++i) log.add("thread " + std::to_string(t) + " message " + std::to_string(i));
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(log.count(), 200);
  const std::vector<std::string> kept = log.messages();
  ASSERT_EQ(kept.size(), 64u);
  EXPECT_EQ(std::set<std::string>(kept.begin(), kept.end()).size(), 64u);  // no torn or repeated entries
}

TEST(StoreConfigTest, RejectsBadConfigs) {
  auto make = [](StoreConfig c) { TokenStore s(c); };
  StoreConfig c;
  c.page_bytes = 5000;  // not a multiple of 4 KiB
  EXPECT_EQ(error_message([&] { make(c); }),
            "token store page size 5000 bytes must be a positive multiple of the host backend's page granularity "
            "(4096 bytes), at most 1 GiB");
  c = {};
  c.dtype = DType::u8;
  EXPECT_EQ(error_code([&] { make(c); }), Errc::invalid_argument);
  c = {};
  c.dim = 0;
  EXPECT_EQ(error_code([&] { make(c); }), Errc::invalid_argument);
  c = {};
  c.pool_pages = 0;
  EXPECT_EQ(error_code([&] { make(c); }), Errc::invalid_argument);
  EXPECT_EQ(error_code([&] { make_store_backend("tpu"); }), Errc::invalid_argument);
}

TEST(StoreBindModes, MergingReducesEntries) {
  for (BindMode mode : {BindMode::single, BindMode::batched, BindMode::merged}) {
    StoreConfig cfg;
    cfg.page_bytes = 4096;
    cfg.dim = 2048;  // f16: one token per page
    cfg.pool_pages = 100;
    cfg.bind_mode = mode;
    TokenStore store(cfg);
    const SeqId s = store.reserve(100);
    store.bind(s, 0, 100);
    const StoreStats st = store.stats();
    EXPECT_EQ(st.bind_calls, mode == BindMode::single ? 100 : 1) << to_string(mode);
    EXPECT_EQ(st.bind_entries, mode == BindMode::merged ? 1 : 100) << to_string(mode);
  }
}

// ---------------------------------------------------------------------------------------------
std::string hex_digest(const std::string& in, size_t n) {
  Blake2b h(n);
  h.update(in.data(), in.size());
  std::vector<uint8_t> out(n);
  h.final(out.data());
  std::string s;
  char buf[3];
  for (uint8_t b : out) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    s += buf;
  }
  return s;
}

TEST(Blake2b, Rfc7693AndPythonVectors) {
  EXPECT_EQ(hex_digest("abc", 64),
            "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d17d87c5392aab792dc252d5de4533cc9518d38aa8"
            "dbf1925ab92386edd4009923");  // RFC 7693 appendix A
  // The rest from Python's hashlib.blake2b(digest_size=32).
  EXPECT_EQ(hex_digest("abc", 32), "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
  EXPECT_EQ(hex_digest("", 32), "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
  const std::pair<size_t, const char*> vectors[] = {
      {128, "f0501d06597880592bc49234eef100ec1ff349058d0e9d9b753504e24af86dd6"},
      {129, "a34a4e1e03c541dfbf3099c4b6c143c022ced65c28bd7e8a10e0a098461aecf0"},
      {256, "d93ebb9c802f5630ab22516fd82b6c21bc8bd551d531349b715f046ed11ed871"},
      {1000, "d62b6c768ce1afc8367e0498ab2f8e3f7c178c35b1429f14c4604b545d200f52"},
  };
  for (const auto& [n, want] : vectors) {
    std::string in(n, '\0');
    for (size_t i = 0; i < n; ++i) in[i] = char((i * 7 + 3) % 256);
    EXPECT_EQ(hex_digest(in, 32), want) << n;
    // Fed in uneven pieces: same digest.
    Blake2b h(32);
    for (size_t at = 0; at < n;) {
      const size_t k = std::min(n - at, size_t(1 + at % 61));
      h.update(in.data() + at, k);
      at += k;
    }
    uint8_t d[32];
    h.final(d);
    char buf[65];
    for (int i = 0; i < 32; ++i) std::snprintf(buf + 2 * i, 3, "%02x", d[i]);
    EXPECT_EQ(std::string(buf), want) << n;
  }
}

TEST(TokenCache, KeysSeparateModelLevelAndPixels) {
  std::vector<uint8_t> px(16 * 16 * 3, 7);
  const CacheKey k = tile_key(px.data(), 16, 16, 3, 0, "m");
  EXPECT_EQ(k, tile_key(px.data(), 16, 16, 3, 0, "m"));
  EXPECT_NE(k, tile_key(px.data(), 16, 16, 3, 1, "m"));
  EXPECT_NE(k, tile_key(px.data(), 16, 16, 3, 0, "m2"));
  EXPECT_NE(k, tile_key(px.data(), 8, 32, 3, 0, "m"));
  px[100] ^= 1;
  EXPECT_NE(k, tile_key(px.data(), 16, 16, 3, 0, "m"));
  EXPECT_EQ(k.hex().size(), 64u);  // full 256 bits
  // A strided view hashes like the packed tile.
  std::vector<uint8_t> wide(16 * 20 * 3, 0);
  for (int y = 0; y < 16; ++y) std::memcpy(&wide[size_t(y) * 60], &px[size_t(y) * 48], 48);
  EXPECT_EQ(tile_key(wide.data(), 16, 16, 3, 0, "m", 60), tile_key(px.data(), 16, 16, 3, 0, "m"));
}

// Keys against Python's hashlib.blake2b over the documented serialisation: tag with its NUL,
// the model id's length (u64 LE) and bytes, (level, width, height, channels) as i32 LE, pixels.
TEST(TokenCache, KeysMatchHashlibUnkeyedAndKeyed) {
  uint8_t px[12];
  for (int i = 0; i < 12; ++i) px[i] = uint8_t((i * 5 + 1) % 256);
  EXPECT_EQ(tile_key(px, 2, 2, 3, 1, "m").hex(), "845c24614f0096bde2f349fb2e20da5b6d17ae848679250ca61e8ce3337206d5");
  CacheSecret secret;
  for (int i = 0; i < 32; ++i) secret.bytes[size_t(i)] = uint8_t(i);
  EXPECT_EQ(tile_key(secret, px, 2, 2, 3, 1, "m").hex(),
            "d81d5a1e35ee855b7d6a152bc8734a3ccd9792b2f18f7ce23e1e55e613ebb4e5");
  // hashlib.blake2b(b"abc", key=bytes(range(32)), digest_size=32)
  Blake2b h(32, secret.bytes);
  h.update("abc", 3);
  uint8_t d[32];
  h.final(d);
  char hex[65];
  for (int i = 0; i < 32; ++i) std::snprintf(hex + 2 * i, 3, "%02x", d[i]);
  EXPECT_EQ(std::string(hex), "d63a32d3e44738d7907f964316c241adaba0abfeabc32349677578a15a203f7f");
  EXPECT_THROW(h.final(d), Error);  // once only
  EXPECT_THROW(Blake2b(65), Error);
  EXPECT_THROW(Blake2b(32, std::vector<uint8_t>(65, 1)), Error);
}

// A cache keys with its own secret: random per cache unless given, so two caches' keys for
// the same tile differ, and a given secret reproduces them.
TEST(TokenCache, CacheKeysAreKeyedWithTheCacheSecret) {
  std::vector<uint8_t> px(8 * 8 * 3, 9);
  TokenCache a(1 << 20), b(1 << 20);
  const CacheKey ka = a.tile_key(px.data(), 8, 8, 3, 0, "m");
  EXPECT_EQ(ka, a.tile_key(px.data(), 8, 8, 3, 0, "m"));
  EXPECT_NE(ka, b.tile_key(px.data(), 8, 8, 3, 0, "m"));
  EXPECT_NE(ka, tile_key(px.data(), 8, 8, 3, 0, "m"));
  EXPECT_NE(CacheSecret::random().bytes, CacheSecret::random().bytes);
  CacheSecret s;
  s.bytes.fill(0x5a);
  TokenCache c(1 << 20, s), d(1 << 20, s);
  EXPECT_EQ(c.tile_key(px.data(), 8, 8, 3, 0, "m"), d.tile_key(px.data(), 8, 8, 3, 0, "m"));
  EXPECT_EQ(c.tile_key(px.data(), 8, 8, 3, 0, "m"), tile_key(s, px.data(), 8, 8, 3, 0, "m"));
  // Key semantics as unkeyed: any change of level, model, geometry or pixels changes the key.
  const CacheKey kc = c.tile_key(px.data(), 8, 8, 3, 0, "m");
  EXPECT_NE(kc, c.tile_key(px.data(), 8, 8, 3, 1, "m"));
  EXPECT_NE(kc, c.tile_key(px.data(), 8, 8, 3, 0, "n"));
  EXPECT_NE(kc, c.tile_key(px.data(), 4, 16, 3, 0, "m"));
  px[5] ^= 1;
  EXPECT_NE(kc, c.tile_key(px.data(), 8, 8, 3, 0, "m"));
  // A stride shorter than a row is refused.
  EXPECT_THROW(tile_key(px.data(), 8, 8, 3, 0, "m", 23), Error);
}

// Content keys against hashlib.blake2b over the documented serialisation: the tag with its NUL,
// the number of parts (u64 LE), then each part's length (u64 LE) and bytes.
TEST(TokenCache, ContentKeysMatchHashlibAndSeparateParts) {
  auto bytes = [](std::string_view s) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
  const std::span<const uint8_t> parts[] = {bytes("encode"), bytes(""), bytes("abc")};
  EXPECT_EQ(content_key(parts).hex(), "6f3c07351e28c28fc441244c614d7e25ada691d37e483237338187dbe6927948");
  CacheSecret secret;
  for (int i = 0; i < 32; ++i) secret.bytes[size_t(i)] = uint8_t(i);
  EXPECT_EQ(content_key(secret, parts).hex(), "f01d4ee34462e69407befc5e40f3e50bd278a26c4ac2ad1cdcac99da6764f2da");
  // Moving a byte across a part boundary changes the key; so does the cache's own secret.
  const std::span<const uint8_t> moved[] = {bytes("encod"), bytes("e"), bytes("abc")};
  EXPECT_NE(content_key(moved), content_key(parts));
  TokenCache c(1 << 20, secret), d(1 << 20);
  EXPECT_EQ(c.content_key(parts), content_key(secret, parts));
  EXPECT_NE(d.content_key(parts), c.content_key(parts));
}

CacheKey key_of(int i) {
  const uint8_t px[3] = {uint8_t(i), uint8_t(i >> 8), 1};
  return tile_key(px, 1, 1, 3, 0, "test");
}

Tensor embeddings(int64_t tokens) { return Tensor(DType::f16, {tokens, 512}); }  // 1 KiB a token

TEST(TokenCache, RefcountsAndLruEvictionOrder) {
  TokenCache cache(4 * 1024);  // four 1 KiB entries
  for (int i = 0; i < 4; ++i) cache.insert(key_of(i), embeddings(1));
  EXPECT_EQ(cache.stats().bytes, 4096);
  // Release in the order 2, 0, 3, 1: that is the LRU order of the unreferenced entries.
  for (int i : {2, 0, 3, 1}) cache.release(key_of(i));
  EXPECT_EQ(cache.stats().evictions, 0);
  // A hit takes entry 0 out of the LRU list; inserting two more evicts 2, then 3.
  ASSERT_NE(cache.acquire(key_of(0)), nullptr);
  EXPECT_EQ(cache.refcount(key_of(0)), 1);
  cache.insert(key_of(4), embeddings(1));
  cache.insert(key_of(5), embeddings(1));
  const std::vector<CacheKey> ev = cache.evicted();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0], key_of(2));
  EXPECT_EQ(ev[1], key_of(3));
  EXPECT_TRUE(cache.contains(key_of(0)));
  EXPECT_TRUE(cache.contains(key_of(1)));
  // Referenced entries are never evicted, even over budget.
  cache.insert(key_of(6), embeddings(8));
  EXPECT_TRUE(cache.contains(key_of(0)));
  EXPECT_FALSE(cache.contains(key_of(1)));
  EXPECT_EQ(cache.stats().bytes, 3 * 1024 + 8 * 1024);
  EXPECT_EQ(cache.stats().referenced_entries, 4);
  // Releasing the big one brings the cache back under budget by evicting it.
  cache.release(key_of(6));
  EXPECT_FALSE(cache.contains(key_of(6)));
  EXPECT_EQ(cache.stats().bytes, 3 * 1024);
  // Misses, hits and errors.
  EXPECT_EQ(cache.acquire(key_of(99)), nullptr);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(error_code([&] { cache.release(key_of(99)); }), Errc::invalid_argument);
  cache.release(key_of(0));
  EXPECT_EQ(error_code([&] { cache.release(key_of(0)); }), Errc::invalid_argument);
  EXPECT_EQ(error_code([&] { cache.insert(key_of(0), embeddings(1)); }), Errc::invalid_argument);
  cache.set_budget(0);
  EXPECT_EQ(cache.stats().entries, 2);  // 4 and 5 are still referenced
  cache.release(key_of(4));
  cache.release(key_of(5));
  EXPECT_EQ(cache.stats().entries, 0);
}

// ---------------------------------------------------------------------------------------------
TEST(StoreBench, SeedTableNumbers) {
  const SeedTable t = seed_table("host", StoreConfig{});  // D=1024 f16, 64 KiB pages
  ASSERT_EQ(t.images.size(), 8u);
  EXPECT_TRUE(t.roundtrip_ok);
  EXPECT_EQ(t.stats.resident_pages, 138);
  EXPECT_EQ(t.stats.dense_bytes, 16 << 20);
  EXPECT_NEAR(t.saved_fraction(), 1.0 - 138.0 * 65536 / (16 << 20), 1e-12);  // 46.1%
  EXPECT_NEAR(t.payload_saved_fraction(), 1.0 - 4300.0 / 8192, 1e-12);
  const BindTiming b = time_backend_binds("host", BindMode::merged, 64, 4096, 1);
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(b.entries, 1);
  const BindTiming f = time_frame_binds("host", BindMode::single, StoreConfig{}, 1);
  EXPECT_EQ(f.pages, 138);
  EXPECT_EQ(f.calls, 138);
  const GatherTiming g = time_gather("host", StoreConfig{}, 1);
  EXPECT_EQ(g.bytes, 4300 * 2048);
}


// ---------------------------------------------------------------------------------------------
// A device that cannot serve a Vulkan backend: nullptr and the reason, never a throw or crash.
TEST(StoreVulkan, UnavailableBackendSaysWhy) {
  for (bool image : {false, true}) {
    std::string why;
    const VulkanStoreOptions options{.device = "no-such-gpu-anywhere", .validation = false};
    const auto b = image ? make_vulkan_image_store_backend(&why, options) : make_vulkan_store_backend(&why, options);
    EXPECT_EQ(b, nullptr);
#ifdef FOVEA_HAVE_VULKAN
    EXPECT_NE(why.find("'no-such-gpu-anywhere' matches no usable device"), std::string::npos) << why;
#else
    EXPECT_EQ(why, "this build of fovea has no Vulkan sparse store backend");
#endif
  }
  EXPECT_NE(error_message([] { make_store_backend("vulkan", {.device = "no-such-gpu-anywhere"}); })
                .find("token store: the vulkan backend is not available: "),
            std::string::npos);
}

#ifdef FOVEA_HAVE_VULKAN
// The bind plan of a sparse image, on synthetic layouts with a mip tail and metadata (lavapipe
// reports neither, so the device test below cannot reach those branches).
TEST(SparseImagePlan, BlocksMipTailAndMetadata) {
  vk::SparseImageLayout L;
  L.width = 1000;
  L.height = 700;
  L.levels = 10;
  L.layers = 2;
  L.granularity = {128, 128, 1};
  L.block_bytes = 65536;
  L.mip_tail_first_lod = 10;  // none: every level bound by blocks
  const auto all = [](const vk::SparseBlock&) { return true; };
  vk::SparseImagePlan p = vk::plan_sparse_image(L, all, true);
  // Per layer: L0 8x6, L1 4x3, L2 2x2, L3..L9 one (partial) block each.
  EXPECT_EQ(p.blocks.size(), 2u * (48 + 12 + 4 + 7));
  EXPECT_EQ(p.mip_tails, 0u);
  EXPECT_TRUE(p.opaque.empty());
  EXPECT_EQ(p.bytes, VkDeviceSize(2 * 71 * 65536));
  // Edge blocks stop at the level's edge; a level smaller than a block is one partial block.
  const vk::SparseImageBind& corner = p.image[47];  // layer 0, level 0, block (7, 5)
  EXPECT_EQ(corner.offset.x, 896);
  EXPECT_EQ(corner.offset.y, 640);
  EXPECT_EQ(corner.extent.width, 104u);
  EXPECT_EQ(corner.extent.height, 60u);
  const vk::SparseImageBind& last = p.image.back();  // layer 1, level 9: 1x1
  EXPECT_EQ(last.level, 9u);
  EXPECT_EQ(last.layer, 1u);
  EXPECT_EQ(last.extent.width, 1u);
  EXPECT_EQ(last.extent.height, 1u);

  // A per-layer mip tail from level 3 and a metadata aspect; level 0 half resident.
  L.mip_tail_first_lod = 3;
  L.mip_tail_size = 2 * 65536;
  L.mip_tail_offset = 0x1000000;
  L.mip_tail_stride = 0x40000;
  L.has_metadata = true;
  L.metadata_size = 65536;
  L.metadata_offset = 0x2000000;
  L.single_metadata = true;
  const auto checker = [](const vk::SparseBlock& b) { return b.level > 0 || (b.bx + b.by) % 2 == 0; };
  p = vk::plan_sparse_image(L, checker, true, VkDeviceMemory(nullptr), 4096);
  EXPECT_EQ(p.blocks.size(), 2u * (24 + 12 + 4));
  for (const vk::SparseBlock& b : p.blocks) EXPECT_LT(b.level, 3u);
  EXPECT_EQ(p.mip_tails, 2u);
  ASSERT_EQ(p.opaque.size(), 3u);
  EXPECT_EQ(p.opaque[0].resource_offset, VkDeviceSize(0x1000000));
  EXPECT_EQ(p.opaque[1].resource_offset, VkDeviceSize(0x1040000));
  EXPECT_EQ(p.opaque[1].size, VkDeviceSize(2 * 65536));
  EXPECT_EQ(p.opaque[0].flags, 0u);
  EXPECT_EQ(p.opaque[2].resource_offset, VkDeviceSize(0x2000000));
  EXPECT_EQ(p.opaque[2].flags, VkSparseMemoryBindFlags(VK_SPARSE_MEMORY_BIND_METADATA_BIT));
  // Memory: blocks from `base`, then the tails, then the metadata, without overlap.
  EXPECT_EQ(p.image.front().memory_offset, VkDeviceSize(4096));
  EXPECT_EQ(p.image.back().memory_offset, VkDeviceSize(4096 + (p.blocks.size() - 1) * 65536));
  EXPECT_EQ(p.opaque[0].memory_offset, VkDeviceSize(4096 + p.blocks.size() * 65536));
  EXPECT_EQ(p.opaque[2].memory_offset, p.opaque[1].memory_offset + 2 * 65536);
  EXPECT_EQ(p.bytes, VkDeviceSize(p.blocks.size() * 65536 + 2 * 2 * 65536 + 65536));
  // One tail for every layer; no tail bound when not asked.
  L.single_mip_tail = true;
  EXPECT_EQ(vk::plan_sparse_image(L, checker, true).mip_tails, 1u);
  EXPECT_TRUE(vk::plan_sparse_image(L, checker, false).opaque.empty());
}

// A partially resident mip chain on the device: level 0 as a checkerboard of blocks, every
// smaller level (and the mip tail, when the driver has one) bound, all in ONE vkQueueBindSparse;
// a pattern copied into the resident blocks reads back exactly; validation stays silent.
TEST(SparseImage, PartiallyResidentMipChain) {
  vk::Instance inst({.validation = true});
  const vk::PhysicalDeviceInfo pd = vk::select_device(inst, "");
  vk::Device dev(inst, pd, {.want_sparse = true});
  ASSERT_TRUE(dev.enabled_features().sparseResidencyImage2D) << pd.name() << " lacks sparseResidencyImage2D";
  vk::ImageDesc d;
  d.format = VK_FORMAT_R32_UINT;
  d.width = 1000;
  d.height = 700;
  d.levels = 10;
  d.usage = VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT;
  vk::SparseImage img(dev, d);
  const vk::SparseImageLayout& L = img.layout();
  ASSERT_GT(L.granularity.width, 0u);
  const auto resident = [](const vk::SparseBlock& b) { return b.level > 0 || (b.bx + b.by) % 2 == 0; };
  VkMemoryRequirements req{};
  vkGetImageMemoryRequirements(dev.handle(), img.handle(), &req);
  const vk::SparseImagePlan sizing = vk::plan_sparse_image(L, [](const vk::SparseBlock&) { return true; }, true);
  EXPECT_LE(sizing.bytes, req.size);  // everything resident fits what the driver asks for
  vk::SparseImagePlan probe = vk::plan_sparse_image(L, resident, true);
  vk::Memory mem = vk::Memory::allocate_type(
      dev, probe.bytes, dev.memory_type(L.memory_type_bits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT), false);
  const vk::SparseImagePlan plan = vk::plan_sparse_image(L, resident, true, mem.handle(), 0);
  EXPECT_LT(plan.bytes, sizing.bytes);  // the checkerboard saves memory
  vk::Fence fence(dev);
  vk::bind_sparse(*dev.sparse_queue(), {.image = img.handle(), .image_opaque_binds = plan.opaque, .image_binds = plan.image},
                  fence);

  // Regions to fill: every resident block, and whole levels inside the mip tail.
  std::vector<VkBufferImageCopy> regions;
  VkDeviceSize bytes = 0;
  auto add = [&](uint32_t level, VkOffset3D off, VkExtent3D ext) {
    VkBufferImageCopy r{};
    r.bufferOffset = bytes;
    r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, level, 0, 1};
    r.imageOffset = off;
    r.imageExtent = ext;
    regions.push_back(r);
    bytes += VkDeviceSize(ext.width) * ext.height * 4;
  };
  for (const vk::SparseImageBind& b : plan.image) add(b.level, b.offset, b.extent);
  for (uint32_t l = L.mip_tail_first_lod; l < L.levels; ++l) add(l, {0, 0, 0}, {L.level_width(l), L.level_height(l), 1});
  size_t level0 = 0;  // resident level-0 blocks: the first regions (plans are level-major)
  for (uint32_t by = 0; by < L.blocks_y(0); ++by)
    for (uint32_t bx = 0; bx < L.blocks_x(0); ++bx) level0 += (bx + by) % 2 == 0;
  ASSERT_EQ(regions[level0 - 1].imageSubresource.mipLevel, 0u);
  if (L.granularity.width == 128 && L.granularity.height == 128 && L.mip_tail_first_lod == L.levels) {
    EXPECT_EQ(regions.size(), size_t(24 + 12 + 4 + 7));  // lavapipe: no tail, 7 one-block levels
  }
  vk::Buffer up = vk::Buffer::create(dev, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk::MemoryUse::upload);
  vk::Buffer down = vk::Buffer::create(dev, bytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT, vk::MemoryUse::readback);
  auto* src = static_cast<uint32_t*>(up.mapped());
  for (VkDeviceSize i = 0; i < bytes / 4; ++i) src[i] = uint32_t(i * 2654435761u);
  std::memset(down.mapped(), 0, bytes);
  vk::Commands cmds(dev, dev.compute_queue());
  VkCommandBuffer cb = cmds.begin();
  vk::image_barrier(cb, img.handle(), 0, L.levels, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                    VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  vkCmdCopyBufferToImage(cb, up.handle(), img.handle(), VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, uint32_t(regions.size()),
                         regions.data());
  vk::image_barrier(cb, img.handle(), 0, L.levels, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                    VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                    VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
  vkCmdCopyImageToBuffer(cb, img.handle(), VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, down.handle(), uint32_t(regions.size()),
                         regions.data());
  vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                     VK_ACCESS_HOST_READ_BIT);
  cmds.submit_and_wait();
  EXPECT_EQ(std::memcmp(up.mapped(), down.mapped(), bytes), 0);

  // Unbinding the smaller levels in one call, then binding them again, keeps level 0 intact.
  std::vector<vk::SparseImageBind> small;
  for (const vk::SparseImageBind& b : plan.image)
    if (b.level > 0) small.push_back({b.level, b.layer, b.offset, b.extent, VK_NULL_HANDLE, 0});
  vk::bind_sparse(*dev.sparse_queue(), {.image = img.handle(), .image_binds = small}, fence);
  vk::bind_sparse(*dev.sparse_queue(), {.image = img.handle(), .image_binds = plan.image}, fence);
  std::memset(down.mapped(), 0, bytes);
  cb = cmds.begin();
  vkCmdCopyImageToBuffer(cb, img.handle(), VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, down.handle(), uint32_t(level0),
                         regions.data());
  vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                     VK_ACCESS_HOST_READ_BIT);
  cmds.submit_and_wait();
  EXPECT_EQ(std::memcmp(up.mapped(), down.mapped(), regions[level0].bufferOffset), 0);
  dev.wait_idle();
  EXPECT_EQ(inst.validation_errors(), 0) << [&] {
    std::string all;
    for (const std::string& m : inst.validation_messages()) all += "  " + m + "\n";
    return all;
  }();
}
#endif

}  // namespace
}  // namespace fovea
