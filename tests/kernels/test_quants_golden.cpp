// Scalar reference formats vs the golden ggml data in ../shared/fixtures/quant-blocks:
// dequantization bit-exact (the IQ1/IQ2/IQ3 lattice types and TQ1_0/TQ2_0 are decode-only),
// quantizers byte-exact (legacy formats, IQ4_NL, IQ4_XS, MXFP4,
// F16, BF16) or of comparable error (K-quants: own quantizer), activation quantizers
// byte-exact, dot products within rounding and at least as accurate as ggml's CPU kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quants.h"
#include "quant_fixture.h"

namespace strata {
namespace {

using test::load_golden;
using test::QuantGolden;

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

// Weight formats whose quantizer reproduces ggml's reference quantizer byte-for-byte.
bool byte_exact_quantizer(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS: case GgmlType::MXFP4:
    case GgmlType::F16: case GgmlType::BF16:
      return true;
    default:
      return false;
  }
}

// Formats Strata only reads (lattice i-quants, ternary): dequantization and dot, no quantizer.
bool decode_only(GgmlType t) {
  switch (t) {
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S: case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::TQ1_0: case GgmlType::TQ2_0:
      return true;
    default:
      return false;
  }
}

class QuantGoldenTest : public ::testing::TestWithParam<GgmlType> {
 protected:
  void SetUp() override {
    STRATA_SKIP_WITHOUT_QUANT_FIXTURES();
    g_ = load_golden(GetParam());
    ASSERT_EQ(g_.blocks.size(), g_.row_bytes * static_cast<size_t>(g_.n_rows));
    ASSERT_EQ(ggml_row_size(GetParam(), static_cast<uint64_t>(g_.n_cols)), g_.row_bytes);
  }
  const uint8_t* row(int r) const { return g_.blocks.data() + static_cast<size_t>(r) * g_.row_bytes; }
  QuantGolden g_;
};

TEST_P(QuantGoldenTest, DequantizeBitExact) {
  const auto& q = quant_traits(GetParam());
  ASSERT_NE(q.to_float, nullptr);
  std::vector<float> out(static_cast<size_t>(g_.n_cols));
  for (int r = 0; r < g_.n_rows; ++r) {
    q.to_float(row(r), out.data(), g_.n_cols);
    int bad = 0, first = -1;
    for (int c = 0; c < g_.n_cols; ++c) {
      if (!same_float(out[c], g_.dequant[static_cast<size_t>(r) * g_.n_cols + c])) {
        if (first < 0) first = c;
        ++bad;
      }
    }
    EXPECT_EQ(bad, 0) << "row " << r << ": first mismatch at col " << first << ": got " << out[first]
                      << " want " << g_.dequant[static_cast<size_t>(r) * g_.n_cols + first];
  }
}

TEST_P(QuantGoldenTest, QuantizeWeights) {
  const GgmlType t = GetParam();
  const auto& q = quant_traits(t);
  if (decode_only(t)) {  // Strata reads these types, never writes them: no quantizer may be registered
    EXPECT_EQ(q.from_float, nullptr) << ggml_type_name(t) << " is decode-only";
    return;
  }
  ASSERT_NE(q.from_float, nullptr);
  const auto& max_err = g_.meta.at("max_abs_err_per_row");
  std::vector<uint8_t> blocks(g_.row_bytes);
  std::vector<float> deq(static_cast<size_t>(g_.n_cols));
  double rel_rmse = 0, ggml_rel_rmse = 0;  // summed over rows
  for (int r = 0; r < g_.n_rows; ++r) {
    const float* x = g_.input.data() + static_cast<size_t>(r) * g_.n_cols;
    q.from_float(x, blocks.data(), g_.n_cols);
    if (byte_exact_quantizer(t)) {
      EXPECT_EQ(std::memcmp(blocks.data(), row(r), g_.row_bytes), 0) << "row " << r << " bytes differ from ggml";
      continue;
    }
    // Own quantizer: its dequantized error must be comparable to ggml's.
    q.to_float(blocks.data(), deq.data(), g_.n_cols);
    float err = 0, amax = 0;
    double se = 0, ggml_se = 0, sx = 0;
    for (int c = 0; c < g_.n_cols; ++c) {
      err = std::max(err, std::fabs(deq[c] - x[c]));
      amax = std::max(amax, std::fabs(x[c]));
      const double ggml_e = g_.dequant[static_cast<size_t>(r) * g_.n_cols + c] - x[c];
      se += static_cast<double>(deq[c] - x[c]) * (deq[c] - x[c]);
      ggml_se += ggml_e * ggml_e;
      sx += static_cast<double>(x[c]) * x[c];
    }
    if (sx > 0) {
      rel_rmse += std::sqrt(se / sx);
      ggml_rel_rmse += std::sqrt(ggml_se / sx);
    }
    const float ggml_err = max_err.at(r).get<float>();
    EXPECT_LE(err, 2 * ggml_err + 1e-6f * amax + 1e-30f) << "row " << r << " max abs err " << err << " vs ggml " << ggml_err;
  }
  // And on average over the rows, a relative RMS error close to ggml's.
  EXPECT_LE(rel_rmse, 1.25 * ggml_rel_rmse) << "mean relative rms error: ours " << rel_rmse / g_.n_rows << ", ggml "
                                            << ggml_rel_rmse / g_.n_rows;
}

TEST_P(QuantGoldenTest, QuantizeActivation) {
  ASSERT_TRUE(g_.meta.contains("vec_dot"));
  const auto& q = quant_traits(GetParam());
  const auto vdt = ggml_type_from_name(g_.meta["vec_dot"].at("vec_dot_type").get<std::string>());
  ASSERT_TRUE(vdt.has_value());
  EXPECT_EQ(q.vec_dot_type, *vdt);
  const auto& qa = quant_traits(q.vec_dot_type);
  ASSERT_NE(qa.from_float, nullptr);
  std::vector<uint8_t> act(ggml_row_size(q.vec_dot_type, static_cast<uint64_t>(g_.n_cols)));
  ASSERT_EQ(act.size(), g_.act_blocks.size());
  qa.from_float(g_.activation.data(), act.data(), g_.n_cols);
  size_t bad = 0;
  for (size_t i = 0; i < act.size(); ++i) bad += act[i] != g_.act_blocks[i];
  EXPECT_EQ(bad, 0u) << "activation bytes differ from ggml's CPU quantizer";
}

TEST_P(QuantGoldenTest, VecDot) {
  const GgmlType t = GetParam();
  const auto& q = quant_traits(t);
  ASSERT_NE(q.vec_dot, nullptr);
  const auto& vd = g_.meta.at("vec_dot");
  const auto& result = vd.at("result");
  const auto& exact = vd.at("f64_dot_of_dequantized");
  std::vector<float> w(static_cast<size_t>(g_.n_cols)), a(static_cast<size_t>(g_.n_cols));
  quant_traits(q.vec_dot_type).to_float(g_.act_blocks.data(), a.data(), g_.n_cols);
  double sum_err = 0, sum_ggml_err = 0;  // relative errors vs the exact dot, summed over rows
  for (int r = 0; r < g_.n_rows; ++r) {
    const float got = q.vec_dot(g_.n_cols, row(r), g_.act_blocks.data());
    // ggml's result is a float, stored with 9 significant digits: rounding to float recovers it
    // exactly (the i-quants match it bit for bit, and their error must then compare equal).
    const double want = static_cast<float>(result.at(r).get<double>()), ref = exact.at(r).get<double>();
    q.to_float(row(r), w.data(), g_.n_cols);
    double mag = 0;  // sum |w*a|: the scale of the rounding errors
    for (int c = 0; c < g_.n_cols; ++c) mag += std::fabs(static_cast<double>(w[c]) * a[c]);
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-6 * mag) << "row " << r;
    // At least as close to the exact dot of the dequantized values as ggml's kernel.
    const double err = std::fabs(got - ref), ggml_err = std::fabs(want - ref);
    EXPECT_LE(err, 2 * ggml_err + 1e-6 * mag) << "row " << r << ": ours " << got << " ggml " << want << " exact " << ref;
    if (mag > 0) {
      sum_err += err / mag;
      sum_ggml_err += ggml_err / mag;
    }
  }
  // Over all rows, the reference is at least as accurate as ggml's CPU kernel.
  EXPECT_LE(sum_err, sum_ggml_err + 1e-12) << "mean relative error vs the f64 dot: ours " << sum_err / g_.n_rows
                                           << ", ggml " << sum_ggml_err / g_.n_rows;
  RecordProperty("err_ratio_vs_ggml", std::to_string(sum_ggml_err > 0 ? sum_err / sum_ggml_err : 0.0));
}

const GgmlType kGoldenTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                 GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                 GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::BF16, GgmlType::F16,
                                 GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                                 GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::TQ1_0, GgmlType::TQ2_0};

INSTANTIATE_TEST_SUITE_P(Golden, QuantGoldenTest, ::testing::ValuesIn(kGoldenTypes),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

}  // namespace
}  // namespace strata
