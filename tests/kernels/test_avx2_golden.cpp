// The SIMD kernel tables (AVX2 and its children, NEON) against llama.cpp's golden quant-blocks fixtures (shared/fixtures/quant-blocks):
// vec_dot results, activation quantization bytes, and random odd-size rows checked against a
// double-precision dot of the golden dequantized values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "gguf/ggml_type.h"
#include "kernels/blocks.h"
#include "kernels/kernel_table.h"
#include "kernel_test_util.h"

namespace strata {
namespace {

using namespace strata::testing;

// Every SIMD table this CPU has (AVX2 and its VNNI / AVX-512 children, or the NEON ones): each
// gives llama.cpp's AVX2 association, so each is checked the same way.
#define REQUIRE_SIMD_AND_FIXTURES(tables)                                                          \
  const std::vector<const KernelTable*> tables = simd_kernel_tables();                             \
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";                          \
  if (!fs::exists(kDir / "README.md")) STRATA_MISSING_FIXTURE(kDir.string() + " (kernel accuracy)")

// Every vec_dot of table `k` on the golden rows vs llama.cpp's result.
void check_vec_dot_golden(const KernelTable* k) {
  const auto act = read_f32(kDir / "activation.f32");
  for (const char* stem : kTypes) {
    SCOPED_TRACE(std::string(stem) + " " + k->name);
    const Golden g = load_golden(stem);
    const VecDotFn dot = k->vec_dot[static_cast<uint32_t>(g.type)];
    ASSERT_NE(dot, nullptr) << "no AVX2 vec_dot for " << stem;
    int bad = 0;
    double worst = 0;  // largest |got - ref| / |ref| over rows with a non-negligible result
    for (int64_t r = 0; r < g.rows; ++r) {
      const float got = dot(g.cols, g.blocks.data() + r * g.row_bytes, g.act_blocks.data());
      double mag = 0;  // scale of the terms, for rows that cancel to ~0
      for (int64_t c = 0; c < g.cols; ++c) mag += std::fabs(double(g.deq[r * g.cols + c]) * act[c]);
      const double ref = g.result[r];
      const double tol = 1e-5 * std::fabs(ref) + 1e-6 * mag + 1e-30;
      if (std::fabs(ref) > 1e-3 * mag) worst = std::max(worst, std::fabs(got - ref) / std::fabs(ref));
      if (!(std::fabs(got - ref) <= tol)) {
        ++bad;
        ADD_FAILURE() << stem << " row " << r << ": got " << got << " llama.cpp " << ref << " (tol " << tol << ")";
      }
    }
    EXPECT_EQ(bad, 0);
    std::printf("  %-7s %s worst relative difference to llama.cpp: %.2e\n", stem, k->name, worst);
  }
}

TEST(SimdGolden, VecDotMatchesLlamaCpp) {
  REQUIRE_SIMD_AND_FIXTURES(tables);
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    check_vec_dot_golden(k);
  }
}

// The VNNI tables only run where the CPU has them: AVX-512 VNNI (512-bit for the super-block
// formats, the rest VNNI-256 or AVX2), and the 256-bit VNNI kernels (AVX-VNNI, or their EVEX
// form on AVX-512 VNNI CPUs).
static void check_table_golden(Isa isa, const char* cpu_lacks) {
  const KernelTable* k = kernel_table(isa);
  if (!k) GTEST_SKIP() << "*** no " << cpu_lacks << " on this CPU: the " << isa_name(isa) << " kernels are NOT tested here ***";
  if (!fs::exists(kDir / "README.md")) STRATA_MISSING_FIXTURE(kDir.string() + " (kernel accuracy)");
  check_vec_dot_golden(k);
}

// The i-quants and ternary types compute with llama.cpp's own AVX2 arithmetic (exact int32 lanes
// per block, one fused multiply-add per lane with d_w * d_a, its horizontal sum; see Lanes8 in
// kernels/scalar/quants_internal.h): their dots are the reference's floats bit for bit, in the
// scalar table and in every SIMD table this CPU has, one token and several.
TEST(IqGolden, VecDotBitExactWithLlamaCpp) {
  if (!fs::exists(kDir / "README.md")) STRATA_MISSING_FIXTURE(kDir.string() + " (i-quant dots)");
  int tables = 0;
  for (Isa isa : kAllIsas) {
    const KernelTable* k = kernel_table(isa);
    if (!k) continue;
    ++tables;
    for (const char* stem : {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "tq1_0", "tq2_0"}) {
      SCOPED_TRACE(std::string(stem) + " " + k->name);
      const Golden g = load_golden(stem);
      const auto ti = static_cast<uint32_t>(g.type);
      for (int64_t r = 0; r < g.rows; ++r) {
        const uint8_t* w = g.blocks.data() + r * g.row_bytes;
        const float want = g.result[r];
        const float got = k->vec_dot[ti](g.cols, w, g.act_blocks.data());
        float xn = -1;
        if (k->vec_dot_xn[ti]) k->vec_dot_xn[ti](g.cols, w, g.act_blocks.data(), 0, 1, &xn, 1);
        else xn = got;
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got) && std::isnan(xn)) << "row " << r;
          continue;
        }
        EXPECT_EQ(f32_to_bits(got), f32_to_bits(want)) << "row " << r << ": " << got << " vs llama.cpp " << want;
        EXPECT_EQ(f32_to_bits(xn), f32_to_bits(want)) << "row " << r << " (multi-token): " << xn << " vs llama.cpp " << want;
      }
    }
  }
  EXPECT_GE(tables, 1);
}

