// vulkan/store/vulkan_store.hpp — private to the Vulkan store backends (and their tests).
//
// Both backends ("vulkan": sparse buffer, "vulkan-image": sparse 2D image) are a
// VulkanStoreBase: their own VkInstance/VkDevice (StoreDevice), a physical pool of device
// memory in chunks of whole pages, and the gather machinery: byte runs are cut at descriptor
// windows and output batches, uploaded as run records, and copied by a compute shader into a
// host-visible output, one submission per batch.
//
// Threads: gather() may run on any number of threads at once (each takes a GatherContext of
// its own: command pool, descriptor pool, output and run buffers); write/fill_zero/bind run one
// at a time (the TokenStore's writer lock, plus a writer mutex here). Every submission to a
// queue and the wait for it happen under StoreDevice::queue_mutex(): Vulkan queues are
// externally synchronised, and lavapipe gives one queue for compute and sparse binding.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fovea/store.hpp"
#include "vulkan/vk/vk.hpp"
#include "vulkan/vk/vk_sparse.hpp"

namespace fovea::vulkan_store {

enum class Residency { buffer, image2d };

// An instance and a device with a sparse-binding queue and the residency feature `need`.
// With options.device == "" the best device that has the feature is taken (discrete first).
// Throws Error(device/unsupported) naming what is missing.
class StoreDevice {
 public:
  StoreDevice(const VulkanStoreOptions& options, Residency need);
  ~StoreDevice();
  StoreDevice(const StoreDevice&) = delete;
  StoreDevice& operator=(const StoreDevice&) = delete;
  vk::Instance& instance() const { return *instance_; }
  const vk::Device& device() const { return *device_; }
  std::mutex& queue_mutex() const { return queue_mutex_; }
  // Moves new validation messages into options.validation_log (after each operation, and
  // when the device is destroyed, so messages from vkDestroy* count too).
  void drain() const;

 private:
  std::unique_ptr<vk::Instance> instance_;
  std::unique_ptr<vk::Device> device_;
  std::shared_ptr<ValidationLog> log_;
  mutable std::mutex queue_mutex_;
  mutable std::mutex drain_mutex_;  // read-and-clear of the instance's messages is one step
};

// Push constants of gather_*.comp and scatter_image.comp (32 bytes).
struct KernelPush {
  uint32_t run_first = 0, run_count = 0;
  uint32_t first = 0, end = 0;  // gather: output words; scatter: invocations
  uint32_t block_w = 0, block_h = 0, blocks_x = 0, blocks_y = 0;
};

class VulkanStoreBase : public StoreBackend {
 public:
  ~VulkanStoreBase() override;
  int64_t page_granularity_bytes() const override { return granularity_; }
  void gather(std::span<const ByteRun> runs, std::byte* dst) const override;

  // Test hooks: a smaller output batch (bytes, a multiple of 4) and, for the buffer backend,
  // a smaller descriptor window, so that splitting is exercised at small sizes. 0 restores.
  void set_gather_batch_bytes(int64_t bytes);
  virtual void set_window_bytes(int64_t bytes) {}

 protected:
  VulkanStoreBase(std::unique_ptr<StoreDevice> device, std::span<const uint32_t> gather_spirv,
                  VkDescriptorType source_type, const char* gather_name);

  // The virtual bytes [base, end) one descriptor of the source reaches from `virt_byte`.
  struct Window {
    int64_t base = 0, end = 0;
  };
  virtual Window window_of(int64_t virt_byte) const = 0;
  // A descriptor set for the gather kernel: binding 0 the source window, 1 out, 2 runs.
  virtual VkDescriptorSet source_set(vk::KernelSets& sets, const Window& w, VkBuffer out, VkBuffer runs) const = 0;
  virtual void geometry(KernelPush& push) const {}

  // The physical pool: `pages` pages of page_bytes in chunks of whole pages, each chunk at
  // most maxMemoryAllocationSize (and 256 MiB).
  void allocate_pool(int64_t pages, int64_t page_bytes, uint32_t memory_type_bits);
  struct PhysAddr {
    VkDeviceMemory memory;
    VkDeviceSize offset;
    int64_t pages_left_in_chunk;
  };
  PhysAddr phys(int64_t page) const;

  // Ends `cmds`, submits it on the compute queue and waits, under the queue lock.
  void submit(vk::Commands& cmds) const;
  void drain() const { device_->drain(); }
  const vk::Device& dev() const { return device_->device(); }
  std::mutex& queue_mutex() const { return device_->queue_mutex(); }

  std::unique_ptr<StoreDevice> device_;
  int64_t granularity_ = 0;
  int64_t page_bytes_ = 0;
  std::mutex writer_mutex_;

 private:
  struct GatherContext;
  struct Piece;
  void run_batch(GatherContext& ctx, const std::vector<Piece>& pieces, int64_t bytes, std::byte* dst) const;

  std::unique_ptr<vk::ComputePipeline> gather_kernel_;
  int64_t batch_bytes_ = 0;  // output bytes per submission
  mutable std::mutex contexts_mutex_;
  mutable std::vector<std::unique_ptr<GatherContext>> contexts_;  // idle ones
  std::vector<vk::Memory> chunks_;
  int64_t chunk_pages_ = 0;
};

}  // namespace fovea::vulkan_store
