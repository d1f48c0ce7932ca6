// The Vulkan device: --gpu parsing and selection (auto never takes a CPU device, vulkan takes
// lavapipe), clear refusals (index out of range, a missing feature), transfers through the
// staging ring and the readback buffer, and the pipeline cache on disk.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>

#include "core/error.h"
#include "gpu/shaders.h"
#include "gpu_test_util.h"

namespace strata::testing {
namespace {

namespace vkfs = std::filesystem;

std::string vk_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VulkanDevice, ParsesTheGpuOption) {
  EXPECT_EQ(gpu::parse_gpu_option("none").kind, gpu::GpuRequest::Kind::None);
  EXPECT_EQ(gpu::parse_gpu_option("auto").kind, gpu::GpuRequest::Kind::Auto);
  const auto v = gpu::parse_gpu_option("vulkan");
  EXPECT_EQ(v.kind, gpu::GpuRequest::Kind::Vulkan);
  EXPECT_EQ(v.index, -1);
  EXPECT_EQ(gpu::parse_gpu_option("vulkan:2").index, 2);
  for (const char* bad : {"cuda", "vulkan:", "vulkan:x", "vulkan:-1", "Vulkan", "vulkan:12345", ""}) {
    const std::string e = vk_error_of([&] { gpu::parse_gpu_option(bad); });
    EXPECT_NE(e.find("--gpu"), std::string::npos) << "'" << bad << "': " << e;
  }
}

TEST(VulkanDevice, EnumeratesAUsableDevice) {
  std::string why;
  const auto devs = gpu::Device::enumerate(&why);
  ASSERT_FALSE(devs.empty()) << why << " (the project installs mesa-vulkan-drivers: lavapipe)";
  bool usable = false;
  for (const auto& d : devs) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.max_storage_range, 0u) << d.summary();
    EXPECT_GT(d.max_invocations, 0u) << d.summary();
    usable = usable || d.missing.empty();
  }
  EXPECT_TRUE(usable);
  const gpu::DeviceInfo& in = vk_device().info();
  EXPECT_TRUE(in.missing.empty());
  EXPECT_NE(in.summary().find(in.name), std::string::npos);
}

// auto takes only a discrete GPU; without one it stays on the CPU and says why in one line.
TEST(VulkanDevice, AutoNeverPicksACpuDevice) {
  const auto devs = gpu::Device::enumerate(nullptr);
  bool discrete = false;
  for (const auto& d : devs) discrete = discrete || (d.type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU && d.missing.empty());
  gpu::DeviceOptions opt;
  opt.pipeline_cache = "none";
  const auto sel = gpu::select_gpu(gpu::parse_gpu_option("auto"), opt);
  if (discrete) {
    ASSERT_TRUE(sel.device);
    EXPECT_EQ(sel.device->info().type, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU);
  } else {
    EXPECT_FALSE(sel.device);
    EXPECT_NE(sel.note.find("running on the CPU"), std::string::npos) << sel.note;
    EXPECT_EQ(sel.note.find('\n'), std::string::npos) << sel.note;
    for (const auto& d : devs) EXPECT_NE(sel.note.find(d.name), std::string::npos) << sel.note;
  }
  // vulkan takes any usable device, lavapipe included; none takes nothing.
  EXPECT_TRUE(gpu::select_gpu(gpu::parse_gpu_option("vulkan"), opt).device);
  EXPECT_FALSE(gpu::select_gpu(gpu::parse_gpu_option("none"), opt).device);
}

TEST(VulkanDevice, RefusesAnIndexOutOfRangeAndAMissingFeature) {
  gpu::DeviceOptions opt;
  opt.pipeline_cache = "none";
  const std::string e = vk_error_of([&] { gpu::Device::open(99, opt); });
  EXPECT_NE(e.find("vulkan:99"), std::string::npos) << e;
  EXPECT_NE(e.find(vk_device().info().name), std::string::npos) << e;  // the devices there are
  opt.min_shared_memory = 1u << 30;  // no device has 1 GiB of workgroup memory
  const std::string f = vk_error_of([&] { gpu::Device::open(vk_device().info().index, opt); });
  EXPECT_NE(f.find("lacks"), std::string::npos) << f;
  EXPECT_NE(f.find("shared memory"), std::string::npos) << f;
  const std::string g = vk_error_of([&] { gpu::Device::open(-1, opt); });
  EXPECT_NE(g.find("no usable Vulkan device"), std::string::npos) << g;
}

