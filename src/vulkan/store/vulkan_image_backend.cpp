// The sparse 2D image variant of the Vulkan store backend ("vulkan-image").
//
// Why this form: a token page has no 2D shape, so the image is used as a paged address space:
// level 0 of an R32_UINT 2D array image, one level, cut into imageGranularity blocks (128x128
// texels = 64 KiB on lavapipe). Virtual word i is texel t = i mod (block texels) of block
// i / (block texels), blocks row-major per layer, layers in order; a store page is
// page_bytes / block_bytes consecutive blocks, each bound with its own VkSparseImageMemoryBind
// (the order in which a multi-block region consumes memory is not specified, and a page's
// physical memory must be exactly its own). One level with extents that are whole blocks has
// no mip tail; a driver that still reports one (imageMipTailFirstLod == 0) is refused with a
// clear error. Mip tails of multi-level images are handled by vk::plan_sparse_image, tested
// with a partially resident mip chain (tests/test_store.cpp, SparseImage*).
//
// Writes and zero fills: whole blocks by vkCmdCopyBufferToImage (from staging, or from a zeroed
// block-sized buffer), the partial blocks at the ends of a run by a compute shader
// (scatter_image.comp) that read-modify-writes partial words, so unaligned byte runs need no
// read-back. Gathers are gather_image.comp.
#include <algorithm>
#include <cstring>

#include "vulkan/store/vulkan_store.hpp"

namespace fovea {
namespace vulkan_store {
namespace {

const uint32_t kGatherImageSpirv[] =
#include "fovea_spirv/store_gather_image.spv.inc"
    ;
const uint32_t kScatterImageSpirv[] =
#include "fovea_spirv/store_scatter_image.spv.inc"
    ;

constexpr int64_t kStagingBytes = 16 << 20;
constexpr VkFormat kFormat = VK_FORMAT_R32_UINT;
constexpr VkImageUsageFlags kUsage = VK_IMAGE_USAGE_STORAGE_BIT | VK_IMAGE_USAGE_TRANSFER_DST_BIT;

class VulkanImageBackend final : public VulkanStoreBase {
 public:
  explicit VulkanImageBackend(std::unique_ptr<StoreDevice> device)
      : VulkanStoreBase(std::move(device), kGatherImageSpirv, VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, "store gather image"),
        writer_(dev(), dev().compute_queue()),
        bind_fence_(dev()) {
    dev().require_format(kFormat, VK_FORMAT_FEATURE_STORAGE_IMAGE_BIT, "storage image support");
    scatter_ = std::make_unique<vk::ComputePipeline>(
        dev(), kScatterImageSpirv,
        std::vector<VkDescriptorType>{VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      VK_DESCRIPTOR_TYPE_STORAGE_BUFFER},
        uint32_t(sizeof(KernelPush)), "store scatter image");
    scatter_sets_ = std::make_unique<vk::KernelSets>(dev(), *scatter_, 1);
    // The block: granularity and bytes of a one-block probe image.
    vk::ImageDesc d;
    d.format = kFormat;
    d.usage = kUsage;
    uint32_t n = 1;
    VkSparseImageFormatProperties fp{};
    vkGetPhysicalDeviceSparseImageFormatProperties(dev().physical(), kFormat, VK_IMAGE_TYPE_2D, VK_SAMPLE_COUNT_1_BIT,
                                                   kUsage, VK_IMAGE_TILING_OPTIMAL, &n, &fp);
    if (n == 0) throw Error(Errc::unsupported, "vulkan: " + dev().info().name() + " has no sparse R32_UINT storage images");
    d.width = fp.imageGranularity.width;
    d.height = fp.imageGranularity.height;
    const vk::SparseImage probe(dev(), d);
    block_ = probe.layout().granularity;
    granularity_ = int64_t(probe.layout().block_bytes);
    if (int64_t(block_.width) * block_.height * 4 != granularity_)
      throw Error(Errc::unsupported, "vulkan: " + dev().info().name() + " uses " + std::to_string(granularity_) +
                                         "-byte blocks of " + std::to_string(block_.width) + "x" +
                                         std::to_string(block_.height) + " R32_UINT texels; the image store needs "
                                         "the standard block shape");
    const VkPhysicalDeviceLimits& lim = dev().limits();
    per_row_max_ = lim.maxImageDimension2D / block_.width;
    rows_max_ = lim.maxImageDimension2D / block_.height;
    VkImageFormatProperties ip{};
    vk::check(vkGetPhysicalDeviceImageFormatProperties(
                  dev().physical(), kFormat, VK_IMAGE_TYPE_2D, VK_IMAGE_TILING_OPTIMAL, kUsage,
                  VK_IMAGE_CREATE_SPARSE_BINDING_BIT | VK_IMAGE_CREATE_SPARSE_RESIDENCY_BIT, &ip),
              "vkGetPhysicalDeviceImageFormatProperties");
    const int64_t blocks_max = int64_t(per_row_max_) * rows_max_ * std::min(lim.maxImageArrayLayers, ip.maxArrayLayers);
    // Virtual words are 32-bit indices in the shaders: at most 16 GiB.
    max_virtual_bytes_ = std::min({int64_t(lim.sparseAddressSpaceSize), int64_t(ip.maxResourceSize),
                                   blocks_max * granularity_, int64_t(1) << 34});
    // One block of zeros on the device, the source of whole-block fills.
    zeros_ = vk::Buffer::create(dev(), VkDeviceSize(granularity_),
                                VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                vk::MemoryUse::device);
    VkCommandBuffer cb = writer_.begin();
    vkCmdFillBuffer(cb, zeros_.handle(), 0, VK_WHOLE_SIZE, 0);
    submit(writer_);
    drain();
  }

