// RMSNorm, RoPE, softmax and SwiGLU on the Vulkan device against the CPU ops (kernels/ops.h),
// on random data: one row and many, lengths off every power of two, masked cells and sinks.
#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "gpu_test_util.h"

namespace strata::testing {
namespace {

TEST(VulkanOps, RmsNormMatchesTheCpu) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  for (const int64_t n : {1, 7, 64, 4096, 5003})
    for (const int64_t rows : {1, 5})
      for (const bool weighted : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " rows " << rows << " weight " << weighted);
        const auto x = vk_random_floats(rows * n, static_cast<uint32_t>(n + rows), -3, 3);
        const auto w = vk_random_floats(n, 99);
        std::vector<float> want(x.size()), got(x.size());
        for (int64_t r = 0; r < rows; ++r) rmsnorm(x.data() + r * n, weighted ? w.data() : nullptr, want.data() + r * n, n, 1e-6f);
        gpu::Buffer xb = gpu::upload_f32(dev, x.data(), rows * n, "x");
        gpu::Buffer wb = gpu::upload_f32(dev, w.data(), n, "w");
        gpu::Buffer yb = gpu::upload_f32(dev, nullptr, rows * n, "y");
        ops.rmsnorm(xb, weighted ? &wb : nullptr, yb, n, rows, 1e-6f);
        gpu::download_f32(dev, yb, got.data(), rows * n);
        EXPECT_LT(vk_nmse(got, want), 1e-12);
      }
}

TEST(VulkanOps, RopeMatchesTheCpuNeoxAndNormal) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  const int head_dim = 128, n_heads = 3;
  const float positions[] = {0, 1, 37, 4000};
  const int n_tok = 4;
  std::vector<float> factors(32);
  for (int i = 0; i < 32; ++i) factors[i] = 1.0f + 0.25f * static_cast<float>(i % 5);
  for (const bool neox : {false, true})
    for (const int n_dims : {128, 64})
      for (const bool yarn : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "neox " << neox << " n_dims " << n_dims << " yarn " << yarn);
        RopeParams p;
        p.n_dims = n_dims;
        p.neox = neox;
        p.freq_base = 1e6f;
        if (yarn) {  // YaRN as DeepSeek's files set it, and Llama 3.1's per-pair factors
          p.ext_factor = 1.0f;
          p.freq_scale = 0.25f;
          p.n_ctx_orig = 4096;
          if (n_dims == 64) p.freq_factors = factors.data();
        }
        std::vector<float> cs(static_cast<size_t>(n_tok * n_dims));
        for (int t = 0; t < n_tok; ++t) rope_cache(p, positions[t], cs.data() + t * n_dims);
        const auto x = vk_random_floats(n_tok * n_heads * head_dim, 5, -2, 2);
        std::vector<float> want = x, got(x.size());
        for (int t = 0; t < n_tok; ++t)
          for (int h = 0; h < n_heads; ++h) rope_apply(p, cs.data() + t * n_dims, want.data() + (t * n_heads + h) * head_dim);
        gpu::Buffer xb = gpu::upload_f32(dev, x.data(), static_cast<int64_t>(x.size()), "q");
        gpu::Buffer cb = gpu::upload_f32(dev, cs.data(), static_cast<int64_t>(cs.size()), "rope cache");
        ops.rope(xb, cb, head_dim, n_heads, n_dims, neox, n_tok);
        gpu::download_f32(dev, xb, got.data(), static_cast<int64_t>(got.size()));
        EXPECT_LT(vk_nmse(got, want), 1e-12);
        // The values past n_dims are not touched.
        for (int t = 0; t < n_tok; ++t)
          for (int h = 0; h < n_heads; ++h)
            for (int i = n_dims; i < head_dim; ++i) {
              const size_t k = static_cast<size_t>((t * n_heads + h) * head_dim + i);
              ASSERT_EQ(got[k], x[k]);
            }
      }
}

TEST(VulkanOps, SoftmaxMatchesTheCpuWithMasksAndSinks) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  for (const int64_t n : {1, 7, 8, 100, 4099})
    for (const bool sink : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " sink " << sink);
      const int64_t rows = 3;
      auto x = vk_random_floats(rows * n, static_cast<uint32_t>(n), -8, 8);
      for (int64_t i = 0; i < n; i += 3) x[n + i] = -INFINITY;  // row 1: every third cell masked
      for (int64_t i = 0; i < n; ++i) x[2 * n + i] = -INFINITY;  // row 2: all masked
      const float sink_v = 1.5f;
      std::vector<float> want = x, got(x.size());
      for (int64_t r = 0; r < rows; ++r) softmax(want.data() + r * n, n, 0.125f, sink ? &sink_v : nullptr);
      gpu::Buffer xb = gpu::upload_f32(dev, x.data(), rows * n, "kq");
      ops.softmax(xb, n, rows, 0.125f, sink ? &sink_v : nullptr);
      gpu::download_f32(dev, xb, got.data(), rows * n);
      EXPECT_LT(vk_nmse(got, want), 1e-10);
      for (int64_t i = 0; i < n; ++i) {
        if (i % 3 == 0) ASSERT_EQ(got[n + i], 0.0f) << "masked cell " << i;
        ASSERT_EQ(got[2 * n + i], 0.0f) << "all-masked row, cell " << i;
      }
    }
}

TEST(VulkanOps, SwigluMatchesTheCpu) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  // The last length needs more workgroups than one grid dimension holds (65535 x 64 values).
  for (const int64_t n : {1, 7, 1000, 65535 * 64 + 77}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const auto g = vk_random_floats(n, 1, -10, 10), u = vk_random_floats(n, 2, -3, 3);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    swiglu(g.data(), u.data(), want.data(), n);
    gpu::Buffer gb = gpu::upload_f32(dev, g.data(), n, "gate"), ub = gpu::upload_f32(dev, u.data(), n, "up");
    gpu::Buffer ob = gpu::upload_f32(dev, nullptr, n, "out");
    ops.swiglu(gb, ub, ob, n);
    gpu::download_f32(dev, ob, got.data(), n);
    EXPECT_LT(vk_nmse(got, want), 1e-12);
    EXPECT_EQ(got.back() != 0.0f, want.back() != 0.0f);
  }
}

}  // namespace
}  // namespace strata::testing
