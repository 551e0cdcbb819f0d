// The store's measurement scenario: the eight-image memory table, bind modes, gather vs memcpy.
#include "store_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "fovea/error.hpp"

namespace fovea {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Pool large enough for the seed table at this page size.
StoreConfig fit_seed(StoreConfig cfg) {
  const int64_t tb = cfg.dim * int64_t(dtype_size(cfg.dtype));
  int64_t need = 0;
  for (int64_t k : kSeedKeptTokens) need += (k * tb + cfg.page_bytes - 1) / cfg.page_bytes;
  const int64_t reserve = 8 * ((kSeedDenseTokens * tb + cfg.page_bytes - 1) / cfg.page_bytes);
  cfg.pool_pages = std::max(cfg.pool_pages, need);
  cfg.virtual_pages = std::max(cfg.virtual_pages, reserve + 1);
  return cfg;
}

// Forwards to a backend and adds up the wall time of its bind() and fill_zero() calls, so a
// frame's bind submissions are timed apart from the zero fill of the new pages (on lavapipe
// the fill is dominated by first-touch page faults of freshly mapped memory, not by binding).
class TimedBackend final : public StoreBackend {
 public:
  explicit TimedBackend(std::unique_ptr<StoreBackend> b) : b_(std::move(b)) {}
  std::string_view name() const override { return b_->name(); }
  int64_t page_granularity_bytes() const override { return b_->page_granularity_bytes(); }
  int64_t max_virtual_bytes() const override { return b_->max_virtual_bytes(); }
  void init(const StoreLayout& layout) override { b_->init(layout); }
  void bind(std::span<const PageBind> binds) override {
    const auto t0 = Clock::now();
    b_->bind(binds);
    bind_ms += ms_since(t0);
  }
  void write(int64_t at, const std::byte* src, int64_t bytes) override { b_->write(at, src, bytes); }
  void fill_zero(std::span<const ByteRun> runs) override {
    const auto t0 = Clock::now();
    b_->fill_zero(runs);
    fill_ms += ms_since(t0);
  }
  void gather(std::span<const ByteRun> runs, std::byte* dst) const override { b_->gather(runs, dst); }
  bool gather_decode(std::span<const int64_t> records, int64_t record_bytes, const ElementwiseDecode& decode,
                     int64_t dim, float* dst) const override {
    return b_->gather_decode(records, record_bytes, decode, dim, dst);
  }
  double bind_ms = 0, fill_ms = 0;

 private:
  std::unique_ptr<StoreBackend> b_;
};

}  // namespace

std::vector<std::string> available_store_backends(std::string* why_not) {
  std::vector<std::string> names{"host"};
  std::string why;
  if (make_vulkan_store_backend(&why)) names.push_back("vulkan");
  else if (why_not) *why_not = why;
  if (make_vulkan_image_store_backend(&why)) names.push_back("vulkan-image");
  else if (why_not && why_not->empty()) *why_not = why;
  return names;
}

SeedTable seed_table(std::string_view backend, StoreConfig cfg) {
  cfg = fit_seed(cfg);
  TokenStore store(cfg, make_store_backend(backend));
  SeedTable t;
  t.backend = std::string(backend);
  t.token_bytes = store.token_bytes();
  t.page_bytes = store.page_bytes();
  std::vector<TokenRange> ranges;
  for (int64_t k : kSeedKeptTokens) ranges.push_back({store.reserve(kSeedDenseTokens), 0, k});
  store.bind_batch(ranges);
  std::vector<std::byte> want;
  for (size_t i = 0; i < ranges.size(); ++i) {
    std::vector<std::byte> bytes(size_t(ranges[i].count * t.token_bytes));
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = std::byte((b * 131 + i * 17 + (b >> 11)) & 0xff);
    store.write_bytes(ranges[i].seq, 0, ranges[i].count, bytes.data());
    want.insert(want.end(), bytes.begin(), bytes.end());
    SeedImage im;
    im.dense_tokens = kSeedDenseTokens;
    im.kept_tokens = ranges[i].count;
    im.pages = store.resident_pages(ranges[i].seq);
    im.resident_bytes = im.pages * t.page_bytes;
    im.payload_bytes = im.kept_tokens * t.token_bytes;
    im.dense_bytes = im.dense_tokens * t.token_bytes;
    t.images.push_back(im);
  }
  const Tensor got = store.gather(ranges);
  t.roundtrip_ok = got.size_bytes() == want.size() && std::memcmp(got.bytes(), want.data(), want.size()) == 0;
  t.stats = store.stats();
  for (const TokenRange& r : ranges) store.release(r.seq);
  return t;
}

