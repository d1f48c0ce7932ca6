// Multi-token dot products (KernelTable::vec_dot_xn) must give, for every token, the very float
// the single-token vec_dot gives (bit for bit): a sequence's logits may not depend on which
// other tokens share its batch. Also checks matmul() over a batch against per-token calls.
#include <gtest/gtest.h>
#include "../fixture_sets.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"

namespace strata {
namespace {

using namespace strata::testing;

const char* const kXnTypes[] = {"q4_k", "q5_k", "q6_k", "iq4_xs", "q8_0", "q4_0", "iq4_nl", "mxfp4",
                                "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0"};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// rows x cols weights made of random golden blocks (real encoder output), skipping the
// golden set's extreme rows (f16-max, 2e4) so that no product overflows to inf / NaN.
std::vector<uint8_t> random_rows(const Golden& g, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto& info = ggml_info(g.type);
  const int64_t bs = info.block_size, tsz = info.type_size, nblk = cols / bs;
  const int64_t per_row = g.cols / bs;
  std::uniform_int_distribution<int64_t> pick(0, g.rows * per_row - 1);
  std::vector<uint8_t> out(rows * nblk * tsz);
  for (int64_t b = 0; b < rows * nblk; ++b) {
    int64_t src;
    do src = pick(rng);
    while (src / per_row == 5 || src / per_row == 21);
    std::memcpy(out.data() + b * tsz, g.blocks.data() + src * tsz, tsz);
  }
  return out;
}



TEST(DotMulti, BitIdenticalToSingleToken) {
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (multi-token dots)");
  const auto tables = simd_kernel_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  std::mt19937 rng(7);
  int checked = 0;
  for (const KernelTable* k : tables) {
    for (const char* stem : kXnTypes) {
      const Golden g = load_golden(stem);
      const auto ti = static_cast<uint32_t>(g.type);
      const VecDotXnFn xn = k->vec_dot_xn[ti];
      if (!xn) continue;  // this table has no multi-token kernel for the type: matmul loops vec_dot
      const VecDotFn dot = k->vec_dot[ti];
      const GgmlType at = matmul_act_type(g.type);
      const int64_t bs = ggml_info(g.type).block_size;
      const std::vector<int64_t> ks = bs == 256 ? std::vector<int64_t>{256, 512, 768, 2304}
                                                : std::vector<int64_t>{32, 96, 160, 768, 4096};
      for (int64_t cols : ks) {
        const auto w = random_rows(g, 1, cols, rng);
        for (int n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 17, 33, 40}) {
          SCOPED_TRACE(std::string(k->name) + " " + stem + " cols=" + std::to_string(cols) +
                       " n_tok=" + std::to_string(n_tok));
          const size_t stride = ggml_row_size(at, cols) + (n_tok % 2 ? 0 : 64);
          const auto act = random_act(*k, at, cols, n_tok, stride, rng);
          const int64_t ys = n_tok % 3 == 0 ? 5 : 1;
          std::vector<float> y(n_tok * ys, -1.0f);
          xn(cols, w.data(), act.data(), stride, n_tok, y.data(), ys);
          for (int t = 0; t < n_tok; ++t) {
            const float ref = dot(cols, w.data(), act.data() + t * stride);
            ASSERT_EQ(bits(y[t * ys]), bits(ref)) << "token " << t << ": " << y[t * ys] << " vs " << ref;
          }
          ++checked;
        }
      }
    }
  }
  // AVX2 and NEON must provide the types that matter most for prompt processing.
  for (Isa isa : {Isa::Avx2, Isa::Neon, Isa::NeonDotprod})
    if (const KernelTable* a = kernel_table(isa)) {
      for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0})
        EXPECT_NE(a->vec_dot_xn[static_cast<uint32_t>(t)], nullptr) << a->name << " " << ggml_type_name(t);
    }
  EXPECT_GT(checked, 0);
}

