// fovea/vulkan.hpp — the Vulkan texture backend: mips on the GPU, foveated sampling from the
// rate map, batches as array textures.
//
//   if (fovea::vulkan_available()) {
//     fovea::ImageU8 img = fovea::load_image("in.jpg");
//     fovea::Executor exec;
//     auto gpu = fovea::VulkanBackend::create({.device = ""});       // best device
//     fovea::PyramidU8 pyr = gpu->build_pyramid(img, {}, fovea::MipMethod::compute);
//     fovea::Allocation alloc = fovea::allocate(fovea::compute_relevance(pyr, 16, {}, {}, exec), {.budget_tokens = 273});
//     fovea::TokenBatch b = gpu->extract(img, alloc, {});            // upload, mips, sample
//   }
//
// Every result equals the CPU reference (pyramid.hpp, extract.hpp): compute mips and
// sampling are bit-exact for uint8 and within 1e-5 for float. Blit mips are the driver's
// linear filter, run on an image and boxes of power-of-two extents so that its weights are
// exactly 1/2: uint8 within 1 LSB of the CPU pyramid (exact while the filter is within 0.125
// LSB of the true mean; exact on lavapipe), float within 1e-5 relative for non-negative data
// (lavapipe: 2 ulps); without padding (VulkanOptions::pad_blit_chains) the float precision is
// the driver's (docs/how-to/vulkan.md). Images are 2D array textures with one layer per channel
// plane (B images × C channels layers in a batch), so planar images upload as is.
// Errors: Error(device) when there is no usable device, Error(unsupported) for a missing
// format feature, Error(out_of_memory) / Error(limit_exceeded) for images the device refuses.
// When fovea was built without Vulkan, vulkan_available() is false and create() throws
// Error(unsupported).
#pragma once
#include "fovea/export.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fovea/allocate.hpp"
#include "fovea/extract.hpp"
#include "fovea/image.hpp"
#include "fovea/pyramid.hpp"
#include "fovea/tokenize.hpp"

FOVEA_API_BEGIN
namespace fovea {

// True when fovea was built with the Vulkan backend (not whether a device exists).
bool vulkan_built();
// True when built with Vulkan and at least one usable device is present. Asked afresh on each
// call (it creates and destroys a VkInstance: a few ms, more with some drivers), so keep the
// answer if you need it often. Thread-safe.
bool vulkan_available();

struct VulkanDeviceInfo {
  int index = 0;
  std::string name, type;      // type: discrete, integrated, virtual, cpu, other
  std::string api_version;     // "1.4.305"
  std::string driver;          // driver name and info when known
  uint64_t device_local_bytes = 0;
  bool sparse_binding = false, sparse_residency_buffer = false, sparse_residency_image2d = false;
  bool fragment_shading_rate = false;  // VK_KHR_fragment_shading_rate
  bool storage_image_extended_formats = false;
  uint32_t max_image_dimension_2d = 0, max_image_array_layers = 0;
  uint32_t max_compute_workgroup_invocations = 0, max_push_constants_bytes = 0;
  uint64_t sparse_address_space_bytes = 0;
  bool blit_linear_r8 = false, blit_linear_r32f = false;  // BLIT_SRC|DST + SAMPLED_FILTER_LINEAR
};

// Lists every physical device (empty when none or not built). Throws only for a broken
// loader; a machine without any Vulkan driver returns an empty list.
std::vector<VulkanDeviceInfo> list_vulkan_devices();

enum class MipMethod : uint8_t {
  compute,  // 2×2 box compute shader: bit-exact with the CPU pyramid
  blit,     // vkCmdBlitImage chain with a linear filter (glGenerateMipmap), in an image padded
            // to power-of-two extents; uint8: the chain is blitted in R32_SFLOAT and each
            // level rounded with the CPU's rule
};

struct VulkanOptions {
  std::string device;       // "" best (discrete first), "N" index, else a name substring
  bool validation = false;  // VK_LAYER_KHRONOS_validation; messages counted per backend
                            // (validation_errors(), validation_messages()), nothing process-wide
  // Blit mips filter an image padded to power-of-two extents (the data in its top-left
  // corner), so that the driver's normalised texel coordinates are exact and its 2:1 linear
  // filter averages exactly 4 texels. false, or a padded image the device refuses (limits,
  // memory): the image's own extents, where the filter's precision is the driver's
  // (docs/how-to/vulkan.md, "Blit mips against the CPU pyramid").
  bool pad_blit_chains = true;
};

// Wall-clock split of the last GPU call (ms), each phase submitted and waited on separately.
struct VulkanTimings {
  double upload_ms = 0, mips_ms = 0, dispatch_ms = 0, readback_ms = 0;
  // Queue submissions (each one waited on) the call made. A batch of B images costs as many
  // as one image: one upload, one mip chain, one dispatch, and so on.
  int submissions = 0;
  double total_ms() const { return upload_ms + mips_ms + dispatch_ms + readback_ms; }
};

// Keeps the images, buffers and descriptor sets of its calls for the next ones of the same
// shape (memory stays allocated until the backend is destroyed).
// Thread safety: none. Use a backend from one thread at a time (one per thread, or a lock);
// separate backends are independent (each has its own VkInstance and VkDevice).
class VulkanBackend {
 public:
  static std::unique_ptr<VulkanBackend> create(const VulkanOptions& options = {});
  ~VulkanBackend();
  VulkanBackend(const VulkanBackend&) = delete;
  VulkanBackend& operator=(const VulkanBackend&) = delete;

