// The rate map as a fragment shading rate attachment (VK_KHR_fragment_shading_rate): queries,
// the texel-size plan, the spec's fallback rule, and a render that reports the rate every
// pixel was shaded at. Written against the Vulkan spec ("Fragment Shading Rates" in the
// rasterization chapter); see shading_rate.hpp.
#include "vulkan/shading_rate.hpp"

#include <algorithm>
#include <cstring>

#include "fovea/error.hpp"

namespace fovea::vk {

namespace {

const uint32_t kFullscreenVertSpirv[] =
#include "fovea_spirv/fullscreen.spv.inc"
    ;
const uint32_t kShadingRateFragSpirv[] =
#include "fovea_spirv/shading_rate.spv.inc"
    ;

// One owner per handle the RAII layer has no class for (render pass, framebuffer, pipeline
// objects): destroyed with the device's destroy function, in reverse declaration order.
template <typename H>
class Owned {
 public:
  using Destroy = void(VKAPI_PTR*)(VkDevice, H, const VkAllocationCallbacks*);
  Owned(VkDevice device, Destroy destroy) : device_(device), destroy_(destroy) {}
  ~Owned() {
    if (handle_ != VK_NULL_HANDLE) destroy_(device_, handle_, nullptr);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  H* out() { return &handle_; }
  H get() const { return handle_; }

 private:
  VkDevice device_;
  Destroy destroy_;
  H handle_ = VK_NULL_HANDLE;
};

bool is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint32_t effective_api(const Instance& instance, const PhysicalDeviceInfo& physical) {
  return std::min(instance.api_version(), physical.properties.apiVersion);
}

std::string extent_str(VkExtent2D e) { return std::to_string(e.width) + "x" + std::to_string(e.height); }

// The family vk::Device uses for its compute queue: the first with COMPUTE|GRAPHICS, else the
// first with COMPUTE (vk.cpp). Graphics work needs the former.
bool device_queue_has_graphics(const PhysicalDeviceInfo& physical) {
  for (const VkQueueFamilyProperties& f : physical.queue_families)
    if (f.queueCount > 0 && (f.queueFlags & VK_QUEUE_COMPUTE_BIT) && (f.queueFlags & VK_QUEUE_GRAPHICS_BIT))
      return true;
  return false;
}

}  // namespace

uint8_t shading_rate_code(VkExtent2D size) {
  auto lg = [](uint32_t v) { return uint8_t(v >= 4 ? 2 : v >= 2 ? 1 : 0); };
  return uint8_t(lg(size.width) << 2 | lg(size.height));
}

VkExtent2D shading_rate_size(uint8_t code) { return {1u << ((code >> 2) & 3), 1u << (code & 3)}; }

std::vector<uint8_t> shading_rate_candidates(uint8_t code, std::span<const VkExtent2D> rates) {
  const VkExtent2D want = shading_rate_size(code);
  if (rates.empty()) return {code};
  for (const VkExtent2D& r : rates)
    if (r.width == want.width && r.height == want.height) return {code};
  // Step 1 either keeps only rates within (w, h), or also those within (h, w): both are
  // allowed, so the candidates are the union of the two selections.
  std::vector<uint8_t> out;
  for (const bool swapped_too : {false, true}) {
    std::vector<VkExtent2D> kept;
    for (const VkExtent2D& r : rates)
      if ((r.width <= want.width && r.height <= want.height) ||
          (swapped_too && r.width <= want.height && r.height <= want.width))
        kept.push_back(r);
    if (kept.empty()) continue;  // cannot happen: 1x1 is always supported
    uint32_t area = 0;
    for (const VkExtent2D& r : kept) area = std::max(area, r.width * r.height);
    uint32_t aspect = ~0u;
    for (const VkExtent2D& r : kept)
      if (r.width * r.height == area) aspect = std::min(aspect, r.width + r.height);
    for (const VkExtent2D& r : kept)
      if (r.width * r.height == area && r.width + r.height == aspect) {
        const uint8_t c = shading_rate_code(r);
        if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
      }
  }
  std::sort(out.begin(), out.end());
  return out;
}

ShadingRateCaps query_shading_rate(const Instance& instance, const PhysicalDeviceInfo& physical) {
  ShadingRateCaps caps;
  caps.graphics_queue = device_queue_has_graphics(physical);
  caps.extension = physical.has_extension(VK_KHR_FRAGMENT_SHADING_RATE_EXTENSION_NAME);
  const std::string name = physical.name();
  if (!caps.extension) {
    caps.why_not = name + " does not offer VK_KHR_fragment_shading_rate";
    return caps;
  }
  VkPhysicalDeviceFragmentShadingRateFeaturesKHR features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FRAGMENT_SHADING_RATE_FEATURES_KHR};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &features;
  vkGetPhysicalDeviceFeatures2(physical.handle, &f2);
  caps.attachment = features.attachmentFragmentShadingRate;