// Every SIMD table above AVX2 (AVX-512, AVX-VNNI) gives, for one token and for several, exactly the AVX2
// kernel's float: the same logits on every machine, and llama.cpp's wherever AVX2's are. Checked
// on every golden row (zeros, subnormals, near-max, outliers) and on random rows and batches.
TEST(DotMulti, WiderTablesBitIdenticalToAvx2) {
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (wider SIMD tables)");
  const KernelTable* a2 = kernel_table(Isa::Avx2);
  std::vector<const KernelTable*> wide;
  for (Isa isa : {Isa::Avx512, Isa::AvxVnni})
    if (const KernelTable* k = kernel_table(isa)) wide.push_back(k);
  if (!a2 || wide.empty())
    GTEST_SKIP() << "*** no AVX-512 VNNI or AVX-VNNI on this CPU: the VNNI kernels are NOT checked here ***";
  std::mt19937 rng(23);
  for (const KernelTable* a5 : wide) {
  int overridden = 0;
  for (const char* stem : kXnTypes) {
    const Golden g = load_golden(stem);
    const auto ti = static_cast<uint32_t>(g.type);
    const VecDotFn ref = a2->vec_dot[ti], dot = a5->vec_dot[ti];
    const VecDotXnFn xn = a5->vec_dot_xn[ti];
    if (dot == ref) continue;
    ++overridden;
    ASSERT_NE(xn, nullptr) << a5->name << " " << stem << ": a vec_dot without its multi-token kernel";
    for (int64_t r = 0; r < g.rows; ++r) {
      const uint8_t* w = g.blocks.data() + r * g.row_bytes;
      const float want = ref(g.cols, w, g.act_blocks.data());
      const float got = dot(g.cols, w, g.act_blocks.data());
      if (std::isnan(want) && std::isnan(got)) continue;
      ASSERT_EQ(bits(got), bits(want)) << a5->name << " " << stem << " golden row " << r << ": " << got << " vs AVX2 " << want;
    }
    const GgmlType at = matmul_act_type(g.type);
    const int64_t bs = ggml_info(g.type).block_size;
    for (int64_t cols : bs == 256 ? std::vector<int64_t>{256, 768, 2304} : std::vector<int64_t>{32, 64, 96, 4096}) {
      const auto w = random_rows(g, 1, cols, rng);
      for (int n_tok : {1, 2, 5, 8, 9, 19, 37}) {
        SCOPED_TRACE(std::string(a5->name) + " " + stem + " cols=" + std::to_string(cols) + " n_tok=" + std::to_string(n_tok));
        const size_t stride = ggml_row_size(at, cols) + 32 * (n_tok % 2);
        const auto act = random_act(*a2, at, cols, n_tok, stride, rng);
        std::vector<float> y(n_tok, -1.0f);
        xn(cols, w.data(), act.data(), stride, n_tok, y.data(), 1);
        for (int t = 0; t < n_tok; ++t) {
          const float want = ref(cols, w.data(), act.data() + t * stride);
          ASSERT_EQ(bits(dot(cols, w.data(), act.data() + t * stride)), bits(want)) << "token " << t;
          ASSERT_EQ(bits(y[t]), bits(want)) << "token " << t << " (multi-token)";
        }
      }
    }
  }
  EXPECT_EQ(overridden, 15) << a5->name << " covers q4_k q5_k q6_k iq4_xs q8_0 q4_0 iq4_nl mxfp4 and the 7 grid i-quants";
  }
}

// The scalar table has no multi-token kernels; a table whose vec_dot differs from the one a
// multi-token kernel mirrors must not keep that kernel.
TEST(DotMulti, TablesPairWithTheirSingleTokenKernel) {
  const KernelTable* s = kernel_table(Isa::Scalar);
  ASSERT_NE(s, nullptr);
  for (uint32_t i = 0; i < kGgmlTypeCount; ++i) EXPECT_EQ(s->vec_dot_xn[i], nullptr) << i;
  // (child, parent): the tables that start as a copy of another.
  const std::pair<Isa, Isa> children[] = {{Isa::Avx512, Isa::Avx2}, {Isa::AvxVnni, Isa::Avx2}, {Isa::NeonDotprod, Isa::Neon}};
  for (const auto& [child, parent] : children) {
    const KernelTable* w = kernel_table(child);
    const KernelTable* a2 = kernel_table(parent);
    if (!w || !a2) continue;
    for (uint32_t i = 0; i < kGgmlTypeCount; ++i) {
      if (w->vec_dot[i] != a2->vec_dot[i]) {
        EXPECT_NE(w->vec_dot_xn[i], a2->vec_dot_xn[i]) << w->name << " type " << i;
      }
    }
  }
}

