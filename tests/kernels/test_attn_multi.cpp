// Grouped-query attention kernels (KernelTable::dot_f16_f32_multi, vsum_f16_multi): on every table
// this CPU has and the scalar one, m queries against shared f16 rows give the same bits as the
// one-query forms (dot_f16_f32; repeated axpy_f16 skipping zero weights), for row widths that
// are and are not multiples of 8 and groups past 8 queries.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernel_test_util.h"
#include "kernels/kernel_table.h"

using namespace strata;

namespace {

std::vector<const KernelTable*> attn_multi_tables() {
  std::vector<const KernelTable*> v = strata::testing::simd_kernel_tables();
  v.push_back(kernel_table(Isa::Scalar));
  return v;
}

std::vector<uint16_t> attn_multi_f16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_f16(d(rng));
  return v;
}

}  // namespace

TEST(AttnMulti, DotOfManyQueriesEqualsOneAtATime) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const KernelTable* k : attn_multi_tables()) {
    ASSERT_NE(k->dot_f16_f32_multi, nullptr);
    for (int n : {1, 7, 8, 64, 100, 128, 192}) {
      for (int m : {1, 3, 8, 11}) {
        const auto row = attn_multi_f16(static_cast<size_t>(n), rng);
        std::vector<std::vector<float>> q(static_cast<size_t>(m), std::vector<float>(static_cast<size_t>(n)));
        std::vector<const float*> qp;
        for (auto& r : q) {
          for (auto& x : r) x = d(rng);
          qp.push_back(r.data());
        }
        std::vector<float> out(static_cast<size_t>(m));
        k->dot_f16_f32_multi(n, row.data(), qp.data(), m, out.data());
        for (int g = 0; g < m; ++g) {
          const float one = k->dot_f16_f32(n, row.data(), qp[g]);
          EXPECT_EQ(std::memcmp(&one, &out[g], sizeof(float)), 0) << "n " << n << " m " << m << " query " << g;
        }
      }
    }
  }
}

TEST(AttnMulti, ValueSumsOfManyQueriesEqualRepeatedAxpy) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (const KernelTable* k : attn_multi_tables()) {
    ASSERT_NE(k->vsum_f16_multi, nullptr);
    for (int dv : {8, 13, 64, 128}) {
      for (int n_keys : {1, 5, 40}) {
        for (int m : {1, 4, 8, 10}) {
          const int64_t stride = dv + 8;  // rows further apart than their width, as KV cache rows
          const auto v = attn_multi_f16(static_cast<size_t>(n_keys * stride), rng);
          std::vector<float> w(static_cast<size_t>(m * n_keys));
          for (auto& x : w) x = u(rng) < 0.2f ? 0.0f : u(rng);  // some exact zeros: skipped
          std::vector<std::vector<float>> y(static_cast<size_t>(m), std::vector<float>(static_cast<size_t>(dv), 99.0f));
          std::vector<float*> yp;
          for (auto& r : y) yp.push_back(r.data());
          k->vsum_f16_multi(n_keys, dv, v.data(), stride, w.data(), n_keys, yp.data(), m);
          for (int g = 0; g < m; ++g) {
            std::vector<float> ref(static_cast<size_t>(dv), 0.0f);
            for (int j = 0; j < n_keys; ++j)
              if (w[static_cast<size_t>(g * n_keys + j)] != 0.0f) k->axpy_f16(dv, w[static_cast<size_t>(g * n_keys + j)], v.data() + j * stride, ref.data());
            EXPECT_EQ(std::memcmp(ref.data(), y[static_cast<size_t>(g)].data(), sizeof(float) * static_cast<size_t>(dv)), 0)
                << "dv " << dv << " keys " << n_keys << " m " << m << " query " << g;
          }
        }
      }
    }
  }
}
