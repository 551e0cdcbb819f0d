// vulkan/shading_rate.hpp — the rate map as a VK_KHR_fragment_shading_rate attachment
// (private to the library; tests use it).
//
//   vk::Instance inst({.validation = true});
//   vk::PhysicalDeviceInfo pd = vk::select_device(inst, "");
//   vk::ShadingRateCaps caps = vk::query_shading_rate(inst, pd);
//   if (!caps.why_not.empty()) ...                        // e.g. lavapipe: no extension
//   vk::ShadingRateRender r = vk::render_shading_rate(inst, pd, allocation.rate_map);
//   r.seen[y * r.width + x]                               // gl_ShadingRateEXT at pixel (x, y)
//
// The render draws one full-screen triangle over a framebuffer of tiles_x·P × tiles_y·P
// pixels with the rate map's codes (RateMap::shading_rate_codes) as the fragment shading rate
// attachment (pipeline rate 1×1, combiner ops KEEP then REPLACE: the attachment decides), and
// a fragment shader that writes gl_ShadingRateEXT to an R8_UINT colour attachment. Every
// capability it uses is queried first; a device that cannot run it gets Error(unsupported)
// with the reason, never an assert. The pure parts (texel-size plan, the spec's fallback rule
// for unsupported rates, the attachment contents) are functions of their inputs and are tested
// on every device; the render itself needs a device with the extension.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fovea/allocate.hpp"
#include "vulkan/vk/vk.hpp"

namespace fovea::vk {

// What a physical device offers for attachment shading rates.
struct ShadingRateCaps {
  bool extension = false;   // VK_KHR_fragment_shading_rate is listed
  bool attachment = false;  // VkPhysicalDeviceFragmentShadingRateFeaturesKHR::attachmentFragmentShadingRate
  VkExtent2D min_texel{0, 0}, max_texel{0, 0};  // min/maxFragmentShadingRateAttachmentTexelSize
  uint32_t max_texel_aspect = 0;                // maxFragmentShadingRateAttachmentTexelSizeAspectRatio
  std::vector<VkExtent2D> rates;                // fragment sizes supported at 1 sample, largest width first
  bool graphics_queue = false;                  // the family vk::Device picks has GRAPHICS
  std::string why_not;                          // empty: render_shading_rate can run
};

ShadingRateCaps query_shading_rate(const Instance& instance, const PhysicalDeviceInfo& physical);

// Attachment texels per tile: the texel size is patch_px clamped to the device's
// [min_texel, max_texel], a power of two dividing patch_px (then every tile is covered by
// (patch_px / texel)² texels of its own code). why_not says why no size fits: the minimum is
// above the largest power of two dividing patch_px (a texel would cover several tiles), or
// patch_px is not a multiple of 4 (a 4×4 fragment would straddle two tiles).
struct TexelPlan {
  uint32_t texel = 0;     // attachment texel width = height, pixels
  uint32_t per_tile = 0;  // patch_px / texel
  std::string why_not;
};
TexelPlan plan_texel_size(int patch_px, const ShadingRateCaps& caps);

// The attachment image [tiles_y·per_tile rows, tiles_x·per_tile columns] of shading-rate codes.
std::vector<uint8_t> shading_rate_texels(const RateMap& rate_map, uint32_t per_tile);

// Encoding of VK_KHR_fragment_shading_rate: (log2 w << 2) | log2 h, w and h in {1, 2, 4}.
uint8_t shading_rate_code(VkExtent2D size);
VkExtent2D shading_rate_size(uint8_t code);

// The codes a device may shade a requested code at (vkspec "Combining the Fragment Shading
// Rates"): the code itself when `rates` has it, else the rates left by: keep w' <= w and
// h' <= h (implementations may also keep w' <= h and h' <= w), then the highest area, then the
// lowest w' + h'; a wide and a tall rate may both remain. Empty `rates`: just the code.
std::vector<uint8_t> shading_rate_candidates(uint8_t code, std::span<const VkExtent2D> rates);

struct ShadingRateRender {
  int width = 0, height = 0;  // tiles_x·P × tiles_y·P
  uint32_t texel = 0;         // attachment texel size used
  std::vector<uint8_t> seen;  // [height, width]: gl_ShadingRateEXT of the fragment covering each pixel
};

// Creates its own device (the extension, attachmentFragmentShadingRate, and
// VK_KHR_create_renderpass2 below Vulkan 1.2) on `physical`, renders, reads back.
// Error(unsupported) with caps.why_not / plan.why_not when the device cannot.
ShadingRateRender render_shading_rate(Instance& instance, const PhysicalDeviceInfo& physical,
                                      const RateMap& rate_map);

}  // namespace fovea::vk
