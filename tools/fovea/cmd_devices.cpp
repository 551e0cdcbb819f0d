// fovea devices [--json]: the Vulkan devices --backend vulkan can use, with the features the
// texture backend and the sparse token store look at.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_util.hpp"
#include "command.hpp"
#include "fovea/vulkan.hpp"

namespace fovea::cli {
namespace {

nlohmann::json to_json(const VulkanDeviceInfo& d) {
  return {{"index", d.index},
          {"name", d.name},
          {"type", d.type},
          {"api_version", d.api_version},
          {"driver", d.driver},
          {"device_local_bytes", d.device_local_bytes},
          {"sparse_binding", d.sparse_binding},
          {"sparse_residency_buffer", d.sparse_residency_buffer},
          {"sparse_residency_image2d", d.sparse_residency_image2d},
          {"sparse_address_space_bytes", d.sparse_address_space_bytes},
          {"fragment_shading_rate", d.fragment_shading_rate},
          {"storage_image_extended_formats", d.storage_image_extended_formats},
          {"blit_linear_r8", d.blit_linear_r8},
          {"blit_linear_r32f", d.blit_linear_r32f},
          {"max_image_dimension_2d", d.max_image_dimension_2d},
          {"max_image_array_layers", d.max_image_array_layers},
          {"max_compute_workgroup_invocations", d.max_compute_workgroup_invocations},
          {"max_push_constants_bytes", d.max_push_constants_bytes}};
}

struct DevicesCommand {
  bool json = false;

  int run() const {
    const std::vector<VulkanDeviceInfo> devs = list_vulkan_devices();
    if (json) {
      nlohmann::json j = {{"vulkan_built", vulkan_built()}, {"devices", nlohmann::json::array()}};
      for (const auto& d : devs) j["devices"].push_back(to_json(d));
      std::cout << json_text(j) << '\n';
      return 0;
    }
    if (!vulkan_built()) {
      std::printf("this build of fovea has no Vulkan backend (--backend vulkan uses the CPU)\n");
      return 0;
    }
    if (devs.empty()) {
      std::printf("no Vulkan devices found (--backend vulkan uses the CPU)\n");
      return 0;
    }
    auto yn = [](bool b) { return b ? "yes" : "no"; };
    for (const auto& d : devs) {
      std::printf("%d: %s (%s, Vulkan %s)%s\n", d.index, d.name.c_str(), d.type.c_str(), d.api_version.c_str(),
                  d.type == "cpu" ? "  [a CPU implementation: its timings are CPU timings]" : "");
      if (!d.driver.empty()) std::printf("   driver: %s\n", d.driver.c_str());
      std::printf("   device-local memory: %.1f GiB\n", double(d.device_local_bytes) / (1u << 30));
      std::printf("   sparse: binding %s, residency buffer %s, residency image2D %s, address space %.1f GiB\n",
                  yn(d.sparse_binding), yn(d.sparse_residency_buffer), yn(d.sparse_residency_image2d),
                  double(d.sparse_address_space_bytes) / (1u << 30));
      std::printf("   fragment shading rate (VK_KHR_fragment_shading_rate): %s\n", yn(d.fragment_shading_rate));
      std::printf("   blit+linear filter: R8 %s, R32F %s; r8ui storage images %s\n", yn(d.blit_linear_r8),
                  yn(d.blit_linear_r32f), yn(d.storage_image_extended_formats));
      std::printf("   limits: image2D %u px, %u array layers, %u invocations/workgroup, %u push-constant bytes\n",
                  d.max_image_dimension_2d, d.max_image_array_layers, d.max_compute_workgroup_invocations,
                  d.max_push_constants_bytes);
    }
    return 0;
  }
};

Runner setup_devices(CLI::App& sub) {
  auto cmd = std::make_shared<DevicesCommand>();
  sub.add_flag("--json", cmd->json, "Print the device list as JSON");
  sub.footer("Examples:\n  fovea devices\n  fovea tokenize photo.jpg --backend vulkan --device 0 -o tokens.safetensors");
  return [cmd] { return cmd->run(); };
}

Registration reg_devices{{"devices", "List the Vulkan devices for --backend vulkan and their features", 90, setup_devices}};

}  // namespace
}  // namespace fovea::cli
