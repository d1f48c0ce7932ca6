// RMSNorm, RoPE, softmax and SwiGLU on the Vulkan device against the CPU ops (kernels/ops.h),
// on random data: one row and many, lengths off every power of two, masked cells and sinks.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"
#include "kernels/quants.h"
#include "core/fp16.h"
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
        if (i % 3 == 0) {
          ASSERT_EQ(got[n + i], 0.0f) << "masked cell " << i;
        }
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

TEST(VulkanOps, AddAndKvStore) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  const int64_t n = 1000;
  const auto x = vk_random_floats(n, 3), y = vk_random_floats(n, 4);
  gpu::Buffer xb = gpu::upload_f32(dev, x.data(), n, "x"), yb = gpu::upload_f32(dev, y.data(), n, "y");
  ops.add(xb, yb, n);
  std::vector<float> got(n);
  gpu::download_f32(dev, xb, got.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], x[i] + y[i]) << i;
  // Three rows of 40 into a cache of 10 rows at positions 7, 2, 9; a fourth at 10 (past the end) is dropped.
  const int64_t width = 40, rows = 10;
  const uint32_t pos[4] = {7, 2, 9, 10};
  const auto src = vk_random_floats(4 * width, 5);
  gpu::Buffer sb = gpu::upload_f32(dev, src.data(), 4 * width, "k rows");
  gpu::Buffer pb = dev.alloc(sizeof(pos), "positions");
  dev.upload(pb, 0, pos, sizeof(pos));
  gpu::Buffer cache = dev.alloc(rows * width * 4, "k cache");
  dev.fill_zero(cache);
  ops.kv_store(sb, pb, cache, width, 4);
  std::vector<float> c(rows * width);
  gpu::download_f32(dev, cache, c.data(), rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) {
      const int t = r == 7 ? 0 : r == 2 ? 1 : r == 9 ? 2 : -1;
      ASSERT_EQ(c[r * width + j], t < 0 ? 0.0f : src[t * width + j]) << "row " << r << " col " << j;
    }
}

// Causal GQA over a KV cache against attention in double: a prompt chunk (5 tokens at positions
// 30..34), a lone decode token at the last position, a sliding window and per-head sinks.
// The bias on every token's row (attention's q/k/v/o biases): the CPU's one rounded add per value.
TEST(VulkanOps, AddBiasOnEveryRow) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  for (const int64_t width : {1, 63, 200})
    for (const int64_t rows : {1, 7}) {
      SCOPED_TRACE(::testing::Message() << "width " << width << " rows " << rows);
      const auto x = vk_random_floats(width * rows, 11), b = vk_random_floats(width, 12);
      gpu::Buffer xb = gpu::upload_f32(dev, x.data(), width * rows, "x"), bb = gpu::upload_f32(dev, b.data(), width, "b");
      ops.add_bias(xb, bb, width, rows);
      std::vector<float> got(x.size());
      gpu::download_f32(dev, xb, got.data(), width * rows);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < width; ++i) ASSERT_EQ(got[r * width + i], x[r * width + i] + b[i]) << r << "," << i;
    }
}

