// The TokenStore front end: sequences, token residency, page bookkeeping, the physical pool
// and the virtual address space. Backends only see page binds and byte runs.
#include "fovea/store.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "fovea/error.hpp"

namespace fovea {

std::string_view to_string(BindMode m) {
  switch (m) {
    case BindMode::single: return "single";
    case BindMode::batched: return "batched";
    case BindMode::merged: return "merged";
  }
  return "?";
}

struct TokenStore::Sequence {
  int64_t base_page = 0;             // first virtual page
  int64_t capacity = 0;              // tokens
  std::vector<int64_t> phys;         // per page: physical page or -1
  std::vector<int32_t> page_tokens;  // per page: resident tokens touching it
  std::vector<uint8_t> resident;     // per token
  int64_t resident_tokens = 0;
  int64_t resident_pages = 0;
};

namespace {

void push_run(std::vector<ByteRun>& runs, int64_t at, int64_t bytes) {
  if (bytes <= 0) return;
  if (!runs.empty() && runs.back().virt_byte + runs.back().bytes == at) runs.back().bytes += bytes;
  else runs.push_back({at, bytes});
}

}  // namespace

TokenStore::TokenStore(const StoreConfig& config, std::unique_ptr<StoreBackend> backend)
    : config_(config), backend_(backend ? std::move(backend) : make_host_store_backend()) {
  if (config_.codec) {
    if (!config_.codec->trained())
      throw invalid_argument("token store codec " + config_.codec->spec() + " is not trained (train it or load its codebook)");
    if (config_.codec->dim() != config_.dim)
      throw invalid_argument("token store dim " + std::to_string(config_.dim) + " does not match codec " + config_.codec->spec() +
                " for D = " + std::to_string(config_.codec->dim()));
  } else if (config_.dtype != DType::f32 && config_.dtype != DType::f16 && config_.dtype != DType::bf16) {
    throw invalid_argument("token store dtype must be f32, f16 or bf16, not " + std::string(dtype_name(config_.dtype)));
  }
  if (config_.dim < 1 || config_.dim > (int64_t(1) << 24))
    throw invalid_argument("token store dim must be in [1, 16777216], got " + std::to_string(config_.dim));
  const int64_t gran = backend_->page_granularity_bytes();
  if (config_.page_bytes <= 0 || config_.page_bytes % gran != 0 || config_.page_bytes > (int64_t(1) << 30))
    throw invalid_argument("token store page size " + std::to_string(config_.page_bytes) + " bytes must be a positive multiple of the " +
              std::string(backend_->name()) + " backend's page granularity (" + std::to_string(gran) +
              " bytes), at most 1 GiB");
  if (config_.pool_pages < 1 || config_.pool_pages > (int64_t(1) << 24) ||
      config_.pool_pages > (int64_t(1) << 46) / config_.page_bytes)
    throw invalid_argument("token store pool must have between 1 page and 64 TiB, got " + std::to_string(config_.pool_pages) +
              " pages of " + std::to_string(config_.page_bytes) + " bytes");
  const int64_t max_virtual_pages = backend_->max_virtual_bytes() / config_.page_bytes;
  if (config_.virtual_pages == 0)
    config_.virtual_pages = std::min({16 * config_.pool_pages, int64_t(1) << 24,
                                      std::max(config_.pool_pages, max_virtual_pages)});
  if (config_.virtual_pages < 1 || config_.virtual_pages > (int64_t(1) << 24))
    throw invalid_argument("token store virtual space must be between 1 and 16777216 pages, got " +
              std::to_string(config_.virtual_pages) + " pages");
  if (config_.virtual_pages > max_virtual_pages)
    throw Error(Errc::limit_exceeded,
                "token store virtual space of " + std::to_string(config_.virtual_pages) + " pages (" +
                    std::to_string(config_.virtual_pages * config_.page_bytes) + " bytes) exceeds the " +
                    std::string(backend_->name()) + " backend's limit of " +
                    std::to_string(backend_->max_virtual_bytes()) + " bytes; lower virtual_pages or pool_pages");
  token_bytes_ = config_.codec ? config_.codec->bytes_per_token() : config_.dim * int64_t(dtype_size(config_.dtype));
  backend_->init({config_.page_bytes, config_.pool_pages, config_.virtual_pages});
  phys_used_.assign(size_t(config_.pool_pages), 0);
  phys_free_ = config_.pool_pages;
  virt_free_.push_back({0, config_.virtual_pages});
}

TokenStore::~TokenStore() = default;

// glibc's rwlock prefers readers: with a backend whose gathers take milliseconds (a GPU),
// overlapping readers would keep the shared lock forever and starve the writer. A writer
// holds the turnstile while it waits and writes, so readers arriving meanwhile queue behind it.
std::shared_lock<std::shared_mutex> TokenStore::read_lock() const {
  std::lock_guard turnstile(turnstile_);
  return std::shared_lock(mutex_);
}

std::pair<std::unique_lock<std::mutex>, std::unique_lock<std::shared_mutex>> TokenStore::write_lock() const {
  std::unique_lock turnstile(turnstile_);
  std::unique_lock lock(mutex_);
  return {std::move(turnstile), std::move(lock)};
}

int64_t TokenStore::pages_for_tokens(int64_t tokens) const {
  return (tokens * token_bytes_ + config_.page_bytes - 1) / config_.page_bytes;
}

TokenStore::Sequence& TokenStore::live(SeqId seq, const char* op) {
  return const_cast<Sequence&>(std::as_const(*this).live(seq, op));
}

const TokenStore::Sequence& TokenStore::live(SeqId seq, const char* op) const {
  if (!broken_.empty()) throw Error(Errc::device, std::string("token store ") + op + ": the store is unusable: " + broken_);
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) return *it->second;
  if (seq >= 1 && seq < next_id_)
    throw invalid_argument(std::string("token store ") + op + ": sequence " + std::to_string(seq) + " was released");
  throw invalid_argument(std::string("token store ") + op + ": no sequence " + std::to_string(seq));
}

