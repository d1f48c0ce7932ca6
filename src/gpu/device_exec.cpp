// Device: buffers, transfers, pipelines and the command stream (device.cpp: selection and set-up).
#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "core/units.h"
#include "gpu/device.h"

namespace strata::gpu {

namespace {
// A wait longer than this is an error (VK_TIMEOUT), not a hang: a device that stops answering
// fails the pass in flight with a message; a lost device reports VK_ERROR_DEVICE_LOST sooner.
constexpr uint64_t kFenceTimeoutNs = 600ull * 1000 * 1000 * 1000;

// The barrier after every dispatch and transfer: what was written is visible to what follows.
void full_barrier(const VkApi& vk, VkCommandBuffer cb) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vk.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}
}  // namespace

Buffer Device::make_buffer(uint64_t bytes, VkBufferUsageFlags usage, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid,
                           std::string_view what, bool host) {
  // Whole 32-bit words: shaders read weights as words, and a word partly outside a binding's
  // range reads as 0 on devices with robust buffer access (lavapipe).
  bytes = std::max<uint64_t>(4, (bytes + 3) & ~uint64_t{3});
  if (info_.max_alloc && bytes > info_.max_alloc)
    fail("Vulkan ({}): {} needs {} in one allocation, more than the device's maxMemoryAllocationSize {}", info_.name, what,
         format_bytes(bytes), format_bytes(info_.max_alloc));
  Buffer b;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = bytes;
  bci.usage = usage;
  const uint32_t fams[2] = {compute_family_, transfer_family_};
  if (compute_family_ != transfer_family_) {
    bci.sharingMode = VK_SHARING_MODE_CONCURRENT;
    bci.queueFamilyIndexCount = 2;
    bci.pQueueFamilyIndices = fams;
  }
  VkResult r = vk_.vkCreateBuffer(dev_, &bci, nullptr, &b.buf_);
  if (r != VK_SUCCESS) fail("Vulkan ({}): creating {} ({}) failed: {}", info_.name, what, format_bytes(bytes), vk_result_name(r));
  b.dev_ = this;
  b.bytes_ = bytes;
  VkMemoryRequirements req{};
  vk_.vkGetBufferMemoryRequirements(dev_, b.buf_, &req);
  // The first type with every wanted flag and none of the avoided ones; then without `avoid`.
  int type = -1;
  for (int pass = 0; pass < 2 && type < 0; ++pass)
    for (uint32_t t = 0; t < mem_props_.memoryTypeCount; ++t) {
      const auto f = mem_props_.memoryTypes[t].propertyFlags;
      if (!(req.memoryTypeBits & (1u << t)) || (f & want) != want) continue;
      if (pass == 0 && (f & avoid)) continue;
      type = static_cast<int>(t);
      break;
    }
  if (type < 0 && host && (want & VK_MEMORY_PROPERTY_HOST_CACHED_BIT)) {  // no cached type: any host-visible one
    return make_buffer(bytes, usage, want & ~VK_MEMORY_PROPERTY_HOST_CACHED_BIT, avoid, what, host);
  }
  if (type < 0) fail("Vulkan ({}): no memory type for {} (flags {:#x})", info_.name, what, want);
  const bool device_local = !host;
  if (device_local && budget_ > 0 && device_bytes_ + req.size > budget_)  // b's destructor destroys the buffer
    fail("Vulkan ({}): --vram-budget {}: allocating {} for {} would exceed it ({} held)", info_.name, format_bytes(budget_),
         format_bytes(req.size), what, format_bytes(device_bytes_));
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = static_cast<uint32_t>(type);
  r = vk_.vkAllocateMemory(dev_, &mai, nullptr, &b.mem_);
  if (r != VK_SUCCESS)
    fail("Vulkan ({}): allocating {} for {} failed: {}", info_.name, format_bytes(req.size), what, vk_result_name(r));
  check(vk_.vkBindBufferMemory(dev_, b.buf_, b.mem_, 0), "vkBindBufferMemory");
  if (device_local) {
    b.counted_ = true;
    b.memory_bytes_ = req.size;
    device_bytes_ += req.size;
    device_peak_ = std::max(device_peak_, device_bytes_);
  }
  if (host) {
    b.coherent_ = mem_props_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    check(vk_.vkMapMemory(dev_, b.mem_, 0, VK_WHOLE_SIZE, 0, &b.map_), "vkMapMemory");
  }
  return b;
}

