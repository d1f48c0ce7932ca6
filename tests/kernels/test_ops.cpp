// ops: ggml's vectorized expf emulation, the SwiGLU and softmax built on it, and the
// attention value sum in llama.cpp's association.
#include "kernels/ops.h"

#include "core/fp16.h"
#include "kernels/kernel_table.h"
#include "model/attn_sum.h"

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

// Reference of ggml's CPU softmax over one row of `len` cells, of which cells [a, b) hold
// values (the rest masked): groups of 8 through the vector expf, float group sums (hi + lo,
// then (0+2) + (1+3)) added in double, the last len % 8 cells through expf.
std::vector<float> ggml_softmax_row(const std::vector<float>& row, int len, int a, int b, float scale) {
  std::vector<float> w(static_cast<size_t>(len), -INFINITY), e(static_cast<size_t>(len), 0.0f);
  float mx = -INFINITY;
  for (int j = a; j < b; ++j) mx = std::max(mx, w[j] = row[j - a] * scale);
  double sum = 0;
  const int ng = len & ~7;
  for (int g = 0; g < ng; g += 8) {
    float v[8];
    for (int q = 0; q < 8; ++q) v[q] = e[g + q] = w[g + q] == -INFINITY ? 0.0f : ggml_vexpf(w[g + q] - mx);
    float s[4];
    for (int q = 0; q < 4; ++q) s[q] = v[q + 4] + v[q];
    sum += static_cast<double>((s[0] + s[2]) + (s[1] + s[3]));
  }
  for (int j = ng; j < len; ++j) sum += e[j] = w[j] == -INFINITY ? 0.0f : std::exp(w[j] - mx);
  const float inv = static_cast<float>(1.0 / sum);
  std::vector<float> out;
  for (int j = a; j < b; ++j) out.push_back(e[j] * inv);
  return out;
}

TEST(Ops, SoftmaxGroupsAsGgmlByCellIndex) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int n : {1, 7, 8, 13, 40}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    // A router row: groups from 0, tail through expf.
    std::vector<float> y = x;
    softmax(y.data(), n, 0.7f);
    EXPECT_EQ(y, ggml_softmax_row(x, n, 0, n, 0.7f)) << n;
    // Attention cells 5..5+n-1 of a 256-cell view: groups by cell index.
    std::vector<float> z = x;
    softmax_cells(z.data(), n, 5, 0.7f);
    EXPECT_EQ(z, ggml_softmax_row(x, 256, 5, 5 + n, 0.7f)) << n;
    std::vector<int32_t> cells(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) cells[j] = 5 + j;
    std::vector<float> u = x;
    softmax_cells(u.data(), cells.data(), n, 0.7f);
    EXPECT_EQ(u, z) << n;
  }
}

TEST(Ops, TableF32DotIsGgmlsOnEveryIsa) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const KernelTable* ref = kernel_table(Isa::Scalar);
  for (int n : {1, 5, 31, 32, 33, 96, 128, 288, 577}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (auto& v : a) v = nd(rng);
    for (auto& v : b) v = nd(rng);
    for (int isa = 0; isa < kIsaCount; ++isa) {
      const KernelTable* k = kernel_table(static_cast<Isa>(isa));
      if (!k || k->isa == Isa::Avx512) continue;  // AVX-512 has its own 16-lane order
      EXPECT_EQ(k->dot_f32(n, a.data(), b.data()), ref->dot_f32(n, a.data(), b.data())) << k->name << " n=" << n;
    }
  }
}

