// fovea was configured without the Vulkan headers, loader or glslc: the backend's entry points
// exist, say so, and callers fall back to the CPU.
#include "fovea/error.hpp"
#include "fovea/vulkan.hpp"

namespace fovea {

namespace {
[[noreturn]] void not_built() {
  throw Error(Errc::unsupported,
              "this fovea was built without the Vulkan backend (install libvulkan-dev and glslc, then reconfigure)");
}
}  // namespace

bool vulkan_built() { return false; }
bool vulkan_available() { return false; }
std::vector<VulkanDeviceInfo> list_vulkan_devices() { return {}; }

struct VulkanBackend::Impl {};
VulkanBackend::VulkanBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VulkanBackend::~VulkanBackend() = default;
std::unique_ptr<VulkanBackend> VulkanBackend::create(const VulkanOptions&) { not_built(); }
const VulkanDeviceInfo& VulkanBackend::device() const { not_built(); }
int VulkanBackend::validation_errors() const { return 0; }
std::vector<std::string> VulkanBackend::validation_messages() const { return {}; }
const VulkanTimings& VulkanBackend::last_timings() const { not_built(); }
PyramidU8 VulkanBackend::build_pyramid(const ImageU8&, const PyramidParams&, MipMethod) { not_built(); }
PyramidF32 VulkanBackend::build_pyramid(const ImageF32&, const PyramidParams&, MipMethod) { not_built(); }
std::vector<PyramidU8> VulkanBackend::build_pyramids(std::span<const ImageU8* const>, const PyramidParams&,
                                                     MipMethod) {
  not_built();
}
Tokenization VulkanBackend::tokenize(ImageU8, const Query&, const TokenizeParams&, Executor&, MipMethod) {
  not_built();
}
std::unique_ptr<TokenizeStages> VulkanBackend::tokenize_stages(MipMethod) { not_built(); }
TokenBatch VulkanBackend::extract(const ImageU8&, const Allocation&, const ExtractParams&, MipMethod) {
  not_built();
}
std::vector<TokenBatch> VulkanBackend::extract_batch(std::span<const ImageU8* const>,
                                                     std::span<const Allocation* const>, const ExtractParams&,
                                                     MipMethod) {
  not_built();
}

}  // namespace fovea
