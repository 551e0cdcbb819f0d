// vulkan/vk/vk_sparse.hpp — additions to the RAII layer (vk.hpp) for the token store:
// sparse-residency buffers and images, one vkQueueBindSparse per batch, and compute kernels
// whose descriptor sets several threads can allocate at once.
//
//   vk::SparseBuffer virt(dev, 1 << 30, usage);                 // address space, no memory
//   vk::Memory pool = vk::Memory::allocate_type(dev, bytes, virt.memory_type(dev), false);
//   vk::SparseMemoryBind b{.resource_offset = 0, .size = 65536, .memory = pool.handle()};
//   vk::bind_sparse(queue, {.buffer = virt.handle(), .buffer_binds = {&b, 1}}, fence);
//
//   vk::SparseImage img(dev, desc);                              // desc.flags gets SPARSE_*
//   vk::SparseImagePlan plan = vk::plan_sparse_image(img.layout(), resident);   // pure
//
// Kept in its own file pair so the Vulkan backend's vk.hpp/vk.cpp stay as they are; nothing
// here changes a signature there. Same rules: one owner per handle, every VkResult checked,
// missing capabilities are Error(unsupported) naming them.
#pragma once

#include <algorithm>
#include <functional>
#include <span>
#include <vector>

#include "vulkan/vk/vk.hpp"

namespace fovea::vk {

// ---- sparse binding --------------------------------------------------------------------------

// One entry of a buffer or opaque-image bind: [resource_offset, +size) of the resource maps to
// [memory_offset, +size) of `memory`, or is unbound when memory is VK_NULL_HANDLE.
struct SparseMemoryBind {
  VkDeviceSize resource_offset = 0;
  VkDeviceSize size = 0;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize memory_offset = 0;
  VkSparseMemoryBindFlags flags = 0;  // VK_SPARSE_MEMORY_BIND_METADATA_BIT for metadata
};

// One block-aligned region of one subresource of a sparse image (VkSparseImageMemoryBind).
struct SparseImageBind {
  uint32_t level = 0, layer = 0;
  VkOffset3D offset{};  // texels, a multiple of the granularity
  VkExtent3D extent{};  // a multiple of the granularity, or reaching the level's edge
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize memory_offset = 0;
};

// Everything one vkQueueBindSparse call applies (one VkBindSparseInfo).
struct SparseBindBatch {
  VkBuffer buffer = VK_NULL_HANDLE;
  std::span<const SparseMemoryBind> buffer_binds = {};
  VkImage image = VK_NULL_HANDLE;
  std::span<const SparseMemoryBind> image_opaque_binds = {};  // mip tails, metadata
  std::span<const SparseImageBind> image_binds = {};
};

// Submits the batch as ONE vkQueueBindSparse with `fence`, then waits for the fence and resets
// it. The queue must have SPARSE_BINDING; the caller holds the queue's lock (queues are
// externally synchronised).
void bind_sparse(const Queue& queue, const SparseBindBatch& batch, Fence& fence);

// ---- sparse buffer ---------------------------------------------------------------------------

// A buffer created with SPARSE_BINDING | SPARSE_RESIDENCY: an address space without memory.
// Throws Error(unsupported) when the device lacks sparseResidencyBuffer (or it was not enabled)
// and Error(limit_exceeded) when `bytes` exceeds sparseAddressSpaceSize.
class SparseBuffer {
 public:
  SparseBuffer(const Device& device, VkDeviceSize bytes, VkBufferUsageFlags usage);
  VkBuffer handle() const { return buffer_.handle(); }
  VkDeviceSize size() const { return buffer_.size(); }
  // The sparse page size: binds start and end on multiples of it (4 KiB on lavapipe).
  VkDeviceSize page_bytes() const { return requirements_.alignment; }
  // A memory type for the pages, DEVICE_LOCAL when there is one.
  uint32_t memory_type(const Device& device) const;

 private:
  Buffer buffer_;
  VkMemoryRequirements requirements_{};
};

// ---- sparse image ----------------------------------------------------------------------------

// What the driver says about a sparse image's layout (vkGetImageSparseMemoryRequirements).
struct SparseImageLayout {
  uint32_t width = 0, height = 0, levels = 1, layers = 1;
  VkExtent3D granularity{1, 1, 1};    // texels per block (imageGranularity)
  VkDeviceSize block_bytes = 0;       // memory per block (the image's memory alignment)
  uint32_t memory_type_bits = 0;
  // Mip tail: levels >= mip_tail_first_lod are bound as opaque memory, not by blocks.
  // mip_tail_first_lod == levels means there is none (lavapipe: none, every level is bound
  // block by block, a level smaller than a block as one partial block).
  uint32_t mip_tail_first_lod = 0;
  VkDeviceSize mip_tail_size = 0, mip_tail_offset = 0, mip_tail_stride = 0;
  bool single_mip_tail = false;       // one tail for every layer (SINGLE_MIPTAIL_BIT)
  // Metadata aspect (some GPUs): bound once, opaquely, with VK_SPARSE_MEMORY_BIND_METADATA_BIT.
  bool has_metadata = false;
  VkDeviceSize metadata_size = 0, metadata_offset = 0, metadata_stride = 0;
  bool single_metadata = false;