// Transfers larger than the staging ring, at offsets, come back byte for byte.
TEST(VulkanDevice, TransfersThroughTheStagingRing) {
  gpu::DeviceOptions opt;
  opt.pipeline_cache = "none";
  opt.staging_bytes = 64 << 10;  // 2 x 32 KiB: a 1 MiB upload takes 32 rounds
  auto dev = gpu::Device::open(vk_device().info().index, opt);
  const size_t n = (1 << 20) + 12;
  std::vector<uint8_t> a(n), back(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  gpu::Buffer b = dev->alloc(n + 100, "roundtrip");
  dev->fill_zero(b);
  dev->upload(b, 100, a.data(), n);
  dev->download(b, 100, back.data(), n);
  EXPECT_EQ(0, std::memcmp(a.data(), back.data(), n));
  uint8_t head[100];
  dev->download(b, 0, head, 100);
  for (uint8_t v : head) ASSERT_EQ(v, 0);  // fill_zero ran before the upload, and the upload kept to its range
  const std::string e = vk_error_of([&] { dev->upload(b, n, a.data(), 200); });
  EXPECT_NE(e.find("past the end"), std::string::npos) << e;
}

// The pipeline cache: written when the device closes, read (and handed to the driver) when the
// next one opens; a file that is not a cache for this device is ignored.
TEST(VulkanDevice, PipelineCacheOnDisk) {
  const vkfs::path dir = vkfs::temp_directory_path() / ("strata-vk-cache-" + std::to_string(getpid()));
  vkfs::remove_all(dir);
  gpu::DeviceOptions opt;
  opt.pipeline_cache = (dir / "sub" / "cache.bin").string();
  const int index = vk_device().info().index;
  {
    auto dev = gpu::Device::open(index, opt);
    EXPECT_EQ(dev->pipeline_cache_path(), opt.pipeline_cache);
    EXPECT_EQ(dev->pipeline_cache_loaded(), 0u);
    dev->pipeline("rmsnorm", gpu::shader_spirv("rmsnorm"), 3, 12);
  }
  ASSERT_TRUE(vkfs::exists(opt.pipeline_cache));
  const auto size = vkfs::file_size(opt.pipeline_cache);
  EXPECT_GE(size, 32u);  // the header (lavapipe stores no more: Mesa 22.3 keeps no compiled pipelines in it)
  {
    auto dev = gpu::Device::open(index, opt);
    EXPECT_EQ(dev->pipeline_cache_loaded(), size);
  }
  {
    std::ofstream f(opt.pipeline_cache, std::ios::binary | std::ios::trunc);
    f << "not a pipeline cache, but long enough to have a header's worth of bytes";
  }
  {
    auto dev = gpu::Device::open(index, opt);
    EXPECT_EQ(dev->pipeline_cache_loaded(), 0u);
    gpu::Ops ops(*dev);  // and it still builds and runs pipelines
    std::vector<float> x = {3.0f, 4.0f}, y(2);
    gpu::Buffer xb = gpu::upload_f32(*dev, x.data(), 2, "x");
    ops.rmsnorm(xb, nullptr, xb, 2, 1, 0.0f);
    gpu::download_f32(*dev, xb, y.data(), 2);
    EXPECT_NEAR(y[0], 3.0f / std::sqrt(12.5f), 1e-6);
  }
  vkfs::remove_all(dir);
}

TEST(VulkanDevice, EveryShaderIsEmbedded) {
  for (const char* s : {"rmsnorm", "softmax", "rope", "swiglu", "matvec_f32", "matvec_q4_K", "matvec_q6_K", "matvec_mxfp4"}) {
    const auto spv = gpu::shader_spirv(s);
    ASSERT_GT(spv.size(), 5u) << s;
    EXPECT_EQ(spv[0], 0x07230203u) << s;  // the SPIR-V magic
  }
  EXPECT_NE(vk_error_of([] { gpu::shader_spirv("matvec_q2_K"); }).find("matvec_q2_K"), std::string::npos);
}

}  // namespace
}  // namespace strata::testing
