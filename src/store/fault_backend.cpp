// The fault-injecting StoreBackend decorator (fault_backend.hpp).
#include "store/fault_backend.hpp"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "fovea/error.hpp"

namespace fovea {

const char* to_string(StoreOp op) {
  switch (op) {
    case StoreOp::init: return "init";
    case StoreOp::bind: return "bind";
    case StoreOp::write: return "write";
    case StoreOp::fill_zero: return "fill_zero";
    case StoreOp::gather: return "gather";
  }
  return "?";
}

void StoreFaults::fail_call(StoreOp op, int64_t n, bool partial) {
  std::lock_guard lock(mutex_);
  fail_at_[int(op)] = n >= 1 ? calls_[int(op)] + n : 0;
  partial_[int(op)] = partial;
}

void StoreFaults::fail_randomly(uint64_t seed, double probability) {
  std::lock_guard lock(mutex_);
  rng_.seed(seed);
  probability_ = probability;
}

void StoreFaults::disarm() {
  std::lock_guard lock(mutex_);
  probability_ = 0;
  std::fill(std::begin(fail_at_), std::end(fail_at_), 0);
}

int64_t StoreFaults::calls(StoreOp op) const {
  std::lock_guard lock(mutex_);
  return calls_[int(op)];
}

int64_t StoreFaults::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}

std::map<int64_t, int64_t> StoreFaults::mapped() const {
  std::lock_guard lock(mutex_);
  if (!conflict_.empty()) throw Error(Errc::internal, conflict_);
  return mapped_;
}

StoreFaults::Decision StoreFaults::next(StoreOp op) {
  std::lock_guard lock(mutex_);
  const int64_t n = ++calls_[int(op)];
  Decision d;
  if (fail_at_[int(op)] == n) {
    fail_at_[int(op)] = 0;
    d.fail = true;
    d.fraction = partial_[int(op)] ? std::uniform_real_distribution<double>(0.0, 1.0)(rng_) : 0.0;
  } else if (probability_ > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < probability_) {
    d.fail = true;
    d.bad_alloc = rng_() % 4 == 0;
    d.fraction = rng_() % 2 ? std::uniform_real_distribution<double>(0.0, 1.0)(rng_) : 0.0;
  }
  injected_ += d.fail;
  return d;
}

void StoreFaults::record_bind(const PageBind& b) {
  std::lock_guard lock(mutex_);
  for (int64_t i = 0; i < b.count; ++i) {
    const int64_t v = b.virt_page + i;
    auto it = mapped_.find(v);
    if (it != mapped_.end()) {
      owner_.erase(it->second);
      mapped_.erase(it);
    }
    if (b.phys_page == PageBind::kUnbound) continue;
    const int64_t p = b.phys_page + i;
    if (owner_.count(p) && conflict_.empty())
      conflict_ = "physical page " + std::to_string(p) + " mapped at virtual page " + std::to_string(v) +
                  " while virtual page " + std::to_string(owner_[p]) + " still holds it";
    mapped_[v] = p;
    owner_[p] = v;
  }
}

namespace {

[[noreturn]] void inject(StoreOp op, const StoreFaults::Decision& d) {
  if (d.bad_alloc) throw std::bad_alloc();
  throw Error(Errc::device, std::string("injected fault in the store backend's ") + to_string(op));
}

class FaultBackend final : public StoreBackend {
 public:
  FaultBackend(std::unique_ptr<StoreBackend> inner, std::shared_ptr<StoreFaults> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}

  std::string_view name() const override { return inner_->name(); }
  int64_t page_granularity_bytes() const override { return inner_->page_granularity_bytes(); }
  int64_t max_virtual_bytes() const override { return inner_->max_virtual_bytes(); }

  void init(const StoreLayout& layout) override {
    const auto d = faults_->next(StoreOp::init);
    if (d.fail) inject(StoreOp::init, d);  // the pool's allocation refused
    inner_->init(layout);
  }

  void bind(std::span<const PageBind> binds) override {
    const auto d = faults_->next(StoreOp::bind);
    if (!d.fail) {
      inner_->bind(binds);
      for (const PageBind& b : binds) faults_->record_bind(b);
      return;
    }
    // A prefix of the pages takes effect, entries split where the prefix ends.
    int64_t pages = 0;
    for (const PageBind& b : binds) pages += b.count;
    int64_t apply = int64_t(d.fraction * double(pages));
    std::vector<PageBind> prefix;
    for (const PageBind& b : binds) {
      if (apply <= 0) break;
      PageBind part = b;
      part.count = std::min(b.count, apply);
      apply -= part.count;
      prefix.push_back(part);
    }
    if (!prefix.empty()) {
      inner_->bind(prefix);
      for (const PageBind& b : prefix) faults_->record_bind(b);
    }
    inject(StoreOp::bind, d);
  }

  void write(int64_t virt_byte, const std::byte* src, int64_t bytes) override {
    const auto d = faults_->next(StoreOp::write);
    if (!d.fail) return inner_->write(virt_byte, src, bytes);
    const int64_t part = int64_t(d.fraction * double(bytes));
    if (part > 0) inner_->write(virt_byte, src, part);
    inject(StoreOp::write, d);
  }

  void fill_zero(std::span<const ByteRun> runs) override {
    const auto d = faults_->next(StoreOp::fill_zero);
    if (!d.fail) return inner_->fill_zero(runs);
    int64_t total = 0;
    for (const ByteRun& r : runs) total += r.bytes;
    int64_t apply = int64_t(d.fraction * double(total));
    std::vector<ByteRun> prefix;
    for (const ByteRun& r : runs) {
      if (apply <= 0) break;
      prefix.push_back({r.virt_byte, std::min(r.bytes, apply)});
      apply -= prefix.back().bytes;
    }
    if (!prefix.empty()) inner_->fill_zero(prefix);
    inject(StoreOp::fill_zero, d);
  }

  void gather(std::span<const ByteRun> runs, std::byte* dst) const override {
    const auto d = faults_->next(StoreOp::gather);
    if (d.fail) inject(StoreOp::gather, d);
    inner_->gather(runs, dst);
  }

 private:
  std::unique_ptr<StoreBackend> inner_;
  std::shared_ptr<StoreFaults> faults_;
};

}  // namespace

std::unique_ptr<StoreBackend> make_fault_store_backend(std::unique_ptr<StoreBackend> inner,
                                                       std::shared_ptr<StoreFaults> faults) {
  return std::make_unique<FaultBackend>(std::move(inner), std::move(faults));
}

}  // namespace fovea