TEST(Avx512Golden, VecDotMatchesLlamaCpp) { check_table_golden(Isa::Avx512, "AVX-512 VNNI"); }
TEST(AvxVnniGolden, VecDotMatchesLlamaCpp) { check_table_golden(Isa::AvxVnni, "AVX-VNNI or AVX-512 VNNI"); }

TEST(SimdGolden, ActivationQuantizationBytes) {
  REQUIRE_SIMD_AND_FIXTURES(tables);
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    const auto act = read_f32(kDir / "activation.f32");
    for (const char* stem : kTypes) {
      SCOPED_TRACE(stem);
      const Golden g = load_golden(stem);
      const FromFloatFn q = k->quantize_act[static_cast<uint32_t>(g.act_type)];
      ASSERT_NE(q, nullptr) << "no AVX2 quantize_act for " << ggml_type_name(g.act_type);
      std::vector<uint8_t> out(g.act_blocks.size(), 0xCD);
      q(act.data(), out.data(), static_cast<int64_t>(act.size()));
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], g.act_blocks[i]) << ggml_type_name(g.act_type) << " byte " << i;
      }
    }
  }
}

// AVX2 dequantizers (where the table has one that is not the scalar reference) reproduce
// ggml's to_float bit for bit.
TEST(SimdGolden, DequantizeBitExact) {
  REQUIRE_SIMD_AND_FIXTURES(tables);
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    const KernelTable* scalar = kernel_table(Isa::Scalar);
    int checked = 0;
    for (const char* stem : kTypes) {
      const Golden g = load_golden(stem);
      const ToFloatFn deq = k->dequantize[static_cast<uint32_t>(g.type)];
      if (!deq || deq == scalar->dequantize[static_cast<uint32_t>(g.type)]) continue;
      ++checked;
      std::vector<float> out(g.rows * g.cols);
      for (int64_t r = 0; r < g.rows; ++r) deq(g.blocks.data() + r * g.row_bytes, out.data() + r * g.cols, g.cols);
      for (size_t i = 0; i < out.size(); ++i) {
        if (std::isnan(out[i]) && std::isnan(g.deq[i])) continue;
        ASSERT_EQ(f32_to_bits(out[i]), f32_to_bits(g.deq[i]))
            << stem << " value " << i << ": " << out[i] << " vs ggml " << g.deq[i];
      }
    }
    // The x86 tables have 6 of their own (q8_0 q4_0 q4_k q6_k f16 bf16), the NEON ones 4 (not the K-quants).
    EXPECT_GE(checked, is_neon(*k) ? 4 : 6);
  }
}

