#include "gpu/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/units.h"

namespace strata::gpu {

namespace {


// Instance handle plus the loader's entries for it; destroyed unless released to a Device.
struct Instance {
  VkApi api{};
  VkInstance inst = VK_NULL_HANDLE;
  ~Instance() {
    if (inst) api.vkDestroyInstance(inst, nullptr);
  }
};

// Creates an instance (Vulkan 1.1, no layers, no extensions beyond portability enumeration);
// nullptr inst with *why on failure.
bool create_instance(Instance& in, std::string* why) {
  const VkApi* base = vk_loader(why);
  if (!base) return false;
  in.api = *base;
  uint32_t version = VK_API_VERSION_1_0;
  if (in.api.vkEnumerateInstanceVersion) in.api.vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_1) {
    *why = "the Vulkan loader is older than 1.1";
    return false;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "strata";
  app.pEngineName = "strata";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  const VkResult r = in.api.vkCreateInstance(&ci, nullptr, &in.inst);
  if (r != VK_SUCCESS) {
    *why = std::string("no Vulkan device (vkCreateInstance: ") + vk_result_name(r) + ")";
    in.inst = VK_NULL_HANDLE;
    return false;
  }
  vk_load_instance(in.api, in.inst);
  return true;
}

DeviceInfo describe(const VkApi& vk, VkPhysicalDevice pd, int index, uint32_t min_shared) {
  DeviceInfo d;
  d.index = index;
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  sub.pNext = &drv;
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sub;
  VkPhysicalDeviceProperties base{};
  vk.vkGetPhysicalDeviceProperties(pd, &base);
  const bool v12 = base.apiVersion >= VK_API_VERSION_1_2;
  if (!v12) sub.pNext = nullptr;  // VkPhysicalDeviceDriverProperties is core in 1.2
  vk.vkGetPhysicalDeviceProperties2(pd, &p2);
  const auto& p = p2.properties;
  d.name = p.deviceName;
  d.driver = v12 ? std::string(drv.driverName) + " " + drv.driverInfo : "";
  d.type = p.deviceType;
  d.vendor_id = p.vendorID;
  d.device_id = p.deviceID;
  d.api_version = p.apiVersion;
  d.max_storage_range = p.limits.maxStorageBufferRange;
  d.shared_memory = p.limits.maxComputeSharedMemorySize;
  d.max_invocations = p.limits.maxComputeWorkGroupInvocations;
  d.min_storage_offset_align = static_cast<uint32_t>(p.limits.minStorageBufferOffsetAlignment);
  d.subgroup_size = sub.subgroupSize;
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p3.pNext = &m3;
  vk.vkGetPhysicalDeviceProperties2(pd, &p3);
  d.max_alloc = m3.maxMemoryAllocationSize;

  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &s16;
  if (v12) s16.pNext = &f12;
  vk.vkGetPhysicalDeviceFeatures2(pd, &f2);
  d.storage16 = s16.storageBuffer16BitAccess;
  d.fp16 = v12 && f12.shaderFloat16;
  d.int8 = v12 && f12.shaderInt8;
  d.storage8 = v12 && f12.storageBuffer8BitAccess;
  uint32_t n_ext = 0;
  vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, nullptr);
  std::vector<VkExtensionProperties> exts(n_ext);
  vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, "VK_KHR_shader_integer_dot_product") == 0) d.int_dot = true;

  VkPhysicalDeviceMemoryProperties mp{};
  vk.vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  for (uint32_t h = 0; h < mp.memoryHeapCount; ++h)
    if (mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) d.device_local_bytes = std::max<uint64_t>(d.device_local_bytes, mp.memoryHeaps[h].size);
  for (uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    const auto f = mp.memoryTypes[t].propertyFlags;
    if ((f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT)) d.host_cached = true;
  }

  uint32_t nq = 0;
  vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  bool compute = false;
  for (const auto& q : qf) {
    if (q.queueFlags & VK_QUEUE_COMPUTE_BIT) compute = true;
    if ((q.queueFlags & VK_QUEUE_TRANSFER_BIT) && !(q.queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT))) d.transfer_queue = true;
  }

  std::vector<std::string> miss;
  if (p.apiVersion < VK_API_VERSION_1_1) miss.push_back("Vulkan 1.1");
  if (!compute) miss.push_back("a compute queue");
  if (d.max_invocations < 256) miss.push_back(fmt::format("256 invocations per workgroup (has {})", d.max_invocations));
  if (d.shared_memory < min_shared)
    miss.push_back(fmt::format("{} of shared memory (has {})", format_bytes(min_shared), format_bytes(d.shared_memory)));
  for (size_t i = 0; i < miss.size(); ++i) d.missing += (i ? ", " : "") + miss[i];
  return d;
}