  VkPhysicalDeviceFragmentShadingRatePropertiesKHR props{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FRAGMENT_SHADING_RATE_PROPERTIES_KHR};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &props;
  vkGetPhysicalDeviceProperties2(physical.handle, &p2);
  caps.min_texel = props.minFragmentShadingRateAttachmentTexelSize;
  caps.max_texel = props.maxFragmentShadingRateAttachmentTexelSize;
  caps.max_texel_aspect = props.maxFragmentShadingRateAttachmentTexelSizeAspectRatio;

  auto get_rates = reinterpret_cast<PFN_vkGetPhysicalDeviceFragmentShadingRatesKHR>(
      vkGetInstanceProcAddr(instance.handle(), "vkGetPhysicalDeviceFragmentShadingRatesKHR"));
  if (!get_rates) {
    caps.why_not = "the loader has no vkGetPhysicalDeviceFragmentShadingRatesKHR";
    return caps;
  }
  uint32_t n = 0;
  check(get_rates(physical.handle, &n, nullptr), "vkGetPhysicalDeviceFragmentShadingRatesKHR");
  std::vector<VkPhysicalDeviceFragmentShadingRateKHR> all(
      n, {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FRAGMENT_SHADING_RATE_KHR});
  check(get_rates(physical.handle, &n, all.data()), "vkGetPhysicalDeviceFragmentShadingRatesKHR");
  all.resize(n);
  for (const auto& r : all)
    if (r.sampleCounts & VK_SAMPLE_COUNT_1_BIT) caps.rates.push_back(r.fragmentSize);

  VkFormatProperties fp{};
  vkGetPhysicalDeviceFormatProperties(physical.handle, VK_FORMAT_R8_UINT, &fp);
  if (!caps.attachment)
    caps.why_not = name + " has VK_KHR_fragment_shading_rate but not its attachmentFragmentShadingRate feature";
  else if (!(fp.optimalTilingFeatures & VK_FORMAT_FEATURE_FRAGMENT_SHADING_RATE_ATTACHMENT_BIT_KHR))
    caps.why_not = name + ": R8_UINT lacks FRAGMENT_SHADING_RATE_ATTACHMENT (required by the spec)";
  else if (!(fp.optimalTilingFeatures & VK_FORMAT_FEATURE_COLOR_ATTACHMENT_BIT))
    caps.why_not = name + ": R8_UINT lacks COLOR_ATTACHMENT";
  else if (!caps.graphics_queue)
    caps.why_not = name + " has no queue family with both GRAPHICS and COMPUTE";
  else if (effective_api(instance, physical) < VK_API_VERSION_1_2 &&
           !physical.has_extension(VK_KHR_CREATE_RENDERPASS_2_EXTENSION_NAME))
    caps.why_not = name + " is below Vulkan 1.2 and lacks VK_KHR_create_renderpass2";
  else if (!is_pow2(caps.min_texel.width) || !is_pow2(caps.min_texel.height) || !is_pow2(caps.max_texel.width) ||
           !is_pow2(caps.max_texel.height))
    caps.why_not = name + " reports attachment texel sizes that are not powers of two (" +
                   extent_str(caps.min_texel) + " .. " + extent_str(caps.max_texel) + ")";
  return caps;
}

TexelPlan plan_texel_size(int patch_px, const ShadingRateCaps& caps) {
  TexelPlan plan;
  const std::string range = " (device texel sizes " + extent_str(caps.min_texel) + " .. " +
                            extent_str(caps.max_texel) + ")";
  if (patch_px < 4 || patch_px % 4 != 0) {
    plan.why_not = "patch_px " + std::to_string(patch_px) +
                   " is not a multiple of 4: a 4x4 fragment would straddle two tiles of different rates";
    return plan;
  }
  // Square texels (aspect ratio 1 is always allowed): the largest power of two that fits
  // under patch_px and the maximum, divides patch_px, and is at least the minimum.
  const uint32_t hi = std::min({uint32_t(patch_px), caps.max_texel.width, caps.max_texel.height});
  const uint32_t lo = std::max(caps.min_texel.width, caps.min_texel.height);
  for (uint32_t t = 1u << 30; t >= 1; t >>= 1) {
    if (t > hi || uint32_t(patch_px) % t != 0) continue;
    if (t < lo) break;
    plan.texel = t;
    plan.per_tile = uint32_t(patch_px) / t;
    return plan;
  }
  plan.why_not = "no power-of-two attachment texel size maps " + std::to_string(patch_px) + "-px tiles exactly" + range;
  return plan;
}

std::vector<uint8_t> shading_rate_texels(const RateMap& rate_map, uint32_t per_tile) {
  const std::vector<uint8_t> codes = rate_map.shading_rate_codes();
  const size_t tx = size_t(rate_map.grid.tiles_x), ty = size_t(rate_map.grid.tiles_y);
  const size_t w = tx * per_tile, h = ty * per_tile;
  std::vector<uint8_t> out(w * h);
  for (size_t y = 0; y < h; ++y)
    for (size_t x = 0; x < w; ++x) out[y * w + x] = codes[(y / per_tile) * tx + x / per_tile];
  return out;
}

namespace {