// Random rows of many blocks: blocks picked from the golden rows (so every stress case shows
// up, in random order), random activations quantized by the AVX2 quantizer, checked against
// a double dot of the golden dequantized weights with the dequantized activations.
TEST(SimdGolden, RandomRowsMatchDoubleReference) {
  REQUIRE_SIMD_AND_FIXTURES(tables);
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    std::mt19937 rng(1234);
    for (const char* stem : kTypes) {
      const Golden g = load_golden(stem);
      const auto& info = ggml_info(g.type);
      const int64_t bs = info.block_size, tsz = info.type_size;
      const int64_t golden_blocks = g.rows * g.cols / bs;
      for (int64_t nblk : {1, 2, 3, 7, 37, 129}) {
        SCOPED_TRACE(std::string(stem) + " blocks=" + std::to_string(nblk));
        const int64_t n = nblk * bs;
        std::vector<uint8_t> w(nblk * tsz);
        std::vector<float> wdeq(n);
        for (int64_t b = 0; b < nblk; ++b) {
          const int64_t src = std::uniform_int_distribution<int64_t>(0, golden_blocks - 1)(rng);
          std::memcpy(w.data() + b * tsz, g.blocks.data() + src * tsz, tsz);
          std::memcpy(wdeq.data() + b * bs, g.deq.data() + src * bs, bs * sizeof(float));
        }
        std::vector<float> x(n);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& v : x) v = nd(rng) * (rng() % 17 == 0 ? 8.0f : 1.0f);
        const int64_t act_bytes = static_cast<int64_t>(ggml_row_size(g.act_type, n));
        std::vector<uint8_t> a(act_bytes);
        k->quantize_act[static_cast<uint32_t>(g.act_type)](x.data(), a.data(), n);
        const auto adeq = dequant_act(g.act_type, a.data(), n);
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          ref += double(wdeq[i]) * adeq[i];
          mag += std::fabs(double(wdeq[i]) * adeq[i]);
        }
        ref += q8_1_min_correction(g.type, w.data(), a.data(), n);
        const float got = k->vec_dot[static_cast<uint32_t>(g.type)](n, w.data(), a.data());
        EXPECT_NEAR(got, ref, 2e-6 * mag + 1e-5 * std::fabs(ref) + 1e-30);
      }
    }
  }
}

// Test-side reference quantizer (round half to even, like the kernels).
void ref_quantize_q8(const float* x, int64_t n, GgmlType t, std::vector<uint8_t>& out) {
  out.assign(ggml_row_size(t, n), 0);
  if (t == GgmlType::Q8_K) {
    for (int64_t b = 0; b < n / 256; ++b) {
      auto* y = reinterpret_cast<block_q8_K*>(out.data()) + b;
      const float* xb = x + b * 256;
      float amax = 0, max = 0;
      for (int i = 0; i < 256; ++i)
        if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
      if (amax == 0) continue;
      const float iscale = -127.0f / max;
      for (int i = 0; i < 256; ++i) y->qs[i] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * xb[i])));
      for (int j = 0; j < 16; ++j) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += y->qs[16 * j + i];
        y->bsums[j] = static_cast<int16_t>(s);
      }
      y->d = 1.0f / iscale;
    }
    return;
  }
  const bool q81 = t == GgmlType::Q8_1;
  const int64_t bsz = q81 ? 36 : 34;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint8_t* y = out.data() + b * bsz;
    const float* xb = x + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(y, &dh, 2);
    auto* qs = reinterpret_cast<int8_t*>(y + (q81 ? 4 : 2));
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += qs[i] = static_cast<int8_t>(std::nearbyint(xb[i] * id));
    if (q81) {
      const uint16_t sh = f32_to_f16(d * static_cast<float>(sum));
      std::memcpy(y + 2, &sh, 2);
    }
  }
}

TEST(SimdKernels, QuantizeActRandomMatchesReference) {
  const std::vector<const KernelTable*> tables = simd_kernel_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    std::mt19937 rng(7);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
      const int64_t bs = ggml_info(t).block_size;
      for (int64_t nblk : {1, 5, 33}) {
        const int64_t n = nblk * bs;
        std::vector<float> x(n);
        std::normal_distribution<float> nd(0.0f, 3.0f);
        for (auto& v : x) v = nd(rng);
        if (nblk > 1) std::fill(x.begin(), x.begin() + bs, 0.0f);  // an all-zero block
        std::vector<uint8_t> ref, got(ggml_row_size(t, n), 0xCD);
        ref_quantize_q8(x.data(), n, t, ref);
        k->quantize_act[static_cast<uint32_t>(t)](x.data(), got.data(), n);
        EXPECT_EQ(got, ref) << ggml_type_name(t) << " n=" << n;
      }
    }
    // F16 / BF16 at odd lengths (vector body + scalar tail) against fp16.h.
    for (int64_t n : {1, 7, 8, 17, 100}) {
      std::vector<float> x(n);
      std::normal_distribution<float> nd(0.0f, 100.0f);
      for (auto& v : x) v = nd(rng);
      if (n > 3) x[2] = std::nanf(""), x[3] = 1e-42f;
      std::vector<uint16_t> h(n), b(n);
      k->quantize_act[static_cast<uint32_t>(GgmlType::F16)](x.data(), h.data(), n);
      k->quantize_act[static_cast<uint32_t>(GgmlType::BF16)](x.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isnan(x[i])) {
          EXPECT_EQ(h[i], f32_to_f16(x[i])) << i;
        }
        EXPECT_EQ(b[i], f32_to_bf16(x[i])) << i;
      }
    }
  }
}

