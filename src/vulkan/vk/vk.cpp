// The RAII layer: results, instance + debug messenger, device selection, queues, memory,
// buffers, images, commands, compute kernels.
#include "vulkan/vk/vk.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

namespace fovea::vk {

// ---- results -------------------------------------------------------------------------------

std::string_view result_name(VkResult r) {
  switch (r) {
#define FOVEA_VK_RESULT(x) \
  case x: return #x;
    FOVEA_VK_RESULT(VK_SUCCESS)
    FOVEA_VK_RESULT(VK_NOT_READY)
    FOVEA_VK_RESULT(VK_TIMEOUT)
    FOVEA_VK_RESULT(VK_EVENT_SET)
    FOVEA_VK_RESULT(VK_EVENT_RESET)
    FOVEA_VK_RESULT(VK_INCOMPLETE)
    FOVEA_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    FOVEA_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    FOVEA_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    FOVEA_VK_RESULT(VK_ERROR_DEVICE_LOST)
    FOVEA_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    FOVEA_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    FOVEA_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    FOVEA_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    FOVEA_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    FOVEA_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    FOVEA_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
    FOVEA_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
    FOVEA_VK_RESULT(VK_ERROR_UNKNOWN)
    FOVEA_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
    FOVEA_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    FOVEA_VK_RESULT(VK_ERROR_FRAGMENTATION)
    FOVEA_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef FOVEA_VK_RESULT
    default: return "VkResult(unknown)";
  }
}

Errc errc_of(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_FRAGMENTED_POOL:
    case VK_ERROR_FRAGMENTATION:
    case VK_ERROR_TOO_MANY_OBJECTS:
      return Errc::out_of_memory;
    case VK_ERROR_LAYER_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return Errc::unsupported;
    default:
      return Errc::device;
  }
}

void check(VkResult r, const char* what) {
  if (r >= 0) return;
  std::string msg = std::string("vulkan: ") + what + " failed: " + std::string(result_name(r));
  if (r == VK_ERROR_DEVICE_LOST) msg += " (the device was lost; the backend must be recreated)";
  throw Error(errc_of(r), msg);
}

std::string_view format_name(VkFormat f) {
  switch (f) {
    case VK_FORMAT_R8_UNORM: return "R8_UNORM";
    case VK_FORMAT_R8_UINT: return "R8_UINT";
    case VK_FORMAT_R32_SFLOAT: return "R32_SFLOAT";
    case VK_FORMAT_R8G8B8A8_UNORM: return "R8G8B8A8_UNORM";
    default: return "VkFormat(other)";
  }
}

uint32_t texel_bytes(VkFormat f) {
  switch (f) {
    case VK_FORMAT_R8_UNORM:
    case VK_FORMAT_R8_UINT:
    case VK_FORMAT_R8_SNORM:
    case VK_FORMAT_R8_SINT: return 1;
    case VK_FORMAT_R16_SFLOAT:
    case VK_FORMAT_R16_UINT:
    case VK_FORMAT_R16_UNORM: return 2;
    case VK_FORMAT_R32_SFLOAT:
    case VK_FORMAT_R32_UINT:
    case VK_FORMAT_R8G8B8A8_UNORM:
    case VK_FORMAT_R8G8B8A8_UINT: return 4;
    case VK_FORMAT_R16G16B16A16_SFLOAT: return 8;
    case VK_FORMAT_R32G32B32A32_SFLOAT: return 16;
    default: return 0;
  }
}

// ---- instance ------------------------------------------------------------------------------

