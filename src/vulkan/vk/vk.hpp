// vulkan/vk/vk.hpp — fovea's thin RAII layer over the Vulkan C API (private to the library).
//
//   vk::Instance inst({.validation = true});                 // debug messenger counts errors
//   vk::PhysicalDeviceInfo pd = vk::select_device(inst, "");  // "" best, "1" index, "llvm" name
//   vk::Device dev(inst, pd, {.want_sparse = true});          // compute (+transfer, +sparse) queues
//   vk::Buffer staging = vk::Buffer::create(dev, bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
//                                           vk::MemoryUse::upload);
//   std::memcpy(staging.mapped(), src, bytes);
//   vk::Commands cmds(dev, dev.compute());                    // pool + one buffer + fence
//   VkCommandBuffer cb = cmds.begin();  ...record...  cmds.submit_and_wait();
//   if (inst.validation_errors()) ...                         // tests fail on any message
//
// Rules of the layer:
//   * every handle has exactly one owner, a move-only class whose destructor frees it;
//   * every VkResult is checked with vk::check(), which throws fovea::Error with the call
//     and the result's name: OUT_OF_*_MEMORY -> Errc::out_of_memory, DEVICE_LOST and other
//     failures -> Errc::device, FEATURE/FORMAT/EXTENSION_NOT_PRESENT -> Errc::unsupported;
//   * capabilities (format features, limits, queue flags, memory types) are queried and a
//     missing one throws Error(unsupported) naming it; nothing asserts on device behaviour.
// Only compiled when FOVEA_HAVE_VULKAN is defined (CMake found the headers, loader, glslc).
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fovea/error.hpp"

namespace fovea::vk {

// ---- results -------------------------------------------------------------------------------

std::string_view result_name(VkResult r);  // "VK_ERROR_OUT_OF_DEVICE_MEMORY", ...
Errc errc_of(VkResult r);
// Throws Error(errc_of(r), "vulkan: <what> failed: <result name>") unless r is VK_SUCCESS
// (or another non-negative status: VK_INCOMPLETE etc. are not errors).
void check(VkResult r, const char* what);

// ---- instance ------------------------------------------------------------------------------

struct InstanceOptions {
  // VK_LAYER_KHRONOS_validation + a VK_EXT_debug_utils messenger. If the layer is not
  // installed, Instance() throws Error(unsupported) saying so (tests then skip or fail).
  bool validation = false;
  std::vector<const char*> extensions = {};  // extra instance extensions (must be present)
};

class Instance {
 public:
  explicit Instance(const InstanceOptions& options = {});
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  uint32_t api_version() const { return api_version_; }  // the version the instance asked for
  bool validation() const { return validation_; }

  // Validation messages seen so far (VALIDATION or PERFORMANCE type, WARNING or ERROR
  // severity). Thread-safe. Tests assert validation_errors() == 0 at the end.
  int validation_errors() const { return errors_.load(); }
  std::vector<std::string> validation_messages() const;
  void clear_validation_messages();

  // Called by the debug messenger; public only for the C callback.
  void on_message(const char* text);