TEST(SimdKernels, FloatDotsAndVectorOps) {
  const std::vector<const KernelTable*> tables = simd_kernel_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    std::mt19937 rng(99);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t n : {1, 7, 8, 31, 33, 100, 1001}) {
      SCOPED_TRACE(n);
      std::vector<float> x(n), y(n);
      for (auto& v : x) v = nd(rng);
      for (auto& v : y) v = nd(rng);
      std::vector<uint16_t> xh(n), yh(n), xb(n), yb(n);
      double rf = 0, rh = 0, rb = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        xh[i] = f32_to_f16(x[i]), yh[i] = f32_to_f16(y[i]);
        xb[i] = f32_to_bf16(x[i]), yb[i] = f32_to_bf16(y[i]);
        rf += double(x[i]) * y[i];
        rh += double(f16_to_f32(xh[i])) * f16_to_f32(yh[i]);
        rb += double(bf16_to_f32(xb[i])) * bf16_to_f32(yb[i]);
        mag += std::fabs(double(x[i]) * y[i]);
      }
      const double tol = 1e-6 * mag + 1e-7;
      EXPECT_NEAR(k->vec_dot[static_cast<uint32_t>(GgmlType::F32)](n, x.data(), y.data()), rf, tol);
      EXPECT_NEAR(k->dot_f32(n, x.data(), y.data()), rf, tol);
      EXPECT_NEAR(k->vec_dot[static_cast<uint32_t>(GgmlType::F16)](n, xh.data(), yh.data()), rh, tol);
      EXPECT_NEAR(k->vec_dot[static_cast<uint32_t>(GgmlType::BF16)](n, xb.data(), yb.data()), rb, tol);
      std::vector<float> z = y;
      k->axpy_f32(n, 0.5f, x.data(), z.data());
      for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(z[i], y[i] + 0.5f * x[i]);
      z = y;
      k->scale_f32(n, -3.0f, z.data());
      for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(z[i], -3.0f * y[i]);
    }
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// The association llama.cpp's CPU build uses for these two dots (one 8-lane fused
// multiply-add accumulator, blocks in order, then (hi+lo) -> pairs -> scalar) must hold
// bit for bit: Q8_0 models and f32 batch routers flip near-ties otherwise.
float hsum8(const float* a) {
  const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}

TEST(KernelAssociation, F32x8MatchesOneAccumulatorOrderOnEveryTable) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {8, 64, 1000, 4096}) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : y) v = nd(rng);
    float acc[8] = {};
    for (int64_t i = 0; i < n; ++i) acc[i % 8] = std::fma(x[i], y[i], acc[i % 8]);
    const float want = hsum8(acc);
    for (Isa isa : kAllIsas) {
      const KernelTable* k = kernel_table(isa);
      if (!k) continue;
      ASSERT_NE(k->dot_f32_x8, nullptr) << k->name;
      EXPECT_EQ(k->dot_f32_x8(n, x.data(), y.data()), want) << k->name << " n=" << n;
    }
  }
}

TEST(KernelAssociation, Q8_0DotIsOneAccumulatorInBlockOrder) {
  const std::vector<const KernelTable*> tables = simd_kernel_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  for (const KernelTable* k : tables) {
    SCOPED_TRACE(k->name);
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> q(-127, 127);
    std::uniform_real_distribution<float> d(0.001f, 0.1f);
    for (int nb : {1, 2, 3, 8, 33}) {
      std::vector<block_q8_0> w(nb), a(nb);
      for (int b = 0; b < nb; ++b) {
        w[b].d = f32_to_f16(d(rng));
        a[b].d = f32_to_f16(d(rng));
        for (int j = 0; j < 32; ++j) w[b].qs[j] = static_cast<int8_t>(q(rng)), a[b].qs[j] = static_cast<int8_t>(q(rng));
      }
      float acc[8] = {};
      for (int b = 0; b < nb; ++b) {
        const float s = f16_to_f32(w[b].d) * f16_to_f32(a[b].d);
        for (int l = 0; l < 8; ++l) {
          int32_t p = 0;  // lane l holds the products of values 4l..4l+3
          for (int j = 4 * l; j < 4 * l + 4; ++j) p += w[b].qs[j] * a[b].qs[j];
          acc[l] = std::fma(s, static_cast<float>(p), acc[l]);
        }
      }
      EXPECT_EQ(k->vec_dot[static_cast<uint32_t>(GgmlType::Q8_0)](32 * nb, w.data(), a.data()), hsum8(acc)) << nb << " blocks";
    }
  }
}

}  // namespace
}  // namespace strata
