// BLAKE2b (RFC 7693) for the token cache's content keys: Debian's libb2 (the BLAKE2 authors'
// reference library, with its SIMD code paths) does the hashing; this file adapts it to
// fovea's types and errors.
#include <sys/random.h>

#include <blake2.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "fovea/error.hpp"
#include "fovea/token_cache.hpp"

namespace fovea {

struct Blake2b::State {
  blake2b_state s;
};

Blake2b::Blake2b(size_t digest_bytes) : Blake2b(digest_bytes, {}) {}

Blake2b::Blake2b(size_t digest_bytes, std::span<const uint8_t> key) : state_(std::make_unique<State>()) {
  if (digest_bytes < 1 || digest_bytes > BLAKE2B_OUTBYTES)
    throw Error(Errc::invalid_argument, "BLAKE2b digest must be 1..64 bytes");
  if (key.size() > BLAKE2B_KEYBYTES) throw Error(Errc::invalid_argument, "BLAKE2b key must be at most 64 bytes");
  const int r = key.empty() ? blake2b_init(&state_->s, digest_bytes)
                            : blake2b_init_key(&state_->s, digest_bytes, key.data(), key.size());
  if (r != 0) throw Error(Errc::internal, "libb2: blake2b_init failed");
  digest_bytes_ = digest_bytes;
}

Blake2b::~Blake2b() = default;
Blake2b::Blake2b(Blake2b&&) noexcept = default;
Blake2b& Blake2b::operator=(Blake2b&&) noexcept = default;

void Blake2b::update(const void* data, size_t bytes) {
  if (!state_) throw Error(Errc::invalid_argument, "Blake2b::update after final()");
  if (bytes == 0) return;
  if (blake2b_update(&state_->s, static_cast<const uint8_t*>(data), bytes) != 0)
    throw Error(Errc::internal, "libb2: blake2b_update failed");
}

void Blake2b::final(uint8_t* out) {
  if (!state_) throw Error(Errc::invalid_argument, "Blake2b::final called twice");
  const int r = blake2b_final(&state_->s, out, digest_bytes_);
  state_.reset();
  if (r != 0) throw Error(Errc::internal, "libb2: blake2b_final failed");
}

CacheSecret CacheSecret::random() {
  CacheSecret k;
  size_t got = 0;
  while (got < k.bytes.size()) {
    const ssize_t n = ::getrandom(k.bytes.data() + got, k.bytes.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(Errc::internal, std::string("getrandom failed: ") + std::strerror(errno));
    }
    got += size_t(n);
  }
  return k;
}

}  // namespace fovea
