// What both Vulkan store backends share: the device, validation messages, the pool, gathers.
#include <algorithm>
#include <cstring>

#include "vulkan/store/vulkan_store.hpp"

namespace fovea::vulkan_store {

// ---- device ----------------------------------------------------------------------------------

namespace {

bool has_residency(const vk::PhysicalDeviceInfo& d, Residency need) {
  const bool queue = std::any_of(d.queue_families.begin(), d.queue_families.end(), [](const auto& f) {
    return f.queueCount > 0 && (f.queueFlags & VK_QUEUE_SPARSE_BINDING_BIT);
  });
  return queue && d.features.sparseBinding &&
         (need == Residency::buffer ? d.features.sparseResidencyBuffer : d.features.sparseResidencyImage2D);
}

const char* feature_name(Residency need) {
  return need == Residency::buffer ? "sparseResidencyBuffer" : "sparseResidencyImage2D";
}

}  // namespace

StoreDevice::StoreDevice(const VulkanStoreOptions& options, Residency need) : log_(options.validation_log) {
  try {
    instance_ = std::make_unique<vk::Instance>(vk::InstanceOptions{.validation = options.validation});
  } catch (const Error& e) {
    if (std::string_view(e.what()).find("VK_ERROR_INCOMPATIBLE_DRIVER") == std::string_view::npos) throw;
    throw Error(Errc::device, "vulkan: no Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER)");
  }
  vk::PhysicalDeviceInfo pd;
  if (!options.device.empty()) {
    pd = vk::select_device(*instance_, options.device);
    if (!has_residency(pd, need))
      throw Error(Errc::unsupported, "vulkan: " + pd.name() + " lacks sparse residency (sparseBinding, " +
                                         feature_name(need) + " and a SPARSE_BINDING queue are needed)");
  } else {
    // The best device (select_device's order) among those that have the feature.
    const std::vector<vk::PhysicalDeviceInfo> all = vk::enumerate_devices(*instance_);
    std::string names;
    int best_rank = 99;
    for (const vk::PhysicalDeviceInfo& d : all) {
      names += (names.empty() ? "" : ", ") + d.name();
      if (d.properties.apiVersion < VK_API_VERSION_1_1 || !has_residency(d, need)) continue;
      int rank = 4;
      switch (d.properties.deviceType) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: rank = 0; break;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: rank = 1; break;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: rank = 2; break;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: rank = 3; break;
        default: break;
      }
      if (rank < best_rank) {
        best_rank = rank;
        pd = d;
      }
    }
    if (all.empty()) throw Error(Errc::device, "vulkan: no Vulkan device found");
    if (best_rank == 99)
      throw Error(Errc::unsupported, std::string("vulkan: no device has sparse residency (sparseBinding, ") +
                                         feature_name(need) + " and a SPARSE_BINDING queue; devices: " + names + ")");
  }
  device_ = std::make_unique<vk::Device>(*instance_, pd, vk::DeviceOptions{.want_sparse = true});
  if (!device_->sparse_queue())
    throw Error(Errc::unsupported, "vulkan: " + pd.name() + " gave no sparse-binding queue");
}

StoreDevice::~StoreDevice() {
  device_.reset();  // messages from vkDestroyDevice and the objects before it count too
  drain();
}

void StoreDevice::drain() const {
  if (!instance_->validation() || instance_->validation_errors() == 0) return;
  std::lock_guard drain_lock(drain_mutex_);
  const std::vector<std::string> msgs = instance_->validation_messages();
  const int n = instance_->validation_errors();
  instance_->clear_validation_messages();
  if (!log_) return;
  // The instance keeps the first 64 texts of its n messages: the count stays exact.
  for (int i = 0; i < n; ++i)
    log_->add(size_t(i) < msgs.size() ? msgs[size_t(i)] : std::string("(message text not kept)"));
}

// ---- the shared backend part -----------------------------------------------------------------

// Most descriptor sets one gather submission uses (one per window segment).
constexpr uint32_t kMaxSegments = 32;
constexpr int64_t kDefaultBatchBytes = 64 << 20;

struct VulkanStoreBase::GatherContext {
  GatherContext(const vk::Device& d, const vk::ComputePipeline& k) : cmds(d, d.compute_queue()), sets(d, k, kMaxSegments) {}
  vk::Commands cmds;
  vk::KernelSets sets;
  vk::Buffer out;   // readback: the packed output of one batch
  vk::Buffer runs;  // upload: run records (uvec4)
};

struct VulkanStoreBase::Piece {
  Window window;
  int64_t src = 0;    // virtual byte
  int64_t dst = 0;    // byte in the batch's output
  int64_t bytes = 0;
};

VulkanStoreBase::VulkanStoreBase(std::unique_ptr<StoreDevice> device, std::span<const uint32_t> gather_spirv,
                                 VkDescriptorType source_type, const char* gather_name)
    : device_(std::move(device)) {
  gather_kernel_ = std::make_unique<vk::ComputePipeline>(
      dev(), gather_spirv,
      std::vector<VkDescriptorType>{source_type, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER},
      uint32_t(sizeof(KernelPush)), gather_name);
  set_gather_batch_bytes(0);
}

VulkanStoreBase::~VulkanStoreBase() = default;

void VulkanStoreBase::set_gather_batch_bytes(int64_t bytes) {
  // The output is one storage-buffer descriptor: at most maxStorageBufferRange.
  const int64_t range = int64_t(dev().limits().maxStorageBufferRange) & ~int64_t(3);
  batch_bytes_ = std::max<int64_t>(4, std::min(bytes > 0 ? bytes : kDefaultBatchBytes, range) & ~int64_t(3));
}

