#pragma once
// A Vulkan compute device: selection (--gpu auto|none|vulkan[:N]), queues, buffers and the
// transfers between host and device, compute pipelines with an on-disk pipeline cache, and one
// command stream. Nothing here knows models or weight types (gpu/ops.h runs the kernels).
//
// Threading: a Device is used by one thread at a time (the engine thread).
// Memory: weights, KV and activations are device-local buffers; uploads go through a host-visible
// staging ring (two halves: the next chunk is copied in while the previous one transfers, on the
// transfer queue when the device has one), readbacks through HOST_CACHED memory where offered
// (uncached reads from mapped memory run at tens of MB/s).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/vk_api.h"

namespace strata::gpu {

// --gpu: "none" (default), "auto" (a discrete GPU when there is one, else the CPU with a note),
// "vulkan" (the best Vulkan device, lavapipe included), "vulkan:N" (device N of `strata --gpu-list`).
struct GpuRequest {
  enum class Kind { None, Auto, Vulkan } kind = Kind::None;
  int index = -1;  // Vulkan: -1 = best device
};
GpuRequest parse_gpu_option(std::string_view s);  // throws strata::Error naming the value

struct DeviceInfo {
  int index = -1;  // in the loader's enumeration order
  std::string name, driver;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0, device_id = 0, api_version = 0;
  uint64_t device_local_bytes = 0;  // largest DEVICE_LOCAL heap
  uint64_t max_storage_range = 0;   // maxStorageBufferRange
  uint64_t max_alloc = 0;           // maxMemoryAllocationSize
  uint32_t subgroup_size = 0, shared_memory = 0, max_invocations = 0;
  uint32_t min_storage_offset_align = 0;
  bool fp16 = false, int8 = false, storage16 = false, storage8 = false, int_dot = false;
  bool transfer_queue = false;  // a queue family for transfers apart from the compute one
  bool host_cached = false;     // a HOST_VISIBLE | HOST_CACHED memory type for readback
  std::string missing;          // what Strata requires that the device lacks ("": usable)
  const char* type_name() const;  // "discrete", "integrated", "virtual", "cpu", "other"
  std::string summary() const;    // one line for --gpu-list and reports
};

struct DeviceOptions {
  // Pipeline cache file: "" = $STRATA_PIPELINE_CACHE, else $XDG_CACHE_HOME/strata (or
  // ~/.cache/strata)/vulkan-<vendor>-<device>.bin; "none" = no cache on disk.
  std::string pipeline_cache;
  uint64_t max_buffer_range = 0;  // 0 = the device's maxStorageBufferRange; tests force a smaller one
  uint64_t staging_bytes = 8ull << 20;
  uint32_t min_shared_memory = 16384;  // a required feature (tests ask for more to see the refusal)
  // Fault injection: submission number N (1-based) of compute work reports VK_ERROR_DEVICE_LOST,
  // as a device that stops mid-run does (0: never; $STRATA_VK_LOSE_AT_SUBMIT sets it for the CLI).
  uint64_t lose_at_submit = 0;
};

inline constexpr uint32_t kMaxBindings = 8;       // storage buffers per shader
inline constexpr uint32_t kMaxDispatchesPerSubmit = 1024; // dispatches per command buffer (then it is submitted)

class Device;

// What crossed the bus and how long the device worked, since the device was opened (callers take
// differences). gpu_s: the compute queue's own time between the first and last command of each
// submission (timestamp queries; 0 when the queue has none, see has_timestamps); transfer_s: host
// time in upload/download copies once the work before them was done.
struct DeviceCounters {
  uint64_t bytes_up = 0, bytes_down = 0;
  uint64_t submits = 0;
  double gpu_s = 0, transfer_s = 0;
};

// A device buffer (move-only) of whole 32-bit words: bytes() is the size asked for rounded up to 4.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset();
  VkBuffer handle() const { return buf_; }
  uint64_t bytes() const { return bytes_; }
  explicit operator bool() const { return buf_ != VK_NULL_HANDLE; }
  void* mapped() const { return map_; }  // host-visible buffers only

 private:
  friend class Device;
  Device* dev_ = nullptr;
  VkBuffer buf_ = VK_NULL_HANDLE;
  VkDeviceMemory mem_ = VK_NULL_HANDLE;
  uint64_t bytes_ = 0;
  void* map_ = nullptr;
  bool coherent_ = true;
  bool counted_ = false;  // device-local: its memory_bytes_ count in the device's figures
  uint64_t memory_bytes_ = 0;  // the allocation's size (vkGetBufferMemoryRequirements)
};

// A compute pipeline over `n_buffers` storage buffers (bindings 0..n-1 of set 0) and a push
// constant block of `push_bytes`; specialization constants 0..k-1 are `spec` (uint32 each).
struct Pipeline {
  VkPipeline pipe = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t n_buffers = 0, push_bytes = 0;
  std::string name;
};

// A range of a buffer bound to a shader (offset: a multiple of min_storage_offset_align).
struct BufRange {
  const Buffer* buf = nullptr;
  uint64_t offset = 0, bytes = 0;  // bytes 0 = to the end of the buffer
};

