// The Vulkan texture backend behind fovea/vulkan.hpp: uploads planar images into 2D array
// textures (one layer per channel plane), builds mips by blit chain or compute shader, and
// samples tokens with textureLod from the rate map.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include "extract/batch.hpp"
#include "fovea/error.hpp"
#include "fovea/vulkan.hpp"
#include "vulkan/vk/vk.hpp"

namespace fovea {

namespace {

const uint32_t kMipU8Spirv[] =
#include "fovea_spirv/mip_u8.spv.inc"
    ;
const uint32_t kMipF32Spirv[] =
#include "fovea_spirv/mip_f32.spv.inc"
    ;
const uint32_t kSampleSpirv[] =
#include "fovea_spirv/sample.spv.inc"
    ;
const uint32_t kMipQuantizeSpirv[] =
#include "fovea_spirv/mip_quantize.spv.inc"
    ;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct MipPush {
  int32_t src_w, src_h, dst_w, dst_h;
};

struct QuantizePush {
  int32_t w, h;
  uint32_t mode, pad;  // mode 0: float chain = uint8 level; 1: round the chain, write both
};

struct SamplePush {
  uint32_t n_units, n_elems, P, channels, mode, row_invocations, num_levels, pad;
  float scale[4];
  float bias[4];
};
static_assert(sizeof(SamplePush) == 64);

VulkanDeviceInfo describe(const vk::PhysicalDeviceInfo& d) {
  VulkanDeviceInfo i;
  i.index = d.index;
  i.name = d.name();
  i.type = std::string(d.type_name());
  const uint32_t v = d.properties.apiVersion;
  i.api_version = std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
                  std::to_string(VK_API_VERSION_PATCH(v));
  // VkPhysicalDeviceDriverProperties (1.2) names the driver; 1.1 devices just report the id.
  if (d.properties.apiVersion >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &drv;
    vkGetPhysicalDeviceProperties2(d.handle, &p2);
    i.driver = std::string(drv.driverName) + " (" + drv.driverInfo + ")";
  }
  i.device_local_bytes = d.device_local_bytes();
  i.sparse_binding = d.features.sparseBinding;
  i.sparse_residency_buffer = d.features.sparseResidencyBuffer;
  i.sparse_residency_image2d = d.features.sparseResidencyImage2D;
  i.fragment_shading_rate = d.has_extension(VK_KHR_FRAGMENT_SHADING_RATE_EXTENSION_NAME);
  i.storage_image_extended_formats = d.features.shaderStorageImageExtendedFormats;
  const VkPhysicalDeviceLimits& l = d.properties.limits;
  i.max_image_dimension_2d = l.maxImageDimension2D;
  i.max_image_array_layers = l.maxImageArrayLayers;
  i.max_compute_workgroup_invocations = l.maxComputeWorkGroupInvocations;
  i.max_push_constants_bytes = l.maxPushConstantsSize;
  i.sparse_address_space_bytes = l.sparseAddressSpaceSize;
  auto blit_linear = [&](VkFormat f) {
    VkFormatProperties p{};
    vkGetPhysicalDeviceFormatProperties(d.handle, f, &p);
    const VkFormatFeatureFlags need = VK_FORMAT_FEATURE_BLIT_SRC_BIT | VK_FORMAT_FEATURE_BLIT_DST_BIT |
                                      VK_FORMAT_FEATURE_SAMPLED_IMAGE_FILTER_LINEAR_BIT;
    return (p.optimalTilingFeatures & need) == need;
  };
  i.blit_linear_r8 = blit_linear(VK_FORMAT_R8_UNORM);
  i.blit_linear_r32f = blit_linear(VK_FORMAT_R32_SFLOAT);
  return i;
}

template <typename T> constexpr VkFormat texture_format() {
  return std::is_same_v<T, uint8_t> ? VK_FORMAT_R8_UNORM : VK_FORMAT_R32_SFLOAT;
}
template <typename T> constexpr VkFormat storage_format() {
  return std::is_same_v<T, uint8_t> ? VK_FORMAT_R8_UINT : VK_FORMAT_R32_SFLOAT;
}

int resolve_levels(int w, int h, int max_levels) {
  if (max_levels < 0)
    throw Error(Errc::invalid_argument, "pyramid max_levels must be >= 0, got " + std::to_string(max_levels));
  const int full = full_mip_levels(w, h);
  return (max_levels == 0 || max_levels > full) ? full : max_levels;
}

// ---- resources kept across calls -------------------------------------------------------------
//
// Creating images and buffers per call (vkCreate*, vkAllocateMemory, and page faults on fresh
// memory) was a large part of every upload and dispatch on lavapipe. The backend keeps them:
// an image is reused by the next call that asks for the same shape, a buffer by the next call
// that fits in it. Reuse is safe because every call ends with a fence wait, and every image
// use starts with a transition from UNDEFINED (its old contents are never read).

// A device image with per-level storage views made on first use.
struct PooledImage {
  vk::ImageDesc desc;
  vk::Image image;
  std::vector<VkImageView> level_views;  // [levels], VK_NULL_HANDLE until made
  uint64_t last_use = 0;