void Device::free(Buffer& b) {
  if (b.map_) vk_.vkUnmapMemory(dev_, b.mem_);
  if (b.buf_) vk_.vkDestroyBuffer(dev_, b.buf_, nullptr);
  if (b.mem_) vk_.vkFreeMemory(dev_, b.mem_, nullptr);
  if (b.counted_) device_bytes_ -= b.memory_bytes_;
  b.counted_ = false;
  b.memory_bytes_ = 0;
  b.buf_ = VK_NULL_HANDLE;
  b.mem_ = VK_NULL_HANDLE;
  b.map_ = nullptr;
}

Buffer Device::alloc(uint64_t bytes, std::string_view what) {
  return make_buffer(bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                     VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, what, false);
}

void Device::copy_and_wait(VkQueue q, VkCommandBuffer cb, VkFence f, const Buffer& src, uint64_t src_off, const Buffer& dst,
                           uint64_t dst_off, uint64_t bytes, bool wait) {
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vk_.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
  full_barrier(vk_, cb);
  VkBufferCopy c{src_off, dst_off, bytes};
  vk_.vkCmdCopyBuffer(cb, src.buf_, dst.buf_, 1, &c);
  full_barrier(vk_, cb);
  check(vk_.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  check(vk_.vkQueueSubmit(q, 1, &si, f), "vkQueueSubmit (copy)");
  if (wait) {
    check(vk_.vkWaitForFences(dev_, 1, &f, VK_TRUE, kFenceTimeoutNs), "vkWaitForFences (copy)");
    check(vk_.vkResetFences(dev_, 1, &f), "vkResetFences");
  }
}

void Device::upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes) {
  if (recording_) submit();  // recorded work that precedes the upload runs first
  STRATA_CHECK(offset + bytes <= dst.bytes_, "Vulkan upload: {} bytes at {} past the end of a {}-byte buffer", bytes, offset, dst.bytes_);
  const double t0 = clock_s();
  ++serial_;
  const uint64_t half = staging_.bytes_ / 2;
  const auto* s = static_cast<const uint8_t*>(src);
  int slot = 0;
  for (uint64_t done = 0; done < bytes; done += half, slot ^= 1) {
    const uint64_t n = std::min(half, bytes - done);
    if (upload_busy_[slot]) {  // the copy that used this half two chunks ago
      check(vk_.vkWaitForFences(dev_, 1, &upload_fence_[slot], VK_TRUE, kFenceTimeoutNs), "vkWaitForFences (upload)");
      check(vk_.vkResetFences(dev_, 1, &upload_fence_[slot]), "vkResetFences");
    }
    std::memcpy(static_cast<uint8_t*>(staging_.map_) + slot * half, s + done, n);
    copy_and_wait(transfer_q_, upload_cb_[slot], upload_fence_[slot], staging_, slot * half, dst, offset + done, n, false);
    upload_busy_[slot] = true;
  }
  for (int i = 0; i < 2; ++i)
    if (upload_busy_[i]) {
      check(vk_.vkWaitForFences(dev_, 1, &upload_fence_[i], VK_TRUE, kFenceTimeoutNs), "vkWaitForFences (upload)");
      check(vk_.vkResetFences(dev_, 1, &upload_fence_[i]), "vkResetFences");
      upload_busy_[i] = false;
    }
  counters_.bytes_up += bytes;
  counters_.transfer_s += clock_s() - t0;
}