class Device {
 public:
  // Every Vulkan device the loader reports, with what Strata needs that each lacks. Empty with
  // *why set when there is no loader or no device.
  static std::vector<DeviceInfo> enumerate(std::string* why);
  // Opens device `index` (-1: the best usable one, lavapipe included). Throws strata::Error
  // with the reason (no loader, no device, the index out of range, a missing feature).
  static std::unique_ptr<Device> open(int index, const DeviceOptions& opt = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  // The largest range one binding may cover (maxStorageBufferRange or the forced one).
  uint64_t max_range() const { return max_range_; }

  // Device-local storage buffer of `bytes`; `what` names it in errors ("blk.3.attn_q.weight").
  // Throws strata::Error when the allocation would take the device-local bytes past the budget.
  Buffer alloc(uint64_t bytes, std::string_view what);

  // Device-local memory (what alloc() holds, as the driver sized each allocation; not the
  // host-visible staging and readback buffers): now, at most since open, and the limit alloc()
  // keeps to (0: none; --vram-budget). A budget below what is held applies to later allocations.
  uint64_t device_bytes() const { return device_bytes_; }
  uint64_t device_peak() const { return device_peak_; }
  void set_budget(uint64_t bytes) { budget_ = bytes; }
  uint64_t budget() const { return budget_; }
  // Host -> device (through the staging ring) and device -> host (through cached memory).
  // Both wait until the copy is done.
  void upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes);
  void download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes);
  void fill_zero(const Buffer& dst);

  // Pipelines (kept by the device, built once per name through the pipeline cache).
  const Pipeline& pipeline(std::string_view name, std::span<const uint32_t> spirv, uint32_t n_buffers,
                           uint32_t push_bytes, std::span<const uint32_t> spec = {});
  // Recording: dispatches go into the current command buffer; each is followed by a barrier
  // (the next one reads what this one wrote). submit() runs them and waits; submit(false) returns
  // once they are queued, so the host works beside the device, and wait() waits for them (the next
  // recording, download or submit waits first; an upload does not, so it may fill a buffer the
  // queued work does not touch while that work runs).
  void dispatch(const Pipeline& p, std::span<const BufRange> bufs, const void* push, uint32_t gx, uint32_t gy = 1,
                uint32_t gz = 1);
  void submit(bool wait = true);
  void wait();
  bool in_flight() const { return in_flight_; }
  int pending_dispatches() const { return n_dispatch_; }
  // Counts every recorded dispatch, fill and upload: a buffer's contents read at one serial are
  // unchanged while the serial is (callers reuse a derived buffer, e.g. quantized activations).
  uint64_t serial() const { return serial_; }
  const DeviceCounters& counters() const { return counters_; }
  bool has_timestamps() const { return ts_pool_ != VK_NULL_HANDLE; }
  // "" while the device works; once a call reported VK_ERROR_DEVICE_LOST, why (every later call
  // throws at once with it: a lost device does not come back).
  const std::string& lost() const { return lost_; }

  // Pipeline cache: the file used ("" none), bytes read from it at start, saved at close.
  const std::string& pipeline_cache_path() const { return cache_path_; }
  uint64_t pipeline_cache_loaded() const { return cache_loaded_; }
  void save_pipeline_cache();

 private:
  friend class Buffer;
  Device() = default;
  void init(const DeviceInfo& info, VkPhysicalDevice pd, const DeviceOptions& opt);
  void free(Buffer& b);
  Buffer make_buffer(uint64_t bytes, VkBufferUsageFlags usage, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid,
                     std::string_view what, bool host);
  void check(VkResult r, std::string_view what) const;
  void begin_compute();
  void copy_and_wait(VkQueue q, VkCommandBuffer cb, VkFence f, const Buffer& src, uint64_t src_off, const Buffer& dst,
                     uint64_t dst_off, uint64_t bytes, bool wait);

  VkApi vk_{};
  VkInstance inst_ = VK_NULL_HANDLE;
  VkPhysicalDevice pd_ = VK_NULL_HANDLE;
  VkDevice dev_ = VK_NULL_HANDLE;
  DeviceInfo info_;
  uint64_t max_range_ = 0;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  uint32_t compute_family_ = 0, transfer_family_ = 0;
  VkQueue compute_q_ = VK_NULL_HANDLE, transfer_q_ = VK_NULL_HANDLE;
  VkCommandPool compute_pool_ = VK_NULL_HANDLE, transfer_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer compute_cb_ = VK_NULL_HANDLE, readback_cb_ = VK_NULL_HANDLE;
  VkCommandBuffer upload_cb_[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  VkFence compute_fence_ = VK_NULL_HANDLE, readback_fence_ = VK_NULL_HANDLE;
  VkFence upload_fence_[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  bool upload_busy_[2] = {false, false};
  Buffer staging_, readback_;
  VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  uint64_t cache_loaded_ = 0;
  std::vector<std::unique_ptr<Pipeline>> pipelines_;
  bool recording_ = false, in_flight_ = false;
  int n_dispatch_ = 0;
  VkQueryPool ts_pool_ = VK_NULL_HANDLE;  // two timestamps per submission (none: the queue has no timestamps)
  double ts_period_ns_ = 0;
  uint64_t ts_mask_ = 0;
  DeviceCounters counters_;
  uint64_t serial_ = 0;
  uint64_t lose_at_submit_ = 0;
  mutable std::string lost_;
  uint64_t device_bytes_ = 0, device_peak_ = 0, budget_ = 0;
};

// --gpu resolved: the device to use (nullptr: the CPU) and, for `auto` on the CPU, one line
// saying why ("gpu auto: no discrete GPU (llvmpipe ... is a cpu device); running on the CPU").
// `vulkan[:N]` throws strata::Error when it cannot open the device.
struct GpuSelection {
  std::unique_ptr<Device> device;
  std::string note;
};
GpuSelection select_gpu(const GpuRequest& req, const DeviceOptions& opt = {});

}  // namespace strata::gpu
