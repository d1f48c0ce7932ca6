// matmul (threaded gemv / small gemm) against a naive double-precision reference: weights built
// from golden blocks (known dequantized values) or random floats, activations quantized by the
// table and dequantized on the test side, odd shapes and thread counts.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernel_test_util.h"

namespace strata {
namespace {

using namespace strata::testing;

struct TestMatrix {
  QMatrix m;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;  // [rows, cols]
};

// Rows of random golden blocks (stem: fixture name) or, for F32, random floats. `pad` extra
// bytes per row exercise row_stride_bytes > row size.
TestMatrix make_matrix(const std::string& stem, int64_t rows, int64_t cols, size_t pad, std::mt19937& rng) {
  TestMatrix t;
  if (stem == "f32") {
    t.m.type = GgmlType::F32;
    t.m.row_stride_bytes = cols * 4 + pad;
    t.bytes.assign(rows * t.m.row_stride_bytes, 0);
    t.deq.resize(rows * cols);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float v = nd(rng);
        t.deq[r * cols + c] = v;
        std::memcpy(t.bytes.data() + r * t.m.row_stride_bytes + c * 4, &v, 4);
      }
  } else {
    const Golden g = load_golden(stem);
    const auto& info = ggml_info(g.type);
    const int64_t bs = info.block_size, tsz = info.type_size, nblk = cols / bs;
    const int64_t golden_blocks = g.rows * g.cols / bs;
    t.m.type = g.type;
    t.m.row_stride_bytes = nblk * tsz + pad;
    t.bytes.assign(rows * t.m.row_stride_bytes, 0);
    t.deq.resize(rows * cols);
    std::uniform_int_distribution<int64_t> pick(0, golden_blocks - 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < nblk; ++b) {
        // Skip the extreme rows (f16-max, 2e4) so the sums stay well conditioned.
        int64_t src;
        do src = pick(rng);
        while (src / (g.cols / bs) == 5 || src / (g.cols / bs) == 21);
        std::memcpy(t.bytes.data() + r * t.m.row_stride_bytes + b * tsz, g.blocks.data() + src * tsz, tsz);
        std::memcpy(t.deq.data() + r * cols + b * bs, g.deq.data() + src * bs, bs * sizeof(float));
      }
  }
  t.m.rows = rows;
  t.m.cols = cols;
  t.m.data = t.bytes.data();
  return t;
}

void check_matmul(const KernelTable& k, ThreadPool* pool, const std::string& stem, int64_t rows, int64_t cols,
                  int64_t n, size_t pad, std::mt19937& rng) {
  SCOPED_TRACE(stem + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " n=" +
               std::to_string(n) + " threads=" + std::to_string(pool ? pool->size() : 1));
  const TestMatrix t = make_matrix(stem, rows, cols, pad, rng);
  std::vector<float> x(n * cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  std::vector<float> y(n * rows, std::nanf(""));
  MatmulScratch s;
  matmul(k, pool, t.m, x.data(), n, y.data(), s);

  const GgmlType at = matmul_act_type(t.m.type);
  const size_t arow = at == GgmlType::F32 ? 0 : ggml_row_size(at, cols);
  for (int64_t tok = 0; tok < n; ++tok) {
    std::vector<double> a(cols);
    std::vector<uint8_t> aq(arow);
    if (at == GgmlType::F32) {
      for (int64_t c = 0; c < cols; ++c) a[c] = x[tok * cols + c];
    } else {
      k.quantize_act[static_cast<uint32_t>(at)](x.data() + tok * cols, aq.data(), cols);
      a = dequant_act(at, aq.data(), cols);
    }
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += double(t.deq[r * cols + c]) * a[c];
        mag += std::fabs(double(t.deq[r * cols + c]) * a[c]);
      }
      if (at == GgmlType::Q8_1)
        ref += q8_1_min_correction(t.m.type, t.bytes.data() + r * t.m.row_stride_bytes, aq.data(), cols);
      ASSERT_NEAR(y[tok * rows + r], ref, 2e-6 * mag + 1e-5 * std::fabs(ref) + 1e-30) << "token " << tok << " row " << r;
    }
  }
}