void TokenStore::check_range(const Sequence& s, SeqId seq, int64_t first, int64_t count, const char* op) const {
  if (first < 0 || count < 0 || first > s.capacity || count > s.capacity - first)
    throw invalid_argument(std::string("token store ") + op + ": tokens [" + std::to_string(first) + ", " +
              std::to_string(first + count) + ") are out of range for sequence " + std::to_string(seq) + " of " +
              std::to_string(s.capacity) + " tokens");
}

int64_t TokenStore::alloc_virtual(int64_t pages) {
  for (size_t i = 0; i < virt_free_.size(); ++i) {
    auto& [first, n] = virt_free_[i];
    if (n >= pages) {
      const int64_t at = first;
      first += pages;
      n -= pages;
      if (n == 0) virt_free_.erase(virt_free_.begin() + ptrdiff_t(i));
      return at;
    }
  }
  return -1;
}

void TokenStore::free_virtual(int64_t first, int64_t pages) {
  if (pages == 0) return;
  auto it = std::lower_bound(virt_free_.begin(), virt_free_.end(), std::make_pair(first, int64_t(0)));
  it = virt_free_.insert(it, {first, pages});
  // Merge with the right neighbour, then the left one.
  auto next = it + 1;
  if (next != virt_free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    virt_free_.erase(next);
  }
  if (it != virt_free_.begin()) {
    auto prev = it - 1;
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      virt_free_.erase(it);
    }
  }
}

// Next fit: consecutive requests get consecutive physical pages while the pool is not
// fragmented, so neighbouring virtual pages usually merge into one bind entry.
std::vector<int64_t> TokenStore::alloc_physical(int64_t pages) {
  assert(pages <= phys_free_);
  std::vector<int64_t> out;
  out.reserve(size_t(pages));
  int64_t p = phys_hint_;
  while (int64_t(out.size()) < pages) {
    if (p >= config_.pool_pages) p = 0;
    if (!phys_used_[size_t(p)]) {
      phys_used_[size_t(p)] = 1;
      out.push_back(p);
    }
    ++p;
  }
  phys_hint_ = p;
  phys_free_ -= pages;
  return out;
}

SeqId TokenStore::reserve(int64_t capacity_tokens) {
  const auto lock = write_lock();
  if (!broken_.empty()) throw Error(Errc::device, "token store reserve: the store is unusable: " + broken_);
  if (capacity_tokens < 1 || capacity_tokens > (int64_t(1) << 40) / token_bytes_)
    throw invalid_argument("token store reserve: capacity must be >= 1 token and fit the address space, got " +
              std::to_string(capacity_tokens));
  const int64_t pages = pages_for_tokens(capacity_tokens);
  const int64_t base = alloc_virtual(pages);
  if (base < 0)
    throw Error(Errc::out_of_memory, "token store reserve: no free virtual range of " + std::to_string(pages) +
                                         " pages for " + std::to_string(capacity_tokens) +
                                         " tokens (virtual space: " + std::to_string(config_.virtual_pages) +
                                         " pages; release sequences or raise virtual_pages)");
  auto s = std::make_unique<Sequence>();
  s->base_page = base;
  s->capacity = capacity_tokens;
  s->phys.assign(size_t(pages), -1);
  s->page_tokens.assign(size_t(pages), 0);
  s->resident.assign(size_t(capacity_tokens), 0);
  const SeqId id = next_id_++;
  seqs_.emplace(id, std::move(s));
  return id;
}