  std::string_view name() const override { return "vulkan-image"; }
  int64_t max_virtual_bytes() const override { return max_virtual_bytes_; }

  void init(const StoreLayout& layout) override {
    const int64_t bytes = layout.virtual_pages * layout.page_bytes;
    if (bytes > max_virtual_bytes_)
      throw Error(Errc::limit_exceeded, "vulkan-image token store: a virtual space of " + std::to_string(bytes) +
                                            " bytes exceeds the device's limit of " + std::to_string(max_virtual_bytes_) +
                                            " bytes for one sparse image");
    if (layout.page_bytes % granularity_ != 0)
      throw Error(Errc::invalid_argument, "vulkan-image token store: page size " + std::to_string(layout.page_bytes) +
                                              " is not a multiple of the image block of " +
                                              std::to_string(granularity_) + " bytes");
    blocks_per_page_ = layout.page_bytes / granularity_;
    const int64_t total = layout.virtual_pages * blocks_per_page_;
    blocks_x_ = uint32_t(std::min<int64_t>(total, per_row_max_));
    blocks_y_ = uint32_t(std::min<int64_t>((total + blocks_x_ - 1) / blocks_x_, rows_max_));
    const int64_t per_layer = int64_t(blocks_x_) * blocks_y_;
    vk::ImageDesc d;
    d.format = kFormat;
    d.usage = kUsage;
    d.width = blocks_x_ * block_.width;
    d.height = blocks_y_ * block_.height;
    d.layers = uint32_t((total + per_layer - 1) / per_layer);
    image_ = std::make_unique<vk::SparseImage>(dev(), d);
    const vk::SparseImageLayout& L = image_->layout();
    if (L.mip_tail_first_lod == 0)
      throw Error(Errc::unsupported, "vulkan-image token store: " + dev().info().name() +
                                         " puts level 0 of a " + std::to_string(d.width) + "x" +
                                         std::to_string(d.height) + " image in its mip tail");
    allocate_pool(layout.pool_pages, layout.page_bytes, L.memory_type_bits);
    view_ = image_->create_view(kFormat, 0, 1);
    // GENERAL once, before any block is bound: contents of newly bound blocks are undefined
    // anyway and the front end zero-fills them.
    VkCommandBuffer cb = writer_.begin();
    vk::image_barrier(cb, image_->handle(), 0, 1, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_GENERAL,
                      VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    submit(writer_);
    drain();
  }

  void bind(std::span<const PageBind> binds) override {
    std::vector<vk::SparseImageBind> entries;
    for (const PageBind& b : binds)
      for (int64_t i = 0; i < b.count; ++i) {
        const int64_t vpage = b.virt_page + i;
        for (int64_t k = 0; k < blocks_per_page_; ++k) {
          vk::SparseImageBind e = block_region(vpage * blocks_per_page_ + k);
          if (b.phys_page != PageBind::kUnbound) {
            const PhysAddr p = phys(b.phys_page + i);
            e.memory = p.memory;
            e.memory_offset = p.offset + VkDeviceSize(k * granularity_);
          }
          entries.push_back(e);
        }
      }
    if (entries.empty()) return;
    {
      std::lock_guard lock(queue_mutex());
      vk::bind_sparse(*dev().sparse_queue(), {.image = image_->handle(), .image_binds = entries}, bind_fence_);
    }
    drain();
  }

  void write(int64_t virt_byte, const std::byte* src, int64_t bytes) override {
    std::lock_guard lock(writer_mutex_);
    while (bytes > 0) {
      const int64_t n = std::min(bytes, kStagingBytes);
      ensure_staging(n);
      std::memcpy(staging_.mapped(), src, size_t(n));
      std::vector<Item> items;
      std::vector<VkBufferImageCopy> copies;
      // Whole blocks straight from staging when the offsets are texel-aligned.
      split(virt_byte, n, virt_byte % 4 == 0, 0, items, copies);
      scatter(items, copies, staging_.handle());
      virt_byte += n;
      src += n;
      bytes -= n;
    }
    drain();
  }

  void fill_zero(std::span<const ByteRun> runs) override {
    if (runs.empty()) return;
    std::lock_guard lock(writer_mutex_);
    std::vector<Item> items;
    std::vector<VkBufferImageCopy> copies;
    for (const ByteRun& r : runs)
      if (r.bytes > 0) split(r.virt_byte, r.bytes, true, kZeros, items, copies);
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.virt < b.virt; });
    ensure_staging(4);  // bound to the (unused) staging binding
    // Bounded submissions: invocation indices are 32-bit; copies go with the first one.
    const int64_t max_words = int64_t(1) << 30;
    size_t i = 0;
    do {
      size_t j = i;
      int64_t words = 0;
      while (j < items.size() && (j == i || words + items[j].bytes / 4 + 2 <= max_words)) {
        words += items[j].bytes / 4 + 2;
        ++j;
      }
      scatter({items.data() + i, j - i}, i == 0 ? std::span<const VkBufferImageCopy>(copies) : std::span<const VkBufferImageCopy>(),
              zeros_.handle());
      i = j;
    } while (i < items.size());
    drain();
  }

