// IQ1_S / IQ1_M (1.56 / 1.75 bits per value) and the ternary TQ1_0 / TQ2_0 formats, all in
// 256-value super-blocks dotted against Q8_K.
//
// IQ1_S / IQ1_M: each group of 8 values is one point of the 2048-entry kIq1sGrid (values
// -1, 0, +1) plus a shared offset +-kIq1Delta, scaled by d * ls with an odd ls = 2*s + 1 (s 3 bits):
//   w = (d * ls) * (grid + delta)      (float, in that order: bit-exact with ggml)
//   IQ1_S: d f16; qs[32] low 8 index bits; per 32 values a u16 qh: 3 high index bits per 8
//          values (bits 0..11), s (bits 12..14), delta sign (bit 15: negative)
//   IQ1_M: qs[32] low index bits; per 8 values a nibble of qh[16]: 3 high index bits and the delta
//          sign (bit 3); scales as four u16: s per 16 values (3 bits each, 12 bits per u16), and
//          the f16 d spread over their top nibbles (u16 j holds d's bits 4j..4j+3)
// The dot sums ls * (grid . a) and ls * sign * sum(a) in integers per block and accumulates
// them in float as llama.cpp's AVX2 kernels do (see vec_dot_iq1).
//
// TQ1_0 (d f16 last): 5 ternary digits per byte of qs[48] and 4 per byte of qh[4], stored as
// a base-3 fraction: digit k of byte b is (uint8(b * 3^k) * 3) >> 8, value digit - 1. Values
// 0..159: qs[0..31], digits 0..4 (value 32k + m from byte m); 160..239: qs[32..47] likewise with
// 16-value rows; 240..255: qh[0..3], digits 0..3. Bytes >= 243 are not produced by the
// quantizer; they decode to defined values (digits stay in 0..2).
// TQ2_0 (d f16 last): 2-bit codes c (value c - 1; c = 3 decodes to 2) in qs[64]: value
// 128h + 32l + m is bits 2l..2l+1 of qs[32h + m].
#include "kernels/iq_grids.h"
#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {
namespace {

// One decoded IQ1 super-block.
struct Iq1Block {
  float d;
  int8_t q[QK_K];          // grid values (-1, 0, +1)
  uint8_t s[QK_K / 16];    // 3-bit scale code per 16 values
  bool neg[QK_K / 8];      // delta sign per 8 values
};

inline void put8(uint64_t grid, int8_t* q) {
  for (int j = 0; j < 8; ++j) q[j] = static_cast<int8_t>((grid >> (8 * j)) & 0xFF);
}

void decode_iq1_s(const void* src, Iq1Block& out) {
  const auto& b = *static_cast<const block_iq1_s*>(src);
  out.d = f16(b.d);
  for (int g = 0; g < QK_K / 32; ++g) {
    const int h = b.qh[g];
    for (int l = 0; l < 4; ++l) {
      const int k = 4 * g + l;
      put8(iq::kIq1sGrid[b.qs[k] | (((h >> (3 * l)) & 7) << 8)], out.q + 8 * k);
      out.neg[k] = (h & 0x8000) != 0;
    }
    out.s[2 * g] = out.s[2 * g + 1] = static_cast<uint8_t>((h >> 12) & 7);
  }
}

void decode_iq1_m(const void* src, Iq1Block& out) {
  const auto& b = *static_cast<const block_iq1_m*>(src);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof(sc));
  out.d = f16(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
  for (int k = 0; k < QK_K / 8; ++k) {
    const int h = (b.qh[k / 2] >> (4 * (k % 2))) & 0xF;
    put8(iq::kIq1sGrid[b.qs[k] | ((h & 7) << 8)], out.q + 8 * k);
    out.neg[k] = (h & 8) != 0;
  }
  for (int g = 0; g < QK_K / 16; ++g) out.s[g] = static_cast<uint8_t>((sc[g / 4] >> (3 * (g % 4))) & 7);
}

using Iq1DecodeFn = void (*)(const void* src, Iq1Block& out);

template <Iq1DecodeFn decode, typename Block>
void to_float_iq1(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  Iq1Block x;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    decode(b + i, x);
    for (int k = 0; k < QK_K / 8; ++k, y += 8) {
      const float dl = x.d * static_cast<float>(2 * x.s[k / 2] + 1);
      const float delta = x.neg[k] ? -iq::kIq1Delta : iq::kIq1Delta;
      for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(x.q[8 * k + j]) + delta);
    }
  }
}