TEST(VulkanOps, AttentionMatchesAReferenceInDouble) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  struct Case {
    int n_head, n_kv, dk, dv, n_keys, window;
    bool sinks;
    std::vector<uint32_t> pos;
    std::vector<uint32_t> base = {};  // rows where each token's sequence starts (empty: none)
    int kv_rows = 0;                  // 0: n_keys
  };
  // The last two: three sequences of 70 rows in one cache, tokens of each in one pass; the last
  // token's sequence starts 20 rows before the end of the rows bound (its later keys are not read).
  const Case cases[] = {{8, 2, 64, 64, 70, 0, false, {30, 31, 32, 33, 34}},
                        {4, 1, 128, 128, 70, 0, false, {69}},
                        {8, 8, 32, 48, 70, 16, true, {0, 1, 40, 69}},
                        {8, 2, 64, 64, 70, 0, false, {5, 6, 69, 0, 33}, {0, 0, 70, 140, 140}, 210},
                        {4, 4, 32, 32, 70, 8, true, {12, 30, 69}, {70, 0, 190}, 210}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(::testing::Message() << "heads " << cs.n_head << "/" << cs.n_kv << " dims " << cs.dk << "/" << cs.dv << " window " << cs.window
                                      << " sinks " << cs.sinks << " tokens " << cs.pos.size());
    const int64_t nt = static_cast<int64_t>(cs.pos.size());
    const auto q = vk_random_floats(nt * cs.n_head * cs.dk, 1, -1, 1);
    const int rows = cs.kv_rows > 0 ? cs.kv_rows : cs.n_keys;
    const auto k = vk_random_floats(rows * cs.n_kv * cs.dk, 2, -1, 1);
    const auto v = vk_random_floats(rows * cs.n_kv * cs.dv, 3, -1, 1);
    const auto sinks = vk_random_floats(cs.n_head, 4, -2, 2);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cs.dk));
    std::vector<float> want(static_cast<size_t>(nt * cs.n_head * cs.dv)), got(want.size());
    for (int64_t t = 0; t < nt; ++t)
      for (int h = 0; h < cs.n_head; ++h) {
        const int kvh = h / (cs.n_head / cs.n_kv);
        const int b0 = cs.base.empty() ? 0 : static_cast<int>(cs.base[t]);
        const int pt = static_cast<int>(cs.pos[t]);
        const int p = std::min(pt, rows - 1 - b0);  // the last key read: none past the rows bound
        const int first = cs.window > 0 ? std::max(0, pt + 1 - cs.window) : 0;
        std::vector<double> s;
        double m = cs.sinks ? sinks[h] : -INFINITY;
        for (int j = first; j <= p; ++j) {
          double d = 0;
          for (int e = 0; e < cs.dk; ++e) d += static_cast<double>(q[(t * cs.n_head + h) * cs.dk + e]) * k[((b0 + j) * cs.n_kv + kvh) * cs.dk + e];
          s.push_back(d * scale);
          m = std::max(m, s.back());
        }
        double sum = cs.sinks ? std::exp(sinks[h] - m) : 0.0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int e = 0; e < cs.dv; ++e) {
          double acc = 0;
          for (int j = first; j <= p; ++j) acc += s[j - first] * v[((b0 + j) * cs.n_kv + kvh) * cs.dv + e];
          want[(t * cs.n_head + h) * cs.dv + e] = static_cast<float>(acc / sum);
        }
      }
    gpu::Buffer qb = gpu::upload_f32(dev, q.data(), static_cast<int64_t>(q.size()), "q");
    gpu::Buffer kb = gpu::upload_f32(dev, k.data(), static_cast<int64_t>(k.size()), "k cache");
    gpu::Buffer vb = gpu::upload_f32(dev, v.data(), static_cast<int64_t>(v.size()), "v cache");
    gpu::Buffer sb = gpu::upload_f32(dev, sinks.data(), cs.n_head, "sinks");
    gpu::Buffer pb = dev.alloc(cs.pos.size() * 4, "positions");
    dev.upload(pb, 0, cs.pos.data(), cs.pos.size() * 4);
    gpu::Buffer ob = gpu::upload_f32(dev, nullptr, static_cast<int64_t>(got.size()), "out");
    gpu::Buffer scratch = gpu::upload_f32(dev, nullptr, nt * cs.n_head * cs.n_keys, "scores");
    gpu::AttnShape a{cs.n_head, cs.n_kv, cs.dk, cs.dv, cs.n_keys, cs.window, scale, cs.kv_rows};
    gpu::Buffer bb;
    if (!cs.base.empty()) {
      bb = dev.alloc(cs.base.size() * 4, "bases");
      dev.upload(bb, 0, cs.base.data(), cs.base.size() * 4);
    }
    ops.attention(qb, kb, vb, pb, cs.sinks ? &sb : nullptr, ob, scratch, a, nt, cs.base.empty() ? nullptr : &bb);
    gpu::download_f32(dev, ob, got.data(), static_cast<int64_t>(got.size()));
    EXPECT_LT(vk_nmse(got, want), 1e-10);
  }
}

// The values a quantized activation row stands for (what the CPU's dot products multiply).
void act_values(GgmlType act, const uint8_t* q, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (act) {
      case GgmlType::Q8_0: {
        const auto* b = reinterpret_cast<const block_q8_0*>(q) + i / 32;
        y[i] = f16_to_f32(b->d) * b->qs[i % 32];
        break;
      }
      case GgmlType::Q8_1: {
        const auto* b = reinterpret_cast<const block_q8_1*>(q) + i / 32;
        y[i] = f16_to_f32(b->d) * b->qs[i % 32];
        break;
      }
      case GgmlType::Q8_K: {
        const auto* b = reinterpret_cast<const block_q8_K*>(q) + i / 256;
        y[i] = b->d * b->qs[i % 256];
        break;
      }
      case GgmlType::F16: y[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(q)[i]); break;
      default: y[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(q)[i]); break;
    }
  }
}

