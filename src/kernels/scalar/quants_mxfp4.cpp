// MXFP4 (gpt-oss): 32 e2m1 values sharing an e8m0 exponent e. Value j is the low nibble of
// qs[j] (j < 16) or the high nibble of qs[j-16]; nibble bit 3 is the sign, bits 0-2 index the
// e2m1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}. The block scale is the float with bits
// uint32(e) << 23, i.e. 2^(e-127). ggml stores the e2m1 values doubled (integers up to 12)
// and decodes e to half that, 2^(e-128); the products are the same exact floats. The one
// difference is e = 0, where the bits give 0 but ggml gives 2^-128: it is special-cased (as
// the denormal 2^-127) so every block decodes bit-exactly as ggml's. Integer dot products use
// the doubled magnitudes with half the scale.
#include <algorithm>
#include <cmath>

#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {
namespace {

constexpr int kBlock = QK_MXFP4;
// 2 * e2m1 value of each 4-bit code.
constexpr int8_t kDoubledE2m1[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e-127); for e = 0 the denormal 2^-127 (bits 0x00400000) instead of 0.
float e8m0_scale(uint8_t e) { return bits_to_f32(e != 0 ? static_cast<uint32_t>(e) << 23 : 0x00400000u); }
// e2m1 value of a code (multiples of 0.5: exact).
float e2m1_value(int code) { return static_cast<float>(kDoubledE2m1[code]) * 0.5f; }

void to_float_mxfp4(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const block_mxfp4*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, y += kBlock) {
    const float d = e8m0_scale(b[i].e);
    for (int j = 0; j < kBlock / 2; ++j) {
      y[j] = e2m1_value(b[i].qs[j] & 0xF) * d;
      y[j + kBlock / 2] = e2m1_value(b[i].qs[j] >> 4) * d;
    }
  }
}

// Code whose value times d is nearest to x (the lowest code on ties).
int nearest_code(float x, float d) {
  int best = 0;
  float best_err = std::fabs(e2m1_value(0) * d - x);
  for (int c = 1; c < 16; ++c) {
    const float err = std::fabs(e2m1_value(c) * d - x);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

// e = floor(log2(absmax)) - 2 + 127, so absmax / 2^(e-127) lies in [4, 8): the top e2m1
// magnitudes {4, 6} (values above 6 saturate). Computed as ggml does (e = 0 for an all-zero
// block); each value then takes the nearest code.
void from_float_mxfp4(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<block_mxfp4*>(dst);
  for (int64_t i = 0; i < n / kBlock; ++i, x += kBlock) {
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : uint8_t{0};
    b[i].e = e;
    const float d = e8m0_scale(e);
    for (int j = 0; j < kBlock / 2; ++j) {
      const int c0 = nearest_code(x[j], d);
      const int c1 = nearest_code(x[j + kBlock / 2], d);
      b[i].qs[j] = static_cast<uint8_t>(c0 | (c1 << 4));
    }
  }
}

float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const block_mxfp4*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  double s = 0;
  for (int64_t i = 0; i < n / kBlock; ++i) {
    int sumi = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      sumi += y[i].qs[j] * kDoubledE2m1[x[i].qs[j] & 0xF];
      sumi += y[i].qs[j + kBlock / 2] * kDoubledE2m1[x[i].qs[j] >> 4];
    }
    s += block_dot(e8m0_scale(x[i].e) * 0.5f, f16(y[i].d), sumi);
  }
  return static_cast<float>(s);
}

}  // namespace

void register_mxfp4_quants(QuantTable& t) {
  set_traits(t, GgmlType::MXFP4, to_float_mxfp4, from_float_mxfp4, GgmlType::Q8_0, vec_dot_mxfp4_q8_0);
}

}  // namespace strata::scalar