namespace {
constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                              VkDebugUtilsMessageTypeFlagsEXT types,
                                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  const bool serious = severity & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                   VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT);
  const bool validation = types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT);
  if (serious && validation && data && data->pMessage) static_cast<Instance*>(user)->on_message(data->pMessage);
  return VK_FALSE;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> layers(n);
  vkEnumerateInstanceLayerProperties(&n, layers.data());
  for (const auto& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

bool has_instance_extension(const char* name, const char* layer = nullptr) {
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(layer, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateInstanceExtensionProperties(layer, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}
}  // namespace

Instance::Instance(const InstanceOptions& options) : validation_(options.validation) {
  uint32_t loader_version = VK_API_VERSION_1_0;
  if (vkEnumerateInstanceVersion(&loader_version) != VK_SUCCESS) loader_version = VK_API_VERSION_1_0;
  if (loader_version < VK_API_VERSION_1_1)
    throw Error(Errc::unsupported, "vulkan: the loader supports only Vulkan 1.0; fovea needs 1.1");
  // 1.3 at most: what the validation layers of Debian 12 (1.3.239) know.
  api_version_ = std::min<uint32_t>(VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(loader_version),
                                                        VK_API_VERSION_MINOR(loader_version), 0),
                                    VK_API_VERSION_1_3);

  std::vector<const char*> layers, extensions = options.extensions;
  for (const char* e : options.extensions)
    if (!has_instance_extension(e))
      throw Error(Errc::unsupported, std::string("vulkan: instance extension ") + e + " is not available");
  if (validation_) {
    if (!has_layer(kValidationLayer))
      throw Error(Errc::unsupported, "vulkan: validation requested but VK_LAYER_KHRONOS_validation is not "
                                     "installed (Debian: vulkan-validationlayers)");
    layers.push_back(kValidationLayer);
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "fovea";
  app.pEngineName = "fovea";
  app.apiVersion = api_version_;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = uint32_t(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = uint32_t(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();

  VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
  mi.pfnUserCallback = debug_callback;
  mi.pUserData = this;
  if (validation_) ci.pNext = &mi;  // also catches messages from vkCreate/DestroyInstance

  check(vkCreateInstance(&ci, nullptr, &instance_), "vkCreateInstance");
  if (validation_) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (!create) {
      vkDestroyInstance(instance_, nullptr);
      throw Error(Errc::unsupported, "vulkan: VK_EXT_debug_utils has no vkCreateDebugUtilsMessengerEXT");
    }
    const VkResult r = create(instance_, &mi, nullptr, &messenger_);
    if (r != VK_SUCCESS) {
      vkDestroyInstance(instance_, nullptr);
      check(r, "vkCreateDebugUtilsMessengerEXT");
    }
  }
}

Instance::~Instance() {
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

void Instance::on_message(const char* text) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++errors_;
  if (messages_.size() < 64) messages_.emplace_back(text);
}

std::vector<std::string> Instance::validation_messages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_;
}

void Instance::clear_validation_messages() {
  std::lock_guard<std::mutex> lock(mutex_);
  messages_.clear();
  errors_ = 0;
}

// ---- physical devices ------------------------------------------------------------------------

bool PhysicalDeviceInfo::has_extension(std::string_view name) const {
  return std::find(extensions.begin(), extensions.end(), name) != extensions.end();
}

std::string_view PhysicalDeviceInfo::type_name() const {
  switch (properties.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

uint64_t PhysicalDeviceInfo::device_local_bytes() const {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < memory.memoryHeapCount; ++i)
    if (memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) sum += memory.memoryHeaps[i].size;
  return sum;
}

std::vector<PhysicalDeviceInfo> enumerate_devices(const Instance& instance) {
  uint32_t n = 0;
  check(vkEnumeratePhysicalDevices(instance.handle(), &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> handles(n);
  check(vkEnumeratePhysicalDevices(instance.handle(), &n, handles.data()), "vkEnumeratePhysicalDevices");
  handles.resize(n);
  std::vector<PhysicalDeviceInfo> out;
  for (uint32_t i = 0; i < n; ++i) {
    PhysicalDeviceInfo d;
    d.handle = handles[i];
    d.index = int(i);
    vkGetPhysicalDeviceProperties(d.handle, &d.properties);
    vkGetPhysicalDeviceFeatures(d.handle, &d.features);
    vkGetPhysicalDeviceMemoryProperties(d.handle, &d.memory);
    uint32_t q = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(d.handle, &q, nullptr);
    d.queue_families.resize(q);
    vkGetPhysicalDeviceQueueFamilyProperties(d.handle, &q, d.queue_families.data());
    uint32_t e = 0;
    vkEnumerateDeviceExtensionProperties(d.handle, nullptr, &e, nullptr);
    std::vector<VkExtensionProperties> exts(e);
    vkEnumerateDeviceExtensionProperties(d.handle, nullptr, &e, exts.data());
    for (uint32_t k = 0; k < e; ++k) d.extensions.emplace_back(exts[k].extensionName);
    out.push_back(std::move(d));
  }
  return out;
}

PhysicalDeviceInfo select_device(const Instance& instance, const std::string& selector) {
  std::vector<PhysicalDeviceInfo> devs = enumerate_devices(instance);
  // A device must have a compute queue and Vulkan 1.1 to be usable here.
  std::vector<PhysicalDeviceInfo> usable;
  for (auto& d : devs) {
    const bool compute = std::any_of(d.queue_families.begin(), d.queue_families.end(), [](const auto& f) {
      return f.queueCount > 0 && (f.queueFlags & VK_QUEUE_COMPUTE_BIT);
    });
    if (compute && d.properties.apiVersion >= VK_API_VERSION_1_1) usable.push_back(d);
  }
  if (usable.empty()) throw Error(Errc::device, "vulkan: no Vulkan 1.1 device with a compute queue found");
  auto list = [&] {
    std::string s;
    for (const auto& d : devs) s += (s.empty() ? "" : ", ") + std::to_string(d.index) + ": " + d.name();
    return s;
  };
  if (selector.empty()) {
    auto rank = [](const PhysicalDeviceInfo& d) {
      switch (d.properties.deviceType) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
        default: return 4;
      }
    };
    return *std::min_element(usable.begin(), usable.end(), [&](const auto& a, const auto& b) {
      return rank(a) != rank(b) ? rank(a) < rank(b) : a.index < b.index;
    });
  }
  const bool numeric = std::all_of(selector.begin(), selector.end(), [](char c) { return std::isdigit((unsigned char)c); });
  if (numeric) {
    const long idx = selector.size() > 6 ? -1 : std::stol(selector);
    for (const auto& d : usable)
      if (d.index == idx) return d;
    throw Error(Errc::device, "vulkan: --device " + selector + ": no usable device with that index (devices: " +
                                  list() + ")");
  }
  auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower((unsigned char)c));
    return s;
  };
  for (const auto& d : usable)
    if (lower(d.name()).find(lower(selector)) != std::string::npos) return d;
  throw Error(Errc::device, "vulkan: --device '" + selector + "' matches no usable device (devices: " + list() + ")");
}

// ---- device ----------------------------------------------------------------------------------

Device::Device(Instance& instance, const PhysicalDeviceInfo& physical, const DeviceOptions& options)
    : instance_(&instance), info_(physical) {
  const auto& fams = info_.queue_families;
  int compute = -1, transfer = -1, sparse = -1;
  for (size_t i = 0; i < fams.size(); ++i) {
    if (fams[i].queueCount == 0) continue;
    const VkQueueFlags f = fams[i].queueFlags;
    if ((f & VK_QUEUE_COMPUTE_BIT) && (compute < 0 || ((f & VK_QUEUE_GRAPHICS_BIT) &&
                                                       !(fams[compute].queueFlags & VK_QUEUE_GRAPHICS_BIT))))
      compute = int(i);
    if ((f & VK_QUEUE_TRANSFER_BIT) && !(f & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)) && transfer < 0)
      transfer = int(i);
  }
  if (compute < 0) throw Error(Errc::device, "vulkan: " + info_.name() + " has no compute queue");
  if (options.want_sparse && info_.features.sparseBinding) {
    // Prefer the compute family (one queue serves both), else any SPARSE_BINDING family.
    if (fams[compute].queueFlags & VK_QUEUE_SPARSE_BINDING_BIT) sparse = compute;
    for (size_t i = 0; i < fams.size() && sparse < 0; ++i)
      if (fams[i].queueCount > 0 && (fams[i].queueFlags & VK_QUEUE_SPARSE_BINDING_BIT)) sparse = int(i);
  }
  std::vector<uint32_t> families{uint32_t(compute)};
  if (transfer >= 0) families.push_back(uint32_t(transfer));
  if (sparse >= 0 && std::find(families.begin(), families.end(), uint32_t(sparse)) == families.end())
    families.push_back(uint32_t(sparse));
  const float priority = 1.0f;
  std::vector<VkDeviceQueueCreateInfo> qcis;
  for (uint32_t f : families) {
    VkDeviceQueueCreateInfo q{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    q.queueFamilyIndex = f;
    q.queueCount = 1;
    q.pQueuePriorities = &priority;
    qcis.push_back(q);
  }

  // Features fovea's kernels use when present; each user checks enabled_features().
  const VkPhysicalDeviceFeatures& have = info_.features;
  enabled_.shaderStorageImageExtendedFormats = have.shaderStorageImageExtendedFormats;
  enabled_.shaderInt64 = have.shaderInt64;
  if (options.want_sparse) {
    enabled_.sparseBinding = have.sparseBinding;
    enabled_.sparseResidencyBuffer = have.sparseResidencyBuffer;
    enabled_.sparseResidencyImage2D = have.sparseResidencyImage2D;
    enabled_.sparseResidencyAliased = have.sparseResidencyAliased;
    enabled_.shaderResourceResidency = have.shaderResourceResidency;
  }
  for (const char* e : options.extensions)
    if (!info_.has_extension(e))
      throw Error(Errc::unsupported, "vulkan: " + info_.name() + " lacks device extension " + e);

  VkDeviceCreateInfo ci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  ci.pNext = options.features_next;
  ci.queueCreateInfoCount = uint32_t(qcis.size());
  ci.pQueueCreateInfos = qcis.data();
  ci.enabledExtensionCount = uint32_t(options.extensions.size());
  ci.ppEnabledExtensionNames = options.extensions.data();
  ci.pEnabledFeatures = &enabled_;
  check(vkCreateDevice(info_.handle, &ci, nullptr, &device_), "vkCreateDevice");

  auto get = [&](int family) {
    Queue q;
    q.family = uint32_t(family);
    q.flags = fams[family].queueFlags;
    vkGetDeviceQueue(device_, q.family, 0, &q.handle);
    return q;
  };
  compute_ = get(compute);
  transfer_ = transfer >= 0 ? get(transfer) : compute_;
  if (sparse >= 0) {
    sparse_ = get(sparse);
    has_sparse_queue_ = true;
  }
}

Device::~Device() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    vkDestroyDevice(device_, nullptr);
  }
}

