// Content-hashed token cache: BLAKE2b-256 keys (libb2, src/store/blake2b.cpp), reference counts,
// LRU over unreferenced entries.
#include "fovea/token_cache.hpp"

#include <cstring>

#include "fovea/error.hpp"

namespace fovea {

std::string CacheKey::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

size_t CacheKeyHash::operator()(const CacheKey& k) const noexcept {
  size_t h;  // the digest is uniformly distributed: any 8 bytes of it make a good bucket hash
  std::memcpy(&h, k.digest.data(), sizeof h);
  return h;
}

namespace {

CacheKey tile_key_with(Blake2b h, const uint8_t* pixels, int width, int height, int channels, int level,
                       std::string_view model_id, size_t stride_bytes) {
  if (width < 1 || height < 1 || channels < 1 || level < 0 || !pixels)
    throw Error(Errc::invalid_argument, "tile_key: empty tile or negative level");
  if (stride_bytes == 0) stride_bytes = size_t(width) * size_t(channels);
  if (stride_bytes < size_t(width) * size_t(channels))
    throw Error(Errc::invalid_argument, "tile_key: the row stride is shorter than a row");
  // Domain tag and lengths first, so no two (model, geometry, pixels) tuples serialise alike.
  const char tag[] = "fovea.tile.v1";
  h.update(tag, sizeof tag);
  const uint64_t len = model_id.size();
  h.update(&len, sizeof len);
  h.update(model_id.data(), model_id.size());
  const int32_t geo[4] = {level, width, height, channels};
  h.update(geo, sizeof geo);
  for (int y = 0; y < height; ++y) h.update(pixels + size_t(y) * stride_bytes, size_t(width) * size_t(channels));
  CacheKey k;
  h.final(k.digest.data());
  return k;
}

CacheKey content_key_with(Blake2b h, std::span<const std::span<const uint8_t>> parts) {
  const char tag[] = "fovea.content.v1";
  h.update(tag, sizeof tag);
  const uint64_t n = parts.size();
  h.update(&n, sizeof n);
  for (std::span<const uint8_t> p : parts) {
    const uint64_t len = p.size();
    h.update(&len, sizeof len);
    if (len) h.update(p.data(), p.size());
  }
  CacheKey k;
  h.final(k.digest.data());
  return k;
}

}  // namespace

CacheKey content_key(std::span<const std::span<const uint8_t>> parts) { return content_key_with(Blake2b(32), parts); }

CacheKey content_key(const CacheSecret& secret, std::span<const std::span<const uint8_t>> parts) {
  return content_key_with(Blake2b(32, secret.bytes), parts);
}

CacheKey tile_key(const uint8_t* pixels, int width, int height, int channels, int level, std::string_view model_id,
                  size_t stride_bytes) {
  return tile_key_with(Blake2b(32), pixels, width, height, channels, level, model_id, stride_bytes);
}

CacheKey tile_key(const CacheSecret& secret, const uint8_t* pixels, int width, int height, int channels, int level,
                  std::string_view model_id, size_t stride_bytes) {
  return tile_key_with(Blake2b(32, secret.bytes), pixels, width, height, channels, level, model_id, stride_bytes);
}

TokenCache::TokenCache(int64_t budget_bytes) : TokenCache(budget_bytes, CacheSecret::random()) {}

TokenCache::TokenCache(int64_t budget_bytes, const CacheSecret& secret) : secret_(secret) {
  if (budget_bytes < 0) throw Error(Errc::invalid_argument, "token cache budget must be >= 0 bytes");
  stats_.budget_bytes = budget_bytes;
}

const Tensor* TokenCache::acquire(const CacheKey& key) {
  std::lock_guard lock(mutex_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  Entry& e = it->second;
  if (e.refs == 0) {
    lru_.erase(e.lru);
    ++stats_.referenced_entries;
  }
  ++e.refs;
  ++stats_.hits;
  return &e.value;
}

const Tensor& TokenCache::insert(const CacheKey& key, Tensor embeddings) {
  std::lock_guard lock(mutex_);
  if (map_.count(key)) throw Error(Errc::invalid_argument, "token cache: key " + key.hex() + " is already cached");
  Entry& e = map_[key];
  e.value = std::move(embeddings);
  e.refs = 1;
  stats_.bytes += int64_t(e.value.size_bytes());
  ++stats_.entries;
  ++stats_.referenced_entries;
  ++stats_.inserts;
  evict_locked();
  return e.value;
}

void TokenCache::release(const CacheKey& key) {
  std::lock_guard lock(mutex_);
  auto it = map_.find(key);
  if (it == map_.end())
    throw Error(Errc::invalid_argument, "token cache release: key " + key.hex() + " is not cached");
  Entry& e = it->second;
  if (e.refs == 0)
    throw Error(Errc::invalid_argument, "token cache release: key " + key.hex() + " has no references left");
  if (--e.refs == 0) {
    --stats_.referenced_entries;
    e.lru = lru_.insert(lru_.end(), key);
    evict_locked();
  }
}

void TokenCache::evict_locked() {
  while (stats_.bytes > stats_.budget_bytes && !lru_.empty()) {
    const CacheKey k = lru_.front();
    lru_.pop_front();
    auto it = map_.find(k);
    stats_.bytes -= int64_t(it->second.value.size_bytes());
    --stats_.entries;
    ++stats_.evictions;
    map_.erase(it);
    if (evicted_.size() == 4096) evicted_.erase(evicted_.begin());
    evicted_.push_back(k);
  }
}

bool TokenCache::contains(const CacheKey& key) const {
  std::lock_guard lock(mutex_);
  return map_.count(key) != 0;
}

int64_t TokenCache::refcount(const CacheKey& key) const {
  std::lock_guard lock(mutex_);
  auto it = map_.find(key);
  return it == map_.end() ? -1 : it->second.refs;
}

std::vector<CacheKey> TokenCache::evicted() const {
  std::lock_guard lock(mutex_);
  return evicted_;
}

CacheStats TokenCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void TokenCache::set_budget(int64_t budget_bytes) {
  if (budget_bytes < 0) throw Error(Errc::invalid_argument, "token cache budget must be >= 0 bytes");
  std::lock_guard lock(mutex_);
  stats_.budget_bytes = budget_bytes;
  evict_locked();
}

}  // namespace fovea