// Preference of `vulkan` without an index: discrete, integrated, virtual, then CPU devices.
int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

std::vector<VkPhysicalDevice> physical_devices(const Instance& in) {
  uint32_t n = 0;
  in.api.vkEnumeratePhysicalDevices(in.inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n);
  if (n) in.api.vkEnumeratePhysicalDevices(in.inst, &n, pds.data());
  pds.resize(n);
  return pds;
}

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/strata";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/strata";
  return "";
}

}  // namespace

GpuRequest parse_gpu_option(std::string_view s) {
  GpuRequest r;
  if (s == "none") return r;
  if (s == "auto") {
    r.kind = GpuRequest::Kind::Auto;
    return r;
  }
  if (s == "vulkan") {
    r.kind = GpuRequest::Kind::Vulkan;
    return r;
  }
  if (s.starts_with("vulkan:")) {
    const std::string_view n = s.substr(7);
    int v = 0;
    bool ok = !n.empty() && n.size() <= 4;
    for (char c : n) {
      if (c < '0' || c > '9') ok = false;
      else v = v * 10 + (c - '0');
    }
    if (ok) {
      r.kind = GpuRequest::Kind::Vulkan;
      r.index = v;
      return r;
    }
  }
  fail("--gpu: '{}' is not one of auto, none, vulkan, vulkan:N", s);
}