  // Render pass: attachment 0 colour (cleared to 255, which no rate code is), attachment 1
  // the shading-rate attachment, already in FRAGMENT_SHADING_RATE_ATTACHMENT_OPTIMAL (the
  // barrier after its upload puts it there) and only read.
void create_render_pass(VkDevice dev, PFN_vkCreateRenderPass2 create_render_pass2, uint32_t texel,
                        Owned<VkRenderPass>& render_pass) {
  VkAttachmentDescription2 att[2] = {{VK_STRUCTURE_TYPE_ATTACHMENT_DESCRIPTION_2},
                                     {VK_STRUCTURE_TYPE_ATTACHMENT_DESCRIPTION_2}};
  att[0].format = VK_FORMAT_R8_UINT;
  att[0].samples = VK_SAMPLE_COUNT_1_BIT;
  att[0].loadOp = VK_ATTACHMENT_LOAD_OP_CLEAR;
  att[0].storeOp = VK_ATTACHMENT_STORE_OP_STORE;
  att[0].stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
  att[0].stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
  att[0].initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
  att[0].finalLayout = VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL;
  att[1].format = VK_FORMAT_R8_UINT;
  att[1].samples = VK_SAMPLE_COUNT_1_BIT;
  att[1].loadOp = VK_ATTACHMENT_LOAD_OP_LOAD;
  att[1].storeOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
  att[1].stencilLoadOp = VK_ATTACHMENT_LOAD_OP_DONT_CARE;
  att[1].stencilStoreOp = VK_ATTACHMENT_STORE_OP_DONT_CARE;
  att[1].initialLayout = VK_IMAGE_LAYOUT_FRAGMENT_SHADING_RATE_ATTACHMENT_OPTIMAL_KHR;
  att[1].finalLayout = VK_IMAGE_LAYOUT_FRAGMENT_SHADING_RATE_ATTACHMENT_OPTIMAL_KHR;
  VkAttachmentReference2 color_ref{VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2};
  color_ref.attachment = 0;
  color_ref.layout = VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL;
  color_ref.aspectMask = VK_IMAGE_ASPECT_COLOR_BIT;
  VkAttachmentReference2 rate_ref{VK_STRUCTURE_TYPE_ATTACHMENT_REFERENCE_2};
  rate_ref.attachment = 1;
  rate_ref.layout = VK_IMAGE_LAYOUT_FRAGMENT_SHADING_RATE_ATTACHMENT_OPTIMAL_KHR;  // aspectMask: input attachments only
  VkFragmentShadingRateAttachmentInfoKHR rate_info{VK_STRUCTURE_TYPE_FRAGMENT_SHADING_RATE_ATTACHMENT_INFO_KHR};
  rate_info.pFragmentShadingRateAttachment = &rate_ref;
  rate_info.shadingRateAttachmentTexelSize = {texel, texel};
  VkSubpassDescription2 subpass{VK_STRUCTURE_TYPE_SUBPASS_DESCRIPTION_2};
  subpass.pNext = &rate_info;
  subpass.pipelineBindPoint = VK_PIPELINE_BIND_POINT_GRAPHICS;
  subpass.colorAttachmentCount = 1;
  subpass.pColorAttachments = &color_ref;
  // The colour writes (and the final layout transition) happen before the copy that reads
  // them back.
  VkSubpassDependency2 dep{VK_STRUCTURE_TYPE_SUBPASS_DEPENDENCY_2};
  dep.srcSubpass = 0;
  dep.dstSubpass = VK_SUBPASS_EXTERNAL;
  dep.srcStageMask = VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT;
  dep.srcAccessMask = VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT;
  dep.dstStageMask = VK_PIPELINE_STAGE_TRANSFER_BIT;
  dep.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  VkRenderPassCreateInfo2 rpi{VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO_2};
  rpi.attachmentCount = 2;
  rpi.pAttachments = att;
  rpi.subpassCount = 1;
  rpi.pSubpasses = &subpass;
  rpi.dependencyCount = 1;
  rpi.pDependencies = &dep;
  check(create_render_pass2(dev, &rpi, nullptr, render_pass.out()), "vkCreateRenderPass2");
}

