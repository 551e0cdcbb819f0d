// store_bench.hpp — the token store's measurement scenario, shared by `fovea store-bench`
// and the tests. Not part of the library: only the CLI and the tests use it.
//
//   fovea::SeedTable t = fovea::seed_table("host", fovea::StoreConfig{});   // the memory table's 8 images
//   std::printf("%.1f%% saved\n", 100 * t.saved_fraction());
//   fovea::BindTiming one = fovea::time_backend_binds("vulkan", fovea::BindMode::single, 1000, 4096, 5);
//
// Timings are medians over `reps` repetitions, in milliseconds, of wall-clock time.
//
// Thread safety: each function builds its own store and backend; calls are independent (but
// timings taken side by side disturb each other).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/store.hpp"

namespace fovea {

// The memory table: eight images of 1024 dense tokens each, of which these survive the budget.
inline constexpr int64_t kSeedDenseTokens = 1024;
inline constexpr int64_t kSeedKeptTokens[8] = {410, 820, 310, 650, 180, 920, 450, 560};

struct SeedImage {
  int64_t dense_tokens = 0, kept_tokens = 0;
  int64_t pages = 0;           // physical pages bound for the kept tokens
  int64_t resident_bytes = 0;  // pages * page_bytes
  int64_t payload_bytes = 0;   // kept_tokens * token_bytes
  int64_t dense_bytes = 0;     // dense_tokens * token_bytes
};

struct SeedTable {
  std::string backend;
  int64_t token_bytes = 0, page_bytes = 0;
  std::vector<SeedImage> images;
  StoreStats stats;            // the store after binding and writing all eight
  bool roundtrip_ok = false;   // a gather of every kept token returned what was written
  double saved_fraction() const { return 1.0 - double(stats.resident_bytes) / double(stats.dense_bytes); }
  double payload_saved_fraction() const { return 1.0 - double(stats.payload_bytes) / double(stats.dense_bytes); }
  // Page-granularity overhead: resident bytes beyond the payload, as a fraction of the payload.
  double page_overhead() const { return double(stats.resident_bytes) / double(stats.payload_bytes) - 1.0; }
};

// Reserves the eight images at their dense size, binds the kept tokens [0, kept) in one batch,
// writes distinct bytes and gathers them back. cfg.pool_pages is raised to fit if needed.
SeedTable seed_table(std::string_view backend, StoreConfig cfg);

struct BindTiming {
  std::string backend;
  BindMode mode = BindMode::merged;
  int64_t pages = 0, page_bytes = 0;
  int64_t calls = 0, entries = 0;  // backend bind() submissions and PageBind entries per repetition
  double bind_ms = 0;              // median time to bind `pages` pages (the bind submissions)
  double unbind_ms = 0;            // median time to unbind them again (same mode)
  double fill_ms = 0;              // frames only: median zero fill of the new pages
  double batch_ms = 0;             // frames only: median wall time of the whole bind_batch
  double pages_per_s() const { return bind_ms > 0 ? double(pages) / (bind_ms * 1e-3) : 0; }
};

// Backend level, no bookkeeping: binds `pages` pages of `page_bytes` (virtual i -> physical i)
// in one of the three ways, then unbinds them the same way.
BindTiming time_backend_binds(std::string_view backend, BindMode mode, int64_t pages, int64_t page_bytes, int reps);

// A whole frame through the TokenStore: the memory table's eight images bound in one bind_batch and
// released again. bind_ms/unbind_ms are the time spent in the backend's bind() submissions
// during bind_batch/unbind_batch; fill_ms the zero fill of the new pages; batch_ms the whole
// bind_batch (bookkeeping + binds + fill).
BindTiming time_frame_binds(std::string_view backend, BindMode mode, const StoreConfig& cfg, int reps);

struct GatherTiming {
  std::string backend;
  int64_t bytes = 0;      // gathered per repetition
  int64_t ranges = 0;
  double gather_ms = 0;   // median TokenStore::gather_into of every kept token of the seed table
  double memcpy_ms = 0;   // median memcpy of the same number of bytes between two host buffers
  double gather_gb_s() const { return gather_ms > 0 ? double(bytes) / (gather_ms * 1e6) : 0; }
  double memcpy_gb_s() const { return memcpy_ms > 0 ? double(bytes) / (memcpy_ms * 1e6) : 0; }
};

GatherTiming time_gather(std::string_view backend, const StoreConfig& cfg, int reps);

// "host", plus "vulkan" when make_vulkan_store_backend() succeeds; `why_not` gets the reason
// when it does not.
std::vector<std::string> available_store_backends(std::string* why_not = nullptr);

}  // namespace fovea

namespace fovea {

// The memory table with compressed pages: the eight images' kept tokens stored as
// records of each codec, resident memory against dense fp32 (every image at 1024 tokens of
// 4·D bytes), and a gather_decoded of every kept token timed against a gather of fp32 pages
// in the same run. Codecs are trained on seeded synthetic vectors (sizes do not depend on
// the data). Defined in store_bench_compressed.cpp.
struct CompressedSeedRow {
  std::string codec;             // "fp32" (the dense reference's dtype, paged), "fp16", "int8", "pq:M"
  int64_t record_bytes = 0;
  int64_t pages = 0;
  int64_t resident_bytes = 0;
  int64_t dense_fp32_bytes = 0;  // 8 x 1024 x 4·D
  bool roundtrip_ok = false;     // gather_decoded == the codec's decode of what was written
  bool on_device = false;        // decoded by the backend's shader
  double gather_decoded_ms = 0;  // median
  double resident_vs_dense_fp32() const { return double(resident_bytes) / double(dense_fp32_bytes); }
};
// The table's codecs, trained once (PQ training is most of the table's time) and shared by every
// backend's run, so the backends also store the same records. `specs` empty: fp32 (no codec:
// the dense reference's dtype, paged), fp16, int8, pq:D/8 (128 bytes at D = 1024), pq:D/16.
struct SeedCodec {
  std::string spec;
  std::shared_ptr<Codec> codec;  // null for fp32
};
std::vector<SeedCodec> train_seed_codecs(int64_t dim, std::vector<std::string> specs = {});
std::vector<CompressedSeedRow> compressed_seed_table(std::string_view backend, StoreConfig cfg,
                                                     const std::vector<SeedCodec>& codecs, int reps = 5);

}  // namespace fovea
