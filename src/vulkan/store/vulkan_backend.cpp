// The Vulkan sparse-residency store backend ("vulkan"): the virtual space is a sparse buffer,
// physical pages come from chunks of device memory, page binds are one vkQueueBindSparse per
// bind() with a fence, writes and zero fills go through vkCmdCopyBuffer / vkCmdFillBuffer (the
// pool need not be host-visible: discrete GPUs), gathers run gather_buffer.comp.
#include <algorithm>
#include <cstring>

#include "vulkan/store/vulkan_store.hpp"

namespace fovea {
namespace vulkan_store {
namespace {

const uint32_t kGatherBufferSpirv[] =
#include "fovea_spirv/store_gather_buffer.spv.inc"
    ;
const uint32_t kGatherDecodeSpirv[] =
#include "fovea_spirv/store_gather_decode.spv.inc"
    ;

// Push constants of gather_decode.comp.
struct DecodePush {
  uint32_t tok_first = 0, tok_count = 0, dim = 0, kind = 0;
};
constexpr uint32_t kDecodeSegments = 32;  // descriptor sets (window segments) per submission

constexpr int64_t kStagingBytes = 16 << 20;

class VulkanBufferBackend final : public VulkanStoreBase {
 public:
  explicit VulkanBufferBackend(std::unique_ptr<StoreDevice> device)
      : VulkanStoreBase(std::move(device), kGatherBufferSpirv, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "store gather"),
        writer_(dev(), dev().compute_queue()),
        bind_fence_(dev()) {
    // The sparse page size is the sparse buffer's alignment: ask a small one.
    const vk::SparseBuffer probe(dev(), 1 << 20, kUsage);
    granularity_ = int64_t(probe.page_bytes());
    const VkDeviceSize space = dev().limits().sparseAddressSpaceSize;
    max_virtual_bytes_ = int64_t(std::min<VkDeviceSize>(space, VkDeviceSize(1) << 40));
    // Zeros for the unaligned ends of a fill (vkCmdFillBuffer needs 4-byte alignment).
    zeros_ = vk::Buffer::create(dev(), 16, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk::MemoryUse::upload);
    std::memset(zeros_.mapped(), 0, 16);
    set_window_bytes(0);
    drain();
  }

  std::string_view name() const override { return "vulkan"; }
  int64_t max_virtual_bytes() const override { return max_virtual_bytes_; }

  void init(const StoreLayout& layout) override {
    const int64_t bytes = layout.virtual_pages * layout.page_bytes;
    if (bytes > max_virtual_bytes_)
      throw Error(Errc::limit_exceeded, "vulkan token store: a virtual space of " + std::to_string(bytes) +
                                            " bytes exceeds the device's sparseAddressSpaceSize of " +
                                            std::to_string(max_virtual_bytes_));
    virt_ = std::make_unique<vk::SparseBuffer>(dev(), VkDeviceSize(bytes), kUsage);
    if (layout.page_bytes % int64_t(virt_->page_bytes()) != 0)
      throw Error(Errc::invalid_argument, "vulkan token store: page size " + std::to_string(layout.page_bytes) +
                                              " is not a multiple of the sparse buffer's page size " +
                                              std::to_string(virt_->page_bytes()));
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(dev().handle(), virt_->handle(), &req);
    allocate_pool(layout.pool_pages, layout.page_bytes, req.memoryTypeBits);
    drain();
  }

  void bind(std::span<const PageBind> binds) override {
    std::vector<vk::SparseMemoryBind> entries;
    entries.reserve(binds.size());
    const VkDeviceSize pb = VkDeviceSize(page_bytes_);
    for (const PageBind& b : binds) {
      if (b.phys_page == PageBind::kUnbound) {
        entries.push_back({VkDeviceSize(b.virt_page) * pb, VkDeviceSize(b.count) * pb});
        continue;
      }
      // A merged entry is split where its physical pages cross a pool chunk.
      for (int64_t done = 0; done < b.count;) {
        const PhysAddr p = phys(b.phys_page + done);
        const int64_t n = std::min(b.count - done, p.pages_left_in_chunk);
        entries.push_back({VkDeviceSize(b.virt_page + done) * pb, VkDeviceSize(n) * pb, p.memory, p.offset});
        done += n;
      }
    }
    if (entries.empty()) return;
    {
      std::lock_guard lock(queue_mutex());
      vk::bind_sparse(*dev().sparse_queue(), {.buffer = virt_->handle(), .buffer_binds = entries}, bind_fence_);
    }
    drain();
  }