uint32_t Device::memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                             VkMemoryPropertyFlags preferred) const {
  const auto& m = info_.memory;
  int fallback = -1;
  for (uint32_t i = 0; i < m.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = m.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    if ((f & preferred) == preferred) return i;
    if (fallback < 0) fallback = int(i);
  }
  if (fallback < 0)
    throw Error(Errc::unsupported, "vulkan: " + info_.name() + " has no memory type with the required flags");
  return uint32_t(fallback);
}

VkMemoryPropertyFlags Device::memory_flags(uint32_t type_index) const {
  return info_.memory.memoryTypes[type_index].propertyFlags;
}

VkFormatProperties Device::format_properties(VkFormat format) const {
  VkFormatProperties p{};
  vkGetPhysicalDeviceFormatProperties(info_.handle, format, &p);
  return p;
}

void Device::require_format(VkFormat format, VkFormatFeatureFlags features, const char* what) const {
  if ((format_properties(format).optimalTilingFeatures & features) != features)
    throw Error(Errc::unsupported, "vulkan: " + info_.name() + ": format " + std::string(format_name(format)) +
                                       " lacks " + what);
}

void Device::wait_idle() const { check(vkDeviceWaitIdle(device_), "vkDeviceWaitIdle"); }

// ---- memory ----------------------------------------------------------------------------------

