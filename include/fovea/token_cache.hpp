// fovea/token_cache.hpp — content-hashed reuse of token embeddings (video frames, chat turns).
//
//   fovea::TokenCache cache(256 << 20);                         // LRU budget for unreferenced entries
//   std::vector<uint8_t> pixels(16 * 16 * 3);
//   fovea::CacheKey key = fovea::tile_key(pixels.data(), 16, 16, 3, /*level=*/0, "siglip-so400m");
//   const fovea::Tensor* hit = cache.acquire(key);
//   if (!hit) hit = &cache.insert(key, fovea::Tensor(fovea::DType::f32, {1, 768}));  // insert also acquires
//   cache.release(key);                                        // when the frame/turn is done
//
// Keys are BLAKE2b-256 (RFC 7693) digests, full width, never truncated, of the model id, the
// pyramid level, the tile geometry and the tile's pixels: two tiles share a key only if all of
// these are equal (up to a 2^-128 collision bound). Each entry has a reference count. Entries
// whose count drops to 0 stay cached and are evicted least-recently-released first once the
// cache holds more than `budget_bytes`; referenced entries are never evicted (the cache may
// then exceed its budget; stats() says by how much). All methods are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fovea/tensor.hpp"

namespace fovea {

// BLAKE2b (RFC 7693), unkeyed, any digest length 1..64 bytes.
class Blake2b {
 public:
  explicit Blake2b(size_t digest_bytes = 32);
  void update(const void* data, size_t bytes);
  // Writes digest_bytes bytes. Call once.
  void final(uint8_t* out);

 private:
  void compress(bool last);
  uint64_t h_[8];
  uint64_t t_[2] = {0, 0};
  uint8_t buf_[128];
  size_t fill_ = 0;
  size_t out_bytes_;
};

struct CacheKey {
  std::array<uint8_t, 32> digest{};
  bool operator==(const CacheKey&) const = default;
  std::string hex() const;
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const noexcept;
};

// The key of one tile: model id, pyramid level, geometry, then the pixels (row-major,
// `stride_bytes` apart; 0 means width * channels).
CacheKey tile_key(const uint8_t* pixels, int width, int height, int channels, int level, std::string_view model_id,
                  size_t stride_bytes = 0);

struct CacheStats {
  int64_t entries = 0;
  int64_t referenced_entries = 0;
  int64_t bytes = 0;  // all entries' tensors
  int64_t budget_bytes = 0;
  int64_t hits = 0, misses = 0, inserts = 0, evictions = 0;
};

class TokenCache {
 public:
  explicit TokenCache(int64_t budget_bytes);
  TokenCache(const TokenCache&) = delete;
  TokenCache& operator=(const TokenCache&) = delete;

  // A hit takes a reference and returns the embeddings (valid until the matching release);
  // a miss returns nullptr.
  const Tensor* acquire(const CacheKey& key);
  // Adds an entry with one reference, then evicts to the budget. Throws if the key exists.
  const Tensor& insert(const CacheKey& key, Tensor embeddings);
  // Drops one reference. Throws Error(invalid_argument) for an unknown key or a count of 0.
  void release(const CacheKey& key);

  bool contains(const CacheKey& key) const;
  int64_t refcount(const CacheKey& key) const;  // -1 if absent
  // Keys evicted so far, oldest first (bounded to the last 4096), for tests and reports.
  std::vector<CacheKey> evicted() const;
  CacheStats stats() const;
  void set_budget(int64_t budget_bytes);

 private:
  struct Entry {
    Tensor value;
    int64_t refs = 0;
    std::list<CacheKey>::iterator lru;  // valid when refs == 0
  };
  void evict_locked();

  mutable std::mutex mutex_;
  std::unordered_map<CacheKey, Entry, CacheKeyHash> map_;
  std::list<CacheKey> lru_;  // unreferenced entries, least recently released first
  std::vector<CacheKey> evicted_;
  CacheStats stats_;
};

}  // namespace fovea
