// Matrix-vector products on the Vulkan device against the CPU: every weight type the GPU runs,
// on random data of every shape class (one row and many, one token and several, block counts
// that do not fill a workgroup, long rows, more rows than one grid dimension holds), and on
// malformed blocks (NaN / Inf scales). Two references: the product of the dequantized weights
// in double (what the shader computes, in f32: a tight bound), and the CPU kernel the engine
// uses (activations quantized to the weight type's vec_dot_type: test-backend-ops' 5e-4).
#include <algorithm>
#include <cstring>

#include "core/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/quants.h"
#include "gpu_test_util.h"

namespace strata::testing {
namespace {


struct VkWeights {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;  // [rows, row_bytes]
  uint64_t row_bytes() const { return ggml_row_size(type, static_cast<uint64_t>(cols)); }
  QMatrix view() const { return QMatrix{type, rows, cols, bytes.data(), row_bytes()}; }
};

VkWeights vk_make_weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  VkWeights w{t, rows, cols, {}};
  w.bytes.resize(static_cast<size_t>(rows * w.row_bytes()));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row = vk_random_floats(cols, seed + 1 + static_cast<uint32_t>(r));
    quantize_row(t, row.data(), w.bytes.data() + r * w.row_bytes(), cols);
  }
  return w;
}