  VkImageView level_view(int level, VkFormat format) {
    VkImageView& v = level_views.at(size_t(level));
    if (!v) v = image.create_view(format, uint32_t(level), 1, VK_IMAGE_USAGE_STORAGE_BIT);
    return v;
  }
};

bool same_desc(const vk::ImageDesc& a, const vk::ImageDesc& b) {
  return a.format == b.format && a.width == b.width && a.height == b.height && a.layers == b.layers &&
         a.levels == b.levels && a.usage == b.usage && a.flags == b.flags;
}

// The last `capacity` image shapes of one role; the least recently used one is replaced.
class ImagePool {
 public:
  explicit ImagePool(size_t capacity) : capacity_(capacity) {}
  // `generation` counts every creation and destruction (see Impl::begin).
  PooledImage& acquire(const vk::Device& device, const vk::ImageDesc& desc, uint64_t& generation) {
    ++tick_;
    for (auto& e : entries_)
      if (same_desc(e->desc, desc)) {
        e->last_use = tick_;
        return *e;
      }
    if (entries_.size() >= capacity_) {
      auto lru = std::min_element(entries_.begin(), entries_.end(),
                                  [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
      entries_.erase(lru);  // frees its memory before the new image takes some
    }
    ++generation;
    auto e = std::make_unique<PooledImage>();
    e->image = vk::Image::create(device, desc);
    e->desc = desc;
    e->level_views.assign(desc.levels, VK_NULL_HANDLE);
    e->last_use = tick_;
    entries_.push_back(std::move(e));
    return *entries_.back();
  }

 private:
  size_t capacity_;
  uint64_t tick_ = 0;
  std::vector<std::unique_ptr<PooledImage>> entries_;
};

// A buffer slot: kept while requests fit, replaced (with 25 % headroom) when one does not.
vk::Buffer& pooled_buffer(const vk::Device& device, vk::Buffer& slot, VkDeviceSize bytes, VkBufferUsageFlags usage,
                          vk::MemoryUse use, uint64_t& generation) {
  if (slot.handle() && slot.size() >= bytes) return slot;
  ++generation;
  slot.reset();
  slot = vk::Buffer::create(device, bytes + bytes / 4, usage, use);
  return slot;
}

// A mip chain of B same-size images on the device, one layer per channel plane. The image
// belongs to the backend's pool: valid until the next call that needs another shape.
struct GpuPyramid {
  PooledImage* pooled = nullptr;
  vk::Image& image() const { return pooled->image; }
  int width = 0, height = 0, channels = 0, count = 0, levels = 0;
  VkImageLayout layout = VK_IMAGE_LAYOUT_UNDEFINED;  // of every level after build
  VkPipelineStageFlags last_stage = VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT;
  VkAccessFlags last_access = 0;
  uint32_t layers() const { return uint32_t(count * channels); }
};

// Texels outside a padded blit image's data that its blits read with weight 0. Once an
// axis's data extent is 1 while the padded extent is still >= 2, that axis's blit is 1:1 and
// samples exactly at texel 0's centre, and the linear filter also fetches texel 1 with weight
// 0; the padding holds whatever the memory held, and 0 × NaN is NaN. These texels are zeroed
// before the chain: column 1 beside the data rows, row 1 beside the data columns (and the
// corner), on every level a blit reads. `image`: the padded desc (levels, extents); none
// when it is not padded (there, data extent 1 means image extent 1 and the clamp rereads
// texel 0).
std::vector<VkBufferImageCopy> padding_guards(const GpuPyramid& g, const vk::ImageDesc& image) {
  std::vector<VkBufferImageCopy> out;
  for (int l = 0; l + 1 < g.levels; ++l) {
    const uint32_t dw = uint32_t(mip_extent(g.width, l)), dh = uint32_t(mip_extent(g.height, l));
    const uint32_t pw = std::max(1u, image.width >> l), ph = std::max(1u, image.height >> l);
    VkBufferImageCopy r{};
    r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, uint32_t(l), 0, g.layers()};
    if (dw == 1 && pw >= 2) {
      r.imageOffset = {1, 0, 0};
      r.imageExtent = {1, dh, 1};
      out.push_back(r);
    }
    if (dh == 1 && ph >= 2) {  // disjoint from the column: that one covers row 1 only when dh >= 2
      r.imageOffset = {0, 1, 0};
      r.imageExtent = {std::min(pw, dw + 1), 1, 1};
      out.push_back(r);
    }
  }
  return out;
}

// The blit from level l to l + 1 of g, filtering `image` (g's image or its float chain).
// Each axis is an exact 2:1 scale, src [0, 2·n) -> dst [0, n), so every destination texel's
// centre falls midway between 2 source texel centres and the linear filter averages exactly
// them (1:1, [0, 1) -> [0, 1), where the data extent is already 1). n is the data's next
// extent, so an odd last row/column is dropped as on the CPU (glGenerateMipmap's
// full-extent blit would resample instead) -- rounded up to a power of two on an axis the
// image is padded on (a power-of-two level-0 extent): the driver derives texel coordinates
// from the box's extents too (lavapipe: the rasteriser's attribute gradient, Δs · 1/Δx), and
// only power-of-two boxes keep them exact. The texels such a box adds are padding, read only
// into padding: destination texel x reads source texels 2x and 2x + 1, so data reads data.
VkImageBlit mip_blit(const GpuPyramid& g, const vk::ImageDesc& image, int l) {
  auto box = [](int data, uint32_t image_extent) {
    if (data == 1) return std::pair{1, 1};
    const int half = data / 2;
    const int n = std::has_single_bit(image_extent) ? int(std::bit_ceil(uint32_t(half))) : half;
    return std::pair{2 * n, n};
  };
  const auto [sx, dx] = box(mip_extent(g.width, l), image.width);
  const auto [sy, dy] = box(mip_extent(g.height, l), image.height);
  VkImageBlit blit{};
  blit.srcSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, uint32_t(l), 0, g.layers()};
  blit.srcOffsets[1] = {sx, sy, 1};
  blit.dstSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, uint32_t(l + 1), 0, g.layers()};
  blit.dstOffsets[1] = {dx, dy, 1};
  return blit;
}

template <typename T>
void check_same_size(std::span<const Image<T>* const> images) {
  if (images.empty()) throw Error(Errc::invalid_argument, "vulkan: no images given");
  for (const Image<T>* im : images) {
    if (!im || im->empty()) throw Error(Errc::invalid_argument, "vulkan: empty image in a batch");
    if (im->width() != images[0]->width() || im->height() != images[0]->height() ||
        im->channels() != images[0]->channels())
      throw Error(Errc::invalid_argument,
                  "vulkan: a batch needs images of one size and channel count (array texture layers)");
  }
}

}  // namespace

struct VulkanBackend::Impl {
  vk::Instance instance;
  vk::PhysicalDeviceInfo physical;
  vk::Device device;
  vk::Commands commands;
  vk::Sampler nearest;
  std::optional<vk::ComputeKernel> mip_u8, mip_f32, sample, quantize;
  bool pad_blit_chains = true;
  std::string mip_u8_missing;  // why the u8 compute and blit mips are unavailable, when they are
  VulkanDeviceInfo info;
  VulkanTimings timings;
  // Pools (see PooledImage): pyramids (2 shapes: e.g. a single image and a batch), the float
  // chain of uint8 blit mips, rate maps; and one buffer per transfer role.
  ImagePool pyramids{2}, chains{1}, rate_maps{1};
  vk::Buffer upload_staging, pyramid_readback, rate_staging, token_list, status_words, sample_result,
      sample_readback, guard_zeros;
  // Descriptor sets are cached by the kernels (record_cached) for the pooled handles; any
  // creation or destruction of a pooled resource bumps `generation`, and the next begin()
  // drops the cached sets (a new handle may reuse a destroyed one's value). Resources are
  // acquired before the begin() of the phase that uses them, never in between.
  uint64_t generation = 0, sets_generation = 0;
  // Counts upload_and_mip calls: a GpuPyramid is what its pooled image holds only until the
  // next one (which may overwrite or evict that image).
  uint64_t pyramid_builds = 0;