 private:
  static constexpr int64_t kZeros = -1;
  struct Item {
    int64_t virt, bytes, source;  // source: staging byte or kZeros
  };

  // [at, at + n): whole blocks as copy regions (from `source` + offset, or all from the zero
  // block when source == kZeros) when `whole_blocks`, the rest as scatter items.
  void split(int64_t at, int64_t n, bool whole_blocks, int64_t source, std::vector<Item>& items,
             std::vector<VkBufferImageCopy>& copies) const {
    const int64_t B = granularity_, end = at + n;
    const int64_t b0 = (at + B - 1) / B, b1 = end / B;  // whole blocks [b0, b1)
    auto item = [&](int64_t lo, int64_t hi) {
      if (hi > lo) items.push_back({lo, hi - lo, source == kZeros ? kZeros : source + (lo - at)});
    };
    if (!whole_blocks || b0 >= b1) {
      item(at, end);
      return;
    }
    item(at, b0 * B);
    for (int64_t b = b0; b < b1; ++b) {
      const vk::SparseImageBind r = block_region(b);
      VkBufferImageCopy c{};
      c.bufferOffset = source == kZeros ? 0 : VkDeviceSize(source + (b * B - at));
      c.bufferRowLength = block_.width;
      c.bufferImageHeight = block_.height;
      c.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, r.layer, 1};
      c.imageOffset = r.offset;
      c.imageExtent = r.extent;
      copies.push_back(c);
    }
    item(b1 * B, end);
  }

  vk::SparseImageBind block_region(int64_t block) const {
    const int64_t per_layer = int64_t(blocks_x_) * blocks_y_;
    const int64_t layer = block / per_layer, r = block % per_layer;
    vk::SparseImageBind e;
    e.level = 0;
    e.layer = uint32_t(layer);
    e.offset = {int32_t((r % blocks_x_) * block_.width), int32_t((r / blocks_x_) * block_.height), 0};
    e.extent = {block_.width, block_.height, 1};
    return e;
  }

  void geometry(KernelPush& p) const override {
    p.block_w = block_.width;
    p.block_h = block_.height;
    p.blocks_x = blocks_x_;
    p.blocks_y = blocks_y_;
  }

  Window window_of(int64_t) const override { return {0, max_virtual_bytes_}; }

  VkDescriptorSet source_set(vk::KernelSets& sets, const Window&, VkBuffer out, VkBuffer runs) const override {
    const vk::BufferWindow b[2] = {{out, 0, VK_WHOLE_SIZE}, {runs, 0, VK_WHOLE_SIZE}};
    return sets.allocate(b, {&view_, 1});
  }