// Activations rounded as the CPU quantizes them (act_quant): the CPU's quantizer of each type,
// dequantized, against the device's copy. Blocks with a zero, a tie at the largest magnitude and
// one tiny block. A device's division may round otherwise than the CPU's (Vulkan allows 2.5 ulp):
// a block's scale may be a last bit apart, and a q one step apart at a tie (a few per thousand at most).
TEST(VulkanOps, ActQuantRoundsAsTheCpuQuantizes) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  for (const GgmlType act : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::F16, GgmlType::BF16}) {
    SCOPED_TRACE(ggml_type_name(act));
    const int64_t cols = 512, rows = 3;
    auto x = vk_random_floats(rows * cols, 21, -4, 4);
    for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;           // an all-zero block
    x[64] = 3.5f, x[70] = -3.5f;                               // the largest magnitude twice, both signs
    for (int j = 0; j < 32; ++j) x[96 + j] = 1e-30f * (j - 16);  // a tiny block
    std::vector<float> want(x.size()), got(x.size());
    std::vector<uint8_t> q(ggml_row_size(act, cols));
    for (int64_t r = 0; r < rows; ++r) {
      kernels().quantize_act[static_cast<uint32_t>(act)](x.data() + r * cols, q.data(), cols);
      act_values(act, q.data(), want.data() + r * cols, cols);
    }
    gpu::Buffer xb = gpu::upload_f32(dev, x.data(), rows * cols, "x");
    gpu::Buffer yb = gpu::upload_f32(dev, nullptr, rows * cols, "y");
    ops.act_quant(xb, yb, cols, rows, act);
    gpu::download_f32(dev, yb, got.data(), rows * cols);
    int steps = 0;  // values whose q differs (by one step at most)
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == want[i]) continue;
      const int64_t b = act == GgmlType::Q8_K ? 256 : act == GgmlType::Q8_0 || act == GgmlType::Q8_1 ? 32 : 1, o = static_cast<int64_t>(i) / b * b;
      float amax = 0;
      for (int64_t j = o; j < o + b; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float step = amax / 127.0f, diff = std::fabs(got[i] - want[i]);
      if (diff <= 4e-7f * std::fabs(want[i])) continue;  // the block's scale a last bit apart (a division on the device)
      ++steps;
      EXPECT_LE(diff, step * 1.01f) << "value " << i << ": more than one step apart";
    }
    EXPECT_LE(steps, static_cast<int>(got.size() / 200)) << "values rounded otherwise than the CPU";
    const int differ = steps;
    if (act == GgmlType::F16 || act == GgmlType::BF16) {
      EXPECT_EQ(differ, 0) << "a conversion has no division: bit for bit";
    }
  }
}

// The gated output's pieces: the query heads taken out of [query | gate] rows, and values
// multiplied by the sigmoid of their gate (per value) or of their row's one gate.
TEST(VulkanOps, StridedCopyAndSigmoidGatesMatchTheCpu) {
  gpu::Device& dev = vk_device();
  gpu::Ops ops(dev);
  const int64_t width = 24, rows = 5, stride = 48;
  const auto qg = vk_random_floats(rows * stride, 3, -6, 6);
  std::vector<float> q(static_cast<size_t>(rows * width));
  gpu::Buffer qgb = gpu::upload_f32(dev, qg.data(), rows * stride, "qg");
  gpu::Buffer qb = gpu::upload_f32(dev, nullptr, rows * width, "q");
  ops.strided_copy(qgb, qb, width, stride, 0, rows);
  gpu::download_f32(dev, qb, q.data(), rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j) EXPECT_EQ(q[r * width + j], qg[r * stride + j]) << r << "," << j;
  for (const bool per_value : {true, false}) {
    const auto x = vk_random_floats(rows * width, 8, -2, 2);
    std::vector<float> got(x.size()), want(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < width; ++j)
        want[r * width + j] = x[r * width + j] * sigmoid_f32(qg[r * stride + width + (per_value ? j : 0)]);
    gpu::Buffer xb = gpu::upload_f32(dev, x.data(), rows * width, "x");
    ops.mul_sigmoid(xb, qgb, width, rows, stride, width, per_value);
    gpu::download_f32(dev, xb, got.data(), rows * width);
    EXPECT_LT(vk_nmse(got, want), 1e-12) << "per value " << per_value;
  }
}

}  // namespace
}  // namespace strata::testing