void VulkanStoreBase::allocate_pool(int64_t pages, int64_t page_bytes, uint32_t memory_type_bits) {
  // maxMemoryAllocationSize (Vulkan 1.1): 2 GiB on lavapipe; chunks of 256 MiB at most anyway,
  // so a big pool does not need one huge allocation.
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &m3;
  vkGetPhysicalDeviceProperties2(dev().physical(), &p2);
  const int64_t max_alloc = std::min<int64_t>(int64_t(m3.maxMemoryAllocationSize), int64_t(256) << 20);
  chunk_pages_ = std::max<int64_t>(1, max_alloc / page_bytes);
  if (page_bytes > int64_t(m3.maxMemoryAllocationSize))
    throw Error(Errc::limit_exceeded, "vulkan token store: a page of " + std::to_string(page_bytes) +
                                          " bytes exceeds the device's maxMemoryAllocationSize");
  const uint32_t type = dev().memory_type(memory_type_bits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  chunks_.clear();
  for (int64_t first = 0; first < pages; first += chunk_pages_) {
    const int64_t n = std::min(chunk_pages_, pages - first);
    chunks_.push_back(vk::Memory::allocate_type(dev(), VkDeviceSize(n * page_bytes), type, false));
  }
  page_bytes_ = page_bytes;
}

VulkanStoreBase::PhysAddr VulkanStoreBase::phys(int64_t page) const {
  const int64_t c = page / chunk_pages_, in = page % chunk_pages_;
  return {chunks_[size_t(c)].handle(), VkDeviceSize(in * page_bytes_), chunk_pages_ - in};
}

void VulkanStoreBase::submit(vk::Commands& cmds) const {
  std::lock_guard lock(queue_mutex());
  cmds.submit_and_wait();
}

void VulkanStoreBase::gather(std::span<const ByteRun> runs, std::byte* dst) const {
  // Take an idle context, or make one: concurrent gathers each record into their own.
  std::unique_ptr<GatherContext> ctx;
  {
    std::lock_guard lock(contexts_mutex_);
    if (!contexts_.empty()) {
      ctx = std::move(contexts_.back());
      contexts_.pop_back();
    }
  }
  if (!ctx) ctx = std::make_unique<GatherContext>(dev(), *gather_kernel_);

  std::vector<Piece> batch;
  int64_t batch_used = 0, done = 0;
  uint32_t segments = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    run_batch(*ctx, batch, batch_used, dst + done);
    done += batch_used;
    batch.clear();
    batch_used = 0;
    segments = 0;
  };
  for (const ByteRun& r : runs) {
    int64_t at = r.virt_byte, left = r.bytes;
    while (left > 0) {
      const Window w = window_of(at);
      const bool new_segment = batch.empty() || batch.back().window.base != w.base;
      if (new_segment && segments == kMaxSegments) {
        flush();
        continue;
      }
      segments += new_segment;
      const int64_t take = std::min({left, w.end - at, batch_bytes_ - batch_used});
      batch.push_back({w, at, batch_used, take});
      batch_used += take;
      at += take;
      left -= take;
      if (batch_used == batch_bytes_) flush();
    }
  }
  flush();
  drain();
  std::lock_guard lock(contexts_mutex_);
  contexts_.push_back(std::move(ctx));
}

void VulkanStoreBase::run_batch(GatherContext& ctx, const std::vector<Piece>& pieces, int64_t bytes,
                                std::byte* dst) const {
  const VkDeviceSize out_bytes = VkDeviceSize((bytes + 3) & ~int64_t(3));
  if (ctx.out.size() < out_bytes)
    ctx.out = vk::Buffer::create(dev(), std::max<VkDeviceSize>(out_bytes, 1 << 20), VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                 vk::MemoryUse::readback);
  const VkDeviceSize run_bytes = pieces.size() * 16;
  if (ctx.runs.size() < run_bytes)
    ctx.runs = vk::Buffer::create(dev(), std::max<VkDeviceSize>(run_bytes, 64 << 10), VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                  vk::MemoryUse::upload);
  auto* rec = static_cast<uint32_t*>(ctx.runs.mapped());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t rel = pieces[i].src - pieces[i].window.base;
    rec[4 * i + 0] = uint32_t(rel >> 2);
    rec[4 * i + 1] = uint32_t(rel & 3);
    rec[4 * i + 2] = uint32_t(pieces[i].dst);
    rec[4 * i + 3] = uint32_t(pieces[i].bytes);
  }
  VkCommandBuffer cb = ctx.cmds.begin();
  // Earlier submissions (writes, fills) happen-before this one's reads.
  vk::memory_barrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  for (size_t i = 0; i < pieces.size();) {
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].window.base == pieces[i].window.base) ++j;
    KernelPush push;
    push.run_first = uint32_t(i);
    push.run_count = uint32_t(j - i);
    push.first = uint32_t(pieces[i].dst >> 2);
    push.end = uint32_t((pieces[j - 1].dst + pieces[j - 1].bytes + 3) >> 2);
    geometry(push);
    const VkDescriptorSet set = source_set(ctx.sets, pieces[i].window, ctx.out.handle(), ctx.runs.handle());
    // 64 invocations a group, 32 words (gather_common.glsl kChunk) an invocation.
    const uint32_t groups = uint32_t(std::min<int64_t>((int64_t(push.end - push.first) + 2047) / 2048, 4096));
    if (i > 0)  // segments may share an output word, which the shader read-modify-writes
      vk::memory_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    gather_kernel_->dispatch(cb, set, &push, groups);
    i = j;
  }
  vk::memory_barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                     VK_ACCESS_HOST_READ_BIT);
  try {
    submit(ctx.cmds);
  } catch (...) {
    ctx.sets.reset();
    throw;
  }
  ctx.sets.reset();
  std::memcpy(dst, ctx.out.mapped(), size_t(bytes));
}

}  // namespace fovea::vulkan_store
