// Scalar reference formats on rows of one block and of many blocks (no fixtures needed):
// round-trip error, block independence, dot product vs a double dot of the dequantized rows,
// and the scalar kernel table wiring.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/kernel_table.h"
#include "kernels/quants.h"

namespace strata {
namespace {

struct SizeCase {
  GgmlType type;
  double max_rel_rmse;  // bound on rms(dequant - x) / rms(x) for N(0,1) data
};

const SizeCase kCases[] = {
    {GgmlType::F32, 0.0},     {GgmlType::F16, 1e-3},    {GgmlType::BF16, 4e-3},   {GgmlType::Q4_0, 0.12},
    {GgmlType::Q4_1, 0.12},   {GgmlType::Q5_0, 0.06},   {GgmlType::Q5_1, 0.06},   {GgmlType::Q8_0, 0.01},
    {GgmlType::Q2_K, 0.45},   {GgmlType::Q3_K, 0.25},   {GgmlType::Q4_K, 0.12},   {GgmlType::Q5_K, 0.06},
    {GgmlType::Q6_K, 0.03},   {GgmlType::IQ4_NL, 0.12}, {GgmlType::IQ4_XS, 0.12}, {GgmlType::MXFP4, 0.2},
};

std::vector<float> normal_row(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

class QuantSizeTest : public ::testing::TestWithParam<SizeCase> {};

void check_row(const SizeCase& c, int64_t n) {
  SCOPED_TRACE(std::string(ggml_type_name(c.type)) + " n=" + std::to_string(n));
  const auto& q = quant_traits(c.type);
  ASSERT_NE(q.to_float, nullptr);
  ASSERT_NE(q.from_float, nullptr);
  ASSERT_NE(q.vec_dot, nullptr);
  const auto x = normal_row(n, 1234u + static_cast<uint32_t>(n));
  const auto act = normal_row(n, 99u);
  std::vector<uint8_t> w(ggml_row_size(c.type, static_cast<uint64_t>(n)));
  q.from_float(x.data(), w.data(), n);
  std::vector<float> wd(static_cast<size_t>(n));
  q.to_float(w.data(), wd.data(), n);
  double se = 0, sx = 0;
  for (int64_t i = 0; i < n; ++i) {
    se += (wd[i] - x[i]) * static_cast<double>(wd[i] - x[i]);
    sx += x[i] * static_cast<double>(x[i]);
  }
  EXPECT_LE(std::sqrt(se / sx), c.max_rel_rmse);

  // Blocks are independent: the first block alone quantizes and dequantizes the same way.
  const int bs = ggml_info(c.type).block_size;
  std::vector<uint8_t> w1(ggml_row_size(c.type, static_cast<uint64_t>(bs)));
  q.from_float(x.data(), w1.data(), bs);
  EXPECT_EQ(std::memcmp(w1.data(), w.data(), w1.size()), 0);

  // Dot with the activation in vec_dot_type vs a double dot of the dequantized rows.
  const auto& qa = quant_traits(q.vec_dot_type);
  std::vector<uint8_t> a(ggml_row_size(q.vec_dot_type, static_cast<uint64_t>(n)));
  qa.from_float(act.data(), a.data(), n);
  std::vector<float> ad(static_cast<size_t>(n));
  qa.to_float(a.data(), ad.data(), n);
  double exact = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    exact += static_cast<double>(wd[i]) * ad[i];
    mag += std::fabs(static_cast<double>(wd[i]) * ad[i]);
  }
  const float got = q.vec_dot(n, w.data(), a.data());
  // Q4_1/Q5_1 use the Q8_1 f16 field s = d*sum(q) for the min term: an f16 rounding per block.
  const bool q8_1 = q.vec_dot_type == GgmlType::Q8_1;
  EXPECT_NEAR(got, exact, (q8_1 ? 2e-3 : 1e-6) * mag + 1e-6 * std::fabs(exact));
}

TEST_P(QuantSizeTest, OneBlock) { check_row(GetParam(), ggml_info(GetParam().type).block_size); }
TEST_P(QuantSizeTest, ManyBlocks) { check_row(GetParam(), 64LL * ggml_info(GetParam().type).block_size); }

INSTANTIATE_TEST_SUITE_P(Sizes, QuantSizeTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(QuantTraits, VecDotTypesAsLlamaCpp) {
  const std::pair<GgmlType, GgmlType> expect[] = {
      {GgmlType::F32, GgmlType::F32},     {GgmlType::F16, GgmlType::F16},     {GgmlType::BF16, GgmlType::BF16},
      {GgmlType::Q4_0, GgmlType::Q8_0},   {GgmlType::Q5_0, GgmlType::Q8_0},   {GgmlType::Q8_0, GgmlType::Q8_0},
      {GgmlType::IQ4_NL, GgmlType::Q8_0}, {GgmlType::MXFP4, GgmlType::Q8_0},  {GgmlType::Q4_1, GgmlType::Q8_1},
      {GgmlType::Q5_1, GgmlType::Q8_1},   {GgmlType::Q2_K, GgmlType::Q8_K},   {GgmlType::Q3_K, GgmlType::Q8_K},
      {GgmlType::Q4_K, GgmlType::Q8_K},   {GgmlType::Q5_K, GgmlType::Q8_K},   {GgmlType::Q6_K, GgmlType::Q8_K},
      {GgmlType::IQ4_XS, GgmlType::Q8_K},  {GgmlType::IQ1_S, GgmlType::Q8_K},  {GgmlType::IQ1_M, GgmlType::Q8_K},
      {GgmlType::IQ2_XXS, GgmlType::Q8_K}, {GgmlType::IQ2_XS, GgmlType::Q8_K}, {GgmlType::IQ2_S, GgmlType::Q8_K},
      {GgmlType::IQ3_XXS, GgmlType::Q8_K}, {GgmlType::IQ3_S, GgmlType::Q8_K},  {GgmlType::TQ1_0, GgmlType::Q8_K},
      {GgmlType::TQ2_0, GgmlType::Q8_K},
  };
  for (const auto& [w, a] : expect) EXPECT_EQ(quant_traits(w).vec_dot_type, a) << ggml_type_name(w);
}

// Decode-only formats (read from GGUF files, never written): ggml's block geometry, the block
// structs' sizes, and the reference dequantization and dot wired into the scalar table.
TEST(QuantTraits, DecodeOnlyFormatSizes) {
  struct Case {
    GgmlType type;
    size_t block_bytes;
  };
  const Case cases[] = {{GgmlType::IQ1_S, sizeof(block_iq1_s)},     {GgmlType::IQ1_M, sizeof(block_iq1_m)},
                        {GgmlType::IQ2_XXS, sizeof(block_iq2_xxs)}, {GgmlType::IQ2_XS, sizeof(block_iq2_xs)},
                        {GgmlType::IQ2_S, sizeof(block_iq2_s)},     {GgmlType::IQ3_XXS, sizeof(block_iq3_xxs)},
                        {GgmlType::IQ3_S, sizeof(block_iq3_s)},     {GgmlType::TQ1_0, sizeof(block_tq1_0)},
                        {GgmlType::TQ2_0, sizeof(block_tq2_0)}};
  const KernelTable* t = kernel_table(Isa::Scalar);
  ASSERT_NE(t, nullptr);
  for (const auto& c : cases) {
    SCOPED_TRACE(ggml_type_name(c.type));
    const auto& info = ggml_info(c.type);
    EXPECT_EQ(info.block_size, QK_K);
    EXPECT_EQ(static_cast<size_t>(info.type_size), c.block_bytes);
    EXPECT_EQ(ggml_row_size(c.type, 3 * QK_K), 3 * c.block_bytes);
    const auto& q = quant_traits(c.type);
    EXPECT_TRUE(has_dequantize(c.type));
    EXPECT_NE(q.vec_dot, nullptr);
    EXPECT_EQ(q.from_float, nullptr);
    const auto i = static_cast<uint32_t>(c.type);
    EXPECT_EQ(t->vec_dot[i], q.vec_dot);
    EXPECT_EQ(t->dequantize[i], q.to_float);
  }
  EXPECT_EQ(ggml_row_size(GgmlType::IQ2_XXS, 2048), 8u * 66u);
  EXPECT_EQ(ggml_row_size(GgmlType::IQ1_S, 7168), 28u * 50u);
}

TEST(QuantTraits, ActivationFormatsRoundTrip) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
    SCOPED_TRACE(ggml_type_name(t));
    const auto x = normal_row(QK_K * 2, 7u);
    std::vector<uint8_t> b(ggml_row_size(t, x.size()));
    quantize_row(t, x.data(), b.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    dequantize_row(t, b.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 0.03f) << i;
  }
}

TEST(QuantTraits, Q8KBsumsAndQ81Sum) {
  const auto x = normal_row(QK_K, 11u);
  std::vector<uint8_t> k(ggml_row_size(GgmlType::Q8_K, QK_K));
  quantize_row(GgmlType::Q8_K, x.data(), k.data(), QK_K);
  block_q8_K bk;
  std::memcpy(&bk, k.data(), sizeof(bk));
  for (int g = 0; g < QK_K / 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += bk.qs[16 * g + j];
    EXPECT_EQ(bk.bsums[g], s);
  }
  std::vector<uint8_t> one(ggml_row_size(GgmlType::Q8_1, 32));
  quantize_row(GgmlType::Q8_1, x.data(), one.data(), 32);
  block_q8_1 b1;
  std::memcpy(&b1, one.data(), sizeof(b1));
  int s = 0;
  for (int8_t v : b1.qs) s += v;
  // s = d*sum(q) with the unrounded d, stored as f16.
  const float want = f16_to_f32(b1.d) * static_cast<float>(s);
  EXPECT_NEAR(f16_to_f32(b1.s), want, 2e-3f * std::fabs(want) + 1e-6f);
}

TEST(QuantTraits, ScalarKernelTableUsesReference) {
  const KernelTable* t = kernel_table(Isa::Scalar);
  ASSERT_NE(t, nullptr);
  for (const auto& c : kCases) {
    const auto i = static_cast<uint32_t>(c.type);
    EXPECT_EQ(t->vec_dot[i], quant_traits(c.type).vec_dot) << ggml_type_name(c.type);
    EXPECT_EQ(t->dequantize[i], quant_traits(c.type).to_float) << ggml_type_name(c.type);
  }
  for (GgmlType a : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K})
    EXPECT_NE(t->quantize_act[static_cast<uint32_t>(a)], nullptr) << ggml_type_name(a);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// MXFP4 scale edge cases: ggml decodes e as 2^(e-128) times doubled e2m1 integers, which
// includes the denormal scales of e = 0 and e = 1.
TEST(QuantTraits, Mxfp4ExtremeExponents) {
  const int doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int e : {0, 1, 2, 127, 200, 254}) {
    block_mxfp4 b;
    b.e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float y[32];
    dequantize_row(GgmlType::MXFP4, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], std::ldexp(static_cast<float>(doubled[j]), e - 128)) << "e=" << e << " j=" << j;
      EXPECT_EQ(y[j + 16], std::ldexp(static_cast<float>(doubled[15 - j]), e - 128)) << "e=" << e << " j=" << j;
    }
  }
}

}  // namespace
}  // namespace strata