  void write(int64_t virt_byte, const std::byte* src, int64_t bytes) override {
    std::lock_guard lock(writer_mutex_);
    while (bytes > 0) {
      const int64_t n = std::min(bytes, kStagingBytes);
      if (int64_t(staging_.size()) < n)
        staging_ = vk::Buffer::create(dev(), VkDeviceSize(std::max<int64_t>(n, 1 << 20)),
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk::MemoryUse::upload);
      std::memcpy(staging_.mapped(), src, size_t(n));
      VkCommandBuffer cb = writer_.begin();
      before_transfer(cb);
      const VkBufferCopy region{0, VkDeviceSize(virt_byte), VkDeviceSize(n)};
      vkCmdCopyBuffer(cb, staging_.handle(), virt_->handle(), 1, &region);
      submit(writer_);
      virt_byte += n;
      src += n;
      bytes -= n;
    }
    drain();
  }

  void fill_zero(std::span<const ByteRun> runs) override {
    if (runs.empty()) return;
    std::lock_guard lock(writer_mutex_);
    VkCommandBuffer cb = writer_.begin();
    before_transfer(cb);
    auto copy_zeros = [&](int64_t at, int64_t n) {
      const VkBufferCopy region{0, VkDeviceSize(at), VkDeviceSize(n)};
      if (n > 0) vkCmdCopyBuffer(cb, zeros_.handle(), virt_->handle(), 1, &region);
    };
    for (const ByteRun& r : runs) {
      const int64_t a = r.virt_byte, e = r.virt_byte + r.bytes;
      const int64_t a4 = (a + 3) & ~int64_t(3), e4 = e & ~int64_t(3);
      if (a4 >= e4) {  // fewer than 4 aligned bytes: at most 6 bytes in all
        copy_zeros(a, e - a);
        continue;
      }
      copy_zeros(a, a4 - a);
      vkCmdFillBuffer(cb, virt_->handle(), VkDeviceSize(a4), VkDeviceSize(e4 - a4), 0);
      copy_zeros(e4, e - e4);
    }
    submit(writer_);
    drain();
  }

  // Decode-on-gather: records decoded by gather_decode.comp into f32, one
  // submission per output batch (<= 64 MiB and maxStorageBufferRange), one dispatch per
  // window segment. Serialised by decode_mutex_ (the queue serialises submissions anyway).
  bool gather_decode(std::span<const int64_t> records, int64_t record_bytes, const ElementwiseDecode& decode,
                     int64_t dim, float* dst) const override {
    using Kind = ElementwiseDecode::Kind;
    const bool affine = decode.kind == Kind::u8_affine;
    if (dim < 1 || record_bytes != (affine ? dim : 2 * dim) || record_bytes > window_range_ / 2 - 4) return false;
    if (affine && (int64_t(decode.lo.size()) != dim || int64_t(decode.step.size()) != dim)) return false;
    if (records.empty()) return true;
    std::lock_guard lock(decode_mutex_);
    if (!decoder_) decoder_ = std::make_unique<Decoder>(dev());
    Decoder& k = *decoder_;
    const VkPhysicalDeviceLimits& lim = dev().limits();
    const int64_t out_limit = std::min<int64_t>(64 << 20, int64_t(lim.maxStorageBufferRange) & ~int64_t(3));
    const int64_t per_batch = std::max<int64_t>(1, out_limit / (4 * dim));
    // Parameters: (lo, step) per dimension (one vec2 for the float kinds, unused).
    const VkDeviceSize par_bytes = VkDeviceSize(affine ? 8 * dim : 8);
    if (k.par.size() < par_bytes)
      k.par = vk::Buffer::create(dev(), std::max<VkDeviceSize>(par_bytes, 4096), VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                 vk::MemoryUse::upload);
    auto* par = static_cast<float*>(k.par.mapped());
    if (affine)
      for (int64_t d = 0; d < dim; ++d) {
        par[2 * d] = decode.lo[size_t(d)];
        par[2 * d + 1] = decode.step[size_t(d)];
      }
    const uint32_t kind = decode.kind == Kind::f16 ? 0u : decode.kind == Kind::bf16 ? 1u : 2u;
    const int64_t n = int64_t(records.size());
    for (int64_t i0 = 0; i0 < n;) {
      // This batch's tokens and their window segments.
      struct Segment {
        Window w;
        int64_t first, count;
      };
      std::vector<Segment> segs;
      int64_t i = i0;
      while (i < n && i - i0 < per_batch) {
        const Window w = window_of(records[size_t(i)]);
        if (segs.empty() || segs.back().w.base != w.base) {
          if (segs.size() == kDecodeSegments) break;
          segs.push_back({w, i - i0, 0});
        }
        ++segs.back().count;
        ++i;
      }
      const int64_t m = i - i0;
      const VkDeviceSize out_bytes = VkDeviceSize(m * dim * 4), tok_bytes = VkDeviceSize(m * 4);
      if (k.out.size() < out_bytes)
        k.out = vk::Buffer::create(dev(), std::max<VkDeviceSize>(out_bytes, 1 << 20), VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                   vk::MemoryUse::readback);
      if (k.tok.size() < tok_bytes)
        k.tok = vk::Buffer::create(dev(), std::max<VkDeviceSize>(tok_bytes, 64 << 10), VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                   vk::MemoryUse::upload);
      auto* tok = static_cast<uint32_t*>(k.tok.mapped());
      for (const Segment& sg : segs)
        for (int64_t t = sg.first; t < sg.first + sg.count; ++t)
          tok[t] = uint32_t(records[size_t(i0 + t)] - sg.w.base);
      VkCommandBuffer cb = k.cmds.begin();
      vk::memory_barrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
      for (const Segment& sg : segs) {
        const vk::BufferWindow b[4] = {{virt_->handle(), VkDeviceSize(sg.w.base), VkDeviceSize(sg.w.end - sg.w.base)},
                                       {k.out.handle(), 0, VK_WHOLE_SIZE},
                                       {k.tok.handle(), 0, VK_WHOLE_SIZE},
                                       {k.par.handle(), 0, VK_WHOLE_SIZE}};
        const VkDescriptorSet set = k.sets.allocate(b);
        const DecodePush push{uint32_t(sg.first), uint32_t(sg.count), uint32_t(dim), kind};
        const uint32_t groups = uint32_t(std::min<int64_t>((sg.count * dim + 255) / 256, 4096));
        k.pipeline.dispatch(cb, set, &push, groups);
      }
      vk::memory_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                         VK_ACCESS_HOST_READ_BIT);
      try {
        submit(k.cmds);
      } catch (...) {
        k.sets.reset();
        throw;
      }
      k.sets.reset();
      std::memcpy(dst + i0 * dim, k.out.mapped(), size_t(out_bytes));
      i0 = i;
    }
    drain();
    return true;
  }