const char* DeviceInfo::type_name() const {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

std::string DeviceInfo::summary() const {
  std::string s = fmt::format("vulkan:{} {} ({}, Vulkan {}.{}, {} device-local, storage range {}, subgroup {}{}{})", index, name,
                              type_name(), VK_API_VERSION_MAJOR(api_version), VK_API_VERSION_MINOR(api_version),
                              format_bytes(device_local_bytes), format_bytes(max_storage_range), subgroup_size,
                              transfer_queue ? ", transfer queue" : "", fp16 ? ", fp16" : "");
  if (!missing.empty()) s += " unusable: lacks " + missing;
  return s;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    dev_ = o.dev_;
    buf_ = o.buf_;
    mem_ = o.mem_;
    bytes_ = o.bytes_;
    map_ = o.map_;
    coherent_ = o.coherent_;
    counted_ = o.counted_;
    memory_bytes_ = o.memory_bytes_;
    o.counted_ = false;
    o.memory_bytes_ = 0;
    o.dev_ = nullptr;
    o.buf_ = VK_NULL_HANDLE;
    o.mem_ = VK_NULL_HANDLE;
    o.map_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (dev_) dev_->free(*this);
  dev_ = nullptr;
}

std::vector<DeviceInfo> Device::enumerate(std::string* why) {
  Instance in;
  std::string w;
  std::vector<DeviceInfo> out;
  if (!create_instance(in, &w)) {
    if (why) *why = w;
    return out;
  }
  const auto pds = physical_devices(in);
  for (size_t i = 0; i < pds.size(); ++i) out.push_back(describe(in.api, pds[i], static_cast<int>(i), DeviceOptions{}.min_shared_memory));
  if (out.empty() && why) *why = "no Vulkan device (the loader found no driver that offers one)";
  return out;
}

std::unique_ptr<Device> Device::open(int index, const DeviceOptions& opt) {
  auto in = std::make_unique<Instance>();
  std::string why;
  if (!create_instance(*in, &why)) fail("--gpu vulkan: {}", why);
  const auto pds = physical_devices(*in);
  if (pds.empty()) fail("--gpu vulkan: no Vulkan device (the loader found no driver that offers one)");
  std::vector<DeviceInfo> infos;
  for (size_t i = 0; i < pds.size(); ++i) infos.push_back(describe(in->api, pds[i], static_cast<int>(i), opt.min_shared_memory));
  int pick = index;
  if (index >= 0) {
    if (index >= static_cast<int>(pds.size())) {
      std::string list;
      for (const auto& d : infos) list += "\n  " + d.summary();
      fail("--gpu vulkan:{}: there are {} Vulkan devices:{}", index, pds.size(), list);
    }
    if (!infos[index].missing.empty()) fail("--gpu vulkan:{}: {} lacks {}", index, infos[index].name, infos[index].missing);
  } else {
    for (const auto& d : infos)
      if (d.missing.empty() && (pick < 0 || type_rank(d.type) < type_rank(infos[pick].type))) pick = d.index;
    if (pick < 0) {
      std::string list;
      for (const auto& d : infos) list += "\n  " + d.summary();
      fail("--gpu vulkan: no usable Vulkan device:{}", list);
    }
  }
  std::unique_ptr<Device> dev(new Device());
  dev->vk_ = in->api;
  dev->inst_ = in->inst;
  in->inst = VK_NULL_HANDLE;  // the device owns it now
  dev->init(infos[pick], pds[pick], opt);
  return dev;
}

void Device::check(VkResult r, std::string_view what) const {
  if (!lost_.empty()) fail("{}", lost_);
  if (r == VK_ERROR_DEVICE_LOST)
    lost_ = fmt::format("Vulkan ({}): the device was lost ({} reported VK_ERROR_DEVICE_LOST); its memory and work are gone", info_.name, what);
  if (r == VK_ERROR_DEVICE_LOST) fail("{}", lost_);
  if (r != VK_SUCCESS) fail("Vulkan ({}): {} failed: {}", info_.name, what, vk_result_name(r));
}

void Device::init(const DeviceInfo& info, VkPhysicalDevice pd, const DeviceOptions& opt) {
  info_ = info;
  pd_ = pd;
  max_range_ = info.max_storage_range;
  lose_at_submit_ = opt.lose_at_submit;
  if (const char* e = std::getenv("STRATA_VK_LOSE_AT_SUBMIT"); e && *e && !lose_at_submit_) lose_at_submit_ = std::strtoull(e, nullptr, 10);
  if (info.max_alloc) max_range_ = std::min(max_range_, info.max_alloc);
  if (opt.max_buffer_range) max_range_ = std::min(max_range_, opt.max_buffer_range);
  vk_.vkGetPhysicalDeviceMemoryProperties(pd, &mem_props_);

  uint32_t nq = 0;
  vk_.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vk_.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
  compute_family_ = UINT32_MAX;
  transfer_family_ = UINT32_MAX;
  for (uint32_t i = 0; i < nq; ++i) {  // a compute family without graphics first (async compute), else any
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) {
      compute_family_ = i;
      break;
    }
  }
  for (uint32_t i = 0; i < nq && compute_family_ == UINT32_MAX; ++i)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) compute_family_ = i;
  for (uint32_t i = 0; i < nq; ++i)
    if ((qf[i].queueFlags & VK_QUEUE_TRANSFER_BIT) && !(qf[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT))) {
      transfer_family_ = i;
      break;
    }
  if (transfer_family_ == UINT32_MAX) transfer_family_ = compute_family_;
  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qci[2] = {{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}, {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}};
  qci[0].queueFamilyIndex = compute_family_;
  qci[0].queueCount = 1;
  qci[0].pQueuePriorities = &prio;
  qci[1] = qci[0];
  qci[1].queueFamilyIndex = transfer_family_;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = transfer_family_ != compute_family_ ? 2 : 1;
  dci.pQueueCreateInfos = qci;
  check(vk_.vkCreateDevice(pd, &dci, nullptr, &dev_), "vkCreateDevice");
  vk_load_device(vk_, dev_);
  vk_.vkGetDeviceQueue(dev_, compute_family_, 0, &compute_q_);
  vk_.vkGetDeviceQueue(dev_, transfer_family_, 0, &transfer_q_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = compute_family_;
  check(vk_.vkCreateCommandPool(dev_, &pci, nullptr, &compute_pool_), "vkCreateCommandPool");
  pci.queueFamilyIndex = transfer_family_;
  check(vk_.vkCreateCommandPool(dev_, &pci, nullptr, &transfer_pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = compute_pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  check(vk_.vkAllocateCommandBuffers(dev_, &cai, &compute_cb_), "vkAllocateCommandBuffers");
  check(vk_.vkAllocateCommandBuffers(dev_, &cai, &readback_cb_), "vkAllocateCommandBuffers");
  cai.commandPool = transfer_pool_;
  cai.commandBufferCount = 2;
  check(vk_.vkAllocateCommandBuffers(dev_, &cai, upload_cb_), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vk_.vkCreateFence(dev_, &fci, nullptr, &compute_fence_), "vkCreateFence");
  check(vk_.vkCreateFence(dev_, &fci, nullptr, &readback_fence_), "vkCreateFence");
  for (auto& f : upload_fence_) check(vk_.vkCreateFence(dev_, &fci, nullptr, &f), "vkCreateFence");

  // Timestamps around each submission (the device's own time, for --prof and the reports).
  VkPhysicalDeviceProperties props{};
  vk_.vkGetPhysicalDeviceProperties(pd, &props);
  const uint32_t ts_bits = qf[compute_family_].timestampValidBits;
  if (ts_bits > 0 && props.limits.timestampPeriod > 0) {
    VkQueryPoolCreateInfo qpi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qpi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qpi.queryCount = 2;
    if (vk_.vkCreateQueryPool(dev_, &qpi, nullptr, &ts_pool_) != VK_SUCCESS) ts_pool_ = VK_NULL_HANDLE;
    ts_period_ns_ = props.limits.timestampPeriod;
    ts_mask_ = ts_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << ts_bits) - 1;
  }

  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kMaxDispatchesPerSubmit * kMaxBindings};
  VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = kMaxDispatchesPerSubmit;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  check(vk_.vkCreateDescriptorPool(dev_, &dpi, nullptr, &desc_pool_), "vkCreateDescriptorPool");

  const uint64_t half = std::max<uint64_t>(opt.staging_bytes / 2, 4096);
  staging_ = make_buffer(2 * half, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                         0, "staging ring", true);
  readback_ = make_buffer(2 * half, VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                          VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | (info_.host_cached ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : 0), 0,
                          "readback buffer", true);

  // Pipeline cache: the file's data is handed to the driver only when its header names this
  // device (vendor, device, pipelineCacheUUID); the driver checks the rest.
  std::string path = opt.pipeline_cache;
  if (path.empty()) {
    if (const char* e = std::getenv("STRATA_PIPELINE_CACHE"); e && *e) path = e;
  }
  if (path.empty()) {
    const std::string dir = default_cache_dir();
    if (!dir.empty()) path = fmt::format("{}/vulkan-{:04x}-{:04x}.bin", dir, info_.vendor_id, info_.device_id);
  }
  if (path == "none") path.clear();
  cache_path_ = path;
  std::vector<char> data;
  if (!path.empty()) {
    std::ifstream f(path, std::ios::binary);
    if (f) data.assign(std::istreambuf_iterator<char>(f), {});
    VkPhysicalDeviceProperties p{};
    vk_.vkGetPhysicalDeviceProperties(pd, &p);
    uint32_t hdr[4] = {};
    if (data.size() >= 16 + VK_UUID_SIZE) std::memcpy(hdr, data.data(), 16);
    if (data.size() < 16 + VK_UUID_SIZE || hdr[1] != VK_PIPELINE_CACHE_HEADER_VERSION_ONE || hdr[2] != p.vendorID || hdr[3] != p.deviceID ||
        std::memcmp(data.data() + 16, p.pipelineCacheUUID, VK_UUID_SIZE) != 0)
      data.clear();
  }
  VkPipelineCacheCreateInfo cci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  cci.initialDataSize = data.size();
  cci.pInitialData = data.empty() ? nullptr : data.data();
  if (vk_.vkCreatePipelineCache(dev_, &cci, nullptr, &cache_) != VK_SUCCESS) {  // a rejected file: start empty
    cci.initialDataSize = 0;
    cci.pInitialData = nullptr;
    data.clear();
    check(vk_.vkCreatePipelineCache(dev_, &cci, nullptr, &cache_), "vkCreatePipelineCache");
  }
  cache_loaded_ = data.size();
}