Memory Memory::allocate(const Device& device, const VkMemoryRequirements& req, MemoryUse use) {
  uint32_t type = 0;
  switch (use) {
    case MemoryUse::device:
      type = device.memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
      break;
    case MemoryUse::upload:
      type = device.memory_type(req.memoryTypeBits,
                                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
      break;
    case MemoryUse::readback:
      type = device.memory_type(req.memoryTypeBits,
                                VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
      break;
  }
  return allocate_type(device, req.size, type, use != MemoryUse::device);
}

Memory Memory::allocate_type(const Device& device, VkDeviceSize size, uint32_t type_index, bool map) {
  // Refuse sizes beyond the heap up front: some drivers (lavapipe) would try to malloc them.
  const auto& mp = device.info().memory;
  const VkDeviceSize heap = mp.memoryHeaps[mp.memoryTypes[type_index].heapIndex].size;
  if (size > heap)
    throw Error(Errc::out_of_memory, "vulkan: allocation of " + std::to_string(size) + " bytes exceeds the " +
                                         std::to_string(heap) + "-byte memory heap of " + device.info().name());
  Memory m;
  m.device_ = device.handle();
  m.size_ = size;
  m.type_ = type_index;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = size;
  ai.memoryTypeIndex = type_index;
  check(vkAllocateMemory(device.handle(), &ai, nullptr, &m.memory_), "vkAllocateMemory");
  if (map) check(vkMapMemory(device.handle(), m.memory_, 0, VK_WHOLE_SIZE, 0, &m.mapped_), "vkMapMemory");
  return m;
}

Memory& Memory::operator=(Memory&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, VK_NULL_HANDLE);
    memory_ = std::exchange(o.memory_, VK_NULL_HANDLE);
    size_ = std::exchange(o.size_, 0);
    type_ = std::exchange(o.type_, 0);
    mapped_ = std::exchange(o.mapped_, nullptr);
  }
  return *this;
}

void Memory::reset() {
  if (memory_) {
    if (mapped_) vkUnmapMemory(device_, memory_);
    vkFreeMemory(device_, memory_, nullptr);
  }
  memory_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
  size_ = 0;
}

// ---- buffers ---------------------------------------------------------------------------------

Buffer Buffer::create_unbound(const Device& device, VkDeviceSize size, VkBufferUsageFlags usage,
                              VkBufferCreateFlags flags) {
  Buffer b;
  b.device_ = device.handle();
  b.size_ = std::max<VkDeviceSize>(size, 4);
  VkBufferCreateInfo ci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  ci.size = b.size_;
  ci.usage = usage;
  ci.flags = flags;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device.handle(), &ci, nullptr, &b.buffer_), "vkCreateBuffer");
  return b;
}

Buffer Buffer::create(const Device& device, VkDeviceSize size, VkBufferUsageFlags usage, MemoryUse use) {
  Buffer b = create_unbound(device, size, usage, 0);
  b.memory_ = Memory::allocate(device, b.requirements(), use);
  check(vkBindBufferMemory(device.handle(), b.buffer_, b.memory_.handle(), 0), "vkBindBufferMemory");
  return b;
}