  // Storage-buffer descriptors reach at most maxStorageBufferRange bytes (128 MiB on
  // lavapipe): a virtual space beyond that is read through windows. Window k starts at k * step
  // (step = half the range, aligned), so every byte has a window reaching at least half a
  // range past it.
  void set_window_bytes(int64_t bytes) override {
    const VkPhysicalDeviceLimits& lim = dev().limits();
    int64_t range = int64_t(lim.maxStorageBufferRange) & ~int64_t(3);
    if (bytes > 0) range = std::min(range, bytes & ~int64_t(3));
    const int64_t align = std::max<int64_t>(4, int64_t(lim.minStorageBufferOffsetAlignment));
    window_range_ = range;
    window_step_ = std::max(align, (range / 2) / align * align);
    if (window_step_ > window_range_ - 4) window_step_ = align;  // tiny test windows
    if (window_range_ <= align)
      throw Error(Errc::invalid_argument, "vulkan token store: window of " + std::to_string(bytes) + " bytes is too small");
  }

 private:
  static constexpr VkBufferUsageFlags kUsage =
      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

  Window window_of(int64_t virt_byte) const override {
    const int64_t size = int64_t(virt_->size());
    if (size <= window_range_) return {0, size};
    const int64_t base = virt_byte / window_step_ * window_step_;
    return {base, std::min(base + window_range_, size)};
  }

  VkDescriptorSet source_set(vk::KernelSets& sets, const Window& w, VkBuffer out, VkBuffer runs) const override {
    const vk::BufferWindow b[3] = {{virt_->handle(), VkDeviceSize(w.base), VkDeviceSize(w.end - w.base)},
                                   {out, 0, VK_WHOLE_SIZE},
                                   {runs, 0, VK_WHOLE_SIZE}};
    return sets.allocate(b);
  }

  static void before_transfer(VkCommandBuffer cb) {
    // Earlier submissions' reads and writes of the virtual buffer happen-before this one.
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                       VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
  }

  struct Decoder {
    explicit Decoder(const vk::Device& d)
        : pipeline(d, kGatherDecodeSpirv, std::vector<VkDescriptorType>(4, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER),
                   uint32_t(sizeof(DecodePush)), "store gather decode"),
          cmds(d, d.compute_queue()),
          sets(d, pipeline, kDecodeSegments) {}
    vk::ComputePipeline pipeline;
    vk::Commands cmds;
    vk::KernelSets sets;
    vk::Buffer out, tok, par;
  };
  mutable std::mutex decode_mutex_;
  mutable std::unique_ptr<Decoder> decoder_;  // made on first use
  vk::Commands writer_;
  vk::Fence bind_fence_;
  vk::Buffer zeros_, staging_;
  std::unique_ptr<vk::SparseBuffer> virt_;
  int64_t max_virtual_bytes_ = 0;
  int64_t window_range_ = 0, window_step_ = 0;
};

}  // namespace
}  // namespace vulkan_store

std::unique_ptr<StoreBackend> make_vulkan_store_backend(std::string* why, const VulkanStoreOptions& options) {
  try {
    auto device = std::make_unique<vulkan_store::StoreDevice>(options, vulkan_store::Residency::buffer);
    return std::make_unique<vulkan_store::VulkanBufferBackend>(std::move(device));
  } catch (const Error& e) {
    if (why) *why = e.what();
    return nullptr;
  }
}

}  // namespace fovea