void TokenStore::submit(std::vector<PageBind>& binds) {
  if (binds.empty()) return;
  // Unbinds first, then binds, each in virtual order; merge neighbours if asked.
  std::stable_sort(binds.begin(), binds.end(), [](const PageBind& a, const PageBind& b) {
    const bool au = a.phys_page == PageBind::kUnbound, bu = b.phys_page == PageBind::kUnbound;
    if (au != bu) return au;
    return a.virt_page < b.virt_page;
  });
  if (config_.bind_mode == BindMode::merged) {
    std::vector<PageBind> merged;
    for (const PageBind& b : binds) {
      if (!merged.empty()) {
        PageBind& m = merged.back();
        const bool both_unbind = m.phys_page == PageBind::kUnbound && b.phys_page == PageBind::kUnbound;
        const bool both_bind = m.phys_page != PageBind::kUnbound && b.phys_page != PageBind::kUnbound;
        if (m.virt_page + m.count == b.virt_page &&
            (both_unbind || (both_bind && m.phys_page + m.count == b.phys_page))) {
          m.count += b.count;
          continue;
        }
      }
      merged.push_back(b);
    }
    binds.swap(merged);
  }
  if (config_.bind_mode == BindMode::single) {
    for (const PageBind& b : binds)
      for (int64_t i = 0; i < b.count; ++i) {
        const PageBind one{b.virt_page + i, b.phys_page == PageBind::kUnbound ? PageBind::kUnbound : b.phys_page + i, 1};
        backend_->bind({&one, 1});
        ++bind_calls_;
        ++bind_entries_;
      }
  } else {
    backend_->bind(binds);
    ++bind_calls_;
    bind_entries_ += int64_t(binds.size());
  }
}

bool TokenStore::restore_mappings(const Mappings& before) {
  if (before.empty()) return true;
  try {
    // Unbind all of them first (harmless where the failed submission never got to), then map
    // back those that were bound: the front end never binds over a bound page.
    std::vector<PageBind> unbind, rebind;
    for (const auto& [virt, phys] : before) {
      unbind.push_back({virt, PageBind::kUnbound, 1});
      if (phys != PageBind::kUnbound) rebind.push_back({virt, phys, 1});
    }
    submit(unbind);
    submit(rebind);
    return true;
  } catch (const std::exception& e) {
    broken_ = std::string("a device error, then another while putting ") + std::to_string(before.size()) +
              " pages back as they were (" + e.what() + "); destroy it and create a new store";
    return false;
  }
}

void TokenStore::release(SeqId seq) {
  const auto lock = write_lock();
  Sequence& s = live(seq, "release");
  std::vector<PageBind> binds;
  std::vector<int64_t> freed;
  Mappings undo;
  for (size_t p = 0; p < s.phys.size(); ++p)
    if (s.phys[p] >= 0) {
      binds.push_back({s.base_page + int64_t(p), PageBind::kUnbound, 1});
      freed.push_back(s.phys[p]);
      undo.push_back({s.base_page + int64_t(p), s.phys[p]});
    }
  try {
    submit(binds);
  } catch (...) {
    restore_mappings(undo);  // the sequence stays as it was
    throw;
  }
  for (int64_t f : freed) phys_used_[size_t(f)] = 0;
  phys_free_ += int64_t(freed.size());
  free_virtual(s.base_page, int64_t(s.phys.size()));
  seqs_.erase(seq);
}

void TokenStore::bind_batch(std::span<const TokenRange> ranges) {
  const auto lock = write_lock();
  bind_locked(ranges);
}