  VkCommandBuffer begin() {
    if (sets_generation != generation) {
      for (auto* k : {&mip_u8, &mip_f32, &sample, &quantize})
        if (*k) (*k)->forget_cached();
      sets_generation = generation;
    }
    return commands.begin();
  }
  // Every submission of a call goes through here: counted in the call's timings.
  void submit_and_wait() {
    commands.submit_and_wait();
    ++timings.submissions;
  }

  Impl(const VulkanOptions& o)
      : instance(vk::InstanceOptions{.validation = o.validation}),
        physical(vk::select_device(instance, o.device)),
        device(instance, physical, {}),
        commands(device, device.compute_queue()),
        nearest(device, VK_FILTER_NEAREST, VK_SAMPLER_MIPMAP_MODE_NEAREST, VK_LOD_CLAMP_NONE) {
    info = describe(physical);
    pad_blit_chains = o.pad_blit_chains;
    const VkFormatFeatureFlags storage = VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT;
    if (!device.enabled_features().shaderStorageImageExtendedFormats)
      mip_u8_missing = "the device lacks shaderStorageImageExtendedFormats (r8ui storage images)";
    else if (!(device.format_properties(VK_FORMAT_R8_UINT).optimalTilingFeatures & storage))
      mip_u8_missing = "R8_UINT has no storage-image support";
    if (mip_u8_missing.empty()) {
      const std::vector<VkDescriptorType> two_images{VK_DESCRIPTOR_TYPE_STORAGE_IMAGE,
                                                     VK_DESCRIPTOR_TYPE_STORAGE_IMAGE};
      mip_u8.emplace(device, kMipU8Spirv, two_images, uint32_t(sizeof(MipPush)), 64, "mip_u8");
      quantize.emplace(device, kMipQuantizeSpirv, two_images, uint32_t(sizeof(QuantizePush)), 64, "mip_quantize");
    }
    mip_f32.emplace(device, kMipF32Spirv,
                    std::vector<VkDescriptorType>{VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, VK_DESCRIPTOR_TYPE_STORAGE_IMAGE},
                    uint32_t(sizeof(MipPush)), 64, "mip_f32");
    sample.emplace(device, kSampleSpirv,
                   std::vector<VkDescriptorType>{VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER,
                                                 VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER,
                                                 VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 VK_DESCRIPTOR_TYPE_STORAGE_BUFFER},
                   uint32_t(sizeof(SamplePush)), 4, "sample");
  }

  // ---- pyramid on the device -------------------------------------------------------------

  // The image a blit chain filters: desc with its extents rounded up to powers of two (see
  // record_blit_mips), unless padding is off or the device refuses that image (its limits,
  // or memory); then desc as is. The pooled image's desc says which.
  PooledImage& acquire_blit_image(ImagePool& pool, const vk::ImageDesc& desc) {
    vk::ImageDesc padded = desc;
    padded.width = std::bit_ceil(desc.width);
    padded.height = std::bit_ceil(desc.height);
    if (pad_blit_chains && !same_desc(padded, desc) && !vk::Image::check_desc(device, padded)) {
      try {
        return pool.acquire(device, padded, generation);
      } catch (const Error& e) {
        if (e.code() != Errc::out_of_memory) throw;
      }
    }
    return pool.acquire(device, desc, generation);
  }

