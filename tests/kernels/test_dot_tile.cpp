// Rows x tokens tile kernels (KernelTable::vec_dot_tile) must give, for every (row, token), the
// very float the single-token vec_dot of the same table gives: a result may not depend on which
// rows or tokens share its tile. Checked at the tile's edges (row counts that are not a multiple
// of the tile, 1..40 tokens, padded weight and activation strides, a strided output) and through
// matmul / matmul_many, which call the tiles for prompt-size products.
#include <gtest/gtest.h>
#include "../fixture_sets.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"

namespace strata {
namespace {

using namespace strata::testing;

const char* const kTileTypes[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s"};

uint32_t tile_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// rows rows of cols values, `stride` bytes apart, made of random golden blocks (skipping the
// golden set's extreme rows 5 and 21 so that no product overflows).
std::vector<uint8_t> tile_rows(const Golden& g, int64_t rows, int64_t cols, size_t stride, std::mt19937& rng) {
  const int64_t tsz = ggml_info(g.type).type_size, nblk = cols / QK_K, per_row = g.cols / QK_K;
  std::uniform_int_distribution<int64_t> pick(0, g.rows * per_row - 1);
  std::vector<uint8_t> out(rows * stride, 0x5A);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nblk; ++b) {
      int64_t src;
      do src = pick(rng);
      while (src / per_row == 5 || src / per_row == 21);
      std::memcpy(out.data() + r * stride + b * tsz, g.blocks.data() + src * tsz, tsz);
    }
  return out;
}



TEST(DotTile, BitIdenticalToSingleTokenAtEveryEdge) {
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (tile dots)");
  const auto tables = simd_kernel_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  std::mt19937 rng(17);
  int checked = 0, scalar_iquants = 0;  // tables without tiles
  for (const KernelTable* k : tables) {
    scalar_iquants += is_neon(*k);
    for (const char* stem : kTileTypes) {
      const Golden g = load_golden(stem);
      const auto ti = static_cast<uint32_t>(g.type);
      const VecDotTileFn tile = k->vec_dot_tile[ti];
      if (is_neon(*k) && !tile) continue;  // NEON: no tile kernels yet (matmul takes the multi-token ones)
      ASSERT_NE(tile, nullptr) << k->name << " " << stem << ": no tile kernel";
      const VecDotFn dot = k->vec_dot[ti];
      // 1, 5 (a panel and a remainder), 8 and 17 super-blocks (the 512-bit tiles decode up to 8 at a time)
      for (int64_t cols : {256, 1280, 2048, 4352}) {
        const size_t wstride = ggml_row_size(g.type, cols) + (cols == 1280 ? 48 : 0);
        const auto w = tile_rows(g, 11, cols, wstride, rng);
        const size_t astride = ggml_row_size(GgmlType::Q8_K, cols) + (cols == 2048 ? 64 : 0);
        const auto act = random_act(*k, GgmlType::Q8_K, cols, 40, astride, rng);
        for (int n_rows = 1; n_rows <= 11; ++n_rows) {
          for (int n_tok = 1; n_tok <= 40; ++n_tok) {
            if (cols != 256 && n_rows != 11 && n_rows != 4 && n_rows != 1) continue;  // all counts at one width
            SCOPED_TRACE(std::string(k->name) + " " + stem + " cols=" + std::to_string(cols) + " rows=" +
                         std::to_string(n_rows) + " tokens=" + std::to_string(n_tok));
            const int64_t ys = n_rows + (n_tok % 3 == 0 ? 3 : 0);
            std::vector<float> y(static_cast<size_t>(n_tok * ys), -1.0f);
            tile(cols, w.data(), wstride, n_rows, act.data(), astride, n_tok, y.data(), ys);
            for (int t = 0; t < n_tok; ++t)
              for (int r = 0; r < n_rows; ++r) {
                const float ref = dot(cols, w.data() + r * wstride, act.data() + t * astride);
                ASSERT_EQ(tile_bits(y[t * ys + r]), tile_bits(ref)) << "row " << r << " token " << t << ": " << y[t * ys + r]
                                                                     << " vs " << ref;
              }
            for (int t = 0; t < n_tok; ++t)  // nothing written between rows
              for (int64_t r = n_rows; r < ys; ++r) ASSERT_EQ(y[t * ys + r], -1.0f);
            ++checked;
          }
        }
      }
    }
  }
  if (scalar_iquants < static_cast<int>(tables.size())) {
    EXPECT_GT(checked, 0);
  }
}

// The 512-bit tiles dot (a + 128) against signed weights, which equals the sign-the-activation
// form of the one-token dot only for a != -128: no Q8_K quantizer may emit -128, whatever the
// input (ordinary, tiny, subnormal, infinite or NaN values).
TEST(DotTile, ActivationQuantizerNeverEmitsMinus128) {
  std::vector<const KernelTable*> tables = simd_kernel_tables();
  tables.push_back(kernel_table(Isa::Scalar));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<float>> blocks;
  for (float scale : {1e-45f, 1e-40f, 1e-38f, 3e-37f, 1e-3f, 1.0f, 1e30f}) {
    std::vector<float> x(QK_K);
    for (auto& v : x) v = scale * nd(rng);
    blocks.push_back(x);
    for (float special : {inf, -inf, nan}) {  // one special value among ordinary ones
      auto y = x;
      y[static_cast<size_t>(rng() % QK_K)] = special;
      blocks.push_back(y);
    }
  }
  std::vector<float> ramp(QK_K);  // exact -127 and 127 codes, and everything between
  for (int i = 0; i < QK_K; ++i) ramp[static_cast<size_t>(i)] = static_cast<float>(i - 128) / 127.0f;
  blocks.push_back(ramp);
  int checked = 0;
  for (const KernelTable* k : tables) {
    const FromFloatFn quant = k->quantize_act[static_cast<uint32_t>(GgmlType::Q8_K)];
    ASSERT_NE(quant, nullptr) << k->name;
    for (size_t b = 0; b < blocks.size(); ++b) {
      block_q8_K q{};
      quant(blocks[b].data(), &q, QK_K);
      for (int i = 0; i < QK_K; ++i) ASSERT_NE(q.qs[i], -128) << k->name << " block " << b << " value " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(tables.size() * blocks.size()));
}

// A tile entry exists only beside a multi-token kernel of the same table; the scalar reference
// has none.
TEST(DotTile, PairedWithMultiTokenKernel) {
  const KernelTable* s = kernel_table(Isa::Scalar);
  for (uint32_t i = 0; i < kGgmlTypeCount; ++i) EXPECT_EQ(s->vec_dot_tile[i], nullptr) << i;
  for (const KernelTable* k : simd_kernel_tables())
    for (uint32_t i = 0; i < kGgmlTypeCount; ++i)
      if (k->vec_dot_tile[i]) {
        EXPECT_NE(k->vec_dot_xn[i], nullptr) << k->name << " type " << i;
      }
}

// matmul over prompt-size batches (tiles of rows x tokens, rows not a multiple of the tile) and
// matmul_many over expert-like jobs equal the per-token products bit for bit.
TEST(DotTile, MatmulAndManyEqualPerToken) {
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (tile matmul)");
  std::mt19937 rng(23);
  ThreadPool pool2(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const KernelTable* k : simd_kernel_tables()) {
    for (const char* stem : {"iq2_xxs", "iq3_s"}) {
      const Golden g = load_golden(stem);
      const int64_t cols = 768, rows = 43;
      const size_t rs = ggml_row_size(g.type, cols);
      const auto bytes = tile_rows(g, rows, cols, rs, rng);
      const QMatrix m{g.type, rows, cols, bytes.data(), rs};
      for (int64_t n : {5, 9, 33, 70, 140}) {  // 140: more than one token tile of matmul and of the tiles
        SCOPED_TRACE(std::string(k->name) + " " + stem + " n=" + std::to_string(n));
        std::vector<float> x(n * cols);
        for (auto& v : x) v = nd(rng);
        std::vector<float> y1(rows), want(n * rows);
        MatmulScratch s;
        for (int64_t t = 0; t < n; ++t) {
          matmul(*k, nullptr, m, x.data() + t * cols, 1, y1.data(), s);
          std::memcpy(want.data() + t * rows, y1.data(), sizeof(float) * rows);
        }
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
          std::vector<float> y(n * rows, -1.0f), ym(n * rows, -1.0f);
          matmul(*k, pool, m, x.data(), n, y.data(), s);
          EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << "matmul";
          MatmulJob jobs[2] = {MatmulJob{m, x.data(), n, ym.data()}, MatmulJob{m, x.data(), 1, y1.data()}};
          MatmulManyScratch sm;
          matmul_many(*k, pool, jobs, 2, sm);
          EXPECT_EQ(0, std::memcmp(ym.data(), want.data(), ym.size() * 4)) << "matmul_many";
          EXPECT_EQ(0, std::memcmp(y1.data(), want.data(), rows * 4)) << "matmul_many, one token";
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
