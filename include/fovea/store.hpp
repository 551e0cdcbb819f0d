// fovea/store.hpp — a paged store of visual-token embeddings with a virtual address space.
//
//   fovea::StoreConfig cfg;                     // D=1024, f16, 64 KiB pages
//   cfg.pool_pages = 4096;                      // physical capacity: 256 MiB
//   fovea::TokenStore store(cfg);               // host backend; make_store_backend("vulkan") for GPU
//   fovea::SeqId img = store.reserve(1024);     // worst case: 1024 tokens, nothing resident yet
//   store.bind(img, 0, 410);                    // pages only for the 410 tokens that survived
//   fovea::Tensor embeddings(fovea::DType::f16, {410, 1024});
//   store.write(img, 0, embeddings);            // [410, D] tensor of the store's dtype
//   fovea::Tensor batch = store.gather({{img, 0, 410}});   // [410, D]
//   store.release(img);
//
// Model. Every sequence (an image, a video frame, a chat turn's image) owns a contiguous range
// of the store's virtual address space, sized for its worst-case token count. Token t of a
// sequence lives at virtual byte offset base + t * token_bytes: tokens are packed, so a token
// may straddle two pages when token_bytes does not divide page_bytes. Physical memory comes in
// fixed-size pages from a pool; a virtual page is bound to a physical page only while at least
// one of its tokens is resident. Residency is per token: bind/unbind make tokens resident or
// not, and the store binds and unbinds the pages under them. Newly resident tokens read as 0.
// Reading or writing a non-resident token is an error (never "read whatever unbound memory
// returns": Vulkan's residencyNonResidentStrict is false on lavapipe).
//
// Batches are all-or-nothing: bind_batch() either makes every requested token resident or
// throws Error(out_of_memory) with nothing changed. Released, unknown and out-of-range
// sequences/tokens throw Error(invalid_argument) naming the sequence and the range.
//
// Device errors. When the backend fails in the middle of a submission (any prefix of it may
// have taken effect), bind_batch, unbind_batch and release put every page of the batch back
// as it was and rethrow: nothing changed, accounting stays exact, no page is left half-bound,
// and an unbound page's tokens are intact once mapped back. A failed write leaves residency
// unchanged and the written tokens' bytes unspecified; a failed gather changes nothing; a
// failed update_frame puts the sequence back as it was, residency and bytes (it reads the
// bound pages first, and writes them back after a failure). Should putting pages back fail as
// well, the store is unusable: every later call throws Error(device) saying so (destroying it
// is still safe and frees everything).
// tests/test_store_faults.cpp injects such failures (src/store/fault_backend.hpp).
//
// Threads: a TokenStore is safe to share between threads: any number of concurrent readers
// (gather, read, queries, stats) and one writer at a time (reserve, bind, unbind, write, update_frame, release). A store-wide shared_mutex
// enforces it, writer-preferring (a waiting writer is not starved by a stream of readers);
// a gather sees every sequence either entirely before or after a write.
//
// Backends (StoreBackend) carry out the page binds and the gathers. The host backend keeps a
// page table and a pool in RAM; the Vulkan backend binds pages of a sparse buffer with
// vkQueueBindSparse and gathers with a compute shader; the Vulkan image backend does the same
// on the blocks of a sparse 2D image. The TokenStore front end does all the bookkeeping, so
// every backend gives identical results (tests/test_store.cpp runs the same operation
// sequences on each and compares).
#pragma once
#include "fovea/export.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fovea/codec_interface.hpp"
#include "fovea/tensor.hpp"

