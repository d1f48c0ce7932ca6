// IQ4_NL (32-value blocks, f16 scale) and IQ4_XS (256-value super-blocks: f16 scale and a
// 6-bit scale per 32 values): 4-bit indices into the non-uniform kIq4nlValues grid.
// Value j of each 32-value group is the low nibble of qs[j] (j < 16) or the high nibble of
// qs[j-16]. The quantizer reproduces ggml's reference (scale search over 15 candidates,
// weighted by x^2, then 6-bit group scales for IQ4_XS), so IQ4_NL and IQ4_XS output match
// ggml byte-for-byte.
#include <algorithm>

#include "kernels/quants_gemm.h"
#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {
namespace {

constexpr int kBlock = 32;  // values per (sub-)block
constexpr int kTries = 7;   // scale candidates on each side of the initial guess
constexpr float kGroupMaxEps = 1e-15f;

// Index of the grid value nearest to x (the lower one on exact ties).
int nearest_level(float x) {
  const int8_t* v = kIq4nlValues;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid]) hi = mid;
    else lo = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

void unpack_levels(const uint8_t qs[16], int8_t q[kBlock]) {  // grid values of one block
  for (int j = 0; j < 16; ++j) {
    q[j] = kIq4nlValues[qs[j] & 0xF];
    q[j + 16] = kIq4nlValues[qs[j] >> 4];
  }
}
void pack_levels(const uint8_t l[kBlock], uint8_t qs[16]) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(l[j] | (l[j + 16] << 4));
}

// Best float scale of one 32-value block (0 for an all-~zero block): weighted least squares
// (weights x^2) over 2*kTries+1 starting scales around absmax/127.
float best_block_scale(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) return 0;
  // Weighted sums for the levels chosen with inverse scale id.
  auto fit = [&](float id, float& sumqx, float& sumq2) {
    sumqx = 0;
    sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const float q = kIq4nlValues[nearest_level(id * x[j])];
      const float w = x[j] * x[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1 / (-max / kIq4nlValues[0]), sumqx, sumq2);
  float d = sumqx / sumq2;
  float best = d * sumqx;
  for (int t = -kTries; t <= kTries; ++t) {
    fit(static_cast<float>(t + kIq4nlValues[0]) / max, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// ---- IQ4_NL ----

void to_float_iq4_nl(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_iq4_nl*>(src);
  int8_t q[kBlock];
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = f16(b[i].d);
    unpack_levels(b[i].qs, q);
    for (int j = 0; j < kBlock; ++j) y[j] = d * static_cast<float>(q[j]);
  }
}
void from_float_iq4_nl(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_iq4_nl*>(dst);
  uint8_t l[kBlock];
  for (int64_t i = 0; i < n / kBlock; ++i, x += kBlock) {
    const float d = best_block_scale(x);
    const float id = d != 0.0f ? 1 / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kBlock; ++j) l[j] = static_cast<uint8_t>(nearest_level(id * x[j]));
    pack_levels(l, b[i].qs);
  }
}
float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq4_nl*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  int8_t q[kBlock];
  double s = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    unpack_levels(x[i].qs, q);
    int sumi = 0;
    for (int j = 0; j < kBlock; ++j) sumi += q[j] * y[i].qs[j];
    s += block_dot(f16(x[i].d), f16(y[i].d), sumi);
  }
  return static_cast<float>(s);
}

// ---- IQ4_XS: scale of group g = d * (ls[g] - 32), ls 6 bits: low 4 in scales_l, high 2 in scales_h ----

int iq4_xs_scale(const block_iq4_xs& b, int g) {
  const int lo = (b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF;
  const int hi = (b.scales_h >> (2 * g)) & 3;
  return (lo | (hi << 4)) - 32;
}

void to_float_iq4_xs(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_iq4_xs*>(src);
  int8_t q[kBlock];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = f16(b[i].d);
    for (int g = 0; g < QK_K / kBlock; ++g, y += kBlock) {
      const float dl = d * static_cast<float>(iq4_xs_scale(b[i], g));
      unpack_levels(b[i].qs + 16 * g, q);
      for (int j = 0; j < kBlock; ++j) y[j] = dl * static_cast<float>(q[j]);
    }
  }
}
void from_float_iq4_xs(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_iq4_xs*>(dst);
  constexpr int kGroups = QK_K / kBlock;
  uint8_t l[kBlock];
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float scales[kGroups];  // best float scale per group
    float max_scale = 0;    // the one of largest magnitude (signed)
    for (int g = 0; g < kGroups; ++g) {
      scales[g] = best_block_scale(x + g * kBlock);
      if (std::fabs(scales[g]) > std::fabs(max_scale)) max_scale = scales[g];
    }
    const float d = -max_scale / 32;
    const float id = d != 0.0f ? 1 / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].scales_h = 0;
    std::memset(b[i].scales_l, 0, sizeof(b[i].scales_l));
    for (int g = 0; g < kGroups; ++g) {
      const int ls = std::clamp(nearest_int(id * scales[g]), -32, 31);
      const float dl = d * static_cast<float>(ls);
      const float idl = dl != 0.0f ? 1 / dl : 0.0f;
      const float* xg = x + g * kBlock;
      for (int j = 0; j < kBlock; ++j) l[j] = static_cast<uint8_t>(nearest_level(idl * xg[j]));
      pack_levels(l, b[i].qs + 16 * g);
      const int u = ls + 32;
      b[i].scales_l[g / 2] |= static_cast<uint8_t>((u & 0xF) << (4 * (g % 2)));
      b[i].scales_h |= static_cast<uint16_t>((u >> 4) << (2 * g));
    }
  }
}
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq4_xs*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  int8_t q[kBlock];
  double s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int32_t isum = 0;
    for (int g = 0; g < QK_K / kBlock; ++g) {
      unpack_levels(x[i].qs + 16 * g, q);
      int32_t sumi = 0;
      for (int j = 0; j < kBlock; ++j) sumi += q[j] * y[i].qs[g * kBlock + j];
      isum += iq4_xs_scale(x[i], g) * sumi;
    }
    s += block_dot(f16(x[i].d), y[i].d, isum);
  }
  return static_cast<float>(s);
}

}  // namespace

void register_iq_quants(QuantTable& t) {
  set_traits(t, GgmlType::IQ4_NL, to_float_iq4_nl, from_float_iq4_nl, GgmlType::Q8_0, vec_dot_iq4_nl_q8_0);
  set_traits(t, GgmlType::IQ4_XS, to_float_iq4_xs, from_float_iq4_xs, GgmlType::Q8_K, vec_dot_iq4_xs_q8_K);
}

}  // namespace strata::scalar

namespace strata {

// The arithmetic of llama.cpp's tiled GEMM (tinyBLAS_Q0_AVX, which its CPU build takes for the
// tokens of a multi-token mul_mat on IQ4_NL weights): exact int32 lanes per block (value v of a
// block in lane v / 4), one fused multiply-add per lane with d_w * d_a into 8 accumulators,
// blocks in order, then its horizontal sum. Its vec_dot (a lone token, and every expert product)
// instead sums even and odd blocks apart (the kernel tables' IQ4_NL vec_dot).
float vec_dot_iq4_nl_q8_0_gemm(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_iq4_nl*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  using namespace scalar;
  int8_t q[kBlock];
  Lanes8 acc;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    unpack_levels(x[i].qs, q);
    int32_t lane[8] = {};
    for (int j = 0; j < kBlock; ++j) lane[iq_lane(j)] += q[j] * y[i].qs[j];
    acc.fma(f16(x[i].d) * f16(y[i].d), lane);
  }
  return acc.hsum();
}

}  // namespace strata