// The i-quants' and ternary types' SIMD kernels are bit-identical to the scalar reference (both
// are llama.cpp's AVX2 arithmetic): every golden row and random rows of many blocks, one token
// and several.
TEST(DotMulti, IqSimdBitIdenticalToScalar) {
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (i-quant kernels)");
  const KernelTable* sc = kernel_table(Isa::Scalar);
  const auto tables = simd_kernel_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  std::mt19937 rng(31);
  for (const KernelTable* k : tables) {
    for (const char* stem : {"iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m", "tq1_0", "tq2_0"}) {
      SCOPED_TRACE(std::string(k->name) + " " + stem);
      const Golden g = load_golden(stem);
      const auto ti = static_cast<uint32_t>(g.type);
      ASSERT_NE(k->vec_dot[ti], sc->vec_dot[ti]) << "no SIMD kernel";
      ASSERT_NE(k->vec_dot_xn[ti], nullptr) << "no multi-token kernel";
      for (int64_t r = 0; r < g.rows; ++r) {
        const uint8_t* w = g.blocks.data() + r * g.row_bytes;
        const float want = sc->vec_dot[ti](g.cols, w, g.act_blocks.data());
        float xn = -1;
        k->vec_dot_xn[ti](g.cols, w, g.act_blocks.data(), 0, 1, &xn, 1);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(k->vec_dot[ti](g.cols, w, g.act_blocks.data())) && std::isnan(xn)) << "golden row " << r;
          continue;
        }
        ASSERT_EQ(bits(k->vec_dot[ti](g.cols, w, g.act_blocks.data())), bits(want)) << "golden row " << r;
        ASSERT_EQ(bits(xn), bits(want)) << "golden row " << r << " (multi-token)";
      }
      for (int64_t cols : {256, 1024, 2816}) {
        const auto w = random_rows(g, 1, cols, rng);
        const size_t stride = ggml_row_size(GgmlType::Q8_K, cols);
        for (int nt : {3, 7, 20}) {  // one pass of 4 tokens; a decoded panel with a remainder; several passes
          SCOPED_TRACE("tokens " + std::to_string(nt));
          const auto act = random_act(*k, GgmlType::Q8_K, cols, nt, stride, rng);
          std::vector<float> y(nt, -1.0f);
          k->vec_dot_xn[ti](cols, w.data(), act.data(), stride, nt, y.data(), 1);
          for (int t = 0; t < nt; ++t) {
            const float want = sc->vec_dot[ti](cols, w.data(), act.data() + t * stride);
            ASSERT_EQ(bits(k->vec_dot[ti](cols, w.data(), act.data() + t * stride)), bits(want)) << "cols " << cols << " token " << t;
            ASSERT_EQ(bits(y[t]), bits(want)) << "cols " << cols << " token " << t << " (multi-token)";
          }
        }
      }
    }
  }
}

// matmul over a batch == matmul token by token, bit for bit, for every table, with and without
// threads, for batch sizes that hit the n = 1 path, the remainders and several token tiles.
TEST(DotMulti, MatmulBatchEqualsPerToken) {
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (batched matmul)");
  std::mt19937 rng(11);
  ThreadPool pool2(2);
  std::vector<const KernelTable*> tables = simd_kernel_tables();
  tables.push_back(kernel_table(Isa::Scalar));
  for (const KernelTable* k : tables) {
    for (const char* stem : kXnTypes) {
      const Golden g = load_golden(stem);
      const int64_t bs = ggml_info(g.type).block_size;
      const int64_t cols = bs == 256 ? 768 : 32 * 13;
      const int64_t rows = 37;
      const auto bytes = random_rows(g, rows, cols, rng);
      const QMatrix m{g.type, rows, cols, bytes.data(), ggml_row_size(g.type, cols)};
      for (int64_t n : {1, 3, 17, 100}) {
        if (k->isa == Isa::Scalar && n == 100) continue;  // slow, and nothing batched to check
        SCOPED_TRACE(std::string(k->name) + " " + stem + " n=" + std::to_string(n));
        std::vector<float> x(n * cols);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
          MatmulScratch s;
          std::vector<float> y(n * rows, -1.0f), y1(rows);
          matmul(*k, pool, m, x.data(), n, y.data(), s);
          for (int64_t t = 0; t < n; ++t) {
            matmul(*k, pool, m, x.data() + t * cols, 1, y1.data(), s);
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(bits(y[t * rows + r]), bits(y1[r])) << "token " << t << " row " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