void Device::download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) {
  STRATA_CHECK(offset + bytes <= src.bytes_, "Vulkan download: {} bytes at {} past the end of a {}-byte buffer", bytes, offset, src.bytes_);
  if (recording_) submit();
  wait();
  const double t0 = clock_s();
  auto* d = static_cast<uint8_t*>(dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(readback_.bytes_, bytes - done);
    copy_and_wait(compute_q_, readback_cb_, readback_fence_, src, offset + done, readback_, 0, n, true);
    if (!readback_.coherent_) {
      VkMappedMemoryRange mr{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE};
      mr.memory = readback_.mem_;
      mr.size = VK_WHOLE_SIZE;
      check(vk_.vkInvalidateMappedMemoryRanges(dev_, 1, &mr), "vkInvalidateMappedMemoryRanges");
    }
    std::memcpy(d + done, readback_.map_, n);
    done += n;
  }
  counters_.bytes_down += bytes;
  counters_.transfer_s += clock_s() - t0;
}

void Device::fill_zero(const Buffer& dst) {
  begin_compute();
  ++serial_;
  vk_.vkCmdFillBuffer(compute_cb_, dst.buf_, 0, VK_WHOLE_SIZE, 0);
  full_barrier(vk_, compute_cb_);
  ++n_dispatch_;
}