 private:
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  uint32_t api_version_ = VK_API_VERSION_1_1;
  bool validation_ = false;
  std::atomic<int> errors_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

// ---- physical devices ------------------------------------------------------------------------

struct PhysicalDeviceInfo {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  int index = 0;  // position in vkEnumeratePhysicalDevices
  VkPhysicalDeviceProperties properties{};
  VkPhysicalDeviceFeatures features{};
  VkPhysicalDeviceMemoryProperties memory{};
  std::vector<VkQueueFamilyProperties> queue_families;
  std::vector<std::string> extensions;
  bool has_extension(std::string_view name) const;
  std::string name() const { return properties.deviceName; }
  std::string_view type_name() const;  // "discrete", "integrated", "virtual", "cpu", "other"
  bool is_software() const { return properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU; }
  uint64_t device_local_bytes() const;  // sum of DEVICE_LOCAL heaps
};

std::vector<PhysicalDeviceInfo> enumerate_devices(const Instance& instance);

// selector "": the best device (discrete > integrated > virtual > cpu > other, then the
// earlier index); a decimal number: that index; anything else: the first device whose name
// contains it (case-insensitive). Throws Error(device) when there is no device or nothing
// matches (the message lists the devices).
PhysicalDeviceInfo select_device(const Instance& instance, const std::string& selector);

// ---- device and queues -----------------------------------------------------------------------

struct Queue {
  VkQueue handle = VK_NULL_HANDLE;
  uint32_t family = 0;
  VkQueueFlags flags = 0;
};

struct DeviceOptions {
  // Enable sparseBinding / sparseResidencyBuffer / sparseResidencyImage2D when the device has
  // them, and create a queue on a SPARSE_BINDING family. Never required: check
  // Device::sparse_queue() and the enabled features.
  bool want_sparse = false;
  std::vector<const char*> extensions = {};  // required extra device extensions
  // Added for the shading-rate render (shading_rate.cpp): a pNext chain of extension feature
  // structs (e.g. VkPhysicalDeviceFragmentShadingRateFeaturesKHR) passed to vkCreateDevice
  // as is, next to the core features above. Must not contain VkPhysicalDeviceFeatures2.
  const void* features_next = nullptr;
};

class Device {
 public:
  Device(Instance& instance, const PhysicalDeviceInfo& physical, const DeviceOptions& options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  VkPhysicalDevice physical() const { return info_.handle; }
  const PhysicalDeviceInfo& info() const { return info_; }
  const VkPhysicalDeviceLimits& limits() const { return info_.properties.limits; }
  const VkPhysicalDeviceFeatures& enabled_features() const { return enabled_; }
  Instance& instance() const { return *instance_; }

  // Always present: a queue with COMPUTE (the first family with COMPUTE|GRAPHICS if any,
  // else COMPUTE). Transfer: a dedicated TRANSFER family if present, else the compute queue.
  // Sparse: a queue on a family with SPARSE_BINDING, or nullptr (want_sparse false or none).
  const Queue& compute_queue() const { return compute_; }
  const Queue& transfer_queue() const { return transfer_; }
  const Queue* sparse_queue() const { return has_sparse_queue_ ? &sparse_ : nullptr; }

  // A memory type index allowed by type_bits with all `required` flags, preferring one that
  // also has `preferred`. Throws Error(unsupported) when none has `required`.
  uint32_t memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                       VkMemoryPropertyFlags preferred = 0) const;
  VkMemoryPropertyFlags memory_flags(uint32_t type_index) const;

  VkFormatProperties format_properties(VkFormat format) const;
  // Throws Error(unsupported, "<format name> lacks <what>") unless optimal-tiling features
  // include all of `features`.
  void require_format(VkFormat format, VkFormatFeatureFlags features, const char* what) const;

  void wait_idle() const;

 private:
  Instance* instance_;
  PhysicalDeviceInfo info_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkPhysicalDeviceFeatures enabled_{};
  Queue compute_, transfer_, sparse_;
  bool has_sparse_queue_ = false;
};

// ---- memory, buffers, images ----------------------------------------------------------------

enum class MemoryUse {
  device,    // DEVICE_LOCAL, not mapped
  upload,    // HOST_VISIBLE | HOST_COHERENT, mapped; prefers DEVICE_LOCAL (rebar / UMA)
  readback,  // HOST_VISIBLE | HOST_COHERENT, mapped; prefers HOST_CACHED
};

class Memory {
 public:
  Memory() = default;
  // vkAllocateMemory of requirements.size from a type chosen for `use`; maps host memory.
  static Memory allocate(const Device& device, const VkMemoryRequirements& requirements, MemoryUse use);
  static Memory allocate_type(const Device& device, VkDeviceSize size, uint32_t type_index, bool map);
  ~Memory() { reset(); }
  Memory(Memory&& o) noexcept { *this = std::move(o); }
  Memory& operator=(Memory&& o) noexcept;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  void reset();

  VkDeviceMemory handle() const { return memory_; }
  VkDeviceSize size() const { return size_; }
  uint32_t type_index() const { return type_; }
  void* mapped() const { return mapped_; }  // nullptr for device memory

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  VkDeviceSize size_ = 0;
  uint32_t type_ = 0;
  void* mapped_ = nullptr;
};

class Buffer {
 public:
  Buffer() = default;
  // A buffer with its own memory (dedicated allocation). Size 0 is rounded up to 4 bytes.
  static Buffer create(const Device& device, VkDeviceSize size, VkBufferUsageFlags usage, MemoryUse use);
  // A buffer without memory (e.g. sparse: pass VK_BUFFER_CREATE_SPARSE_* flags); bind it yourself.
  static Buffer create_unbound(const Device& device, VkDeviceSize size, VkBufferUsageFlags usage,
                               VkBufferCreateFlags flags);
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void reset();

