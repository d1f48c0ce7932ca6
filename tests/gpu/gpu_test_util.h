#pragma once
// Shared by the Vulkan tests: the device they run on (lavapipe on machines without a GPU; the
// project installs mesa-vulkan-drivers, so a missing device FAILS the tests, never skips them),
// random data, and the normalized mean squared error of test-backend-ops.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "gpu/device.h"
#include "gpu/ops.h"
#include "gpu/self_check.h"

namespace strata::testing {

// One device per test process (ctest runs each test in its own). STRATA_TEST_VULKAN picks one
// (e.g. "vulkan:1") on machines with several; default: the best usable one. No pipeline cache
// on disk (the test of the cache names its own file).
inline gpu::Device& vk_device() {
  static std::unique_ptr<gpu::Device> dev = [] {
    gpu::DeviceOptions opt;
    opt.pipeline_cache = "none";
    const char* env = std::getenv("STRATA_TEST_VULKAN");
    const gpu::GpuRequest req = gpu::parse_gpu_option(env && *env ? env : "vulkan");
    return gpu::Device::open(req.index, opt);
  }();
  return *dev;
}

inline std::vector<float> vk_random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// gpu::nmse (test-backend-ops' normalized error), b the reference.
inline double vk_nmse(const std::vector<float>& a, const std::vector<float>& b) { return gpu::nmse(a, b); }

}  // namespace strata::testing