void TokenStore::bind_locked(std::span<const TokenRange> ranges) {
  // Validate everything and count the pages needed before changing anything.
  struct NewPage {
    Sequence* s;
    int64_t page;  // local
  };
  std::vector<NewPage> need;
  for (const TokenRange& r : ranges) {
    Sequence& s = live(r.seq, "bind");
    check_range(s, r.seq, r.first, r.count, "bind");
  }
  for (const TokenRange& r : ranges) {
    Sequence& s = *seqs_.at(r.seq);
    if (r.count == 0) continue;
    const int64_t p0 = r.first * token_bytes_ / config_.page_bytes;
    const int64_t p1 = ((r.first + r.count) * token_bytes_ - 1) / config_.page_bytes;
    for (int64_t p = p0; p <= p1; ++p)
      if (s.phys[size_t(p)] < 0) need.push_back({&s, p});
  }
  std::sort(need.begin(), need.end(), [](const NewPage& a, const NewPage& b) {
    return a.s->base_page + a.page < b.s->base_page + b.page;
  });
  need.erase(std::unique(need.begin(), need.end(),
                         [](const NewPage& a, const NewPage& b) { return a.s == b.s && a.page == b.page; }),
             need.end());
  if (int64_t(need.size()) > phys_free_)
    throw Error(Errc::out_of_memory, "token store bind: the batch needs " + std::to_string(need.size()) +
                                         " new pages but the pool has " + std::to_string(phys_free_) + " free (of " +
                                         std::to_string(config_.pool_pages) + "); nothing was bound");
  std::vector<int64_t> phys = alloc_physical(int64_t(need.size()));
  std::vector<PageBind> binds;
  std::vector<ByteRun> zero;
  Mappings undo;
  binds.reserve(need.size());
  for (size_t i = 0; i < need.size(); ++i) {
    const int64_t v = need[i].s->base_page + need[i].page;
    binds.push_back({v, phys[i], 1});
    undo.push_back({v, PageBind::kUnbound});
    zero.push_back({v * config_.page_bytes, config_.page_bytes});
  }
  // Newly resident tokens read as 0: new pages are zeroed whole; in pages already bound, the
  // bytes of the tokens that become resident are zeroed (unbind leaves old bytes behind, so a
  // failed unbind never has to restore any).
  for (const TokenRange& r : ranges) {
    const Sequence& s = *seqs_.at(r.seq);
    const int64_t base = s.base_page * config_.page_bytes;
    for (int64_t t = r.first; t < r.first + r.count; ++t) {
      if (s.resident[size_t(t)]) continue;
      const int64_t b0 = t * token_bytes_, b1 = b0 + token_bytes_;
      for (int64_t p = b0 / config_.page_bytes; p <= (b1 - 1) / config_.page_bytes; ++p)
        if (s.phys[size_t(p)] >= 0)
          zero.push_back({base + std::max(b0, p * config_.page_bytes), std::min(b1, (p + 1) * config_.page_bytes) -
                                                                         std::max(b0, p * config_.page_bytes)});
    }
  }
  std::sort(zero.begin(), zero.end(), [](const ByteRun& a, const ByteRun& b) { return a.virt_byte < b.virt_byte; });
  std::vector<ByteRun> merged_zero;  // sorted, overlaps (ranges repeated in a batch) merged
  for (const ByteRun& r : zero) {
    if (!merged_zero.empty() && merged_zero.back().virt_byte + merged_zero.back().bytes >= r.virt_byte) {
      ByteRun& m = merged_zero.back();
      m.bytes = std::max(m.virt_byte + m.bytes, r.virt_byte + r.bytes) - m.virt_byte;
    } else {
      merged_zero.push_back(r);
    }
  }
  try {
    submit(binds);
    if (!merged_zero.empty()) backend_->fill_zero(merged_zero);
  } catch (...) {
    // Any prefix of the submission may have taken effect (a device error mid-batch, or one
    // page at a time in single mode): unbind every page of the batch, then give the pool its
    // pages back. Nothing else changed yet, so the batch is all-or-nothing.
    if (restore_mappings(undo)) {
      for (int64_t p : phys) phys_used_[size_t(p)] = 0;
      phys_free_ += int64_t(phys.size());
    }
    throw;
  }
  for (size_t i = 0; i < need.size(); ++i) {
    need[i].s->phys[size_t(need[i].page)] = phys[i];
    ++need[i].s->resident_pages;
  }
  for (const TokenRange& r : ranges) {
    Sequence& s = *seqs_.at(r.seq);
    for (int64_t t = r.first; t < r.first + r.count; ++t) {
      if (s.resident[size_t(t)]) continue;
      s.resident[size_t(t)] = 1;
      ++s.resident_tokens;
      const int64_t p0 = t * token_bytes_ / config_.page_bytes;
      const int64_t p1 = ((t + 1) * token_bytes_ - 1) / config_.page_bytes;
      for (int64_t p = p0; p <= p1; ++p) ++s.page_tokens[size_t(p)];
    }
  }
}