// Every SIMD table this CPU has (AVX2, AVX-VNNI, AVX-512; NEON), odd shapes, with and without threads.
TEST(Matmul, MatchesDoubleReference) {
  if (simd_kernel_tables().empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (matmul)");
  std::mt19937 rng(42);
  ThreadPool pool3(3);
  ThreadPool pool2(2);
  for (Isa isa : kSimdIsas) {
    const KernelTable* k = kernel_table(isa);
    if (!k) continue;
    SCOPED_TRACE(k->name);
    for (const char* stem : {"q4_0", "q4_1", "q8_0", "q5_k", "q4_k", "q6_k", "iq4_xs", "mxfp4", "f16", "bf16", "f32"}) {
      const int64_t bs = stem == std::string("f32") ? 32 : ggml_info(load_golden(stem).type).block_size;
      const int64_t cols = bs == 256 ? 512 : 32 * 5;
      for (int64_t rows : {1, 7, 37}) {
        for (int64_t n : {1, 3, 17}) {
          check_matmul(*k, &pool3, stem, rows, cols, n, n == 3 ? 6 : 0, rng);
          if (HasFatalFailure()) return;
        }
      }
      check_matmul(*k, nullptr, stem, 5, cols, 2, 0, rng);
      if (HasFatalFailure()) return;
    }
    // n > 16 with more weight rows than one row tile (256 KiB): row tiles x token tiles.
    check_matmul(*k, &pool3, "q4_k", 1000, 512, 19, 0, rng);
    check_matmul(*k, &pool2, "q8_0", 333, 256, 1, 0, rng);
  }
}

TEST(Matmul, RejectsBadShapes) {
  if (simd_kernel_tables().empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable* k = simd_kernel_tables().front();
  std::vector<uint8_t> w(1000);
  QMatrix m{GgmlType::Q4_K, 2, 100, w.data(), 144};  // 100 columns: not a multiple of 256
  std::vector<float> x(100), y(2);
  MatmulScratch s;
  EXPECT_THROW(matmul(*k, nullptr, m, x.data(), 1, y.data(), s), Error);
}

// GemmBackend::Blas (opt-in --gemm blas): products of >= kBlasMinTokens tokens take OpenBLAS
// sgemm on dequantized weights with the f32 activations themselves (no activation rounding);
// smaller ones keep the int8 path bit for bit.
struct GemmBackendGuard {
  explicit GemmBackendGuard(GemmBackend b) { select_gemm_backend(b); }
  ~GemmBackendGuard() { select_gemm_backend(GemmBackend::Int8); }
};

TEST(Matmul, BlasBackendMatchesDoubleReference) {
  if (simd_kernel_tables().empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable* k = simd_kernel_tables().front();
  if (!gemm_blas_available()) {
    EXPECT_FALSE(gemm_blas_built()) << "the build found OpenBLAS, but the library does not load";
    EXPECT_THROW(select_gemm_backend(GemmBackend::Blas), Error);
    GTEST_SKIP() << "built without OpenBLAS (--gemm blas not available)";
  }
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (BLAS matmul)");
  EXPECT_EQ(parse_gemm_backend("blas"), GemmBackend::Blas);
  EXPECT_EQ(parse_gemm_backend("int8"), GemmBackend::Int8);
  EXPECT_THROW(parse_gemm_backend("mkl"), Error);
  std::mt19937 rng(11);
  ThreadPool pool3(3);
  const int64_t cols = 512;
  for (const char* stem : {"q8_0", "q4_k", "q6_k", "q4_0"}) {
    for (int64_t rows : {37, 300}) {
      const TestMatrix t = make_matrix(stem, rows, cols, rows == 37 ? 6 : 0, rng);
      for (int64_t n : {kBlasMinTokens - 1, kBlasMinTokens, kBlasMinTokens + 3}) {
        SCOPED_TRACE(std::string(stem) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n));
        std::vector<float> x(n * cols);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng);
        std::vector<float> y8(n * rows), yb(n * rows, std::nanf("")), y1(n * rows, std::nanf(""));
        MatmulScratch s;
        matmul(*k, &pool3, t.m, x.data(), n, y8.data(), s);  // int8 (default)
        {
          GemmBackendGuard blas(GemmBackend::Blas);
          EXPECT_EQ(matmul_blas_applies(*k, t.m, n), n >= kBlasMinTokens);
          matmul(*k, &pool3, t.m, x.data(), n, yb.data(), s);
          matmul(*k, nullptr, t.m, x.data(), n, y1.data(), s);
        }
        if (n < kBlasMinTokens) {  // below the threshold: the int8 path, bit for bit
          EXPECT_EQ(0, std::memcmp(y8.data(), yb.data(), y8.size() * 4));
          continue;
        }
        for (int64_t tok = 0; tok < n; ++tok)
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              ref += double(t.deq[r * cols + c]) * x[tok * cols + c];
              mag += std::fabs(double(t.deq[r * cols + c]) * x[tok * cols + c]);
            }
            ASSERT_NEAR(yb[tok * rows + r], ref, 1e-5 * mag + 1e-30) << "token " << tok << " row " << r;
            ASSERT_NEAR(y1[tok * rows + r], ref, 1e-5 * mag + 1e-30) << "token " << tok << " row " << r << " (1 thread)";
          }
      }
    }
  }
  // f32 weights never take the BLAS path (their multi-token association follows llama.cpp's).
  GemmBackendGuard blas(GemmBackend::Blas);
  QMatrix f{GgmlType::F32, 4, 64, nullptr, 256};
  EXPECT_FALSE(matmul_blas_applies(*k, f, 512));
}

