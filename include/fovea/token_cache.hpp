// fovea/token_cache.hpp — content-hashed reuse of token embeddings (video frames, chat turns).
//
//   fovea::TokenCache cache(256 << 20);                         // LRU budget for unreferenced entries
//   std::vector<uint8_t> pixels(16 * 16 * 3);
//   fovea::CacheKey key = cache.tile_key(pixels.data(), 16, 16, 3, /*level=*/0, "siglip-so400m");
//   const fovea::Tensor* hit = cache.acquire(key);
//   if (!hit) hit = &cache.insert(key, fovea::Tensor(fovea::DType::f32, {1, 768}));  // insert also acquires
//   cache.release(key);                                        // when the frame/turn is done
//
// Keys are BLAKE2b-256 (RFC 7693, through libb2) digests, full width, never truncated, of the
// model id, the pyramid level, the tile geometry and the tile's pixels: two tiles share a key
// only if all of these are equal (up to a 2^-128 collision bound: BLAKE2b is a cryptographic
// hash, so nobody can craft two tiles that collide, which a fast non-cryptographic hash such
// as XXH3 would not guarantee). TokenCache::tile_key is keyed (BLAKE2b's MAC mode) with the
// cache's secret, 32 random bytes per cache unless the caller gives one: its keys cannot be
// computed, or matched against, outside the process that holds the secret. The free function
// tile_key is unkeyed (anyone can recompute its keys), or keyed with a secret passed in; a
// cache accepts keys from any of them, but keys made with different secrets never match.
// Each entry has a reference count. Entries whose count drops to 0 stay cached and are
// evicted least-recently-released first once the cache holds more than `budget_bytes`;
// referenced entries are never evicted (the cache may then exceed its budget; stats() says by
// how much).
//
// Thread safety: every TokenCache method is thread-safe (one internal mutex). A Blake2b
// hasher is a plain value: one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fovea/tensor.hpp"

namespace fovea {

// BLAKE2b (RFC 7693) through libb2: a digest of 1..64 bytes, unkeyed or keyed with up to 64
// bytes (BLAKE2b's keyed mode, a MAC/PRF). Throws Error(invalid_argument) for other lengths.
class Blake2b {
 public:
  explicit Blake2b(size_t digest_bytes = 32);
  Blake2b(size_t digest_bytes, std::span<const uint8_t> key);
  ~Blake2b();
  Blake2b(Blake2b&&) noexcept;
  Blake2b& operator=(Blake2b&&) noexcept;
  void update(const void* data, size_t bytes);
  // Writes digest_bytes bytes. Call once.
  void final(uint8_t* out);

 private:
  struct State;  // libb2's blake2b_state
  std::unique_ptr<State> state_;
  size_t digest_bytes_ = 0;
};

// The key of a keyed hash: 32 bytes.
struct CacheSecret {
  std::array<uint8_t, 32> bytes{};
  // From the kernel's random source (getrandom).
  static CacheSecret random();
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
// `stride_bytes` apart; 0 means width * channels). Unkeyed: the same in every process.
CacheKey tile_key(const uint8_t* pixels, int width, int height, int channels, int level, std::string_view model_id,
                  size_t stride_bytes = 0);
// The same, keyed with `secret`: equal inputs and secrets give equal keys.
CacheKey tile_key(const CacheSecret& secret, const uint8_t* pixels, int width, int height, int channels, int level,
                  std::string_view model_id, size_t stride_bytes = 0);

// The key of any content (a service's whole request: its kind, model, parameters, the image's
// bytes): `parts` in order, each with its length first, so no two part lists serialise alike.
// Unkeyed (the same in every process), or keyed with `secret`.
CacheKey content_key(std::span<const std::span<const uint8_t>> parts);
CacheKey content_key(const CacheSecret& secret, std::span<const std::span<const uint8_t>> parts);

struct CacheStats {
  int64_t entries = 0;
  int64_t referenced_entries = 0;
  int64_t bytes = 0;  // all entries' tensors
  int64_t budget_bytes = 0;
  int64_t hits = 0, misses = 0, inserts = 0, evictions = 0;
};

class TokenCache {
 public:
  // Keys from tile_key() below are keyed with a random secret of this cache.
  explicit TokenCache(int64_t budget_bytes);
  // A chosen secret: keys reproducible across processes (a cache shared between them).
  TokenCache(int64_t budget_bytes, const CacheSecret& secret);
  TokenCache(const TokenCache&) = delete;
  TokenCache& operator=(const TokenCache&) = delete;

  // fovea::tile_key keyed with this cache's secret.
  CacheKey tile_key(const uint8_t* pixels, int width, int height, int channels, int level, std::string_view model_id,
                    size_t stride_bytes = 0) const {
    return fovea::tile_key(secret_, pixels, width, height, channels, level, model_id, stride_bytes);
  }

  // fovea::content_key keyed with this cache's secret.
  CacheKey content_key(std::span<const std::span<const uint8_t>> parts) const {
    return fovea::content_key(secret_, parts);
  }

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

  CacheSecret secret_;
  mutable std::mutex mutex_;
  std::unordered_map<CacheKey, Entry, CacheKeyHash> map_;
  std::list<CacheKey> lru_;  // unreferenced entries, least recently released first
  std::vector<CacheKey> evicted_;
  CacheStats stats_;
};

}  // namespace fovea