// A decode token's value sum is ggml's f32 dot over the zero-padded view (32 lanes by cell);
// a chunk's is the tiled GEMM's 8-lane dot.
TEST(Ops, AttnValueSumFollowsTheDotAndTheTiledGemm) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const int dv = 12, first = 37, n = 50, len = 96;
  std::vector<float> p(static_cast<size_t>(n)), vals(static_cast<size_t>(n) * dv);
  for (auto& v : p) v = std::fabs(nd(rng));
  for (auto& v : vals) v = nd(rng);
  std::vector<float> col_p(static_cast<size_t>(len), 0.0f), col_v(static_cast<size_t>(len));
  for (int j = 0; j < n; ++j) col_p[first + j] = p[j];
  const KernelTable* ref = kernel_table(Isa::Scalar);
  std::vector<float> lanes(static_cast<size_t>(dv) * 32), out(dv);
  for (int L : {32, 8}) {
    attn_value_sum(p.data(), n, dv, [&](int j) { return first + j; }, [&](int j) { return vals.data() + static_cast<size_t>(j) * dv; }, out.data(),
                   lanes.data(), L);
    for (int d = 0; d < dv; ++d) {
      std::fill(col_v.begin(), col_v.end(), 0.0f);
      for (int j = 0; j < n; ++j) col_v[first + j] = vals[static_cast<size_t>(j) * dv + d];
      const float want = L == 32 ? ref->dot_f32(len, col_v.data(), col_p.data()) : ref->dot_f32_x8(len, col_v.data(), col_p.data());
      EXPECT_EQ(out[d], want) << "L=" << L << " d=" << d;
    }
  }
}

// The f16 KV kernels: every ISA gives the scalar table's bits, within float rounding of the
// f32 computation on the converted values.
TEST(Ops, F16KvKernelsMatchScalarAndF32) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd;
  const KernelTable* ref = kernel_table(Isa::Scalar);
  for (int n : {1, 7, 8, 64, 128, 131}) {
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::vector<float> hf(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      h[i] = f32_to_f16(nd(rng));
      hf[i] = f16_to_f32(h[i]);
      b[i] = nd(rng);
    }
    const float want = ref->dot_f16_f32(n, h.data(), b.data());
    double exact = 0, mag = 0;
    for (int i = 0; i < n; ++i) {
      exact += double(hf[i]) * b[i];
      mag += std::fabs(double(hf[i]) * b[i]);
    }
    EXPECT_NEAR(want, exact, 1e-6 * mag + 1e-7) << n;
    std::vector<float> y0(b), y1(b);
    ref->axpy_f16(n, 0.37f, h.data(), y0.data());
    for (int i = 0; i < n; ++i) EXPECT_EQ(y0[i], std::fma(0.37f, hf[i], b[i])) << n;
    for (int isa = 1; isa < kIsaCount; ++isa) {
      const KernelTable* k = kernel_table(static_cast<Isa>(isa));
      if (!k) continue;
      EXPECT_EQ(k->dot_f16_f32(n, h.data(), b.data()), want) << k->name << " n=" << n;
      std::vector<float> y(b);
      k->axpy_f16(n, 0.37f, h.data(), y.data());
      EXPECT_EQ(y, y0) << k->name << " n=" << n;
    }
  }
}


// Gated DeltaNet ops. The causal convolution rounds each tap's product, then adds in tap order.
TEST(Ops, CausalConvStepRoundsProductsInTapOrder) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int C = 13, K = 4;
  std::vector<float> hist((K - 1) * C), x(C), w(C * K), y(C);
  for (auto* v : {&hist, &x, &w})
    for (auto& e : *v) e = u(rng);
  conv1d_causal_step(hist.data(), x.data(), w.data(), C, K, y.data());
  for (int c = 0; c < C; ++c) {
    float s = 0.0f;
    for (int j = 0; j < K - 1; ++j) {
      const float p = hist[j * C + c] * w[c * K + j];
      s = s + p;
    }
    const float p = x[c] * w[c * K + K - 1];
    EXPECT_EQ(s + p, y[c]) << c;
  }
}