VkMemoryRequirements Buffer::requirements() const {
  VkMemoryRequirements r{};
  vkGetBufferMemoryRequirements(device_, buffer_, &r);
  return r;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, VK_NULL_HANDLE);
    buffer_ = std::exchange(o.buffer_, VK_NULL_HANDLE);
    size_ = std::exchange(o.size_, 0);
    memory_ = std::move(o.memory_);
  }
  return *this;
}

void Buffer::reset() {
  if (buffer_) vkDestroyBuffer(device_, buffer_, nullptr);
  buffer_ = VK_NULL_HANDLE;
  memory_.reset();
  size_ = 0;
}

// ---- images ----------------------------------------------------------------------------------

std::optional<Error> Image::check_desc(const Device& device, const ImageDesc& desc) {
  const VkPhysicalDeviceLimits& lim = device.limits();
  if (desc.width == 0 || desc.height == 0 || desc.layers == 0 || desc.levels == 0)
    return Error(Errc::invalid_argument, "vulkan: image extents, layers and levels must be >= 1");
  if (desc.width > lim.maxImageDimension2D || desc.height > lim.maxImageDimension2D)
    return Error(Errc::limit_exceeded, "vulkan: image " + std::to_string(desc.width) + "x" +
                                           std::to_string(desc.height) + " exceeds the device's maxImageDimension2D " +
                                           std::to_string(lim.maxImageDimension2D));
  if (desc.layers > lim.maxImageArrayLayers)
    return Error(Errc::limit_exceeded, "vulkan: " + std::to_string(desc.layers) +
                                           " array layers exceed the device's maxImageArrayLayers " +
                                           std::to_string(lim.maxImageArrayLayers));
  VkImageFormatProperties fp{};
  const VkResult fr = vkGetPhysicalDeviceImageFormatProperties(device.physical(), desc.format, VK_IMAGE_TYPE_2D,
                                                               VK_IMAGE_TILING_OPTIMAL, desc.usage, desc.flags, &fp);
  if (fr == VK_ERROR_FORMAT_NOT_SUPPORTED)
    return Error(Errc::unsupported, "vulkan: " + device.info().name() + " cannot create " +
                                        std::string(format_name(desc.format)) + " images with the requested usage");
  check(fr, "vkGetPhysicalDeviceImageFormatProperties");
  if (desc.levels > fp.maxMipLevels || desc.layers > fp.maxArrayLayers || desc.width > fp.maxExtent.width ||
      desc.height > fp.maxExtent.height)
    return Error(Errc::limit_exceeded, "vulkan: image of " + std::to_string(desc.width) + "x" +
                                           std::to_string(desc.height) + "x" + std::to_string(desc.layers) +
                                           " layers, " + std::to_string(desc.levels) +
                                           " levels exceeds the format's limits");
  // The whole chain's size against maxResourceSize (e.g. 4 GiB on lavapipe): a clean
  // out-of-memory error instead of a driver's refusal or a validation message.
  const uint64_t texel = texel_bytes(desc.format);
  if (texel != 0) {
    uint64_t bytes = 0;
    for (uint32_t l = 0; l < desc.levels; ++l)
      bytes += uint64_t(std::max(1u, desc.width >> l)) * std::max(1u, desc.height >> l) * desc.layers * texel;
    if (bytes > fp.maxResourceSize)
      return Error(Errc::out_of_memory, "vulkan: image of " + std::to_string(desc.width) + "x" +
                                            std::to_string(desc.height) + "x" + std::to_string(desc.layers) +
                                            " layers needs " + std::to_string(bytes) + " bytes; the device allows " +
                                            std::to_string(fp.maxResourceSize) + " per image");
  }
  return std::nullopt;
}

Image Image::create_unbound(const Device& device, const ImageDesc& desc) {
  if (std::optional<Error> e = check_desc(device, desc)) throw *e;
  Image img;
  img.device_ = device.handle();
  img.desc_ = desc;
  VkImageCreateInfo ci{VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO};
  ci.flags = desc.flags;
  ci.imageType = VK_IMAGE_TYPE_2D;
  ci.format = desc.format;
  ci.extent = {desc.width, desc.height, 1};
  ci.mipLevels = desc.levels;
  ci.arrayLayers = desc.layers;
  ci.samples = VK_SAMPLE_COUNT_1_BIT;
  ci.tiling = VK_IMAGE_TILING_OPTIMAL;
  ci.usage = desc.usage;
  ci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  ci.initialLayout = VK_IMAGE_LAYOUT_UNDEFINED;
  check(vkCreateImage(device.handle(), &ci, nullptr, &img.image_), "vkCreateImage");
  return img;
}