const Pipeline& Device::pipeline(std::string_view name, std::span<const uint32_t> spirv, uint32_t n_buffers, uint32_t push_bytes,
                                 std::span<const uint32_t> spec) {
  std::string key(name);
  for (uint32_t s : spec) {
    key += '/';
    key += std::to_string(s);
  }
  for (const auto& p : pipelines_)
    if (p->name == key) return *p;
  STRATA_CHECK(n_buffers <= kMaxBindings, "Vulkan pipeline {}: {} buffers (at most {})", name, n_buffers, kMaxBindings);
  STRATA_CHECK(!spirv.empty(), "Vulkan pipeline {}: no SPIR-V", name);
  auto p = std::make_unique<Pipeline>();
  p->name = key;
  p->n_buffers = n_buffers;
  p->push_bytes = push_bytes;
  VkDescriptorSetLayoutBinding b[kMaxBindings]{};
  for (uint32_t i = 0; i < n_buffers; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dli{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dli.bindingCount = n_buffers;
  dli.pBindings = b;
  check(vk_.vkCreateDescriptorSetLayout(dev_, &dli, nullptr, &p->set_layout), "vkCreateDescriptorSetLayout");
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
  VkPipelineLayoutCreateInfo pli{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &p->set_layout;
  pli.pushConstantRangeCount = push_bytes ? 1 : 0;
  pli.pPushConstantRanges = &pcr;
  check(vk_.vkCreatePipelineLayout(dev_, &pli, nullptr, &p->layout), "vkCreatePipelineLayout");
  VkShaderModuleCreateInfo smi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smi.codeSize = spirv.size() * 4;
  smi.pCode = spirv.data();
  VkShaderModule mod = VK_NULL_HANDLE;
  check(vk_.vkCreateShaderModule(dev_, &smi, nullptr, &mod), fmt::format("vkCreateShaderModule ({})", name));
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) entries[i] = {static_cast<uint32_t>(i), static_cast<uint32_t>(i * 4), 4};
  VkSpecializationInfo si{static_cast<uint32_t>(entries.size()), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = mod;
  cpi.stage.pName = "main";
  cpi.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  cpi.layout = p->layout;
  const VkResult r = vk_.vkCreateComputePipelines(dev_, cache_, 1, &cpi, nullptr, &p->pipe);
  vk_.vkDestroyShaderModule(dev_, mod, nullptr);
  if (r != VK_SUCCESS) fail("Vulkan ({}): building pipeline {} failed: {}", info_.name, name, vk_result_name(r));
  pipelines_.push_back(std::move(p));
  return *pipelines_.back();
}

void Device::begin_compute() {
  if (recording_) return;
  wait();  // the command buffer and the descriptor pool of queued work are still in use
  check(vk_.vkResetDescriptorPool(dev_, desc_pool_, 0), "vkResetDescriptorPool");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vk_.vkBeginCommandBuffer(compute_cb_, &bi), "vkBeginCommandBuffer");
  if (ts_pool_) {
    vk_.vkCmdResetQueryPool(compute_cb_, ts_pool_, 0, 2);
    vk_.vkCmdWriteTimestamp(compute_cb_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, ts_pool_, 0);
  }
  full_barrier(vk_, compute_cb_);  // uploads of the transfer queue are complete (their fence was waited on)
  recording_ = true;
  n_dispatch_ = 0;
}

void Device::dispatch(const Pipeline& p, std::span<const BufRange> bufs, const void* push, uint32_t gx, uint32_t gy, uint32_t gz) {
  STRATA_CHECK(bufs.size() == p.n_buffers, "Vulkan dispatch {}: {} buffers bound, the shader has {}", p.name, bufs.size(), p.n_buffers);
  if (gx == 0 || gy == 0 || gz == 0) return;
  if (recording_ && n_dispatch_ >= static_cast<int>(kMaxDispatchesPerSubmit)) submit();
  begin_compute();
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = desc_pool_;
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &p.set_layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vk_.vkAllocateDescriptorSets(dev_, &ai, &set), "vkAllocateDescriptorSets");
  VkDescriptorBufferInfo bi[kMaxBindings]{};
  VkWriteDescriptorSet w[kMaxBindings]{};
  for (size_t i = 0; i < bufs.size(); ++i) {
    const BufRange& r = bufs[i];
    STRATA_CHECK(r.buf && *r.buf, "Vulkan dispatch {}: buffer {} is not allocated", p.name, i);
    const uint64_t bytes = r.bytes ? r.bytes : r.buf->bytes() - r.offset;
    STRATA_CHECK(r.offset + bytes <= r.buf->bytes(), "Vulkan dispatch {}: binding {} ({} bytes at {}) past the buffer's {} bytes", p.name, i,
                 bytes, r.offset, r.buf->bytes());
    STRATA_CHECK(bytes <= max_range_, "Vulkan dispatch {}: binding {} covers {} bytes, more than the storage range {} (split the tensor)",
                 p.name, i, bytes, max_range_);
    bi[i] = {r.buf->handle(), r.offset, bytes};
    w[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    w[i].dstSet = set;
    w[i].dstBinding = static_cast<uint32_t>(i);
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &bi[i];
  }
  vk_.vkUpdateDescriptorSets(dev_, static_cast<uint32_t>(bufs.size()), w, 0, nullptr);
  vk_.vkCmdBindPipeline(compute_cb_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipe);
  vk_.vkCmdBindDescriptorSets(compute_cb_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  if (p.push_bytes) vk_.vkCmdPushConstants(compute_cb_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p.push_bytes, push);
  ++serial_;
  vk_.vkCmdDispatch(compute_cb_, gx, gy, gz);
  full_barrier(vk_, compute_cb_);
  ++n_dispatch_;
}

void Device::submit(bool wait_done) {
  if (!recording_) return;
  recording_ = false;
  if (ts_pool_) vk_.vkCmdWriteTimestamp(compute_cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, ts_pool_, 1);
  check(vk_.vkEndCommandBuffer(compute_cb_), "vkEndCommandBuffer");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &compute_cb_;
  ++counters_.submits;
  n_dispatch_ = 0;
  const bool lose = lose_at_submit_ != 0 && counters_.submits == lose_at_submit_;  // fault injection
  check(lose ? VK_ERROR_DEVICE_LOST : vk_.vkQueueSubmit(compute_q_, 1, &si, compute_fence_), "vkQueueSubmit (compute)");
  in_flight_ = true;
  if (wait_done) wait();
}

void Device::wait() {
  if (!in_flight_) return;
  in_flight_ = false;
  check(vk_.vkWaitForFences(dev_, 1, &compute_fence_, VK_TRUE, kFenceTimeoutNs), "vkWaitForFences (compute)");
  check(vk_.vkResetFences(dev_, 1, &compute_fence_), "vkResetFences");
  uint64_t ts[2] = {0, 0};
  if (ts_pool_ && vk_.vkGetQueryPoolResults(dev_, ts_pool_, 0, 2, sizeof ts, ts, sizeof ts[0], VK_QUERY_RESULT_64_BIT) == VK_SUCCESS)
    counters_.gpu_s += static_cast<double>((ts[1] - ts[0]) & ts_mask_) * ts_period_ns_ * 1e-9;
}

}  // namespace strata::gpu
