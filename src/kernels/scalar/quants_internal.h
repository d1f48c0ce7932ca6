#pragma once
// Shared helpers of the scalar reference formats (kernels/scalar/quants_*.cpp only).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/quants.h"

namespace strata::scalar {

using QuantTable = std::array<QuantTraits, kGgmlTypeCount>;

// One registry line per format.
inline void set_traits(QuantTable& t, GgmlType type, ToFloatFn to_float, FromFloatFn from_float,
                       GgmlType vec_dot_type, VecDotFn vec_dot) {
  QuantTraits& q = t[static_cast<uint32_t>(type)];
  q.type = type;
  q.to_float = to_float;
  q.from_float = from_float;
  q.vec_dot_type = vec_dot_type;
  q.vec_dot = vec_dot;
}

// Per-family registration (each defined in its own quants_<family>.cpp).
void register_float_quants(QuantTable& t);
void register_legacy_quants(QuantTable& t);
void register_k_quants(QuantTable& t);
void register_iq_quants(QuantTable& t);
void register_iq_lattice_quants(QuantTable& t);
void register_iq1_ternary_quants(QuantTable& t);
void register_mxfp4_quants(QuantTable& t);

inline float f16(uint16_t h) { return f16_to_f32(h); }

// Round to nearest, ties to even, for |x| < 2^22 (the 1.5*2^23 magic-number trick ggml's
// quantizers rely on; its results differ from lroundf on exact .5 ties).
inline int nearest_int(float x) {
  const float v = x + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Contribution of one block to a dot product: d_w * d_a * (integer dot of the quants).
// Evaluated in double (d_w*d_a is exact there) and accumulated over blocks in double, so the
// reference rounds once per row; optimized kernels are compared to it within tolerance.
inline double block_dot(float dw, float da, int32_t isum) {
  return static_cast<double>(dw) * static_cast<double>(da) * static_cast<double>(isum);
}

// The accumulation of llama.cpp's AVX2 kernels for the 256-value i-quants and ternary types,
// which their dot products reproduce bit for bit (the quant-blocks vec_dot references):
//  - per super-block, 8 int32 lanes; value v lands in lane (v % 32) / 4 (what vpmaddubsw +
//    vpmaddwd leave there for each 32-value chunk), so each lane is an exact integer;
//  - each lane is converted to float (exact: |lane| < 2^24 for every format) and fused-
//    multiply-added with the block scale d = d_w * d_a into 8 float accumulators, blocks in order;
//  - at the end the horizontal sum (lane i + lane i+4, then (0 + 2) + (1 + 3)).
inline constexpr int iq_lane(int v) { return (v & 31) >> 2; }
struct Lanes8 {
  float acc[8] = {};
  void fma(float d, const int32_t (&lane)[8]) {
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(lane[l]), acc[l]);
  }
  float hsum() const {
    const float t0 = acc[0] + acc[4], t1 = acc[1] + acc[5], t2 = acc[2] + acc[6], t3 = acc[3] + acc[7];
    return (t0 + t2) + (t1 + t3);
  }
};

// The 16 non-uniform levels shared by IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,   38,  53,  69,  89,  113};

// Q8_K activation quantizer (shared by the K-quants and IQ4_XS); defined in quants_k.cpp.
void quantize_row_q8_K(const float* x, void* y, int64_t n);

}  // namespace strata::scalar