  uint32_t level_width(uint32_t level) const { return std::max(1u, width >> level); }
  uint32_t level_height(uint32_t level) const { return std::max(1u, height >> level); }
  uint32_t blocks_x(uint32_t level) const { return (level_width(level) + granularity.width - 1) / granularity.width; }
  uint32_t blocks_y(uint32_t level) const { return (level_height(level) + granularity.height - 1) / granularity.height; }
  bool in_mip_tail(uint32_t level) const { return level >= mip_tail_first_lod; }
  uint32_t mip_tails() const { return mip_tail_first_lod >= levels ? 0 : single_mip_tail ? 1 : layers; }
};

// A block of a sparse image: level, layer and block coordinates (in blocks, not texels).
struct SparseBlock {
  uint32_t level = 0, layer = 0, bx = 0, by = 0;
};

// Which binds make a set of blocks resident, as a pure function of the layout (tested with
// synthetic layouts that have mip tails and metadata, which lavapipe does not report).
struct SparseImagePlan {
  std::vector<SparseBlock> blocks;  // blocks outside the mip tail, level-major
  uint32_t mip_tails = 0;           // opaque tail regions to bind (0, 1 or layers)
  VkDeviceSize bytes = 0;           // memory for all of it: blocks, tails and metadata
  std::vector<SparseMemoryBind> opaque;   // tails then metadata, memory offsets from `base`
  std::vector<SparseImageBind> image;     // one per block, memory offsets from `base`
};
// `resident(block)` picks the blocks outside the tail; when `bind_tail` the whole mip tail of
// every layer (or the single one) is bound too, plus the metadata when the layout has it.
// Memory is laid out blocks first, then tails, then metadata, starting at `base` of `memory`.
SparseImagePlan plan_sparse_image(const SparseImageLayout& layout,
                                  const std::function<bool(const SparseBlock&)>& resident, bool bind_tail,
                                  VkDeviceMemory memory = VK_NULL_HANDLE, VkDeviceSize base = 0);

// A 2D (array) image with SPARSE_BINDING | SPARSE_RESIDENCY (added to desc.flags) and no memory;
// create_view() as vk::Image's once the blocks it reads are bound. Throws Error(unsupported)
// when the device or format lacks sparse residency for these usage flags.
class SparseImage {
 public:
  SparseImage(const Device& device, ImageDesc desc);
  VkImage handle() const { return image_.handle(); }
  const ImageDesc& desc() const { return image_.desc(); }
  const SparseImageLayout& layout() const { return layout_; }
  VkImageView create_view(VkFormat format, uint32_t base_level, uint32_t levels) {
    return image_.create_view(format, base_level, levels);
  }

 private:
  Image image_;
  SparseImageLayout layout_;
};

// ---- kernels shared by threads ---------------------------------------------------------------

// One storage-buffer binding with an explicit window: storage-buffer descriptors may not exceed
// maxStorageBufferRange (128 MiB on lavapipe), so a large buffer is bound through windows.
struct BufferWindow {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;             // a multiple of minStorageBufferOffsetAlignment
  VkDeviceSize range = VK_WHOLE_SIZE;  // <= maxStorageBufferRange
};

// A descriptor pool of up to max_sets sets of one ComputePipeline's layout (vk.hpp). Owned by one thread.
class KernelSets {
 public:
  KernelSets(const Device& device, const ComputePipeline& kernel, uint32_t max_sets);
  ~KernelSets();
  KernelSets(const KernelSets&) = delete;
  KernelSets& operator=(const KernelSets&) = delete;
  uint32_t capacity() const { return max_sets_; }
  uint32_t used() const { return used_; }
  // A set with binding i = storage buffer windows[i] or storage image views[i] by the kernel's
  // types (views are used for STORAGE_IMAGE bindings, in GENERAL layout). Error(internal) when
  // the pool is exhausted: callers reset() after their command buffer completed.
  VkDescriptorSet allocate(std::span<const BufferWindow> buffers, std::span<const VkImageView> images = {});
  void reset();

 private:
  const Device* device_;
  const ComputePipeline* kernel_;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  uint32_t max_sets_ = 0, used_ = 0;
};

}  // namespace fovea::vk