FOVEA_API_BEGIN
namespace fovea {

// How page binds are submitted to the backend: the bench compares the three.
enum class BindMode : uint8_t {
  single,   // one backend call (one submission + fence wait) per page
  batched,  // one call per batch, one entry per page
  merged,   // one call per batch, neighbouring pages (virtual and physical) merged into one entry
};
std::string_view to_string(BindMode m);

// One entry of a bind submission: virtual pages [virt_page, virt_page + count) map to physical
// pages [phys_page, phys_page + count), or are unbound when phys_page == kUnbound.
struct PageBind {
  static constexpr int64_t kUnbound = -1;
  int64_t virt_page = 0;
  int64_t phys_page = kUnbound;
  int64_t count = 1;
};

// A run of virtual bytes to copy into a gather's output, in order.
struct ByteRun {
  int64_t virt_byte = 0;
  int64_t bytes = 0;
};

struct StoreLayout {
  int64_t page_bytes = 0;
  int64_t pool_pages = 0;     // physical pages
  int64_t virtual_pages = 0;  // size of the virtual address space, in pages
};

// The interface a backend implements. The front end guarantees: binds never map a virtual page
// that is already bound (it unbinds first), never bind a physical page twice, and reads/writes
// only touch bound pages. Unbinding a page that is not bound must be harmless (a rollback after
// a failed submission unbinds every page the submission named). Implementations must allow
// concurrent read()/gather() calls.
class StoreBackend {
 public:
  virtual ~StoreBackend() = default;
  virtual std::string_view name() const = 0;
  // page_bytes must be a multiple of this (host: 4 KiB; Vulkan: the sparse buffer alignment).
  virtual int64_t page_granularity_bytes() const = 0;
  // Allocates the physical pool and the virtual space. Called once, before anything else.
  virtual void init(const StoreLayout& layout) = 0;
  // Applies the entries as one submission and returns when they have taken effect.
  virtual void bind(std::span<const PageBind> binds) = 0;
  // Byte-level access to bound virtual memory. `runs` may span page boundaries.
  virtual void write(int64_t virt_byte, const std::byte* src, int64_t bytes) = 0;
  virtual void fill_zero(std::span<const ByteRun> runs) = 0;
  // Copies the runs, in order, into dst (packed).
  virtual void gather(std::span<const ByteRun> runs, std::byte* dst) const = 0;
  // The largest virtual space init() accepts (Vulkan: sparseAddressSpaceSize and resource
  // limits). The front end sizes its default virtual space to fit.
  virtual int64_t max_virtual_bytes() const { return INT64_MAX; }
  // Decode-on-gather on the device: record i (record_bytes bytes at virtual byte
  // records[i], all bound) decoded by `decode` into dst[i * dim, (i + 1) * dim) as f32.
  // Returns false when the backend cannot (the front end then gathers the bytes and decodes
  // on the CPU). The Vulkan buffer backend does f16, bf16 and u8_affine in a shader.
  virtual bool gather_decode(std::span<const int64_t> records, int64_t record_bytes, const ElementwiseDecode& decode,
                             int64_t dim, float* dst) const {
    return false;
  }
};

// The host backend: a RAM pool and a page table (virtual page -> physical page).
std::unique_ptr<StoreBackend> make_host_store_backend();

// Where Vulkan store backends put their validation-layer messages (warnings and errors). The
// caller creates it and passes it in VulkanStoreOptions; backends add to it after each
// operation and when they are destroyed, so messages from vkDestroy* are there afterwards.
// Several backends may share one log. Thread-safe.
class ValidationLog {
 public:
  void add(std::string message);
  int64_t count() const;                      // every message added
  std::vector<std::string> messages() const;  // the first 64
 private:
  mutable std::mutex mutex_;
  int64_t count_ = 0;
  std::vector<std::string> messages_;
};

struct VulkanStoreOptions {
  std::string device;       // "" the best device, "N" an index, else a name substring (--device)
  bool validation = false;  // VK_LAYER_KHRONOS_validation
  // With validation: where its messages go. nullptr: they are dropped.
  std::shared_ptr<ValidationLog> validation_log = nullptr;
};

// The Vulkan sparse-residency backend ("vulkan"): a sparse buffer (sparseResidencyBuffer) is the
// virtual space, pages of a device-memory pool are bound with one vkQueueBindSparse per bind()
// and a fence, writes go through a staging buffer, gathers run a compute shader. Returns
// nullptr with `*why` set when this build or the device cannot do it (no Vulkan, no device, no
// sparseResidencyBuffer, no validation layer when asked for); never throws for that.
// Defined in src/vulkan/store/vulkan_backend.cpp (vulkan_stub.cpp there without Vulkan).
std::unique_ptr<StoreBackend> make_vulkan_store_backend(std::string* why, const VulkanStoreOptions& options = {});

// The sparse 2D image variant ("vulkan-image", sparseResidencyImage2D): the virtual space is
// level 0 of an R32_UINT 2D array image, a page is page_bytes / block bytes imageGranularity
// blocks (128x128 texels = 64 KiB on lavapipe, so pages are multiples of 64 KiB), gathers and
// writes are compute shaders. Same contract and same results as "vulkan" and "host".
std::unique_ptr<StoreBackend> make_vulkan_image_store_backend(std::string* why,
                                                              const VulkanStoreOptions& options = {});

// Names accepted by make_store_backend: "host", "vulkan", "vulkan-image". An unavailable Vulkan
// backend throws Error(device) with the reason.
std::unique_ptr<StoreBackend> make_store_backend(std::string_view name, const VulkanStoreOptions& options = {});

struct StoreConfig {
  int64_t dim = 1024;             // D: elements per token, >= 1
  DType dtype = DType::f16;       // f32, f16 or bf16 (ignored with a codec)
  // Compressed pages (fovea/compress.hpp): each token is one record of codec->bytes_per_token()
  // bytes (the record size replaces dim * dtype); dim must equal codec->dim(); the codec must
  // be trained. write()/update_frame() take [n, D] f32 (encoded on the way in) or [n, record]
  // u8 records; gather() returns the records; gather_decoded() the f32 embeddings.
  std::shared_ptr<const Codec> codec;
  int64_t page_bytes = 64 << 10;  // multiple of the backend's page granularity
  int64_t pool_pages = 1024;      // physical pages (pool_pages * page_bytes of memory)
  int64_t virtual_pages = 0;      // address space in pages; 0: 16 x pool_pages, capped by the
                                  // backend's max_virtual_bytes() (but at least pool_pages)
  BindMode bind_mode = BindMode::merged;
};

using SeqId = uint64_t;  // never reused, so a released id is recognised as released

struct TokenRange {
  SeqId seq = 0;
  int64_t first = 0;  // token index within the sequence
  int64_t count = 0;
};

struct StoreStats {
  int64_t sequences = 0;
  int64_t resident_tokens = 0;
  int64_t resident_pages = 0;   // bound physical pages
  int64_t resident_bytes = 0;   // resident_pages * page_bytes: the memory actually used
  int64_t payload_bytes = 0;    // resident_tokens * token_bytes: what a perfect packer would use
  int64_t reserved_pages = 0;   // virtual pages reserved by live sequences
  int64_t reserved_bytes = 0;   // reserved_pages * page_bytes (address space, not memory)
  int64_t dense_bytes = 0;      // sum of capacity * token_bytes: every sequence at its worst case
  int64_t free_pages = 0;       // physical pages left in the pool
  int64_t bind_calls = 0;       // backend bind() submissions so far
  int64_t bind_entries = 0;     // PageBind entries submitted so far
};

// What update_frame did.
struct FrameDelta {
  int64_t pages_written = 0;    // bound pages whose bytes changed and were rewritten
  int64_t pages_unchanged = 0;  // bound pages left alone
  int64_t pages_bound = 0;      // newly bound (the frame grew)
  int64_t pages_unbound = 0;    // unbound (the frame shrank)
};

class TokenStore {
 public:
  // Throws Error(invalid_argument) for a bad config; Error(device/out_of_memory) from the backend.
  explicit TokenStore(const StoreConfig& config, std::unique_ptr<StoreBackend> backend = nullptr);
  ~TokenStore();
  TokenStore(const TokenStore&) = delete;
  TokenStore& operator=(const TokenStore&) = delete;

