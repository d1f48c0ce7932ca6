#pragma once
// The Vulkan entry points Strata calls, loaded at run time from the system loader
// (libvulkan.so.1, Debian's libvulkan1) with dlopen: the binary does not link the loader, so it
// starts and runs on the CPU on machines without one. Headers are Debian's libvulkan-dev.
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <string>

namespace strata::gpu {

// X(name): every function; global ones come from vkGetInstanceProcAddr(nullptr, ...), instance
// ones after vkCreateInstance, device ones from vkGetDeviceProcAddr.
#define STRATA_VK_GLOBAL_FNS(X) \
  X(vkCreateInstance)           \
  X(vkEnumerateInstanceVersion) \
  X(vkEnumerateInstanceExtensionProperties)

#define STRATA_VK_INSTANCE_FNS(X)                   \
  X(vkDestroyInstance)                              \
  X(vkEnumeratePhysicalDevices)                     \
  X(vkGetPhysicalDeviceProperties)                  \
  X(vkGetPhysicalDeviceProperties2)                 \
  X(vkGetPhysicalDeviceFeatures2)                   \
  X(vkGetPhysicalDeviceMemoryProperties)            \
  X(vkGetPhysicalDeviceQueueFamilyProperties)       \
  X(vkEnumerateDeviceExtensionProperties)           \
  X(vkCreateDevice)                                 \
  X(vkGetDeviceProcAddr)

#define STRATA_VK_DEVICE_FNS(X)       \
  X(vkDestroyDevice)                  \
  X(vkGetDeviceQueue)                 \
  X(vkDeviceWaitIdle)                 \
  X(vkCreateBuffer)                   \
  X(vkDestroyBuffer)                  \
  X(vkGetBufferMemoryRequirements)    \
  X(vkAllocateMemory)                 \
  X(vkFreeMemory)                     \
  X(vkBindBufferMemory)               \
  X(vkMapMemory)                      \
  X(vkUnmapMemory)                    \
  X(vkInvalidateMappedMemoryRanges)   \
  X(vkFlushMappedMemoryRanges)        \
  X(vkCreateShaderModule)             \
  X(vkDestroyShaderModule)            \
  X(vkCreatePipelineCache)            \
  X(vkDestroyPipelineCache)           \
  X(vkGetPipelineCacheData)           \
  X(vkCreateDescriptorSetLayout)      \
  X(vkDestroyDescriptorSetLayout)     \
  X(vkCreatePipelineLayout)           \
  X(vkDestroyPipelineLayout)          \
  X(vkCreateComputePipelines)         \
  X(vkDestroyPipeline)                \
  X(vkCreateDescriptorPool)           \
  X(vkDestroyDescriptorPool)          \
  X(vkResetDescriptorPool)            \
  X(vkAllocateDescriptorSets)         \
  X(vkUpdateDescriptorSets)           \
  X(vkCreateCommandPool)              \
  X(vkDestroyCommandPool)             \
  X(vkResetCommandPool)               \
  X(vkAllocateCommandBuffers)         \
  X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer)               \
  X(vkCmdBindPipeline)                \
  X(vkCmdBindDescriptorSets)          \
  X(vkCmdPushConstants)               \
  X(vkCmdDispatch)                    \
  X(vkCmdPipelineBarrier)             \
  X(vkCmdCopyBuffer)                  \
  X(vkCmdFillBuffer)                  \
  X(vkCreateFence)                    \
  X(vkDestroyFence)                   \
  X(vkResetFences)                    \
  X(vkWaitForFences)                  \
  X(vkQueueSubmit)                    \
  X(vkCreateQueryPool)                \
  X(vkDestroyQueryPool)               \
  X(vkCmdResetQueryPool)              \
  X(vkCmdWriteTimestamp)              \
  X(vkGetQueryPoolResults)

struct VkApi {
#define STRATA_VK_MEMBER(name) PFN_##name name = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  STRATA_VK_GLOBAL_FNS(STRATA_VK_MEMBER)
  STRATA_VK_INSTANCE_FNS(STRATA_VK_MEMBER)
  STRATA_VK_DEVICE_FNS(STRATA_VK_MEMBER)
#undef STRATA_VK_MEMBER
};

// Loads the loader library once per process (later calls return the same answer). Returns
// nullptr and sets *why ("no Vulkan loader: libvulkan.so.1: cannot open shared object file...")
// when it is absent. STRATA_VULKAN_LOADER names another library file (tests: a missing one).
const VkApi* vk_loader(std::string* why);
// Fills the instance-level entries of `api` (a copy of the loader's) for `inst`; throws
// strata::Error naming the first missing entry.
void vk_load_instance(VkApi& api, VkInstance inst);
void vk_load_device(VkApi& api, VkDevice dev);

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* vk_result_name(VkResult r);

}  // namespace strata::gpu