  VkBuffer handle() const { return buffer_; }
  VkDeviceSize size() const { return size_; }
  void* mapped() const { return memory_.mapped(); }
  const Memory& memory() const { return memory_; }
  VkMemoryRequirements requirements() const;

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceSize size_ = 0;
  Memory memory_;
};

struct ImageDesc {
  VkFormat format = VK_FORMAT_R8_UNORM;
  uint32_t width = 1, height = 1;
  uint32_t layers = 1;
  uint32_t levels = 1;
  VkImageUsageFlags usage = VK_IMAGE_USAGE_SAMPLED_BIT;
  VkImageCreateFlags flags = 0;  // e.g. MUTABLE_FORMAT | EXTENDED_USAGE, SPARSE_*
};

class Image {
 public:
  Image() = default;
  // Checks extents and layers against the device limits (Error(limit_exceeded)), creates the
  // image in DEVICE_LOCAL memory (Error(out_of_memory) when refused) and a 2D-array view of
  // every level and layer (without STORAGE usage when flags has EXTENDED_USAGE). Initial
  // layout UNDEFINED.
  static Image create(const Device& device, const ImageDesc& desc);
  // The checks create() makes before any driver call, without throwing: the Error create()
  // would throw for desc's extents, layers, levels or size, or nullopt when it may be created
  // (the allocation itself can still be refused).
  static std::optional<Error> check_desc(const Device& device, const ImageDesc& desc);
  // Without memory and without a view (sparse images: bind, then call create_view()).
  static Image create_unbound(const Device& device, const ImageDesc& desc);
  ~Image() { reset(); }
  Image(Image&& o) noexcept { *this = std::move(o); }
  Image& operator=(Image&& o) noexcept;
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;
  void reset();

  VkImage handle() const { return image_; }
  VkImageView view() const { return view_; }  // all levels and layers, desc.format
  const ImageDesc& desc() const { return desc_; }
  // A 2D-array view of [base_level, base_level + levels), all layers, in `format` (the image
  // must be MUTABLE_FORMAT for a different one). usage != 0 restricts the view's usage
  // (VkImageViewUsageCreateInfo), needed when the image has usages `format` lacks
  // (EXTENDED_USAGE images). Owned by this Image.
  VkImageView create_view(VkFormat format, uint32_t base_level, uint32_t levels, VkImageUsageFlags usage = 0);

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  VkImage image_ = VK_NULL_HANDLE;
  VkImageView view_ = VK_NULL_HANDLE;
  std::vector<VkImageView> extra_views_;
  ImageDesc desc_;
  Memory memory_;
};

// A layout transition + execution/memory dependency for `levels` levels from base_level, all
// layers, color aspect.
void image_barrier(VkCommandBuffer cb, VkImage image, uint32_t base_level, uint32_t levels,
                   VkImageLayout old_layout, VkImageLayout new_layout, VkPipelineStageFlags src_stage,
                   VkAccessFlags src_access, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access);
void memory_barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst_access);

// ---- commands --------------------------------------------------------------------------------

class Fence {
 public:
  explicit Fence(const Device& device, bool signaled = false);
  ~Fence();
  Fence(const Fence&) = delete;
  Fence& operator=(const Fence&) = delete;
  VkFence handle() const { return fence_; }
  // Waits up to timeout_ns (default 60 s): Error(device, "... timed out") after that.
  void wait(uint64_t timeout_ns = 60'000'000'000ull);
  void reset();

 private:
  VkDevice device_;
  VkFence fence_ = VK_NULL_HANDLE;
};

// A command pool on one queue family with one primary command buffer and a fence: the
// record-submit-wait cycle every operation here uses.
class Commands {
 public:
  Commands(const Device& device, const Queue& queue);
  ~Commands();
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  VkCommandBuffer begin();       // resets the pool, begins ONE_TIME_SUBMIT
  void submit_and_wait();        // ends, submits, waits on the fence
  VkCommandBuffer buffer() const { return cb_; }

