#include "gpu/vk_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace strata::gpu {

namespace {
struct Loader {
  VkApi api;
  std::string why;
  bool ok = false;
};

Loader load() {
  Loader l;
  const char* env = std::getenv("STRATA_VULKAN_LOADER");
  const char* lib = env && *env ? env : "libvulkan.so.1";
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.why = std::string("no Vulkan loader (") + (e ? e : lib) + ")";
    return l;
  }
  l.api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(h, "vkGetInstanceProcAddr"));
  if (!l.api.vkGetInstanceProcAddr) {
    l.why = std::string("no Vulkan loader (") + lib + " has no vkGetInstanceProcAddr)";
    return l;
  }
#define STRATA_VK_GLOBAL(name) \
  l.api.name = reinterpret_cast<PFN_##name>(l.api.vkGetInstanceProcAddr(nullptr, #name));
  STRATA_VK_GLOBAL_FNS(STRATA_VK_GLOBAL)
#undef STRATA_VK_GLOBAL
  if (!l.api.vkCreateInstance || !l.api.vkEnumerateInstanceExtensionProperties) {
    l.why = std::string("no Vulkan loader (") + lib + " lacks vkCreateInstance)";
    return l;
  }
  l.ok = true;  // the handle stays open for the life of the process
  return l;
}
}  // namespace

const VkApi* vk_loader(std::string* why) {
  static const Loader l = load();
  if (!l.ok) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.api;
}

void vk_load_instance(VkApi& api, VkInstance inst) {
#define STRATA_VK_INST(name)                                                               \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetInstanceProcAddr(inst, #name));         \
  if (!api.name) fail("Vulkan: the loader has no {} (instance function)", #name);
  STRATA_VK_INSTANCE_FNS(STRATA_VK_INST)
#undef STRATA_VK_INST
}

void vk_load_device(VkApi& api, VkDevice dev) {
#define STRATA_VK_DEV(name)                                                         \
  api.name = reinterpret_cast<PFN_##name>(api.vkGetDeviceProcAddr(dev, #name));     \
  if (!api.name) fail("Vulkan: the device has no {} (device function)", #name);
  STRATA_VK_DEVICE_FNS(STRATA_VK_DEV)
#undef STRATA_VK_DEV
}

const char* vk_result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VK_ERROR_UNKNOWN";
  }
}

}  // namespace strata::gpu