// matmul_many: every product equals matmul() on the same job, bit for bit (shared inputs,
// mixed types, f32 with multi-token flags, more jobs than threads, i-quants with 2..9 tokens
// through their multi-token kernels), on every SIMD table this CPU has.
TEST(Matmul, ManyEqualsOneByOne) {
  if (simd_kernel_tables().empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  if (!fs::exists(kDir / "README.md"))
    STRATA_MISSING_FIXTURE(kDir.string() + " (matmul_many)");
  std::mt19937 rng(5);
  ThreadPool pool(2);
  const int64_t cols = 512;
  std::vector<TestMatrix> mats;
  for (const char* stem : {"q4_k", "q6_k", "f32", "q8_0", "q4_k", "iq2_xxs", "iq3_s", "iq2_xxs", "iq1_m"})
    mats.push_back(make_matrix(stem, 37 + 11 * mats.size(), cols, 0, rng));
  for (auto& t : mats) t.m.rows = 37 + 11 * static_cast<int64_t>(&t - mats.data()), t.m.cols = cols, t.m.data = t.bytes.data();
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> xa(3 * cols), xb(2 * cols), xc(9 * cols);
  for (auto* x : {&xa, &xb, &xc})
    for (auto& v : *x) v = nd(rng);
  const uint8_t flags[3] = {1, 0, 1};
  for (Isa isa : kSimdIsas) {
    const KernelTable* k = kernel_table(isa);
    if (!k) continue;
    SCOPED_TRACE(k->name);
    std::vector<std::vector<float>> want(mats.size()), got(mats.size());
    std::vector<MatmulJob> jobs;
    MatmulScratch s1;
    for (size_t j = 0; j < mats.size(); ++j) {
      const float* x = j >= 7 ? xc.data() : j % 2 ? xb.data() : xa.data();  // jobs 0, 2, 4, 6 share xa
      const int64_t n = j >= 7 ? 9 : j % 2 ? 2 : 3;
      const uint8_t* fl = j % 2 || j >= 7 ? nullptr : flags;
      want[j].assign(static_cast<size_t>(n * mats[j].m.rows), 0);
      got[j].assign(want[j].size(), -1);
      matmul(*k, &pool, mats[j].m, x, n, want[j].data(), s1, fl);
      jobs.push_back(MatmulJob{mats[j].m, x, n, got[j].data(), fl});
    }
    MatmulManyScratch sm;
    for (ThreadPool* p : {&pool, static_cast<ThreadPool*>(nullptr)}) {
      matmul_many(*k, p, jobs.data(), static_cast<int>(jobs.size()), sm);
      for (size_t j = 0; j < mats.size(); ++j) EXPECT_EQ(0, std::memcmp(want[j].data(), got[j].data(), want[j].size() * 4)) << "job " << j;
    }
  }
}

}  // namespace
}  // namespace strata