  const StoreConfig& config() const;
  std::string_view backend_name() const;
  int64_t token_bytes() const;  // the record size with a codec
  int64_t page_bytes() const;

  // A sequence of up to `capacity_tokens` tokens, none resident. Reserves address space only.
  SeqId reserve(int64_t capacity_tokens);
  // Unbinds everything and frees the address space. A second release throws.
  void release(SeqId seq);

  // Makes tokens [first, first+count) resident (already resident ones are left as they are).
  void bind(SeqId seq, int64_t first, int64_t count) { bind_batch({{seq, first, count}}); }
  // All ranges at once: one backend submission; all-or-nothing when the pool runs out.
  void bind_batch(std::span<const TokenRange> ranges);
  void bind_batch(std::initializer_list<TokenRange> ranges) {
    bind_batch(std::span<const TokenRange>(ranges.begin(), ranges.size()));
  }
  // Makes tokens non-resident; pages with no resident token left are returned to the pool.
  void unbind(SeqId seq, int64_t first, int64_t count) { unbind_batch({{seq, first, count}}); }
  void unbind_batch(std::span<const TokenRange> ranges);
  void unbind_batch(std::initializer_list<TokenRange> ranges) {
    unbind_batch(std::span<const TokenRange>(ranges.begin(), ranges.size()));
  }