BindTiming time_backend_binds(std::string_view backend, BindMode mode, int64_t pages, int64_t page_bytes, int reps) {
  if (pages < 1 || page_bytes < 1 || reps < 1)
    throw Error(Errc::invalid_argument, "store bench: pages, page size and repetitions must be >= 1");
  std::unique_ptr<StoreBackend> b = make_store_backend(backend);
  if (page_bytes % b->page_granularity_bytes() != 0)
    throw Error(Errc::invalid_argument, "store bench: page size " + std::to_string(page_bytes) +
                                            " is not a multiple of the " + std::string(backend) +
                                            " backend's page granularity " +
                                            std::to_string(b->page_granularity_bytes()));
  b->init({page_bytes, pages, pages});
  BindTiming t;
  t.backend = std::string(backend);
  t.mode = mode;
  t.pages = pages;
  t.page_bytes = page_bytes;
  auto run = [&](bool bind) {
    if (mode == BindMode::single) {
      for (int64_t i = 0; i < pages; ++i) {
        const PageBind one{i, bind ? i : PageBind::kUnbound, 1};
        b->bind({&one, 1});
      }
      return std::pair<int64_t, int64_t>{pages, pages};
    }
    if (mode == BindMode::batched) {
      std::vector<PageBind> v(static_cast<size_t>(pages));
      for (int64_t i = 0; i < pages; ++i) v[size_t(i)] = {i, bind ? i : PageBind::kUnbound, 1};
      b->bind(v);
      return std::pair<int64_t, int64_t>{1, pages};
    }
    const PageBind all{0, bind ? 0 : PageBind::kUnbound, pages};
    b->bind({&all, 1});
    return std::pair<int64_t, int64_t>{1, 1};
  };
  std::vector<double> bind_ms, unbind_ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    const auto [calls, entries] = run(true);
    bind_ms.push_back(ms_since(t0));
    t0 = Clock::now();
    run(false);
    unbind_ms.push_back(ms_since(t0));
    t.calls = calls;
    t.entries = entries;
  }
  t.bind_ms = median(bind_ms);
  t.unbind_ms = median(unbind_ms);
  return t;
}

BindTiming time_frame_binds(std::string_view backend, BindMode mode, const StoreConfig& config, int reps) {
  if (reps < 1) throw Error(Errc::invalid_argument, "store bench: repetitions must be >= 1");
  StoreConfig cfg = fit_seed(config);
  cfg.bind_mode = mode;
  // A pool of exactly the frame's pages: every repetition reuses the same physical pages, so
  // after the warm-up no repetition pays the first touch of fresh pool memory.
  int64_t need = 0;
  for (int64_t k : kSeedKeptTokens) need += (k * cfg.dim * int64_t(dtype_size(cfg.dtype)) + cfg.page_bytes - 1) / cfg.page_bytes;
  cfg.pool_pages = need;
  auto timed = std::make_unique<TimedBackend>(make_store_backend(backend));
  TimedBackend& clock = *timed;
  TokenStore store(cfg, std::move(timed));
  BindTiming t;
  t.backend = std::string(backend);
  t.mode = mode;
  t.page_bytes = cfg.page_bytes;
  std::vector<double> bind_ms, fill_ms, batch_ms, unbind_ms;
  for (int r = -1; r < reps; ++r) {  // r = -1 warms up (first touch of the pool) and is dropped
    std::vector<TokenRange> ranges;
    for (int64_t k : kSeedKeptTokens) ranges.push_back({store.reserve(kSeedDenseTokens), 0, k});
    const StoreStats before = store.stats();
    clock.bind_ms = clock.fill_ms = 0;
    auto t0 = Clock::now();
    store.bind_batch(ranges);
    const double batch = ms_since(t0);
    if (r >= 0) {
      batch_ms.push_back(batch);
      bind_ms.push_back(clock.bind_ms);
      fill_ms.push_back(clock.fill_ms);
    }
    const StoreStats after = store.stats();
    t.pages = after.resident_pages;
    t.calls = after.bind_calls - before.bind_calls;
    t.entries = after.bind_entries - before.bind_entries;
    clock.bind_ms = 0;
    store.unbind_batch(ranges);
    if (r >= 0) unbind_ms.push_back(clock.bind_ms);
    for (const TokenRange& rg : ranges) store.release(rg.seq);
  }
  t.bind_ms = median(bind_ms);
  t.fill_ms = median(fill_ms);
  t.batch_ms = median(batch_ms);
  t.unbind_ms = median(unbind_ms);
  return t;
}

GatherTiming time_gather(std::string_view backend, const StoreConfig& config, int reps) {
  if (reps < 1) throw Error(Errc::invalid_argument, "store bench: repetitions must be >= 1");
  StoreConfig cfg = fit_seed(config);
  TokenStore store(cfg, make_store_backend(backend));
  std::vector<TokenRange> ranges;
  for (int64_t k : kSeedKeptTokens) ranges.push_back({store.reserve(kSeedDenseTokens), 0, k});
  store.bind_batch(ranges);
  const int64_t tb = store.token_bytes();
  int64_t total = 0;
  for (const TokenRange& r : ranges) {
    std::vector<std::byte> bytes(size_t(r.count * tb), std::byte(r.seq & 0xff));
    store.write_bytes(r.seq, 0, r.count, bytes.data());
    total += r.count * tb;
  }
  GatherTiming t;
  t.backend = std::string(backend);
  t.bytes = total;
  t.ranges = int64_t(ranges.size());
  std::unique_ptr<std::byte[], AlignedFree> dst = aligned_alloc_bytes(size_t(total));
  std::unique_ptr<std::byte[], AlignedFree> src = aligned_alloc_bytes(size_t(total));
  std::memset(src.get(), 1, size_t(total));
  std::memset(dst.get(), 0, size_t(total));
  store.gather_into(ranges, dst.get());  // warm up (first touch, pipeline creation)
  std::memcpy(dst.get(), src.get(), size_t(total));
  std::vector<double> g, m;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    store.gather_into(ranges, dst.get());
    g.push_back(ms_since(t0));
    t0 = Clock::now();
    std::memcpy(dst.get(), src.get(), size_t(total));
    m.push_back(ms_since(t0));
    volatile std::byte sink = dst[size_t(r) % size_t(total)];  // keep the copy observable
    (void)sink;
  }
  t.gather_ms = median(g);
  t.memcpy_ms = median(m);
  for (const TokenRange& r : ranges) store.release(r.seq);
  return t;
}

}  // namespace fovea