// y [n, rows] = dequant(W) x in double, rounded once.
std::vector<float> vk_exact_product(const VkWeights& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> deq(static_cast<size_t>(w.cols)), y(static_cast<size_t>(n * w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w.type, w.bytes.data() + r * w.row_bytes(), deq.data(), w.cols);
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += static_cast<double>(deq[c]) * x[t * w.cols + c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
  return y;
}

std::vector<float> vk_cpu_product(const VkWeights& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  MatmulScratch s;
  matmul(kernels(), nullptr, w.view(), x.data(), n, y.data(), s);
  return y;
}

std::vector<float> vk_gpu_product(gpu::Device& dev, const VkWeights& w, const std::vector<float>& x, int64_t n, size_t* parts = nullptr) {
  gpu::Ops ops(dev);
  const gpu::DeviceMatrix m = gpu::upload_matrix(dev, w.view(), "test.weight");
  if (parts) *parts = m.parts.size();
  gpu::Buffer xb = gpu::upload_f32(dev, x.data(), n * w.cols, "x");
  gpu::Buffer yb = gpu::upload_f32(dev, nullptr, n * w.rows, "y");
  ops.matvec(m, xb, n, yb);
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  gpu::download_f32(dev, yb, y.data(), n * w.rows);
  return y;
}

struct VkShape {
  int64_t rows, cols_blocks, n_tok;  // cols = cols_blocks * block (float types: cols_blocks values + extra)
};

int64_t vk_cols_of(GgmlType t, int64_t blocks) {
  const int b = ggml_info(t).block_size;
  return b == 1 ? blocks : blocks * b;
}

class VulkanMatvec : public ::testing::TestWithParam<GgmlType> {};

TEST_P(VulkanMatvec, MatchesTheCpuOnRandomData) {
  const GgmlType t = GetParam();
  const bool flt = ggml_info(t).block_size == 1;
  // One row of one block; rows and block counts that fill no workgroup; several tokens; a long
  // row (DeepSeek's 18432-value FFN rows). Float types: lengths off every power of two.
  const VkShape shapes[] = {
      {1, flt ? 37 : 1, 1},
      {19, flt ? 1000 : (ggml_info(t).block_size == 256 ? 3 : 7), 3},
      {70, flt ? 4099 : (ggml_info(t).block_size == 256 ? 16 : 128), 2},
      {3, flt ? 18433 : (ggml_info(t).block_size == 256 ? 72 : 576), 1},
  };
  gpu::Device& dev = vk_device();
  uint32_t seed = 11;
  for (const VkShape& sh : shapes) {
    const int64_t cols = vk_cols_of(t, sh.cols_blocks);
    SCOPED_TRACE(::testing::Message() << ggml_type_name(t) << " rows " << sh.rows << " cols " << cols << " tokens " << sh.n_tok);
    const VkWeights w = vk_make_weights(t, sh.rows, cols, seed += 100);
    const auto x = vk_random_floats(sh.n_tok * cols, seed + 7);
    const auto got = vk_gpu_product(dev, w, x, sh.n_tok);
    const auto exact = vk_exact_product(w, x, sh.n_tok);
    const auto cpu = vk_cpu_product(w, x, sh.n_tok);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(vk_nmse(got, exact), 1e-10) << "against dequantized weights in double";
    EXPECT_LT(vk_nmse(got, cpu), 5e-4) << "against the CPU kernel";
    // The CPU kernel itself is that close to the exact product (the reference is sane).
    EXPECT_LT(vk_nmse(cpu, exact), 5e-4);
  }
}

// Non-finite block scales: the rows holding them are non-finite on the GPU exactly where they
// are on the CPU, every other row is unaffected, and the device keeps running.
TEST_P(VulkanMatvec, MalformedScalesGiveTheCpusNonFiniteRows) {
  const GgmlType t = GetParam();
  const auto& info = ggml_info(t);
  const int64_t rows = 6, cols = info.block_size == 1 ? 64 : 2 * info.block_size, n = 2;
  VkWeights w = vk_make_weights(t, rows, cols, 5);
  const uint64_t rb = w.row_bytes();
  // Offset of a block's scale and the bits to write there: f16 NaN / +Inf (0x7E00 / 0x7C00);
  // MXFP4's e8m0 exponent 0xFF is +Inf; float types carry the value itself.
  auto poison = [&](int64_t row, int64_t block, bool nan) {
    uint8_t* b = w.bytes.data() + row * rb + block * info.type_size;
    const uint16_t h = nan ? 0x7E00 : 0x7C00;
    switch (t) {
      case GgmlType::F32: {
        const float v = nan ? NAN : INFINITY;
        std::memcpy(b, &v, 4);
        break;
      }
      case GgmlType::BF16: {
        const uint16_t bf = nan ? 0x7FC0 : 0x7F80;
        std::memcpy(b, &bf, 2);
        break;
      }
      case GgmlType::MXFP4: b[0] = 0xFF; break;
      case GgmlType::Q6_K: std::memcpy(b + 208, &h, 2); break;
      default: std::memcpy(b, &h, 2); break;  // F16 value, or d first in the block
    }
  };
  poison(1, 0, true);
  poison(3, 1, false);
  poison(4, 0, true);
  poison(4, 1, false);
  const auto x = vk_random_floats(n * cols, 9);
  const auto got = vk_gpu_product(vk_device(), w, x, n);
  const auto cpu = vk_cpu_product(w, x, n);
  for (int64_t tk = 0; tk < n; ++tk)
    for (int64_t r = 0; r < rows; ++r) {
      const float g = got[tk * rows + r], c = cpu[tk * rows + r];
      const bool bad = r == 1 || r == 3 || r == 4;
      EXPECT_EQ(std::isfinite(c), !bad) << "CPU row " << r;  // the test's premise
      EXPECT_EQ(std::isfinite(g), std::isfinite(c)) << "row " << r << " token " << tk << ": gpu " << g << " cpu " << c;
      if (!bad) {
        EXPECT_NEAR(g, c, 0.05 * (1 + std::fabs(c))) << "row " << r;
      }
    }
  // The device still runs a clean product afterwards.
  const VkWeights clean = vk_make_weights(t, 2, cols, 77);
  const auto again = vk_gpu_product(vk_device(), clean, x, 1);
  EXPECT_LT(vk_nmse(again, vk_exact_product(clean, x, 1)), 1e-10);
}

// Several tokens run as a matrix-matrix product (tokens share each weight read in a workgroup);
// every token's row is the one-token product's bit for bit (the same sums in the same order), for a
// count that is not a multiple of the tokens per workgroup.
TEST_P(VulkanMatvec, ManyTokensEqualOneAtATimeBitForBit) {
  const GgmlType t = GetParam();
  const int64_t block = ggml_info(t).block_size, cols = block == 1 ? 96 : 3 * block, rows = 7, n = 13;
  const VkWeights w = vk_make_weights(t, rows, cols, 31);
  const auto x = vk_random_floats(n * cols, 17);
  const auto all = vk_gpu_product(vk_device(), w, x, n);
  for (int64_t tk = 0; tk < n; ++tk) {
    const std::vector<float> one_x(x.begin() + tk * cols, x.begin() + (tk + 1) * cols);
    const auto one = vk_gpu_product(vk_device(), w, one_x, 1);
    EXPECT_EQ(0, std::memcmp(one.data(), all.data() + tk * rows, rows * 4)) << "token " << tk;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, VulkanMatvec, ::testing::ValuesIn(gpu::matvec_types().begin(), gpu::matvec_types().end()),
                         [](const auto& i) { return std::string(ggml_type_name(i.param)); });

// More rows than one grid dimension holds (65535 workgroups): the rows spill into the grid's y.
TEST(VulkanMatvecShapes, MoreRowsThanOneGridDimension) {
  const VkWeights w = vk_make_weights(GgmlType::Q8_0, 70001, 32, 3);
  const auto x = vk_random_floats(32, 4);
  const auto got = vk_gpu_product(vk_device(), w, x, 1);
  EXPECT_LT(vk_nmse(got, vk_exact_product(w, x, 1)), 1e-10);
  EXPECT_NE(got.back(), 0.0f);
}

// A matrix larger than the storage range is split into parts of whole rows; the product is the
// same, bit for bit, as on one binding (each row is computed the same way in either).
TEST(VulkanMatvecShapes, SplitBeyondTheStorageRangeGivesTheSameBits) {
  gpu::DeviceOptions opt;
  opt.pipeline_cache = "none";
  opt.max_buffer_range = 4096;  // 120 Q4_K rows of 2 x 144 bytes: 14 rows per part, 9 parts
  auto small = gpu::Device::open(vk_device().info().index, opt);
  const VkWeights w = vk_make_weights(GgmlType::Q4_K, 120, 512, 8);
  const auto x = vk_random_floats(2 * 512, 2);
  size_t parts_small = 0, parts_full = 0;
  const auto split = vk_gpu_product(*small, w, x, 2, &parts_small);
  const auto whole = vk_gpu_product(vk_device(), w, x, 2, &parts_full);
  EXPECT_EQ(parts_small, 9u);
  EXPECT_EQ(parts_full, 1u);
  ASSERT_EQ(split.size(), whole.size());
  EXPECT_EQ(0, std::memcmp(split.data(), whole.data(), split.size() * 4));
  // A row larger than the range cannot be split: the error names the tensor.
  const VkWeights wide = vk_make_weights(GgmlType::F32, 2, 2048, 1);
  try {
    gpu::upload_matrix(*small, wide.view(), "blk.0.ffn_down.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_down.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("storage range"), std::string::npos) << e.what();
  }
}

TEST(VulkanMatvecShapes, UnsupportedTypeIsRefusedByName) {
  const VkWeights w = vk_make_weights(GgmlType::Q2_K, 2, 256, 1);
  try {
    gpu::upload_matrix(vk_device(), w.view(), "blk.7.attn_v.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("blk.7.attn_v.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("q2_K"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace strata::testing