  // `tokens`: [n, D] of the store's dtype, written to tokens [first, first+n), all resident.
  // With a codec: [n, D] f32 (encoded here) or [n, record bytes] u8 records.
  void write(SeqId seq, int64_t first, const Tensor& tokens);
  void write_bytes(SeqId seq, int64_t first, int64_t count, const std::byte* src);

  // Delta rebinding for the next frame of a video: afterwards the sequence holds exactly the
  // tokens of `tokens` ([n, D]) at [0, n) and nothing beyond. Pages whose bytes are unchanged
  // are not touched; only the pages that changed are rewritten; the pages the frame grew into
  // are bound and those it shrank out of unbound (one submission each). All-or-nothing when the
  // pool cannot hold the grown frame (Error(out_of_memory)) and when a device call fails midway
  // (Error(device): the sequence is put back as it was).
  FrameDelta update_frame(SeqId seq, const Tensor& tokens);

  // The ranges' tokens, concatenated: [sum of counts, D]. Every token must be resident.
  Tensor gather(std::span<const TokenRange> ranges) const;
  Tensor gather(std::initializer_list<TokenRange> ranges) const {
    return gather(std::span<const TokenRange>(ranges.begin(), ranges.size()));
  }
  // Into caller memory of sum(count) * token_bytes bytes.
  void gather_into(std::span<const TokenRange> ranges, std::byte* dst) const;
  // The ranges' tokens as [sum of counts, D] f32: decoded by the codec (on the device when
  // the backend can, StoreBackend::gather_decode; else on the CPU), or converted from the
  // store's dtype without one.
  Tensor gather_decoded(std::span<const TokenRange> ranges) const;
  Tensor gather_decoded(std::initializer_list<TokenRange> ranges) const {
    return gather_decoded(std::span<const TokenRange>(ranges.begin(), ranges.size()));
  }
  // Whether gather_decoded runs on the backend's device for this store's codec.
  bool decodes_on_device() const;

  // Residency queries.
  bool is_live(SeqId seq) const;
  int64_t capacity(SeqId seq) const;
  bool is_resident(SeqId seq, int64_t token) const;
  int64_t resident_tokens(SeqId seq) const;
  int64_t resident_pages(SeqId seq) const;
  // Per virtual page of the sequence: the physical page it is bound to, or -1.
  std::vector<int64_t> page_table(SeqId seq) const;
  // Pages a sequence of `capacity` tokens spans (its reservation).
  int64_t pages_for_tokens(int64_t tokens) const;

  StoreStats stats() const;

 private:
  // The sequences, the physical pool, the virtual address space and the locks (src/store/store.cpp).
  class FOVEA_INTERNAL Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fovea
FOVEA_API_END