TEST(Ops, L2NormIsUnitLength) {
  std::vector<float> x = {3.0f, -4.0f, 0.5f, 2.0f, 1.0f, -1.5f, 0.25f, 7.0f};
  std::vector<float> y(x.size());
  l2norm(x.data(), y.data(), static_cast<int64_t>(x.size()), 1e-6f);
  double n2 = 0, ref = 0;
  for (float v : x) ref += double(v) * v;
  for (size_t i = 0; i < x.size(); ++i) {
    n2 += double(y[i]) * y[i];
    EXPECT_NEAR(y[i], x[i] / std::sqrt(ref), 1e-6) << i;
  }
  EXPECT_NEAR(n2, 1.0, 1e-5);
}

// The gated delta rule against a double-precision transcription of its definition, over a few
// steps (decay, delta update, read-out with the updated state), on every ISA's dot.
TEST(Ops, GatedDeltaStepFollowsTheDeltaRule) {
  const int S = 40;  // not a multiple of 32: the dot's tail is exercised too
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int isa = 0; isa < kIsaCount; ++isa) {
    const KernelTable* kt = kernel_table(static_cast<Isa>(isa));
    if (!kt) continue;
    std::vector<float> m(S * S, 0.0f), out(S);
    std::vector<double> ref(S * S, 0.0);  // ref[i][j] = M[i][j]
    for (int step = 0; step < 5; ++step) {
      std::vector<float> q(S), k(S), v(S);
      for (int i = 0; i < S; ++i) q[i] = u(rng), k[i] = u(rng) / 4, v[i] = u(rng);
      const float g = -0.3f * (step + 1), beta = 0.25f + 0.1f * step;
      gated_delta_step(m.data(), q.data(), k.data(), v.data(), g, beta, S, out.data(), kt->dot_f32);
      const double decay = std::exp(double(g));
      for (auto& e : ref) e *= decay;
      for (int j = 0; j < S; ++j) {
        double mk = 0;
        for (int i = 0; i < S; ++i) mk += ref[i * S + j] * k[i];
        const double d = beta * (v[j] - mk);
        for (int i = 0; i < S; ++i) ref[i * S + j] += k[i] * d;
      }
      for (int j = 0; j < S; ++j) {
        double o = 0;
        for (int i = 0; i < S; ++i) o += ref[i * S + j] * q[i];
        EXPECT_NEAR(out[j], o / std::sqrt(double(S)), 1e-5) << kt->name << " step " << step << " j " << j;
        for (int i = 0; i < S; ++i) ASSERT_NEAR(m[j * S + i], ref[i * S + j], 1e-5) << "state stored value-major";
      }
    }
  }
}

}  // namespace
}  // namespace strata

namespace strata {

// LayerNorm (DeepSeek-V3.2's indexer keys) as ggml's norm op then mul and add: close to the
// double-precision formula, and its variance summed in ggml's groups of 8 (a 67-value row has a
// 3-value scalar tail), so the result does not depend on anything but x.
TEST(Ops, LayerNormMatchesTheFormulaWithWeightAndBias) {
  for (int n : {64, 67, 128}) {
    std::vector<float> x(static_cast<size_t>(n)), w(x.size()), b(x.size()), y(x.size());
    for (int i = 0; i < n; ++i) {
      x[i] = std::sin(0.37f * i) * 3.0f + 0.5f;
      w[i] = 1.0f + 0.01f * i;
      b[i] = 0.1f * std::cos(0.2f * i);
    }
    layernorm(x.data(), w.data(), b.data(), y.data(), n, 1e-6f);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= n;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= n;
    for (int i = 0; i < n; ++i) {
      const double want = (x[i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
      EXPECT_NEAR(y[i], want, 1e-5) << "n " << n << " i " << i;
    }
    std::vector<float> y2(x.size());
    layernorm(x.data(), nullptr, nullptr, y2.data(), n, 1e-6f);  // plain: zero mean, unit variance
    double m2 = 0, v2 = 0;
    for (float v : y2) m2 += v;
    for (float v : y2) v2 += v * v;
    EXPECT_NEAR(m2 / n, 0.0, 1e-6);
    EXPECT_NEAR(v2 / n, 1.0, 1e-4);
  }
}

}  // namespace strata