void TokenStore::unbind_batch(std::span<const TokenRange> ranges) {
  const auto lock = write_lock();
  unbind_locked(ranges);
}

void TokenStore::unbind_locked(std::span<const TokenRange> ranges) {
  for (const TokenRange& r : ranges) {
    Sequence& s = live(r.seq, "unbind");
    check_range(s, r.seq, r.first, r.count, "unbind");
  }
  // Bookkeeping first (nothing below can fail on bad input), remembering what to undo.
  struct Gone {
    Sequence* s;
    int64_t token;
  };
  std::vector<Gone> gone;
  for (const TokenRange& r : ranges) {
    Sequence& s = *seqs_.at(r.seq);
    for (int64_t t = r.first; t < r.first + r.count; ++t) {
      if (!s.resident[size_t(t)]) continue;
      s.resident[size_t(t)] = 0;
      --s.resident_tokens;
      const int64_t p0 = t * token_bytes_ / config_.page_bytes;
      const int64_t p1 = ((t + 1) * token_bytes_ - 1) / config_.page_bytes;
      for (int64_t p = p0; p <= p1; ++p) --s.page_tokens[size_t(p)];
      gone.push_back({&s, t});
    }
  }
  std::vector<PageBind> binds;
  std::vector<int64_t> freed;
  struct Freed {
    Sequence* s;
    int64_t page;  // local
  };
  std::vector<Freed> freed_pages;
  Mappings undo;
  for (const Gone& g : gone) {
    const int64_t b0 = g.token * token_bytes_, b1 = b0 + token_bytes_;
    for (int64_t p = b0 / config_.page_bytes; p <= (b1 - 1) / config_.page_bytes; ++p) {
      int64_t& ph = g.s->phys[size_t(p)];
      if (g.s->page_tokens[size_t(p)] == 0 && ph >= 0) {
        binds.push_back({g.s->base_page + p, PageBind::kUnbound, 1});
        undo.push_back({g.s->base_page + p, ph});
        freed.push_back(ph);
        freed_pages.push_back({g.s, p});
        ph = -1;
        --g.s->resident_pages;
      }
    }
  }
  try {
    submit(binds);
  } catch (...) {
    // All-or-nothing: map the pages back (their memory still holds the tokens) and undo the
    // bookkeeping above.
    const bool restored = restore_mappings(undo);
    for (size_t i = 0; i < freed_pages.size(); ++i) {
      freed_pages[i].s->phys[size_t(freed_pages[i].page)] = freed[i];
      ++freed_pages[i].s->resident_pages;
    }
    for (const Gone& g : gone) {
      g.s->resident[size_t(g.token)] = 1;
      ++g.s->resident_tokens;
      const int64_t b0 = g.token * token_bytes_, b1 = b0 + token_bytes_;
      for (int64_t p = b0 / config_.page_bytes; p <= (b1 - 1) / config_.page_bytes; ++p) ++g.s->page_tokens[size_t(p)];
    }
    (void)restored;  // when the mappings could not be restored the store is unusable (broken_)
    throw;
  }
  for (int64_t f : freed) phys_used_[size_t(f)] = 0;
  phys_free_ += int64_t(freed.size());
}

Tensor TokenStore::to_records(const Tensor& tokens, const char* op) const {
  if (config_.codec) {
    const Codec& c = *config_.codec;
    if (tokens.rank() == 2 && tokens.dtype() == DType::f32 && tokens.dim(1) == config_.dim) {
      Tensor r(DType::u8, {tokens.dim(0), token_bytes_});
      if (tokens.dim(0) > 0) c.encode_rows(tokens.data<float>(), tokens.dim(0), r.data<uint8_t>());
      return r;
    }
    if (tokens.rank() == 2 && tokens.dtype() == DType::u8 && tokens.dim(1) == token_bytes_) return Tensor();
    throw invalid_argument(std::string("token store ") + op + ": tokens must be [n, " + std::to_string(config_.dim) +
              "] F32 or [n, " + std::to_string(token_bytes_) + "] U8 " + c.spec() + " records");
  }
  if (tokens.dtype() != config_.dtype || tokens.rank() != 2 || tokens.dim(1) != config_.dim)
    throw invalid_argument(std::string("token store ") + op + ": tokens must be [n, " + std::to_string(config_.dim) + "] " +
              std::string(dtype_name(config_.dtype)));
  return Tensor();  // already the stored bytes
}

