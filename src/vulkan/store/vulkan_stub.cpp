// Builds without the Vulkan sparse backends get this: the host backend serves.
#include "fovea/store.hpp"

namespace fovea {
std::unique_ptr<StoreBackend> make_vulkan_store_backend(std::string* why, const VulkanStoreOptions&) {
  if (why) *why = "this build of fovea has no Vulkan sparse store backend";
  return nullptr;
}
std::unique_ptr<StoreBackend> make_vulkan_image_store_backend(std::string* why, const VulkanStoreOptions&) {
  if (why) *why = "this build of fovea has no Vulkan sparse store backend";
  return nullptr;
}
}  // namespace fovea