  // Pipeline: no inputs, one full-screen triangle, no blending (integer attachment), pipeline
  // rate 1x1, combiner ops KEEP (no primitive rate) then REPLACE (the attachment's rate).
void create_pipeline(VkDevice dev, VkRenderPass render_pass, VkPipelineLayout layout, VkExtent2D size,
                     Owned<VkPipeline>& pipeline) {
  auto module = [&](std::span<const uint32_t> code, Owned<VkShaderModule>& m) {
    VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    si.codeSize = code.size_bytes();
    si.pCode = code.data();
    check(vkCreateShaderModule(dev, &si, nullptr, m.out()), "vkCreateShaderModule");
  };
  Owned<VkShaderModule> vert(dev, vkDestroyShaderModule), frag(dev, vkDestroyShaderModule);
  module(kFullscreenVertSpirv, vert);
  module(kShadingRateFragSpirv, frag);

  VkPipelineShaderStageCreateInfo stages[2] = {{VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO},
                                               {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO}};
  stages[0].stage = VK_SHADER_STAGE_VERTEX_BIT;
  stages[0].module = vert.get();
  stages[0].pName = "main";
  stages[1].stage = VK_SHADER_STAGE_FRAGMENT_BIT;
  stages[1].module = frag.get();
  stages[1].pName = "main";
  VkPipelineVertexInputStateCreateInfo vi{VK_STRUCTURE_TYPE_PIPELINE_VERTEX_INPUT_STATE_CREATE_INFO};
  VkPipelineInputAssemblyStateCreateInfo ia{VK_STRUCTURE_TYPE_PIPELINE_INPUT_ASSEMBLY_STATE_CREATE_INFO};
  ia.topology = VK_PRIMITIVE_TOPOLOGY_TRIANGLE_LIST;
  const VkViewport viewport{0.0f, 0.0f, float(size.width), float(size.height), 0.0f, 1.0f};
  const VkRect2D scissor{{0, 0}, size};
  VkPipelineViewportStateCreateInfo vp{VK_STRUCTURE_TYPE_PIPELINE_VIEWPORT_STATE_CREATE_INFO};
  vp.viewportCount = 1;
  vp.pViewports = &viewport;
  vp.scissorCount = 1;
  vp.pScissors = &scissor;
  VkPipelineRasterizationStateCreateInfo rs{VK_STRUCTURE_TYPE_PIPELINE_RASTERIZATION_STATE_CREATE_INFO};
  rs.polygonMode = VK_POLYGON_MODE_FILL;
  rs.cullMode = VK_CULL_MODE_NONE;
  rs.frontFace = VK_FRONT_FACE_COUNTER_CLOCKWISE;
  rs.lineWidth = 1.0f;
  // One sample, no sample shading, no sample mask: none of the conditions that force 1x1.
  VkPipelineMultisampleStateCreateInfo ms{VK_STRUCTURE_TYPE_PIPELINE_MULTISAMPLE_STATE_CREATE_INFO};
  ms.rasterizationSamples = VK_SAMPLE_COUNT_1_BIT;
  VkPipelineColorBlendAttachmentState blend{};
  blend.colorWriteMask = VK_COLOR_COMPONENT_R_BIT;
  VkPipelineColorBlendStateCreateInfo cb{VK_STRUCTURE_TYPE_PIPELINE_COLOR_BLEND_STATE_CREATE_INFO};
  cb.attachmentCount = 1;
  cb.pAttachments = &blend;
  VkPipelineFragmentShadingRateStateCreateInfoKHR fsr{
      VK_STRUCTURE_TYPE_PIPELINE_FRAGMENT_SHADING_RATE_STATE_CREATE_INFO_KHR};
  fsr.fragmentSize = {1, 1};
  fsr.combinerOps[0] = VK_FRAGMENT_SHADING_RATE_COMBINER_OP_KEEP_KHR;
  fsr.combinerOps[1] = VK_FRAGMENT_SHADING_RATE_COMBINER_OP_REPLACE_KHR;
  VkGraphicsPipelineCreateInfo gpi{VK_STRUCTURE_TYPE_GRAPHICS_PIPELINE_CREATE_INFO};
  gpi.pNext = &fsr;
  gpi.stageCount = 2;
  gpi.pStages = stages;
  gpi.pVertexInputState = &vi;
  gpi.pInputAssemblyState = &ia;
  gpi.pViewportState = &vp;
  gpi.pRasterizationState = &rs;
  gpi.pMultisampleState = &ms;
  gpi.pColorBlendState = &cb;
  gpi.layout = layout;
  gpi.renderPass = render_pass;
  gpi.subpass = 0;
  check(vkCreateGraphicsPipelines(dev, VK_NULL_HANDLE, 1, &gpi, nullptr, pipeline.out()), "vkCreateGraphicsPipelines");
}

// The render-pass-2 entry points: core in Vulkan 1.2, VK_KHR_create_renderpass2's below.
struct RenderPass2 {
  PFN_vkCreateRenderPass2 create = nullptr;
  PFN_vkCmdBeginRenderPass2 begin = nullptr;
  PFN_vkCmdEndRenderPass2 end = nullptr;
};

RenderPass2 load_render_pass2(VkDevice dev, bool core12) {
  auto load = [&](const char* core, const char* khr) {
    PFN_vkVoidFunction f = vkGetDeviceProcAddr(dev, core12 ? core : khr);
    if (!f) throw Error(Errc::unsupported, std::string("vulkan: shading-rate render: no ") + (core12 ? core : khr));
    return f;
  };
  RenderPass2 fns;
  fns.create = reinterpret_cast<PFN_vkCreateRenderPass2>(load("vkCreateRenderPass2", "vkCreateRenderPass2KHR"));
  fns.begin = reinterpret_cast<PFN_vkCmdBeginRenderPass2>(load("vkCmdBeginRenderPass2", "vkCmdBeginRenderPass2KHR"));
  fns.end = reinterpret_cast<PFN_vkCmdEndRenderPass2>(load("vkCmdEndRenderPass2", "vkCmdEndRenderPass2KHR"));
  return fns;
}

// The rate texels' upload: staging buffer to the aw × ah shading-rate attachment.
struct RateUpload {
  VkBuffer staging;
  VkImage rate;
  uint32_t aw, ah;
};
// The render's readback: the colour attachment to a host-visible buffer.
struct ColorReadback {
  VkImage color;
  VkBuffer readback;
};

// Records the render: the rate texels uploaded into their attachment, one full-screen triangle
// whose fragments write the rate they ran at, and the colour attachment copied back.
void record_render(VkCommandBuffer cmd, const RateUpload& in, const RenderPass2& rp2, VkRenderPass render_pass,
                   VkFramebuffer framebuffer, VkPipeline pipeline, const VkRect2D& scissor, const ColorReadback& out) {
  image_barrier(cmd, in.rate, 0, 1, VK_IMAGE_LAYOUT_UNDEFINED, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, 0, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
  VkBufferImageCopy up{};
  up.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
  up.imageExtent = {in.aw, in.ah, 1};
  vkCmdCopyBufferToImage(cmd, in.staging, in.rate, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL, 1, &up);
  image_barrier(cmd, in.rate, 0, 1, VK_IMAGE_LAYOUT_TRANSFER_DST_OPTIMAL,
                VK_IMAGE_LAYOUT_FRAGMENT_SHADING_RATE_ATTACHMENT_OPTIMAL_KHR, VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_FRAGMENT_SHADING_RATE_ATTACHMENT_BIT_KHR,
                VK_ACCESS_FRAGMENT_SHADING_RATE_ATTACHMENT_READ_BIT_KHR);
  VkClearValue clear{};
  clear.color.uint32[0] = 255;
  VkRenderPassBeginInfo rbi{VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO};
  rbi.renderPass = render_pass;
  rbi.framebuffer = framebuffer;
  rbi.renderArea = scissor;
  rbi.clearValueCount = 1;
  rbi.pClearValues = &clear;
  VkSubpassBeginInfo sbi{VK_STRUCTURE_TYPE_SUBPASS_BEGIN_INFO};
  sbi.contents = VK_SUBPASS_CONTENTS_INLINE;
  rp2.begin(cmd, &rbi, &sbi);
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_GRAPHICS, pipeline);
  vkCmdDraw(cmd, 3, 1, 0, 0);
  VkSubpassEndInfo sei{VK_STRUCTURE_TYPE_SUBPASS_END_INFO};
  rp2.end(cmd, &sei);
  VkBufferImageCopy down{};
  down.imageSubresource = {VK_IMAGE_ASPECT_COLOR_BIT, 0, 0, 1};
  down.imageExtent = {scissor.extent.width, scissor.extent.height, 1};
  vkCmdCopyImageToBuffer(cmd, out.color, VK_IMAGE_LAYOUT_TRANSFER_SRC_OPTIMAL, out.readback, 1, &down);
  memory_barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                 VK_ACCESS_HOST_READ_BIT);
}

}  // namespace