Image Image::create(const Device& device, const ImageDesc& desc) {
  Image img = create_unbound(device, desc);
  VkMemoryRequirements req{};
  vkGetImageMemoryRequirements(device.handle(), img.image_, &req);
  img.memory_ = Memory::allocate(device, req, MemoryUse::device);
  check(vkBindImageMemory(device.handle(), img.image_, img.memory_.handle(), 0), "vkBindImageMemory");
  img.view_ = img.create_view(desc.format, 0, desc.levels,
                              (desc.flags & VK_IMAGE_CREATE_EXTENDED_USAGE_BIT)
                                  ? desc.usage & ~VkImageUsageFlags(VK_IMAGE_USAGE_STORAGE_BIT)
                                  : 0);
  return img;
}

VkImageView Image::create_view(VkFormat format, uint32_t base_level, uint32_t levels, VkImageUsageFlags usage) {
  VkImageViewCreateInfo vi{VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO};
  vi.image = image_;
  vi.viewType = VK_IMAGE_VIEW_TYPE_2D_ARRAY;
  vi.format = format;
  vi.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, base_level, levels, 0, desc_.layers};
  VkImageViewUsageCreateInfo ui{VK_STRUCTURE_TYPE_IMAGE_VIEW_USAGE_CREATE_INFO};
  if (usage) {
    ui.usage = usage;
    vi.pNext = &ui;
  }
  VkImageView v = VK_NULL_HANDLE;
  check(vkCreateImageView(device_, &vi, nullptr, &v), "vkCreateImageView");
  extra_views_.push_back(v);  // view_ is one of these too
  return v;
}

Image& Image::operator=(Image&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, VK_NULL_HANDLE);
    image_ = std::exchange(o.image_, VK_NULL_HANDLE);
    view_ = std::exchange(o.view_, VK_NULL_HANDLE);
    extra_views_ = std::move(o.extra_views_);
    o.extra_views_.clear();
    desc_ = o.desc_;
    memory_ = std::move(o.memory_);
  }
  return *this;
}

void Image::reset() {
  for (VkImageView v : extra_views_) vkDestroyImageView(device_, v, nullptr);
  extra_views_.clear();
  view_ = VK_NULL_HANDLE;  // one of extra_views_
  if (image_) vkDestroyImage(device_, image_, nullptr);
  image_ = VK_NULL_HANDLE;
  memory_.reset();
}

void image_barrier(VkCommandBuffer cb, VkImage image, uint32_t base_level, uint32_t levels, VkImageLayout old_layout,
                   VkImageLayout new_layout, VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                   VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkImageMemoryBarrier b{VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER};
  b.srcAccessMask = src_access;
  b.dstAccessMask = dst_access;
  b.oldLayout = old_layout;
  b.newLayout = new_layout;
  b.srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  b.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
  b.image = image;
  b.subresourceRange = {VK_IMAGE_ASPECT_COLOR_BIT, base_level, levels, 0, VK_REMAINING_ARRAY_LAYERS};
  vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 0, nullptr, 0, nullptr, 1, &b);
}

void memory_barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = src_access;
  b.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
}

// ---- commands --------------------------------------------------------------------------------

Fence::Fence(const Device& device, bool signaled) : device_(device.handle()) {
  VkFenceCreateInfo ci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (signaled) ci.flags = VK_FENCE_CREATE_SIGNALED_BIT;
  check(vkCreateFence(device_, &ci, nullptr, &fence_), "vkCreateFence");
}
Fence::~Fence() {
  if (fence_) vkDestroyFence(device_, fence_, nullptr);
}
void Fence::wait(uint64_t timeout_ns) {
  const VkResult r = vkWaitForFences(device_, 1, &fence_, VK_TRUE, timeout_ns);
  if (r == VK_TIMEOUT) throw Error(Errc::device, "vulkan: waiting for the device timed out");
  check(r, "vkWaitForFences");
}
void Fence::reset() { check(vkResetFences(device_, 1, &fence_), "vkResetFences"); }