 private:
  const Device* device_;
  Queue queue_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  Fence fence_;
};

// ---- compute kernels -------------------------------------------------------------------------

// One binding of a kernel's descriptor set 0 (binding index = position in the list).
struct Binding {
  VkDescriptorType type;
  VkBuffer buffer = VK_NULL_HANDLE;        // STORAGE_BUFFER / UNIFORM_BUFFER
  VkImageView view = VK_NULL_HANDLE;       // STORAGE_IMAGE / COMBINED_IMAGE_SAMPLER / SAMPLED_IMAGE
  VkSampler sampler = VK_NULL_HANDLE;      // COMBINED_IMAGE_SAMPLER
  VkImageLayout layout = VK_IMAGE_LAYOUT_GENERAL;
  static Binding storage_buffer(VkBuffer b) { return {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, b}; }
  static Binding storage_image(VkImageView v) {
    return {VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, VK_NULL_HANDLE, v, VK_NULL_HANDLE, VK_IMAGE_LAYOUT_GENERAL};
  }
  static Binding sampled(VkImageView v, VkSampler s, VkImageLayout l) {
    return {VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER, VK_NULL_HANDLE, v, s, l};
  }
};

// A compute pipeline from embedded SPIR-V: set-0 layout from `types`, one push-constant
// range of push_bytes (<= limits.maxPushConstantsSize, checked), entry point "main". It owns
// no descriptor sets, so one pipeline can serve several threads, each allocating its sets
// from its own pool (ComputeKernel below, or vk::KernelSets in vk_sparse.hpp).
class ComputePipeline {
 public:
  ComputePipeline(const Device& device, std::span<const uint32_t> spirv, std::vector<VkDescriptorType> types,
                  uint32_t push_bytes, const char* name);
  ~ComputePipeline();
  ComputePipeline(const ComputePipeline&) = delete;
  ComputePipeline& operator=(const ComputePipeline&) = delete;
  const Device& device() const { return *device_; }
  const std::vector<VkDescriptorType>& types() const { return types_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  const std::string& name() const { return name_; }
  // Binds the pipeline and `set`, pushes the constants, dispatches (checked against limits).
  void dispatch(VkCommandBuffer cb, VkDescriptorSet set, const void* push, uint32_t groups_x, uint32_t groups_y = 1,
                uint32_t groups_z = 1) const;
  // A descriptor pool for up to max_sets sets of this pipeline's layout; the caller destroys it.
  VkDescriptorPool create_pool(uint32_t max_sets) const;

 private:
  void destroy();
  const Device* device_;
  std::string name_;
  std::vector<VkDescriptorType> types_;
  uint32_t push_bytes_ = 0;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

// A ComputePipeline with its own descriptor pools, for one thread.
// record() allocates a descriptor set from the kernel's own pool (max_sets per reset),
// writes `bindings`, pushes constants and dispatches. reset_sets() frees all sets: call it
// only after the command buffers that used them completed.
class ComputeKernel {
 public:
  ComputeKernel(const Device& device, std::span<const uint32_t> spirv, std::vector<VkDescriptorType> types,
                uint32_t push_bytes, uint32_t max_sets = 64, const char* name = "kernel");
  ~ComputeKernel();
  ComputeKernel(const ComputeKernel&) = delete;
  ComputeKernel& operator=(const ComputeKernel&) = delete;

  void record(VkCommandBuffer cb, std::span<const Binding> bindings, const void* push, uint32_t groups_x,
              uint32_t groups_y = 1, uint32_t groups_z = 1);
  void reset_sets();

  // ---- descriptor-set cache (added after 369ed23; record() and reset_sets() unchanged) ----
  // record() with a set kept for the next call with the same bindings: writing a descriptor
  // set costs ~50 µs on lavapipe, per dispatch. Sets live in a second pool of max_sets sets;
  // once it is full, record_cached() falls back to record(). Handle values are reused by new
  // objects, so call forget_cached() when any handle that may be in a cached set has been
  // destroyed, and only when no command buffer using a cached set is recording or pending.
  void record_cached(VkCommandBuffer cb, std::span<const Binding> bindings, const void* push, uint32_t groups_x,
                     uint32_t groups_y = 1, uint32_t groups_z = 1);
  void forget_cached();
  size_t cached_sets() const { return cached_.size(); }

 private:
  struct CachedSet {
    std::vector<Binding> bindings;
    VkDescriptorSet set = VK_NULL_HANDLE;
  };
  void check_bindings(std::span<const Binding> bindings) const;
  // A set from `pool` holding `bindings`.
  VkDescriptorSet new_set(VkDescriptorPool pool, std::span<const Binding> bindings);
  void write_set(VkDescriptorSet set, std::span<const Binding> bindings);
  void destroy();
  ComputePipeline pipeline_;
  uint32_t max_sets_ = 0;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkDescriptorPool cache_pool_ = VK_NULL_HANDLE;
  std::vector<CachedSet> cached_;
};

class Sampler {
 public:
  // CLAMP_TO_EDGE on every axis, normalized coordinates, LOD range [0, max_lod].
  Sampler(const Device& device, VkFilter filter, VkSamplerMipmapMode mip_mode, float max_lod);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  VkSampler handle() const { return sampler_; }

 private:
  VkDevice device_;
  VkSampler sampler_ = VK_NULL_HANDLE;
};

std::string_view format_name(VkFormat f);
// Bytes per texel of the uncompressed formats fovea uses; 0 for any other format.
uint32_t texel_bytes(VkFormat f);

}  // namespace fovea::vk