void TokenStore::write(SeqId seq, int64_t first, const Tensor& tokens) {
  const Tensor encoded = to_records(tokens, "write");
  const Tensor& r = encoded.rank() ? encoded : tokens;
  write_bytes(seq, first, r.dim(0), r.bytes());
}

void TokenStore::write_bytes(SeqId seq, int64_t first, int64_t count, const std::byte* src) {
  const auto lock = write_lock();
  const Sequence& s = live(seq, "write");
  check_range(s, seq, first, count, "write");
  for (int64_t t = first; t < first + count; ++t)
    if (!s.resident[size_t(t)])
      throw invalid_argument("token store write: token " + std::to_string(t) + " of sequence " + std::to_string(seq) +
                " is not resident (bind it first)");
  if (count > 0) backend_->write(s.base_page * config_.page_bytes + first * token_bytes_, src, count * token_bytes_);
}

FrameDelta TokenStore::update_frame(SeqId seq, const Tensor& input) {
  const Tensor encoded = to_records(input, "update_frame");
  const Tensor& tokens = encoded.rank() ? encoded : input;
  const int64_t n = tokens.dim(0);
  FrameDelta delta;
  const auto lock = write_lock();
  Sequence& s = live(seq, "update_frame");
  check_range(s, seq, 0, n, "update_frame");
  const std::vector<int64_t> was_bound = s.phys;
  // All-or-nothing: the shrink returns its pages before the growth takes new ones.
  const int64_t keep_pages = pages_for_tokens(n);
  int64_t grow = 0, shrink = 0;
  for (size_t p = 0; p < s.phys.size(); ++p) {
    if (int64_t(p) < keep_pages) grow += s.phys[p] < 0;
    else shrink += s.phys[p] >= 0;
  }
  if (grow > phys_free_ + shrink)
    throw Error(Errc::out_of_memory, "token store update_frame: the frame needs " + std::to_string(grow) +
                                         " new pages but the pool has " + std::to_string(phys_free_ + shrink) +
                                         " free; nothing changed");
  // The bytes of every page bound now, read first (a failed read changes nothing): the pages the
  // frame keeps are compared with them, and should a device call fail midway, restore_frame puts
  // back from them every page that may have changed: the update is all-or-nothing.
  const int64_t base = s.base_page * config_.page_bytes;
  std::vector<ByteRun> bound;
  std::vector<int64_t> saved_at(was_bound.size(), -1);  // per page: offset of its bytes in `old`
  int64_t saved_bytes = 0;
  for (size_t p = 0; p < was_bound.size(); ++p)
    if (was_bound[p] >= 0) {
      push_run(bound, base + int64_t(p) * config_.page_bytes, config_.page_bytes);
      saved_at[p] = saved_bytes;
      saved_bytes += config_.page_bytes;
    }
  std::vector<std::byte> old(static_cast<size_t>(saved_bytes));
  if (!bound.empty()) backend_->gather(bound, old.data());
  const std::vector<uint8_t> was_resident = s.resident;
  bool writing = false;  // past the binds: the kept pages' bytes may have changed
  try {
    const TokenRange tail{seq, n, s.capacity - n}, head{seq, 0, n};
    if (tail.count > 0) unbind_locked({&tail, 1});
    if (head.count > 0) bind_locked({&head, 1});
    // Compare on the host, then one write per run of neighbouring pages that changed or are
    // new (a GPU backend pays a submission per call).
    const int64_t end = n * token_bytes_;
    int64_t write_lo = -1, write_hi = -1;
    writing = true;
    auto flush = [&] {
      if (write_lo >= 0) backend_->write(base + write_lo, tokens.bytes() + write_lo, write_hi - write_lo);
      write_lo = -1;
    };
    for (size_t p = 0; p < s.phys.size(); ++p) {
      const bool before = was_bound[p] >= 0, after = s.phys[p] >= 0;
      if (before && !after) ++delta.pages_unbound;
      if (!after) continue;
      const int64_t lo = int64_t(p) * config_.page_bytes, hi = std::min(end, lo + config_.page_bytes);
      bool dirty = true;
      if (!before) {
        ++delta.pages_bound;
      } else {
        dirty = std::memcmp(old.data() + saved_at[p], tokens.bytes() + lo, size_t(hi - lo)) != 0;
        ++(dirty ? delta.pages_written : delta.pages_unchanged);
      }
      if (!dirty) {
        flush();
      } else if (write_lo >= 0 && write_hi == lo) {
        write_hi = hi;
      } else {
        flush();
        write_lo = lo;
        write_hi = hi;
      }
    }
    flush();
  } catch (...) {
    restore_frame(s, seq, was_bound, was_resident, old, saved_at, writing);
    throw;
  }
  return delta;
}

