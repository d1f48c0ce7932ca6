// KernelTable::expf_f32 (ggml's vectorized expf, which SwiGLU, SiLU and softmax round through):
// every table this CPU has gives the one-lane reference ggml_vexpf's bits, for every length
// (tails included) and over the branches (normal, |n| > 126, |n| > 192, infinities, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/ops.h"

using namespace strata;

namespace {

std::vector<float> expf_inputs() {
  std::vector<float> v;
  for (float x = -200.0f; x <= 200.0f; x += 0.37f) v.push_back(x);
  for (float b : {87.0f, 88.0f, 88.72f, 89.0f, 126.0f, 127.0f, 133.0f, 192.0f, 193.0f})
    for (float d : {-0.5f, -1e-3f, 0.0f, 1e-3f, 0.5f}) {
      v.push_back(b + d);
      v.push_back(-(b + d));
    }
  for (float s : {0.0f, -0.0f, 1e-30f, -1e-30f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    v.push_back(s);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 30.0f);
  for (int i = 0; i < 5000; ++i) v.push_back(nd(rng));
  return v;
}

bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

TEST(ExpfTable, EveryTableGivesTheReferenceBits) {
  const std::vector<float> x = expf_inputs();
  int tables = 0;
  for (Isa isa : kAllIsas) {
    const KernelTable* t = kernel_table(isa);
    if (!t) continue;
    ++tables;
    ASSERT_NE(t->expf_f32, nullptr) << isa_name(isa);
    std::vector<float> y(x.size());
    t->expf_f32(static_cast<int64_t>(x.size()), x.data(), y.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(y[i], ggml_vexpf(x[i]))) << isa_name(isa) << ": expf(" << x[i] << ") = " << y[i];
    // Every length 0..37 (the tails), in place (x and y alias).
    for (int64_t n = 0; n <= 37; ++n) {
      std::vector<float> z(x.begin() + 100, x.begin() + 100 + n);
      t->expf_f32(n, z.data(), z.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(z[i], ggml_vexpf(x[100 + i]))) << isa_name(isa) << " n=" << n << " i=" << i;
    }
  }
  EXPECT_GE(tables, 1);
}
