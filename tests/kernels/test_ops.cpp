// ops: ggml's vectorized expf emulation and the SwiGLU built on it.
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

TEST(Ops, GgmlVexpfIsWithinTwoUlpOfExpAndHandlesTheEdges) {
  EXPECT_EQ(ggml_vexpf(0.0f), 1.0f);
  EXPECT_EQ(ggml_vexpf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ggml_vexpf(-200.0f), 0.0f);  // underflow branch
  EXPECT_TRUE(std::isinf(ggml_vexpf(200.0f)));  // overflow branch
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-87.0f, 88.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = ud(rng);
    const double want = std::exp(static_cast<double>(x));
    const float got = ggml_vexpf(x);
    const double ulp = std::nextafter(static_cast<float>(want), std::numeric_limits<float>::infinity()) - static_cast<float>(want);
    ASSERT_LE(std::fabs(got - want), 2 * ulp) << "x = " << x;
  }
}

TEST(Ops, SwigluUsesTheVectorExpForGroupsOfEightAndExpfForTheTail) {
  std::vector<float> g(13), u(13), out(13);
  for (int i = 0; i < 13; ++i) g[i] = -3.0f + 0.5f * i, u[i] = 1.0f + 0.1f * i;
  swiglu(g.data(), u.data(), out.data(), 13);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], (g[i] / (1.0f + ggml_vexpf(0.0f - g[i]))) * u[i]) << i;
  for (int i = 8; i < 13; ++i) EXPECT_EQ(out[i], (g[i] / (1.0f + std::exp(-g[i]))) * u[i]) << i;
}

}  // namespace
}  // namespace strata