Commands::Commands(const Device& device, const Queue& queue) : device_(&device), queue_(queue), fence_(device) {
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pi.queueFamilyIndex = queue.family;
  check(vkCreateCommandPool(device.handle(), &pi, nullptr, &pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  const VkResult r = vkAllocateCommandBuffers(device.handle(), &ai, &cb_);
  if (r != VK_SUCCESS) {
    vkDestroyCommandPool(device.handle(), pool_, nullptr);
    check(r, "vkAllocateCommandBuffers");
  }
}

Commands::~Commands() {
  if (pool_) vkDestroyCommandPool(device_->handle(), pool_, nullptr);
}

VkCommandBuffer Commands::begin() {
  check(vkResetCommandPool(device_->handle(), pool_, 0), "vkResetCommandPool");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(cb_, &bi), "vkBeginCommandBuffer");
  return cb_;
}

void Commands::submit_and_wait() {
  check(vkEndCommandBuffer(cb_), "vkEndCommandBuffer");
  fence_.reset();
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb_;
  check(vkQueueSubmit(queue_.handle, 1, &si, fence_.handle()), "vkQueueSubmit");
  fence_.wait();
}

// ---- compute kernels -------------------------------------------------------------------------

ComputePipeline::ComputePipeline(const Device& device, std::span<const uint32_t> spirv,
                                 std::vector<VkDescriptorType> types, uint32_t push_bytes, const char* name)
    : device_(&device), name_(name), types_(std::move(types)), push_bytes_(push_bytes) {
  const VkDevice dev = device.handle();
  if (push_bytes > device.limits().maxPushConstantsSize)
    throw Error(Errc::unsupported, "vulkan: " + name_ + " needs " + std::to_string(push_bytes) +
                                       " bytes of push constants; the device allows " +
                                       std::to_string(device.limits().maxPushConstantsSize));
  // On any failure below, the destructor of a partly built pipeline is not run: clean up here.
  try {
    VkShaderModuleCreateInfo si{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    si.codeSize = spirv.size_bytes();
    si.pCode = spirv.data();
    check(vkCreateShaderModule(dev, &si, nullptr, &module_), "vkCreateShaderModule");

    std::vector<VkDescriptorSetLayoutBinding> bindings;
    for (uint32_t i = 0; i < types_.size(); ++i)
      bindings.push_back({i, types_[i], 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr});
    VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = uint32_t(bindings.size());
    li.pBindings = bindings.data();
    check(vkCreateDescriptorSetLayout(dev, &li, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");

    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pli.setLayoutCount = 1;
    pli.pSetLayouts = &set_layout_;
    pli.pushConstantRangeCount = push_bytes ? 1 : 0;
    pli.pPushConstantRanges = &range;
    check(vkCreatePipelineLayout(dev, &pli, nullptr, &layout_), "vkCreatePipelineLayout");

    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module_;
    ci.stage.pName = "main";
    ci.layout = layout_;
    check(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, nullptr, &pipeline_), "vkCreateComputePipelines");
  } catch (...) {
    destroy();
    throw;
  }
}

ComputePipeline::~ComputePipeline() { destroy(); }

void ComputePipeline::destroy() {
  const VkDevice dev = device_->handle();
  if (pipeline_) vkDestroyPipeline(dev, pipeline_, nullptr);
  if (layout_) vkDestroyPipelineLayout(dev, layout_, nullptr);
  if (set_layout_) vkDestroyDescriptorSetLayout(dev, set_layout_, nullptr);
  if (module_) vkDestroyShaderModule(dev, module_, nullptr);
  pipeline_ = VK_NULL_HANDLE;
  layout_ = VK_NULL_HANDLE;
  set_layout_ = VK_NULL_HANDLE;
  module_ = VK_NULL_HANDLE;
}

void ComputePipeline::dispatch(VkCommandBuffer cb, VkDescriptorSet set, const void* push, uint32_t gx, uint32_t gy,
                               uint32_t gz) const {
  const auto& maxg = device_->limits().maxComputeWorkGroupCount;
  if (gx > maxg[0] || gy > maxg[1] || gz > maxg[2])
    throw Error(Errc::limit_exceeded, "vulkan: " + name_ + " dispatch exceeds maxComputeWorkGroupCount");
  if (gx == 0 || gy == 0 || gz == 0) return;
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout_, 0, 1, &set, 0, nullptr);
  if (push_bytes_) vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes_, push);
  vkCmdDispatch(cb, gx, gy, gz);
}

VkDescriptorPool ComputePipeline::create_pool(uint32_t max_sets) const {
  std::vector<VkDescriptorPoolSize> sizes;
  for (VkDescriptorType t : types_) sizes.push_back({t, max_sets});
  VkDescriptorPoolCreateInfo di{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  di.maxSets = max_sets;
  di.poolSizeCount = uint32_t(sizes.size());
  di.pPoolSizes = sizes.data();
  VkDescriptorPool pool = VK_NULL_HANDLE;
  check(vkCreateDescriptorPool(device_->handle(), &di, nullptr, &pool), "vkCreateDescriptorPool");
  return pool;
}

ComputeKernel::ComputeKernel(const Device& device, std::span<const uint32_t> spirv,
                             std::vector<VkDescriptorType> types, uint32_t push_bytes, uint32_t max_sets,
                             const char* name)
    : pipeline_(device, spirv, std::move(types), push_bytes, name), max_sets_(max_sets) {
  try {
    pool_ = pipeline_.create_pool(max_sets);
    cache_pool_ = pipeline_.create_pool(max_sets);
  } catch (...) {
    destroy();  // a constructor that throws gets no destructor call (pipeline_ is destroyed)
    throw;
  }
}

ComputeKernel::~ComputeKernel() { destroy(); }

void ComputeKernel::destroy() {
  const VkDevice dev = pipeline_.device().handle();
  if (pool_) vkDestroyDescriptorPool(dev, pool_, nullptr);
  if (cache_pool_) vkDestroyDescriptorPool(dev, cache_pool_, nullptr);
  pool_ = VK_NULL_HANDLE;
  cache_pool_ = VK_NULL_HANDLE;
  cached_.clear();
}

void ComputeKernel::record(VkCommandBuffer cb, std::span<const Binding> bindings, const void* push,
                           uint32_t gx, uint32_t gy, uint32_t gz) {
  check_bindings(bindings);
  pipeline_.dispatch(cb, new_set(pool_, bindings), push, gx, gy, gz);
}

void ComputeKernel::check_bindings(std::span<const Binding> bindings) const {
  if (bindings.size() != pipeline_.types().size())
    throw Error(Errc::internal, "vulkan: " + pipeline_.name() + " takes " + std::to_string(pipeline_.types().size()) +
                                    " bindings");
}

VkDescriptorSet ComputeKernel::new_set(VkDescriptorPool pool, std::span<const Binding> bindings) {
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = pool;
  ai.descriptorSetCount = 1;
  const VkDescriptorSetLayout set_layout = pipeline_.set_layout();
  ai.pSetLayouts = &set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(pipeline_.device().handle(), &ai, &set), "vkAllocateDescriptorSets");
  write_set(set, bindings);
  return set;
}

void ComputeKernel::write_set(VkDescriptorSet set, std::span<const Binding> bindings) {
  std::vector<VkDescriptorBufferInfo> buffers(bindings.size());
  std::vector<VkDescriptorImageInfo> images(bindings.size());
  std::vector<VkWriteDescriptorSet> writes;
  for (uint32_t i = 0; i < bindings.size(); ++i) {
    const Binding& b = bindings[i];
    VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.dstBinding = i;
    w.descriptorCount = 1;
    w.descriptorType = pipeline_.types()[i];
    if (w.descriptorType == VK_DESCRIPTOR_TYPE_STORAGE_BUFFER || w.descriptorType == VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER) {
      buffers[i] = {b.buffer, 0, VK_WHOLE_SIZE};
      w.pBufferInfo = &buffers[i];
    } else {
      images[i] = {b.sampler, b.view, b.layout};
      w.pImageInfo = &images[i];
    }
    writes.push_back(w);
  }
  vkUpdateDescriptorSets(pipeline_.device().handle(), uint32_t(writes.size()), writes.data(), 0, nullptr);
}

void ComputeKernel::reset_sets() {
  check(vkResetDescriptorPool(pipeline_.device().handle(), pool_, 0), "vkResetDescriptorPool");
}

// ---- descriptor-set cache ----------------------------------------------------------------------

namespace {
bool same_binding(const Binding& a, const Binding& b) {
  return a.type == b.type && a.buffer == b.buffer && a.view == b.view && a.sampler == b.sampler &&
         a.layout == b.layout;
}
}  // namespace

void ComputeKernel::record_cached(VkCommandBuffer cb, std::span<const Binding> bindings, const void* push,
                                  uint32_t gx, uint32_t gy, uint32_t gz) {
  check_bindings(bindings);
  for (const CachedSet& c : cached_)
    if (std::equal(c.bindings.begin(), c.bindings.end(), bindings.begin(), bindings.end(), same_binding))
      return pipeline_.dispatch(cb, c.set, push, gx, gy, gz);
  if (cached_.size() >= max_sets_) return record(cb, bindings, push, gx, gy, gz);
  const VkDescriptorSet set = new_set(cache_pool_, bindings);
  cached_.push_back({std::vector<Binding>(bindings.begin(), bindings.end()), set});
  pipeline_.dispatch(cb, set, push, gx, gy, gz);
}

void ComputeKernel::forget_cached() {
  if (cached_.empty()) return;
  cached_.clear();
  check(vkResetDescriptorPool(pipeline_.device().handle(), cache_pool_, 0), "vkResetDescriptorPool");
}

// ---- samplers --------------------------------------------------------------------------------

Sampler::Sampler(const Device& device, VkFilter filter, VkSamplerMipmapMode mip_mode, float max_lod)
    : device_(device.handle()) {
  VkSamplerCreateInfo ci{VK_STRUCTURE_TYPE_SAMPLER_CREATE_INFO};
  ci.magFilter = filter;
  ci.minFilter = filter;
  ci.mipmapMode = mip_mode;
  ci.addressModeU = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE;
  ci.addressModeV = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE;
  ci.addressModeW = VK_SAMPLER_ADDRESS_MODE_CLAMP_TO_EDGE;
  ci.minLod = 0.0f;
  ci.maxLod = max_lod;
  ci.unnormalizedCoordinates = VK_FALSE;
  check(vkCreateSampler(device_, &ci, nullptr, &sampler_), "vkCreateSampler");
}
Sampler::~Sampler() {
  if (sampler_) vkDestroySampler(device_, sampler_, nullptr);
}

}  // namespace fovea::vk