void TokenStore::restore_frame(Sequence& s, SeqId seq, const std::vector<int64_t>& was_bound,
                               const std::vector<uint8_t>& was_resident, const std::vector<std::byte>& old,
                               const std::vector<int64_t>& saved_at, bool written) {
  try {
    // 1. The tokens the failed update made resident go (all-or-nothing itself): the pages it
    //    bound return to the pool.
    std::vector<TokenRange> extra;
    for (int64_t t = 0; t < s.capacity; ++t)
      if (s.resident[size_t(t)] && !was_resident[size_t(t)]) {
        if (!extra.empty() && extra.back().first + extra.back().count == t) ++extra.back().count;
        else extra.push_back({seq, t, 1});
      }
    if (!extra.empty()) unbind_locked(extra);
    // 2. The pages it unbound, mapped back to their own physical pages: those are free again
    //    (nothing but this update ran under the write lock), so the page table is as it was.
    std::vector<PageBind> binds;
    std::vector<uint8_t> rewrite(s.phys.size(), 0);  // pages whose bytes may differ now
    for (size_t p = 0; p < s.phys.size(); ++p)
      if (was_bound[p] >= 0 && s.phys[p] < 0) {
        if (phys_used_[size_t(was_bound[p])])
          throw Error(Errc::internal, "physical page " + std::to_string(was_bound[p]) + " was taken meanwhile");
        binds.push_back({s.base_page + int64_t(p), was_bound[p], 1});
        rewrite[p] = 1;  // its physical page may have served the frame's new pages meanwhile
      } else if (was_bound[p] >= 0 && written) {
        rewrite[p] = 1;
      }
    submit(binds);
    for (size_t p = 0; p < s.phys.size(); ++p)
      if (was_bound[p] >= 0 && s.phys[p] < 0) {
        s.phys[p] = was_bound[p];
        phys_used_[size_t(was_bound[p])] = 1;
        --phys_free_;
        ++s.resident_pages;
      }
    for (int64_t t = 0; t < s.capacity; ++t)
      if (was_resident[size_t(t)] && !s.resident[size_t(t)]) {
        s.resident[size_t(t)] = 1;
        ++s.resident_tokens;
        const int64_t p0 = t * token_bytes_ / config_.page_bytes;
        const int64_t p1 = ((t + 1) * token_bytes_ - 1) / config_.page_bytes;
        for (int64_t p = p0; p <= p1; ++p) ++s.page_tokens[size_t(p)];
      }
    // 3. Those pages get their bytes back, one write per run of neighbours (consecutive bound
    //    pages are consecutive in `old` too).
    const int64_t base = s.base_page * config_.page_bytes;
    for (size_t p = 0; p < s.phys.size();) {
      if (!rewrite[p]) {
        ++p;
        continue;
      }
      size_t q = p + 1;
      while (q < s.phys.size() && rewrite[q]) ++q;
      backend_->write(base + int64_t(p) * config_.page_bytes, old.data() + saved_at[p], int64_t(q - p) * config_.page_bytes);
      p = q;
    }
  } catch (const std::exception& e) {
    if (broken_.empty())
      broken_ = std::string("a device error in update_frame, then another while putting the frame back (") + e.what() +
                "); destroy it and create a new store";
  }
}

void TokenStore::token_runs(const Sequence& s, int64_t first, int64_t count, std::vector<ByteRun>& out) const {
  push_run(out, s.base_page * config_.page_bytes + first * token_bytes_, count * token_bytes_);
}

void TokenStore::gather_into(std::span<const TokenRange> ranges, std::byte* dst) const {
  const auto lock = read_lock();
  std::vector<ByteRun> runs;
  for (const TokenRange& r : ranges) {
    const Sequence& s = live(r.seq, "gather");
    check_range(s, r.seq, r.first, r.count, "gather");
    for (int64_t t = r.first; t < r.first + r.count; ++t)
      if (!s.resident[size_t(t)])
        throw invalid_argument("token store gather: token " + std::to_string(t) + " of sequence " + std::to_string(r.seq) +
                  " is not resident");
    token_runs(s, r.first, r.count, runs);
  }
  if (!runs.empty()) backend_->gather(runs, dst);
}