ShadingRateRender render_shading_rate(Instance& instance, const PhysicalDeviceInfo& physical,
                                      const RateMap& rate_map) {
  const ShadingRateCaps caps = query_shading_rate(instance, physical);
  if (!caps.why_not.empty()) throw Error(Errc::unsupported, "vulkan: shading-rate render: " + caps.why_not);
  const int P = rate_map.grid.patch_px;
  const TexelPlan plan = plan_texel_size(P, caps);
  if (!plan.why_not.empty()) throw Error(Errc::unsupported, "vulkan: shading-rate render: " + plan.why_not);
  if (rate_map.grid.tiles_x < 1 || rate_map.grid.tiles_y < 1 || rate_map.level.size() != size_t(rate_map.grid.tiles()))
    throw Error(Errc::invalid_argument, "vulkan: shading-rate render: the rate map does not match its grid");

  ShadingRateRender out;
  out.width = rate_map.grid.tiles_x * P;
  out.height = rate_map.grid.tiles_y * P;
  out.texel = plan.texel;
  const VkPhysicalDeviceLimits& lim = physical.properties.limits;
  if (uint32_t(out.width) > lim.maxFramebufferWidth || uint32_t(out.height) > lim.maxFramebufferHeight ||
      uint32_t(out.width) > lim.maxViewportDimensions[0] || uint32_t(out.height) > lim.maxViewportDimensions[1])
    throw Error(Errc::limit_exceeded, "vulkan: shading-rate render: a " + std::to_string(out.width) + "x" +
                                          std::to_string(out.height) + " framebuffer exceeds the device's limits");
  const std::vector<uint8_t> texels = shading_rate_texels(rate_map, plan.per_tile);
  const uint32_t aw = uint32_t(rate_map.grid.tiles_x) * plan.per_tile;
  const uint32_t ah = uint32_t(rate_map.grid.tiles_y) * plan.per_tile;

  // The device: the extension and its attachment feature (and renderpass2 below 1.2).
  const bool core12 = effective_api(instance, physical) >= VK_API_VERSION_1_2;
  DeviceOptions options;
  options.extensions.push_back(VK_KHR_FRAGMENT_SHADING_RATE_EXTENSION_NAME);
  if (!core12) options.extensions.push_back(VK_KHR_CREATE_RENDERPASS_2_EXTENSION_NAME);
  VkPhysicalDeviceFragmentShadingRateFeaturesKHR enable{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FRAGMENT_SHADING_RATE_FEATURES_KHR};
  enable.attachmentFragmentShadingRate = VK_TRUE;
  options.features_next = &enable;
  Device device(instance, physical, options);
  const VkDevice dev = device.handle();
  if (!(device.compute_queue().flags & VK_QUEUE_GRAPHICS_BIT))
    throw Error(Errc::unsupported, "vulkan: shading-rate render: the device's queue has no GRAPHICS");

  const RenderPass2 rp2 = load_render_pass2(dev, core12);

  // Images: the shading-rate attachment (R8_UINT, one texel per texel-size square) and the
  // colour attachment the fragment shader writes its rate to.
  device.require_format(VK_FORMAT_R8_UINT,
                        VK_FORMAT_FEATURE_FRAGMENT_SHADING_RATE_ATTACHMENT_BIT_KHR | VK_FORMAT_FEATURE_TRANSFER_DST_BIT,
                        "fragment shading rate attachments and transfers");
  device.require_format(VK_FORMAT_R8_UINT, VK_FORMAT_FEATURE_COLOR_ATTACHMENT_BIT | VK_FORMAT_FEATURE_TRANSFER_SRC_BIT,
                        "colour attachments and transfers");
  ImageDesc rd;
  rd.format = VK_FORMAT_R8_UINT;
  rd.width = aw;
  rd.height = ah;
  rd.usage = VK_IMAGE_USAGE_FRAGMENT_SHADING_RATE_ATTACHMENT_BIT_KHR | VK_IMAGE_USAGE_TRANSFER_DST_BIT;
  Image rate = Image::create(device, rd);
  ImageDesc cd;
  cd.format = VK_FORMAT_R8_UINT;
  cd.width = uint32_t(out.width);
  cd.height = uint32_t(out.height);
  cd.usage = VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT | VK_IMAGE_USAGE_TRANSFER_SRC_BIT;
  Image color = Image::create(device, cd);
  Buffer staging = Buffer::create(device, texels.size(), VK_BUFFER_USAGE_TRANSFER_SRC_BIT, MemoryUse::upload);
  std::memcpy(staging.mapped(), texels.data(), texels.size());
  const size_t pixels = size_t(out.width) * out.height;
  Buffer readback = Buffer::create(device, pixels, VK_BUFFER_USAGE_TRANSFER_DST_BIT, MemoryUse::readback);

  Owned<VkRenderPass> render_pass(dev, vkDestroyRenderPass);
  create_render_pass(dev, rp2.create, plan.texel, render_pass);

  const VkImageView views[2] = {color.view(), rate.view()};
  VkFramebufferCreateInfo fbi{VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO};
  fbi.renderPass = render_pass.get();
  fbi.attachmentCount = 2;
  fbi.pAttachments = views;
  fbi.width = uint32_t(out.width);
  fbi.height = uint32_t(out.height);
  fbi.layers = 1;
  Owned<VkFramebuffer> framebuffer(dev, vkDestroyFramebuffer);
  check(vkCreateFramebuffer(dev, &fbi, nullptr, framebuffer.out()), "vkCreateFramebuffer");

  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  Owned<VkPipelineLayout> layout(dev, vkDestroyPipelineLayout);
  check(vkCreatePipelineLayout(dev, &pli, nullptr, layout.out()), "vkCreatePipelineLayout");
  Owned<VkPipeline> pipeline(dev, vkDestroyPipeline);
  const VkRect2D scissor{{0, 0}, {uint32_t(out.width), uint32_t(out.height)}};
  create_pipeline(dev, render_pass.get(), layout.get(), scissor.extent, pipeline);

  Commands commands(device, device.compute_queue());
  record_render(commands.begin(), {staging.handle(), rate.handle(), aw, ah}, rp2, render_pass.get(), framebuffer.get(),
                pipeline.get(), scissor, {color.handle(), readback.handle()});
  commands.submit_and_wait();
  const uint8_t* seen = static_cast<const uint8_t*>(readback.mapped());
  out.seen.assign(seen, seen + pixels);
  return out;
}

}  // namespace fovea::vk
