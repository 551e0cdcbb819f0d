// Sparse buffers and images, vkQueueBindSparse batches, kernels shared by threads (vk_sparse.hpp).
#include "vulkan/vk/vk_sparse.hpp"

#include <string>

namespace fovea::vk {

// ---- sparse binding --------------------------------------------------------------------------

void bind_sparse(const Queue& queue, const SparseBindBatch& batch, Fence& fence) {
  if (!(queue.flags & VK_QUEUE_SPARSE_BINDING_BIT))
    throw Error(Errc::internal, "vulkan: vkQueueBindSparse on a queue without SPARSE_BINDING");
  auto convert = [](std::span<const SparseMemoryBind> in) {
    std::vector<VkSparseMemoryBind> out;
    out.reserve(in.size());
    for (const SparseMemoryBind& b : in)
      out.push_back({b.resource_offset, b.size, b.memory, b.memory ? b.memory_offset : 0, b.flags});
    return out;
  };
  const std::vector<VkSparseMemoryBind> buffer_binds = convert(batch.buffer_binds);
  const std::vector<VkSparseMemoryBind> opaque_binds = convert(batch.image_opaque_binds);
  std::vector<VkSparseImageMemoryBind> image_binds;
  image_binds.reserve(batch.image_binds.size());
  for (const SparseImageBind& b : batch.image_binds) {
    VkSparseImageMemoryBind ib{};
    ib.subresource = {VK_IMAGE_ASPECT_COLOR_BIT, b.level, b.layer};
    ib.offset = b.offset;
    ib.extent = b.extent;
    ib.memory = b.memory;
    ib.memoryOffset = b.memory ? b.memory_offset : 0;
    image_binds.push_back(ib);
  }
  VkSparseBufferMemoryBindInfo bi{batch.buffer, uint32_t(buffer_binds.size()), buffer_binds.data()};
  VkSparseImageOpaqueMemoryBindInfo oi{batch.image, uint32_t(opaque_binds.size()), opaque_binds.data()};
  VkSparseImageMemoryBindInfo ii{batch.image, uint32_t(image_binds.size()), image_binds.data()};
  VkBindSparseInfo info{VK_STRUCTURE_TYPE_BIND_SPARSE_INFO};
  if (!buffer_binds.empty()) {
    info.bufferBindCount = 1;
    info.pBufferBinds = &bi;
  }
  if (!opaque_binds.empty()) {
    info.imageOpaqueBindCount = 1;
    info.pImageOpaqueBinds = &oi;
  }
  if (!image_binds.empty()) {
    info.imageBindCount = 1;
    info.pImageBinds = &ii;
  }
  check(vkQueueBindSparse(queue.handle, 1, &info, fence.handle()), "vkQueueBindSparse");
  fence.wait();
  fence.reset();
}

// ---- sparse buffer ---------------------------------------------------------------------------

SparseBuffer::SparseBuffer(const Device& device, VkDeviceSize bytes, VkBufferUsageFlags usage) {
  const VkPhysicalDeviceFeatures& f = device.enabled_features();
  if (!f.sparseBinding || !f.sparseResidencyBuffer || !device.sparse_queue())
    throw Error(Errc::unsupported, "vulkan: " + device.info().name() +
                                       " has no sparse buffer residency (sparseBinding, sparseResidencyBuffer and a "
                                       "SPARSE_BINDING queue are needed)");
  const VkDeviceSize space = device.limits().sparseAddressSpaceSize;
  if (bytes > space)
    throw Error(Errc::limit_exceeded, "vulkan: a sparse buffer of " + std::to_string(bytes) +
                                          " bytes exceeds the device's sparseAddressSpaceSize of " +
                                          std::to_string(space) + " bytes");
  buffer_ = Buffer::create_unbound(device, bytes, usage,
                                   VK_BUFFER_CREATE_SPARSE_BINDING_BIT | VK_BUFFER_CREATE_SPARSE_RESIDENCY_BIT);
  requirements_ = buffer_.requirements();
  if (requirements_.alignment == 0 || requirements_.memoryTypeBits == 0)
    throw Error(Errc::device, "vulkan: the sparse buffer reports no page size or memory type");
}

uint32_t SparseBuffer::memory_type(const Device& device) const {
  return device.memory_type(requirements_.memoryTypeBits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
}

// ---- sparse image ----------------------------------------------------------------------------

SparseImagePlan plan_sparse_image(const SparseImageLayout& L, const std::function<bool(const SparseBlock&)>& resident,
                                  bool bind_tail, VkDeviceMemory memory, VkDeviceSize base) {
  SparseImagePlan plan;
  VkDeviceSize at = base;
  const uint32_t gw = L.granularity.width, gh = L.granularity.height;
  for (uint32_t level = 0; level < std::min(L.levels, L.mip_tail_first_lod); ++level)
    for (uint32_t layer = 0; layer < L.layers; ++layer)
      for (uint32_t by = 0; by < L.blocks_y(level); ++by)
        for (uint32_t bx = 0; bx < L.blocks_x(level); ++bx) {
          const SparseBlock b{level, layer, bx, by};
          if (!resident(b)) continue;
          SparseImageBind ib;
          ib.level = level;
          ib.layer = layer;
          ib.offset = {int32_t(bx * gw), int32_t(by * gh), 0};
          // Edge blocks stop at the level's edge (allowed: offset + extent == the extent).
          ib.extent = {std::min(gw, L.level_width(level) - bx * gw), std::min(gh, L.level_height(level) - by * gh), 1};
          ib.memory = memory;
          ib.memory_offset = at;
          at += L.block_bytes;
          plan.blocks.push_back(b);
          plan.image.push_back(ib);
        }
  if (bind_tail) {
    plan.mip_tails = L.mip_tails();
    for (uint32_t t = 0; t < plan.mip_tails; ++t) {
      plan.opaque.push_back({L.mip_tail_offset + VkDeviceSize(t) * L.mip_tail_stride, L.mip_tail_size, memory, at, 0});
      at += L.mip_tail_size;
    }
    if (L.has_metadata) {
      const uint32_t n = L.single_metadata ? 1 : L.layers;
      for (uint32_t t = 0; t < n; ++t) {
        plan.opaque.push_back({L.metadata_offset + VkDeviceSize(t) * L.metadata_stride, L.metadata_size, memory, at,
                               VK_SPARSE_MEMORY_BIND_METADATA_BIT});
        at += L.metadata_size;
      }
    }
  }
  plan.bytes = at - base;
  return plan;
}

SparseImage::SparseImage(const Device& device, ImageDesc desc) {
  const VkPhysicalDeviceFeatures& f = device.enabled_features();
  if (!f.sparseBinding || !f.sparseResidencyImage2D || !device.sparse_queue())
    throw Error(Errc::unsupported, "vulkan: " + device.info().name() +
                                       " has no sparse 2D image residency (sparseBinding, sparseResidencyImage2D and "
                                       "a SPARSE_BINDING queue are needed)");
  desc.flags |= VK_IMAGE_CREATE_SPARSE_BINDING_BIT | VK_IMAGE_CREATE_SPARSE_RESIDENCY_BIT;
  uint32_t n = 0;
  vkGetPhysicalDeviceSparseImageFormatProperties(device.physical(), desc.format, VK_IMAGE_TYPE_2D,
                                                 VK_SAMPLE_COUNT_1_BIT, desc.usage, VK_IMAGE_TILING_OPTIMAL, &n,
                                                 nullptr);
  if (n == 0)
    throw Error(Errc::unsupported, "vulkan: " + device.info().name() + " cannot make sparse " +
                                       std::string(format_name(desc.format)) + " images with these usages");
  image_ = Image::create_unbound(device, desc);
  VkMemoryRequirements req{};
  vkGetImageMemoryRequirements(device.handle(), image_.handle(), &req);
  uint32_t count = 0;
  vkGetImageSparseMemoryRequirements(device.handle(), image_.handle(), &count, nullptr);
  std::vector<VkSparseImageMemoryRequirements> reqs(count);
  vkGetImageSparseMemoryRequirements(device.handle(), image_.handle(), &count, reqs.data());
  SparseImageLayout& L = layout_;
  L.width = desc.width;
  L.height = desc.height;
  L.levels = desc.levels;
  L.layers = desc.layers;
  L.block_bytes = req.alignment;
  L.memory_type_bits = req.memoryTypeBits;
  bool color = false;
  for (const VkSparseImageMemoryRequirements& r : reqs) {
    const bool single = r.formatProperties.flags & VK_SPARSE_IMAGE_FORMAT_SINGLE_MIPTAIL_BIT;
    if (r.formatProperties.aspectMask & VK_IMAGE_ASPECT_COLOR_BIT) {
      color = true;
      L.granularity = r.formatProperties.imageGranularity;
      L.mip_tail_first_lod = std::min(r.imageMipTailFirstLod, desc.levels);
      L.mip_tail_size = r.imageMipTailSize;
      L.mip_tail_offset = r.imageMipTailOffset;
      L.mip_tail_stride = r.imageMipTailStride;
      L.single_mip_tail = single;
    } else if (r.formatProperties.aspectMask & VK_IMAGE_ASPECT_METADATA_BIT) {
      L.has_metadata = true;
      L.metadata_size = r.imageMipTailSize;
      L.metadata_offset = r.imageMipTailOffset;
      L.metadata_stride = r.imageMipTailStride;
      L.single_metadata = single;
    }
  }
  if (!color || L.block_bytes == 0 || L.granularity.width == 0 || L.granularity.height == 0)
    throw Error(Errc::unsupported, "vulkan: " + device.info().name() + " reports no sparse color layout for " +
                                       std::string(format_name(desc.format)) + " images");
}

// ---- per-thread descriptor sets of a shared pipeline ------------------------------------------

KernelSets::KernelSets(const Device& device, const ComputePipeline& kernel, uint32_t max_sets)
    : device_(&device), kernel_(&kernel), pool_(kernel.create_pool(max_sets)), max_sets_(max_sets) {}

KernelSets::~KernelSets() {
  if (pool_) vkDestroyDescriptorPool(device_->handle(), pool_, nullptr);
}

VkDescriptorSet KernelSets::allocate(std::span<const BufferWindow> buffers, std::span<const VkImageView> images) {
  if (used_ >= max_sets_) throw Error(Errc::internal, "vulkan: " + kernel_->name() + ": descriptor pool exhausted");
  const VkDevice dev = device_->handle();
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = pool_;
  ai.descriptorSetCount = 1;
  const VkDescriptorSetLayout layout = kernel_->set_layout();
  ai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(dev, &ai, &set), "vkAllocateDescriptorSets");
  ++used_;
  const auto& types = kernel_->types();
  std::vector<VkDescriptorBufferInfo> bi(types.size());
  std::vector<VkDescriptorImageInfo> ii(types.size());
  std::vector<VkWriteDescriptorSet> writes;
  size_t nb = 0, ni = 0;
  for (uint32_t i = 0; i < types.size(); ++i) {
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.dstBinding = i;
    w.descriptorCount = 1;
    w.descriptorType = types[i];
    if (types[i] == VK_DESCRIPTOR_TYPE_STORAGE_IMAGE) {
      if (ni >= images.size()) throw Error(Errc::internal, "vulkan: " + kernel_->name() + ": missing image binding");
      ii[i] = {VK_NULL_HANDLE, images[ni++], VK_IMAGE_LAYOUT_GENERAL};
      w.pImageInfo = &ii[i];
    } else {
      if (nb >= buffers.size()) throw Error(Errc::internal, "vulkan: " + kernel_->name() + ": missing buffer binding");
      const BufferWindow& b = buffers[nb++];
      bi[i] = {b.buffer, b.offset, b.range};
      w.pBufferInfo = &bi[i];
    }
    writes.push_back(w);
  }
  vkUpdateDescriptorSets(dev, uint32_t(writes.size()), writes.data(), 0, nullptr);
  return set;
}

void KernelSets::reset() {
  check(vkResetDescriptorPool(device_->handle(), pool_, 0), "vkResetDescriptorPool");
  used_ = 0;
}

}  // namespace fovea::vk