  const VulkanDeviceInfo& device() const;
  // Validation messages (warnings and errors) seen since creation; 0 without validation.
  int validation_errors() const;
  std::vector<std::string> validation_messages() const;
  const VulkanTimings& last_timings() const;

  // Mip chains, same semantics and params as fovea::build_pyramid (the image is copied).
  PyramidU8 build_pyramid(const ImageU8& image, const PyramidParams& params, MipMethod method);
  PyramidF32 build_pyramid(const ImageF32& image, const PyramidParams& params, MipMethod method);
  // B images of one size and channel count: one upload, one mip chain, one readback.
  std::vector<PyramidU8> build_pyramids(std::span<const ImageU8* const> images, const PyramidParams& params,
                                        MipMethod method);

  // Upload, mips (allocation.max_level + 1 levels) and one sampling dispatch: equals
  // fovea::extract(build_pyramid(image), allocation, params) on the CPU.
  TokenBatch extract(const ImageU8& image, const Allocation& allocation, const ExtractParams& params,
                     MipMethod method = MipMethod::compute);
  // fovea::tokenize's pixel stages on this device (the pipeline itself is fovea::tokenize's):
  // build_pyramid is one upload and one mip chain, its levels read back for the CPU's
  // relevance and allocation; extract is one sampling dispatch on the pyramid still on the
  // device (if another call of this backend built a pyramid in between, or extract is given
  // another pyramid, it uploads that pyramid's level 0 and builds the mips again). The
  // uniform baseline's patches are cut on the CPU. Uses this backend: valid while it lives.
  std::unique_ptr<TokenizeStages> tokenize_stages(MipMethod method = MipMethod::compute);
  // fovea::tokenize(image, query, params, exec, *tokenize_stages(method)). Equal to the CPU
  // result for MipMethod::compute (token file byte-identical); last_timings() splits both
  // stages.
  Tokenization tokenize(ImageU8 image, const Query& query, const TokenizeParams& params, Executor& exec,
                        MipMethod method = MipMethod::compute);
  // A batch: images[i] with allocations[i]; all images of one size and channel count.
  std::vector<TokenBatch> extract_batch(std::span<const ImageU8* const> images,
                                        std::span<const Allocation* const> allocations,
                                        const ExtractParams& params, MipMethod method = MipMethod::compute);

  struct FOVEA_INTERNAL Impl;

 private:
  explicit VulkanBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fovea
FOVEA_API_END