Tensor TokenStore::gather(std::span<const TokenRange> ranges) const {
  int64_t n = 0;
  for (const TokenRange& r : ranges) n += std::max<int64_t>(r.count, 0);
  Tensor out = config_.codec ? Tensor(DType::u8, {n, token_bytes_}) : Tensor(config_.dtype, {n, config_.dim});
  gather_into(ranges, out.bytes());
  return out;
}

bool TokenStore::decodes_on_device() const {
  if (!config_.codec) return false;
  const auto d = config_.codec->elementwise_decode();
  if (!d) return false;
  // Ask with no records: a backend that can decode this kind answers true.
  return backend_->gather_decode({}, token_bytes_, *d, config_.dim, nullptr);
}

Tensor TokenStore::gather_decoded(std::span<const TokenRange> ranges) const {
  int64_t n = 0;
  for (const TokenRange& r : ranges) n += std::max<int64_t>(r.count, 0);
  Tensor out(DType::f32, {n, config_.dim});
  if (config_.codec) {
    if (const auto d = config_.codec->elementwise_decode()) {
      const auto lock = read_lock();
      std::vector<int64_t> at;
      at.reserve(size_t(n));
      for (const TokenRange& r : ranges) {
        const Sequence& s = live(r.seq, "gather");
        check_range(s, r.seq, r.first, r.count, "gather");
        for (int64_t t = r.first; t < r.first + r.count; ++t) {
          if (!s.resident[size_t(t)])
            throw invalid_argument("token store gather: token " + std::to_string(t) + " of sequence " + std::to_string(r.seq) +
                      " is not resident");
          at.push_back(s.base_page * config_.page_bytes + t * token_bytes_);
        }
      }
      if (n == 0 || backend_->gather_decode(at, token_bytes_, *d, config_.dim, out.data<float>())) return out;
    }
  }
  const Tensor raw = gather(ranges);
  float* y = out.data<float>();
  if (config_.codec) {
    if (n > 0) config_.codec->decode_rows(raw.data<uint8_t>(), n, y);
  } else if (config_.dtype == DType::f32) {
    std::memcpy(y, raw.bytes(), raw.size_bytes());
  } else {
    const uint16_t* h = raw.data<uint16_t>();
    for (int64_t i = 0; i < raw.numel(); ++i) y[i] = config_.dtype == DType::f16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
  }
  return out;
}

bool TokenStore::is_live(SeqId seq) const {
  const auto lock = read_lock();
  return seqs_.count(seq) != 0;
}

int64_t TokenStore::capacity(SeqId seq) const {
  const auto lock = read_lock();
  return live(seq, "capacity").capacity;
}

bool TokenStore::is_resident(SeqId seq, int64_t token) const {
  const auto lock = read_lock();
  const Sequence& s = live(seq, "is_resident");
  check_range(s, seq, token, 1, "is_resident");
  return s.resident[size_t(token)] != 0;
}

int64_t TokenStore::resident_tokens(SeqId seq) const {
  const auto lock = read_lock();
  return live(seq, "resident_tokens").resident_tokens;
}

int64_t TokenStore::resident_pages(SeqId seq) const {
  const auto lock = read_lock();
  return live(seq, "resident_pages").resident_pages;
}

std::vector<int64_t> TokenStore::page_table(SeqId seq) const {
  const auto lock = read_lock();
  return live(seq, "page_table").phys;
}

StoreStats TokenStore::stats() const {
  const auto lock = read_lock();
  StoreStats st;
  st.sequences = int64_t(seqs_.size());
  for (const auto& [id, s] : seqs_) {
    st.resident_tokens += s->resident_tokens;
    st.resident_pages += s->resident_pages;
    st.reserved_pages += int64_t(s->phys.size());
    st.dense_bytes += s->capacity * token_bytes_;
  }
  st.resident_bytes = st.resident_pages * config_.page_bytes;
  st.payload_bytes = st.resident_tokens * token_bytes_;
  st.reserved_bytes = st.reserved_pages * config_.page_bytes;
  st.free_pages = phys_free_;
  st.bind_calls = bind_calls_;
  st.bind_entries = bind_entries_;
  return st;
}

// ---- ValidationLog -----------------------------------------------------------------------

void ValidationLog::add(std::string message) {
  std::lock_guard lock(mutex_);
  ++count_;
  if (messages_.size() < 64) messages_.push_back(std::move(message));
}

int64_t ValidationLog::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

std::vector<std::string> ValidationLog::messages() const {
  std::lock_guard lock(mutex_);
  return messages_;
}

}  // namespace fovea