  void ensure_staging(int64_t n) {
    if (int64_t(staging_.size()) < n)
      staging_ = vk::Buffer::create(dev(), VkDeviceSize(std::max<int64_t>(n, 1 << 20)),
                                    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                                    vk::MemoryUse::upload);
  }

  // One submission: the whole-block copies, then the items as run records, cut into dispatches
  // wherever two consecutive items touch the same word (the shader read-modify-writes partial
  // words).
  void scatter(std::span<const Item> items, std::span<const VkBufferImageCopy> copies, VkBuffer copy_source) {
    const VkDeviceSize rec_bytes = std::max<size_t>(items.size(), 1) * 32;
    if (runs_.size() < rec_bytes)
      runs_ = vk::Buffer::create(dev(), std::max<VkDeviceSize>(rec_bytes, 64 << 10), VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                 vk::MemoryUse::upload);
    auto* rec = static_cast<uint32_t*>(runs_.mapped());
    uint32_t prefix = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const Item& it = items[i];
      const int64_t lead = it.virt & 3;
      rec[8 * i + 0] = uint32_t(it.virt >> 2);
      rec[8 * i + 1] = uint32_t(lead);
      rec[8 * i + 2] = uint32_t(it.bytes);
      rec[8 * i + 3] = it.source == kZeros ? 0xffffffffu : uint32_t(it.source);
      rec[8 * i + 4] = prefix;
      rec[8 * i + 5] = rec[8 * i + 6] = rec[8 * i + 7] = 0;
      prefix += uint32_t((lead + it.bytes + 3) / 4);
    }
    scatter_sets_->reset();
    const vk::BufferWindow b[2] = {{staging_.handle(), 0, VK_WHOLE_SIZE}, {runs_.handle(), 0, VK_WHOLE_SIZE}};
    const VkDescriptorSet set = scatter_sets_->allocate(b, {&view_, 1});
    VkCommandBuffer cb = writer_.begin();
    vk::memory_barrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    if (!copies.empty()) {  // in TRANSFER_DST_OPTIMAL (GENERAL is slower on some GPUs, validation warns)
      vk::image_barrier(cb, image_->handle(), 0, 1, VK_IMAGE_LAYOUT_GENERAL, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                        VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
      vkCmdCopyBufferToImage(cb, copy_source, image_->handle(), VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                             uint32_t(copies.size()), copies.data());
      vk::image_barrier(cb, image_->handle(), 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, VK_IMAGE_LAYOUT_GENERAL,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    }
    for (size_t i = 0; i < items.size();) {
      size_t j = i + 1;
      while (j < items.size() && items[j].virt / 4 > (items[j - 1].virt + items[j - 1].bytes - 1) / 4) ++j;
      KernelPush push;
      push.run_first = uint32_t(i);
      push.run_count = uint32_t(j - i);
      push.first = rec[8 * i + 4];
      push.end = j < items.size() ? rec[8 * j + 4] : prefix;
      geometry(push);
      if (i > 0)
        vk::memory_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      scatter_->dispatch(cb, set, &push, uint32_t(std::min<int64_t>((int64_t(push.end - push.first) + 63) / 64, 4096)));
      i = j;
    }
    submit(writer_);
  }

  vk::Commands writer_;
  vk::Fence bind_fence_;
  std::unique_ptr<vk::ComputePipeline> scatter_;
  std::unique_ptr<vk::KernelSets> scatter_sets_;
  vk::Buffer staging_, runs_, zeros_;
  std::unique_ptr<vk::SparseImage> image_;
  VkImageView view_ = VK_NULL_HANDLE;  // owned by image_
  VkExtent3D block_{};
  uint32_t per_row_max_ = 0, rows_max_ = 0;
  uint32_t blocks_x_ = 1, blocks_y_ = 1;
  int64_t blocks_per_page_ = 1;
  int64_t max_virtual_bytes_ = 0;
};

}  // namespace
}  // namespace vulkan_store

std::unique_ptr<StoreBackend> make_vulkan_image_store_backend(std::string* why, const VulkanStoreOptions& options) {
  try {
    auto device = std::make_unique<vulkan_store::StoreDevice>(options, vulkan_store::Residency::image2d);
    return std::make_unique<vulkan_store::VulkanImageBackend>(std::move(device));
  } catch (const Error& e) {
    if (why) *why = e.what();
    return nullptr;
  }
}

}  // namespace fovea