// The dot, with llama.cpp's arithmetic (Lanes8): lanes of ls * grid * a per block, fused into
// 8 float accumulators with d = d_w * d_a. The delta term ls * sign * sum(a):
//   IQ1_S: one int per block from the activation's per-16 sums, accumulated as a scalar
//          fused multiply-add with d; result = hsum + kIq1Delta * that;
//   IQ1_M: lanes of its own (sign per 8 values, ls per 16) in a second set of accumulators;
//          result = hsum(first) + kIq1Delta * hsum(second).
template <Iq1DecodeFn decode, typename Block, bool kM>
float vec_dot_iq1(int64_t n, const void* w, const void* a) {
  const auto* b = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  Iq1Block x;
  Lanes8 acc1, acc2;
  float acc_delta = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    decode(b + i, x);
    int32_t lane1[8] = {}, lane2[8] = {};
    for (int v = 0; v < QK_K; ++v) {
      const int ls = 2 * x.s[v / 16] + 1;
      lane1[iq_lane(v)] += ls * x.q[v] * y[i].qs[v];
      if constexpr (kM) lane2[iq_lane(v)] += (x.neg[v / 8] ? -ls : ls) * y[i].qs[v];
    }
    const float d = x.d * y[i].d;
    acc1.fma(d, lane1);
    if constexpr (kM) {
      acc2.fma(d, lane2);
    } else {
      int32_t sum2 = 0;
      for (int g = 0; g < QK_K / 32; ++g) {
        const int ls = 2 * x.s[2 * g] + 1;
        const int32_t sa = y[i].bsums[2 * g] + y[i].bsums[2 * g + 1];
        sum2 += x.neg[4 * g] ? -ls * sa : ls * sa;
      }
      acc_delta = std::fma(d, static_cast<float>(sum2), acc_delta);
    }
  }
  if constexpr (kM) return acc1.hsum() + iq::kIq1Delta * acc2.hsum();
  else return acc1.hsum() + iq::kIq1Delta * acc_delta;
}

// ---- ternary ----

// Ternary digit k (0..4) of a base-3 fraction byte.
inline int trit(uint8_t b, int k) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto q = static_cast<uint8_t>(b * kPow3[k]);
  return (q * 3) >> 8;
}

// The 256 values (-1, 0, +1; 2 for unused codes) of one TQ1_0 / TQ2_0 block.
void decode_tq1_0(const block_tq1_0& b, int8_t* q) {
  for (int k = 0; k < 5; ++k)
    for (int m = 0; m < 32; ++m) *q++ = static_cast<int8_t>(trit(b.qs[m], k) - 1);
  for (int k = 0; k < 5; ++k)
    for (int m = 0; m < 16; ++m) *q++ = static_cast<int8_t>(trit(b.qs[32 + m], k) - 1);
  for (int k = 0; k < 4; ++k)
    for (int m = 0; m < 4; ++m) *q++ = static_cast<int8_t>(trit(b.qh[m], k) - 1);
}
void decode_tq2_0(const block_tq2_0& b, int8_t* q) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 4; ++l)
      for (int m = 0; m < 32; ++m) *q++ = static_cast<int8_t>(((b.qs[32 * h + m] >> (2 * l)) & 3) - 1);
}

template <typename Block, void (*decode)(const Block&, int8_t*)>
void to_float_ternary(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  int8_t q[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    decode(b[i], q);
    const float d = f16(b[i].d);
    for (int j = 0; j < QK_K; ++j) y[j] = static_cast<float>(q[j]) * d;
  }
}

// The dot, with llama.cpp's arithmetic: lanes (Lanes8) of code * a (code = value + 1, 0..3),
// minus in lane l the activation's sum over values 32l..32l+31 (its per-16 sums 2l and 2l+1),
// fused into 8 float accumulators with d = d_w * d_a.
template <typename Block, void (*decode)(const Block&, int8_t*)>
float vec_dot_ternary(int64_t n, const void* w, const void* a) {
  const auto* b = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  int8_t q[QK_K];
  Lanes8 acc;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    decode(b[i], q);
    int32_t lane[8] = {};
    for (int v = 0; v < QK_K; ++v) lane[iq_lane(v)] += (q[v] + 1) * y[i].qs[v];
    for (int l = 0; l < 8; ++l) lane[l] -= y[i].bsums[2 * l] + y[i].bsums[2 * l + 1];
    acc.fma(f16(b[i].d) * y[i].d, lane);
  }
  return acc.hsum();
}

}  // namespace

void register_iq1_ternary_quants(QuantTable& t) {
  set_traits(t, GgmlType::IQ1_S, to_float_iq1<decode_iq1_s, block_iq1_s>, nullptr, GgmlType::Q8_K,
             vec_dot_iq1<decode_iq1_s, block_iq1_s, false>);
  set_traits(t, GgmlType::IQ1_M, to_float_iq1<decode_iq1_m, block_iq1_m>, nullptr, GgmlType::Q8_K,
             vec_dot_iq1<decode_iq1_m, block_iq1_m, true>);
  set_traits(t, GgmlType::TQ1_0, to_float_ternary<block_tq1_0, decode_tq1_0>, nullptr, GgmlType::Q8_K,
             vec_dot_ternary<block_tq1_0, decode_tq1_0>);
  set_traits(t, GgmlType::TQ2_0, to_float_ternary<block_tq2_0, decode_tq2_0>, nullptr, GgmlType::Q8_K,
             vec_dot_ternary<block_tq2_0, decode_tq2_0>);
}

}  // namespace strata::scalar