  // Records the zeroing of `guards` (padding_guards) in `image`, all of whose levels must be
  // in TRANSFER_DST_OPTIMAL, and makes it visible to the blits and rounding passes.
  void record_guards(VkCommandBuffer cb, VkImage image, const std::vector<VkBufferImageCopy>& guards,
                     VkBuffer zeros) {
    if (guards.empty()) return;
    vkCmdCopyBufferToImage(cb, zeros, image, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, uint32_t(guards.size()),
                           guards.data());
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT |
                           VK_ACCESS_SHADER_WRITE_BIT);
  }

  // The pyramid image's description for `g` (format, extents, usage, flags) once the device has
  // the format features `method` needs; throws Error(unsupported) when it has not.
  template <typename T>
  vk::ImageDesc pyramid_desc(const GpuPyramid& g, MipMethod method) {
    constexpr bool u8 = std::is_same_v<T, uint8_t>;
    const VkFormat fmt = texture_format<T>();
    vk::ImageDesc desc;
    desc.format = fmt;
    desc.width = uint32_t(g.width);
    desc.height = uint32_t(g.height);
    desc.layers = g.layers();
    desc.levels = uint32_t(g.levels);
    desc.usage = VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_SAMPLED_BIT;
    device.require_format(fmt, VK_FORMAT_FEATURE_SAMPLED_IMAGE_BIT | VK_FORMAT_FEATURE_TRANSFER_SRC_BIT |
                                   VK_FORMAT_FEATURE_TRANSFER_DST_BIT,
                          "sampling and transfers");
    // uint8 blit mips filter a float copy of the chain (see record_blit_mips_u8), so the
    // float format needs the blit features and both need storage, as compute mips do.
    const VkFormat blit_fmt = u8 ? VK_FORMAT_R32_SFLOAT : fmt;
    if (method == MipMethod::blit)
      device.require_format(blit_fmt, VK_FORMAT_FEATURE_BLIT_SRC_BIT | VK_FORMAT_FEATURE_BLIT_DST_BIT |
                                          VK_FORMAT_FEATURE_SAMPLED_IMAGE_FILTER_LINEAR_BIT,
                            "blit with a linear filter (needed for blit mips; use the compute method)");
    if (method == MipMethod::compute || u8) {
      if (u8 && !mip_u8)
        throw Error(Errc::unsupported, std::string("vulkan: ") +
                                           (method == MipMethod::blit ? "blit" : "compute") +
                                           " mips for uint8 unavailable: " + mip_u8_missing);
      device.require_format(storage_format<T>(), VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT, "storage images");
      if (method == MipMethod::blit)
        device.require_format(blit_fmt, VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT, "storage images (blit mips' rounding)");
      desc.usage |= VK_IMAGE_USAGE_STORAGE_BIT;
      if (u8) {
        desc.flags |= VK_IMAGE_CREATE_MUTABLE_FORMAT_BIT;
        if (!(device.format_properties(fmt).optimalTilingFeatures & VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT))
          desc.flags |= VK_IMAGE_CREATE_EXTENDED_USAGE_BIT;
      }
    }
    return desc;
  }

  // Upload: the planes of each image are contiguous in its buffer, rows stride() apart; level 0
  // of every layer of g's image is written.
  template <typename T>
  void upload_images(std::span<const Image<T>* const> images, GpuPyramid& g) {
    const size_t plane_bytes = images[0]->plane_stride() * sizeof(T);
    const auto t0 = Clock::now();
    vk::Buffer& staging = pooled_buffer(device, upload_staging, VkDeviceSize(plane_bytes) * g.layers(),
                                        VK_BUFFER_USAGE_TRANSFER_SRC_BIT, vk::MemoryUse::upload, generation);
    std::vector<VkBufferImageCopy> regions;
    for (int b = 0; b < g.count; ++b) {
      std::memcpy(static_cast<std::byte*>(staging.mapped()) + size_t(b) * g.channels * plane_bytes,
                  images[b]->plane(0), g.channels * plane_bytes);
      for (int c = 0; c < g.channels; ++c) {
        VkBufferImageCopy r{};
        r.bufferOffset = VkDeviceSize(b * g.channels + c) * plane_bytes;
        r.bufferRowLength = uint32_t(images[b]->stride());
        r.bufferImageHeight = uint32_t(g.height);
        r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, uint32_t(b * g.channels + c), 1};
        r.imageExtent = {uint32_t(g.width), uint32_t(g.height), 1};
        regions.push_back(r);
      }
    }
    VkCommandBuffer cb = begin();
    vk::image_barrier(cb, g.image().handle(), 0, 1, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                      VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_WRITE_BIT);
    vkCmdCopyBufferToImage(cb, staging.handle(), g.image().handle(), VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                           uint32_t(regions.size()), regions.data());
    submit_and_wait();
    timings.upload_ms += ms_since(t0);
  }

  // The mip levels of g's image from its level 0, by `method`.
  template <typename T>
  void make_mips(GpuPyramid& g, MipMethod method) {
    constexpr bool u8 = std::is_same_v<T, uint8_t>;
    const auto t0 = Clock::now();
    PooledImage* chain = nullptr;  // acquired before begin(): see `generation`
    if (method == MipMethod::blit && u8) {
      vk::ImageDesc cd;
      cd.format = VK_FORMAT_R32_SFLOAT;
      cd.width = uint32_t(g.width);
      cd.height = uint32_t(g.height);
      cd.layers = g.layers();
      cd.levels = uint32_t(g.levels);
      cd.usage = VK_IMAGE_USAGE_TRANSFER_SRC_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT | VK_IMAGE_USAGE_STORAGE_BIT;
      chain = &acquire_blit_image(chains, cd);
    }
    std::vector<VkBufferImageCopy> guards;
    VkBuffer zeros = VK_NULL_HANDLE;
    if (method == MipMethod::blit) {
      guards = padding_guards(g, chain ? chain->desc : g.pooled->desc);
      VkDeviceSize bytes = 0;
      for (const VkBufferImageCopy& r : guards)
        bytes = std::max<VkDeviceSize>(bytes, VkDeviceSize(r.imageExtent.width) * r.imageExtent.height * 4);
      if (bytes > 0) {
        vk::Buffer& z = pooled_buffer(device, guard_zeros, bytes * g.layers(), VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                                      vk::MemoryUse::upload, generation);
        std::memset(z.mapped(), 0, z.size());
        zeros = z.handle();
      }
    }
    VkCommandBuffer cb = begin();
    if (chain)
      record_blit_mips_u8(cb, g, *chain, guards, zeros);
    else if (method == MipMethod::blit)
      record_blit_mips(cb, g, guards, zeros);
    else
      record_compute_mips<T>(cb, g);
    submit_and_wait();
    if (mip_u8) mip_u8->reset_sets();
    if (quantize) quantize->reset_sets();
    mip_f32->reset_sets();
    timings.mips_ms += ms_since(t0);
  }

  template <typename T>
  GpuPyramid upload_and_mip(std::span<const Image<T>* const> images, int max_levels, MipMethod method) {
    check_same_size(images);
    constexpr bool u8 = std::is_same_v<T, uint8_t>;
    GpuPyramid g;
    g.width = images[0]->width();
    g.height = images[0]->height();
    g.channels = images[0]->channels();
    g.count = int(images.size());
    g.levels = resolve_levels(g.width, g.height, max_levels);
    ++pyramid_builds;
    const vk::ImageDesc desc = pyramid_desc<T>(g, method);
    // Float blit mips filter the pyramid image itself, so that one is padded.
    g.pooled = method == MipMethod::blit && !u8 ? &acquire_blit_image(pyramids, desc)
                                                : &pyramids.acquire(device, desc, generation);
    upload_images(images, g);
    make_mips<T>(g, method);
    return g;
  }

  // Float blit mips: the plain chain, each level the driver's linear filter of the previous.
  // The filter's weights come from texel coordinates the driver derives from the image's
  // extents ((x + 0.5) / extent) and from the blit boxes; with either not a power of two they
  // are inexact in float and the 2:1 filter is not the mean of its 4 texels (lavapipe: off by
  // about x·2^-24 of the texel difference, 1e-3 relative at 8191 wide). g's image is
  // therefore padded to power-of-two extents (acquire_blit_image), the data in its top-left
  // corner, and the boxes rounded up to powers of two (mip_blit): every coordinate is then a
  // dyadic rational, exact in float, and each weight exactly 1/2 (docs/how-to/vulkan.md). `guards`:
  // padding_guards of the image, zeroed from `zeros` first.
  void record_blit_mips(VkCommandBuffer cb, GpuPyramid& g, const std::vector<VkBufferImageCopy>& guards,
                        VkBuffer zeros) {
    const VkImage img = g.image().handle();
    if (g.levels > 1)
      vk::image_barrier(cb, img, 1, uint32_t(g.levels - 1), VK_IMAGE_LAYOUT_UNDEFINED,
                        VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
    record_guards(cb, img, guards, zeros);  // level 0 is still TRANSFER_DST from the upload
    vk::image_barrier(cb, img, 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
                      VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_READ_BIT);
    for (int l = 0; l + 1 < g.levels; ++l) {
      const VkImageBlit blit = mip_blit(g, g.image().desc(), l);
      vkCmdBlitImage(cb, img, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, img, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1,
                     &blit, VK_FILTER_LINEAR);
      vk::image_barrier(cb, img, uint32_t(l + 1), 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                        VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, VK_PIPELINE_STAGE_TRANSFER_BIT,
                        VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    }
    g.layout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    g.last_stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    g.last_access = VK_ACCESS_TRANSFER_WRITE_BIT;
  }

  // uint8 mips by blits that equal the CPU pyramid. A blit into R8_UNORM rounds as the driver
  // likes ("one of the two closest" integers, the spec says) and every level inherits the
  // previous level's rounding: 3-4 LSB from the CPU at deep levels on lavapipe. Blitting the
  // whole chain in float and rounding once at the end does not help either: the CPU rounds at
  // every level, and its chain is up to 1.8 LSB from the exact mean at 1024² (3 LSB at 8192
  // wide), so round(mean) misses it by 2-3 LSB (docs/how-to/vulkan.md). So the blits filter a float
  // copy of the chain (R32_SFLOAT, values in LSB units: no rounding and no clamping in the
  // blit), and after each blit mip_quantize.comp rounds the new level with the CPU's rule,
  // into the uint8 pyramid and back into the float chain the next blit reads. Result: the CPU
  // pyramid, as long as the driver's 2:1 linear filter is within 0.125 LSB of the mean of its
  // 4 source texels; with `chain` padded to power-of-two extents (record_blit_mips) the filter
  // of integers is exact. `chain`: an R32_SFLOAT image of g's layers and levels and at least
  // its extents; `guards`: its padding_guards, zeroed from `zeros` first.
  void record_blit_mips_u8(VkCommandBuffer cb, GpuPyramid& g, PooledImage& chain,
                           const std::vector<VkBufferImageCopy>& guards, VkBuffer zeros) {
    const VkImage img = g.image().handle(), ch = chain.image.handle();
    const uint32_t rest = uint32_t(g.levels - 1);
    vk::image_barrier(cb, img, 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                      VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    vk::image_barrier(cb, ch, 0, uint32_t(g.levels), VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                      VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_WRITE_BIT);
    record_guards(cb, ch, guards, zeros);
    vk::image_barrier(cb, ch, 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                      VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT);
    if (rest > 0)
      vk::image_barrier(cb, img, 1, rest, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_GENERAL,
                        VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                        VK_ACCESS_SHADER_WRITE_BIT);
    auto round_level = [&](int l, uint32_t mode) {
      const QuantizePush push{mip_extent(g.width, l), mip_extent(g.height, l), mode, 0};
      const vk::Binding bindings[] = {vk::Binding::storage_image(chain.level_view(l, VK_FORMAT_R32_SFLOAT)),
                                      vk::Binding::storage_image(g.pooled->level_view(l, VK_FORMAT_R8_UINT))};
      quantize->record_cached(cb, bindings, &push, uint32_t((push.w + 7) / 8), uint32_t((push.h + 7) / 8), g.layers());
    };
    round_level(0, 0);  // the float chain's level 0 is the image itself
    for (int l = 0; l + 1 < g.levels; ++l) {
      vk::image_barrier(cb, ch, uint32_t(l), 1, VK_IMAGE_LAYOUT_GENERAL, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
      const VkImageBlit blit = mip_blit(g, chain.desc, l);
      vkCmdBlitImage(cb, ch, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, ch, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &blit,
                     VK_FILTER_LINEAR);
      vk::image_barrier(cb, ch, uint32_t(l + 1), 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      round_level(l + 1, 1);
    }
    g.layout = VK_IMAGE_LAYOUT_GENERAL;
    g.last_stage = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    g.last_access = VK_ACCESS_SHADER_WRITE_BIT;
  }

  template <typename T>
  void record_compute_mips(VkCommandBuffer cb, GpuPyramid& g) {
    vk::ComputeKernel& k = std::is_same_v<T, uint8_t> ? *mip_u8 : *mip_f32;
    const VkImage img = g.image().handle();
    vk::image_barrier(cb, img, 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                      VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    if (g.levels > 1)
      vk::image_barrier(cb, img, 1, uint32_t(g.levels - 1), VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_GENERAL,
                        VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                        VK_ACCESS_SHADER_WRITE_BIT);
    std::vector<VkImageView> views;
    for (int l = 0; l < g.levels; ++l) views.push_back(g.pooled->level_view(l, storage_format<T>()));
    for (int l = 0; l + 1 < g.levels; ++l) {
      const MipPush push{mip_extent(g.width, l), mip_extent(g.height, l), mip_extent(g.width, l + 1),
                         mip_extent(g.height, l + 1)};
      const vk::Binding bindings[] = {vk::Binding::storage_image(views[l]), vk::Binding::storage_image(views[l + 1])};
      k.record_cached(cb, bindings, &push, uint32_t((push.dst_w + 7) / 8), uint32_t((push.dst_h + 7) / 8), g.layers());
      vk::memory_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    }
    g.layout = VK_IMAGE_LAYOUT_GENERAL;
    g.last_stage = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    g.last_access = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  }

  template <typename T>
  // Levels below first_level are not read back and stay empty (the caller has level 0).
  std::vector<Pyramid<T>> read_pyramids(GpuPyramid& g, int first_level = 0) {
    auto t0 = Clock::now();
    std::vector<VkBufferImageCopy> regions;
    std::vector<size_t> offsets(size_t(g.levels), 0);
    size_t total = 0;
    for (int l = first_level; l < g.levels; ++l) {
      const int w = mip_extent(g.width, l), h = mip_extent(g.height, l);
      VkBufferImageCopy r{};
      r.bufferOffset = total;
      r.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, uint32_t(l), 0, g.layers()};
      r.imageExtent = {uint32_t(w), uint32_t(h), 1};
      regions.push_back(r);
      offsets[size_t(l)] = total;
      total += size_t(w) * h * g.layers() * sizeof(T);
    }
    vk::Buffer& rb =
        pooled_buffer(device, pyramid_readback, total, VK_BUFFER_USAGE_TRANSFER_DST_BIT, vk::MemoryUse::readback,
                      generation);
    VkCommandBuffer cb = begin();
    // TRANSFER_SRC_OPTIMAL even after compute mips (GENERAL): the validation layers flag a
    // copy out of GENERAL as a performance warning, and tests count every warning.
    const VkImageLayout src_layout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
    vk::image_barrier(cb, g.image().handle(), 0, uint32_t(g.levels), g.layout, src_layout, g.last_stage,
                      g.last_access, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    vkCmdCopyImageToBuffer(cb, g.image().handle(), src_layout, rb.handle(), uint32_t(regions.size()), regions.data());
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                       VK_ACCESS_HOST_READ_BIT);
    submit_and_wait();
    g.layout = src_layout;
    g.last_stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    g.last_access = 0;

    std::vector<Pyramid<T>> out;
    const std::byte* base = static_cast<const std::byte*>(rb.mapped());
    for (int b = 0; b < g.count; ++b) {
      std::vector<Image<T>> levels;
      for (int l = 0; l < g.levels; ++l) {
        if (l < first_level) {
          levels.emplace_back();
          continue;
        }
        const int w = mip_extent(g.width, l), h = mip_extent(g.height, l);
        Image<T> im(w, h, g.channels);
        for (int c = 0; c < g.channels; ++c) {
          const T* src = reinterpret_cast<const T*>(base + offsets[l]) + size_t(b * g.channels + c) * w * h;
          for (int y = 0; y < h; ++y) std::memcpy(im.row(c, y), src + size_t(y) * w, size_t(w) * sizeof(T));
        }
        levels.push_back(std::move(im));
      }
      out.emplace_back(std::move(levels));
    }
    timings.readback_ms += ms_since(t0);
    return out;
  }

  // ---- sampling -----------------------------------------------------------------------------

  // The highest mip level a batch's allocations sample, checked: one image size, one tile grid,
  // and within the `levels` the pyramid will have (resolved from it).
  int checked_max_level(std::span<const ImageU8* const> images, std::span<const Allocation* const> allocs,
                        int& levels) {
    const TileGrid& g0 = allocs[0]->rate_map.grid;
    int max_level = 0;
    for (const Allocation* a : allocs) {
      const TileGrid& g = a->rate_map.grid;
      if (g.image_width != images[0]->width() || g.image_height != images[0]->height())
        throw Error(Errc::invalid_argument, "allocation was made for a different image size");
      if (g.patch_px != g0.patch_px || g.tiles_x != g0.tiles_x || g.tiles_y != g0.tiles_y ||
          a->rate_map.level.size() != size_t(g.tiles()))
        throw Error(Errc::invalid_argument, "vulkan: the allocations of a batch need one tile grid");
      max_level = std::max(max_level, a->max_level);
    }
    levels = resolve_levels(images[0]->width(), images[0]->height(), max_level + 1);
    if (max_level >= levels)
      throw Error(Errc::invalid_argument, "allocation needs mip level " + std::to_string(max_level) +
                                              " but the pyramid has " + std::to_string(levels) + " levels");
    return max_level;
  }

  // Token list of the whole batch (x, y, level, image); `out` gets each allocation's batch with
  // positions, levels and boxes as the CPU extraction makes them (extract/batch.hpp), its patches
  // to be filled from the device.
  static std::vector<uint32_t> batch_tokens(std::span<const Allocation* const> allocs, int max_level,
                                            const ExtractParams& params, std::vector<TokenBatch>& out) {
    std::vector<uint32_t> tok;
    for (size_t b = 0; b < allocs.size(); ++b) {
      for (const Token& t : allocs[b]->layout.tokens) {
        if (t.level < 0 || t.level > max_level || t.x < 0 || t.y < 0)
          throw Error(Errc::invalid_argument, "vulkan: token outside its allocation's levels");
        tok.insert(tok.end(), {uint32_t(t.x), uint32_t(t.y), uint32_t(t.level), uint32_t(b)});
      }
      out.push_back(allocation_batch(*allocs[b], params));
    }
    return tok;
  }

  // What the sampler reads besides the pyramid, on the device: the rate maps (one layer per
  // image), the token list, and the status words it reports disagreements in (zeroed).
  struct SampleInputs {
    vk::Image* rate;
    vk::Buffer* tokens;
    vk::Buffer* status;
  };
  SampleInputs upload_sample_inputs(std::span<const Allocation* const> allocs, const std::vector<uint32_t>& tok) {
    const TileGrid& g0 = allocs[0]->rate_map.grid;
    device.require_format(VK_FORMAT_R8_UINT, VK_FORMAT_FEATURE_SAMPLED_IMAGE_BIT, "sampled images (the rate map)");
    vk::ImageDesc rd;
    rd.format = VK_FORMAT_R8_UINT;
    rd.width = uint32_t(g0.tiles_x);
    rd.height = uint32_t(g0.tiles_y);
    rd.layers = uint32_t(allocs.size());
    rd.usage = VK_IMAGE_USAGE_SAMPLED_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT;
    vk::Image& rate = rate_maps.acquire(device, rd, generation).image;
    const size_t tiles = size_t(g0.tiles());
    vk::Buffer& rstage = pooled_buffer(device, rate_staging, tiles * allocs.size(), VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                                       vk::MemoryUse::upload, generation);
    for (size_t b = 0; b < allocs.size(); ++b)
      std::memcpy(static_cast<uint8_t*>(rstage.mapped()) + b * tiles, allocs[b]->rate_map.level.data(), tiles);
    vk::Buffer& tokens = pooled_buffer(device, token_list, tok.size() * 4, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                       vk::MemoryUse::upload, generation);
    std::memcpy(tokens.mapped(), tok.data(), tok.size() * 4);
    vk::Buffer& status =
        pooled_buffer(device, status_words, 16, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, vk::MemoryUse::readback,
                      generation);
    std::memset(status.mapped(), 0, 16);
    VkCommandBuffer cb = begin();
    vk::image_barrier(cb, rate.handle(), 0, 1, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                      VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_WRITE_BIT);
    VkBufferImageCopy rr{};
    rr.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, rd.layers};
    rr.imageExtent = {rd.width, rd.height, 1};
    vkCmdCopyBufferToImage(cb, rstage.handle(), rate.handle(), VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &rr);
    vk::image_barrier(cb, rate.handle(), 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                      VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL, VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    submit_and_wait();
    return {&rate, &tokens, &status};
  }

  // One dispatch of the sampler for the whole batch: n_elems patch samples of P×P patches into
  // n_words words of the returned device buffer.
  vk::Buffer& dispatch_sample(GpuPyramid& pyr, const SampleInputs& in, const ExtractParams& params, int P,
                              uint64_t total_tokens, uint64_t n_elems, uint64_t n_words) {
    const bool u8 = params.dtype == DType::u8;
    vk::Buffer& result = pooled_buffer(device, sample_result, n_words * 4,
                                       VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                                       vk::MemoryUse::device, generation);
    SamplePush push{};
    // One invocation per patch row, except uint8 rows that do not start on a word (P % 4).
    const bool per_word = u8 && P % 4 != 0;
    const uint64_t n_units = per_word ? n_words : total_tokens * 3 * uint64_t(P);
    push.n_units = uint32_t(n_units);
    push.n_elems = uint32_t(n_elems);
    push.P = uint32_t(P);
    push.channels = uint32_t(pyr.channels);
    push.mode = per_word ? 0 : (u8 ? 2 : 1);
    push.num_levels = uint32_t(pyr.levels);
    const PatchScale ps = patch_scale(params);  // the CPU extraction's constants
    for (int c = 0; c < 3; ++c) {
      push.scale[c] = ps.scale[c];
      push.bias[c] = ps.bias[c];
    }
    const uint64_t groups = (n_units + 63) / 64;
    const uint32_t max_x = device.limits().maxComputeWorkGroupCount[0];
    const uint32_t gx = uint32_t(std::min<uint64_t>(groups, max_x));
    const uint32_t gy = uint32_t((groups + gx - 1) / gx);
    push.row_invocations = gx * 64;
    VkCommandBuffer cb = begin();
    vk::image_barrier(cb, pyr.image().handle(), 0, uint32_t(pyr.levels), pyr.layout,
                      VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL, pyr.last_stage, pyr.last_access,
                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
    const vk::Binding bindings[] = {
        vk::Binding::sampled(pyr.image().view(), nearest.handle(), VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL),
        vk::Binding::sampled(in.rate->view(), nearest.handle(), VK_IMAGE_LAYOUT_SHADER_READ_ONLY_OPTIMAL),
        vk::Binding::storage_buffer(in.tokens->handle()), vk::Binding::storage_buffer(result.handle()),
        vk::Binding::storage_buffer(in.status->handle())};
    sample->record_cached(cb, bindings, &push, gx, gy, 1);
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_HOST_READ_BIT);
    submit_and_wait();
    sample->reset_sets();
    return result;
  }

  // The sampler's n_words words of `result` read back into the batches' patches (in their
  // dtype), after its status words say the rate maps and token lists agreed.
  void read_patches(vk::Buffer& result, const vk::Buffer& status, uint64_t n_words, const ExtractParams& params,
                    std::vector<TokenBatch>& out) {
    vk::Buffer& rb =
        pooled_buffer(device, sample_readback, n_words * 4, VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                      vk::MemoryUse::readback, generation);
    VkCommandBuffer cb = begin();
    VkBufferCopy bc{0, 0, n_words * 4};
    vkCmdCopyBuffer(cb, result.handle(), rb.handle(), 1, &bc);
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                       VK_ACCESS_HOST_READ_BIT);
    submit_and_wait();
    const uint32_t* st = static_cast<const uint32_t*>(status.mapped());
    if (st[0] != 0)
      throw Error(Errc::invalid_argument, "vulkan: the rate map and the token layout disagree on " +
                                              std::to_string(st[0]) + " token level(s)");
    if (st[1] != 0) throw Error(Errc::invalid_argument, "vulkan: the rate map names a level the pyramid lacks");
    const std::byte* src = static_cast<const std::byte*>(rb.mapped());
    size_t elem_offset = 0;
    for (TokenBatch& tb : out) {
      const size_t ne = size_t(tb.patches.numel());
      switch (params.dtype) {
        case DType::u8: std::memcpy(tb.patches.bytes(), src + elem_offset, ne); break;
        case DType::f32: std::memcpy(tb.patches.bytes(), src + elem_offset * 4, ne * 4); break;
        default: {  // f16: the device writes binary32, converted here exactly as the CPU does
          const float* f = reinterpret_cast<const float*>(src) + elem_offset;
          uint16_t* h = tb.patches.data<uint16_t>();
          for (size_t i = 0; i < ne; ++i) h[i] = f32_to_f16(f[i]);
        }
      }
      elem_offset += ne;
    }
  }

  std::vector<TokenBatch> extract_batch(std::span<const ImageU8* const> images,
                                        std::span<const Allocation* const> allocs, const ExtractParams& params,
                                        MipMethod method, GpuPyramid* resident = nullptr) {
    if (images.size() != allocs.size())
      throw Error(Errc::invalid_argument, "vulkan: one allocation per image is needed");
    check_same_size(images);
    check_extract_params(params);
    int levels = 0;
    const int max_level = checked_max_level(images, allocs, levels);
    const int P = allocs[0]->rate_map.grid.patch_px;

    std::vector<TokenBatch> out;
    const std::vector<uint32_t> tok = batch_tokens(allocs, max_level, params, out);
    const uint64_t total_tokens = tok.size() / 4;
    const uint64_t n_elems = total_tokens * 3 * uint64_t(P) * P;
    if (n_elems >= (uint64_t(1) << 31))
      throw Error(Errc::limit_exceeded, "vulkan: a batch of " + std::to_string(n_elems) +
                                            " patch samples exceeds the sampler's 2^31 limit; split it");
    const bool u8 = params.dtype == DType::u8;
    const uint64_t n_words = u8 ? (n_elems + 3) / 4 : n_elems;

    // A pyramid already on the device (tokenize()) is sampled as is when it has the levels.
    GpuPyramid fresh;
    if (!resident || resident->levels < levels || resident->count != int(images.size()))
      fresh = upload_and_mip<uint8_t>(images, levels, method);
    GpuPyramid& pyr = fresh.pooled ? fresh : *resident;
    if (total_tokens == 0) return out;

    auto t0 = Clock::now();
    const SampleInputs in = upload_sample_inputs(allocs, tok);
    timings.upload_ms += ms_since(t0);
    t0 = Clock::now();
    vk::Buffer& result = dispatch_sample(pyr, in, params, P, total_tokens, n_elems, n_words);
    timings.dispatch_ms += ms_since(t0);
    t0 = Clock::now();
    read_patches(result, *in.status, n_words, params, out);
    timings.readback_ms += ms_since(t0);
    return out;
  }
};

// ---- public API ----------------------------------------------------------------------------

bool vulkan_built() { return true; }

std::vector<VulkanDeviceInfo> list_vulkan_devices() {
  std::vector<VulkanDeviceInfo> out;
  std::unique_ptr<vk::Instance> inst;
  try {
    inst = std::make_unique<vk::Instance>();
  } catch (const Error&) {
    return out;  // no driver (VK_ERROR_INCOMPATIBLE_DRIVER) or a 1.0-only loader
  }
  for (const vk::PhysicalDeviceInfo& d : vk::enumerate_devices(*inst)) out.push_back(describe(d));
  return out;
}

// Asked afresh on every call (an instance is created and destroyed): nothing is cached for the
// process, so a device that appears or goes away (a driver installed, VK_ICD_FILENAMES
// changed) is seen by the next call.
bool vulkan_available() {
  try {
    vk::Instance inst;
    (void)vk::select_device(inst, "");
    return true;
  } catch (const Error&) {
    return false;
  }
}

VulkanBackend::VulkanBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VulkanBackend::~VulkanBackend() = default;

std::unique_ptr<VulkanBackend> VulkanBackend::create(const VulkanOptions& options) {
  return std::unique_ptr<VulkanBackend>(new VulkanBackend(std::make_unique<Impl>(options)));
}

const VulkanDeviceInfo& VulkanBackend::device() const { return impl_->info; }
int VulkanBackend::validation_errors() const { return impl_->instance.validation_errors(); }
std::vector<std::string> VulkanBackend::validation_messages() const { return impl_->instance.validation_messages(); }
const VulkanTimings& VulkanBackend::last_timings() const { return impl_->timings; }

PyramidU8 VulkanBackend::build_pyramid(const ImageU8& image, const PyramidParams& params, MipMethod method) {
  const ImageU8* one[] = {&image};
  return std::move(build_pyramids(one, params, method).at(0));
}

PyramidF32 VulkanBackend::build_pyramid(const ImageF32& image, const PyramidParams& params, MipMethod method) {
  impl_->timings = {};
  const ImageF32* one[] = {&image};
  GpuPyramid g = impl_->upload_and_mip<float>(std::span<const ImageF32* const>(one), params.max_levels, method);
  return std::move(impl_->read_pyramids<float>(g).at(0));
}

std::vector<PyramidU8> VulkanBackend::build_pyramids(std::span<const ImageU8* const> images,
                                                     const PyramidParams& params, MipMethod method) {
  impl_->timings = {};
  GpuPyramid g = impl_->upload_and_mip<uint8_t>(images, params.max_levels, method);
  return impl_->read_pyramids<uint8_t>(g);
}

namespace {

// fovea::tokenize's pixel stages on the device: the pyramid is built once (levels 1.. read
// back for the CPU's relevance and allocation; level 0 is the input itself) and stays
// resident for the sampling dispatch.
class VulkanStages final : public TokenizeStages {
 public:
  VulkanStages(VulkanBackend::Impl& impl, MipMethod method) : impl_(impl), method_(method) {}

  PyramidU8 build_pyramid(ImageU8 image, const PyramidParams& params, Executor&) override {
    impl_.timings = {};  // a new tokenization: the split covers both stages
    const ImageU8* one[] = {&image};
    resident_ = impl_.upload_and_mip<uint8_t>(std::span<const ImageU8* const>(one), params.max_levels, method_);
    built_at_ = impl_.pyramid_builds;
    PyramidU8 p = std::move(impl_.read_pyramids<uint8_t>(resident_, 1).at(0));
    p.level(0) = std::move(image);
    level0_ = p.level(0).plane(0);
    return p;
  }

  // The caller's pixels: the upload reads a planar image, so this is the one copy of them.
  PyramidU8 build_pyramid(const ImageViewU8& image, const PyramidParams& params, Executor& exec) override {
    return build_pyramid(to_image(image), params, exec);
  }

  TokenBatch extract(const PyramidU8& pyramid, const Allocation& allocation, const ExtractParams& params,
                     Executor&) override {
    const ImageU8* one[] = {&pyramid.level(0)};
    const Allocation* a[] = {&allocation};
    // The resident pyramid when `pyramid` is the one built above (known by its level-0
    // buffer) and nothing has rebuilt the pooled image since; otherwise extract_batch uploads
    // level 0 and builds its own mips.
    const bool resident =
        resident_.pooled && built_at_ == impl_.pyramid_builds && pyramid.level(0).plane(0) == level0_;
    return std::move(impl_.extract_batch(one, a, params, method_, resident ? &resident_ : nullptr).at(0));
  }

 private:
  VulkanBackend::Impl& impl_;
  MipMethod method_;
  GpuPyramid resident_;
  uint64_t built_at_ = 0;
  const uint8_t* level0_ = nullptr;
};

}  // namespace

std::unique_ptr<TokenizeStages> VulkanBackend::tokenize_stages(MipMethod method) {
  return std::make_unique<VulkanStages>(*impl_, method);
}

Tokenization VulkanBackend::tokenize(ImageU8 image, const Query& query, const TokenizeParams& params,
                                     Executor& exec, MipMethod method) {
  VulkanStages stages(*impl_, method);
  return fovea::tokenize(std::move(image), query, params, exec, stages);
}

TokenBatch VulkanBackend::extract(const ImageU8& image, const Allocation& allocation, const ExtractParams& params,
                                  MipMethod method) {
  const ImageU8* one[] = {&image};
  const Allocation* a[] = {&allocation};
  return std::move(extract_batch(one, a, params, method).at(0));
}

std::vector<TokenBatch> VulkanBackend::extract_batch(std::span<const ImageU8* const> images,
                                                     std::span<const Allocation* const> allocations,
                                                     const ExtractParams& params, MipMethod method) {
  impl_->timings = {};
  return impl_->extract_batch(images, allocations, params, method);
}

}  // namespace fovea