void Device::save_pipeline_cache() {
  if (cache_path_.empty() || !cache_) return;
  size_t n = 0;
  if (vk_.vkGetPipelineCacheData(dev_, cache_, &n, nullptr) != VK_SUCCESS || n == 0) return;
  std::vector<char> data(n);
  if (vk_.vkGetPipelineCacheData(dev_, cache_, &n, data.data()) != VK_SUCCESS) return;
  std::error_code ec;
  const std::filesystem::path p(cache_path_);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  const std::string tmp = cache_path_ + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return;  // an unwritable cache directory costs only the next start's compile time
    f.write(data.data(), static_cast<std::streamsize>(n));
    if (!f) return;
  }
  std::filesystem::rename(tmp, cache_path_, ec);
}

Device::~Device() {
  if (dev_) {
    vk_.vkDeviceWaitIdle(dev_);
    save_pipeline_cache();
    staging_.reset();
    readback_.reset();
    for (auto& p : pipelines_) {
      vk_.vkDestroyPipeline(dev_, p->pipe, nullptr);
      vk_.vkDestroyPipelineLayout(dev_, p->layout, nullptr);
      vk_.vkDestroyDescriptorSetLayout(dev_, p->set_layout, nullptr);
    }
    if (cache_) vk_.vkDestroyPipelineCache(dev_, cache_, nullptr);
    if (ts_pool_) vk_.vkDestroyQueryPool(dev_, ts_pool_, nullptr);
    if (desc_pool_) vk_.vkDestroyDescriptorPool(dev_, desc_pool_, nullptr);
    for (VkFence f : {compute_fence_, readback_fence_, upload_fence_[0], upload_fence_[1]})
      if (f) vk_.vkDestroyFence(dev_, f, nullptr);
    if (compute_pool_) vk_.vkDestroyCommandPool(dev_, compute_pool_, nullptr);
    if (transfer_pool_) vk_.vkDestroyCommandPool(dev_, transfer_pool_, nullptr);
    vk_.vkDestroyDevice(dev_, nullptr);
  }
  if (inst_) vk_.vkDestroyInstance(inst_, nullptr);
}

GpuSelection select_gpu(const GpuRequest& req, const DeviceOptions& opt) {
  GpuSelection s;
  if (req.kind == GpuRequest::Kind::None) return s;
  if (req.kind == GpuRequest::Kind::Vulkan) {
    s.device = Device::open(req.index, opt);
    return s;
  }
  std::string why;
  const auto infos = Device::enumerate(&why);
  for (const auto& d : infos)
    if (d.type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU && d.missing.empty()) {
      s.device = Device::open(d.index, opt);
      return s;
    }
  if (infos.empty()) {
    s.note = "gpu auto: " + why + "; running on the CPU";
  } else {
    std::string seen;
    for (const auto& d : infos) seen += fmt::format("{}{} is a {} device{}", seen.empty() ? "" : ", ", d.name, d.type_name(),
                                                    d.missing.empty() ? "" : " and lacks " + d.missing);
    s.note = "gpu auto: no usable discrete GPU (" + seen + "); running on the CPU";
  }
  return s;
}

}  // namespace strata::gpu
