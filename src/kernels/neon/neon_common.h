#pragma once
// Shared NEON helpers for the kernels in this folder (ARM64 only). Everything has internal
// linkage: the dotprod objects (compiled with +dotprod) keep their own copies.
//
// llama.cpp's AVX2 kernels, whose bits every table gives, hold a block's integer products in 8
// int32 lanes of a 256-bit vector, lane l summing bytes 4l..4l+3 of a 32-byte chunk, and convert
// and fused-multiply-add each lane on its own. Here a 256-bit vector is a pair of 128-bit ones
// (lo: lanes 0..3, bytes 0..15; hi: lanes 4..7, bytes 16..31), and each int32 lane holds the
// same exact integer (SDOT, or widening multiplies and pairwise adds without dotprod), so every
// float operation sees the same operands in the same order.
#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"

namespace strata::neon_common {
namespace {

// 8 float lanes / 8 int32 lanes (the two halves of an AVX2 register).
struct F8 {
  float32x4_t lo, hi;
};
struct I8 {
  int32x4_t lo, hi;
};

inline F8 f8_zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
inline I8 i8_zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
inline I8 i8_add(I8 a, I8 b) { return {vaddq_s32(a.lo, b.lo), vaddq_s32(a.hi, b.hi)}; }
inline I8 i8_sub(I8 a, I8 b) { return {vsubq_s32(a.lo, b.lo), vsubq_s32(a.hi, b.hi)}; }
// acc + d * float(p), one fused multiply-add per lane (vfmadd231ps).
inline F8 fma8(F8 acc, float d, I8 p) {
  const float32x4_t vd = vdupq_n_f32(d);
  return {vfmaq_f32(acc.lo, vd, vcvtq_f32_s32(p.lo)), vfmaq_f32(acc.hi, vd, vcvtq_f32_s32(p.hi))};
}
inline F8 add8(F8 a, F8 b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }

// llama.cpp's reduction of 4 float lanes: (l0 + l2) + (l1 + l3).
inline float hsum4(float32x4_t v) {
  const float32x2_t s = vadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}
// ... and of 8: lanes l + (l + 4), then as above (hsum_ps).
inline float hsum8(F8 v) { return hsum4(vaddq_f32(v.lo, v.hi)); }
inline int32_t hsum_i8(I8 v) { return vaddvq_s32(vaddq_s32(v.lo, v.hi)); }  // exact

// 4 int32 lanes: lane l += bytes 4l..4l+3 of a times those of b (signed x signed).
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  const int16x8_t p0 = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t p1 = vmull_high_s8(a, b);
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)));
#endif
}

// 32 bytes (two 16-byte halves).
struct B32 {
  int8x16_t lo, hi;
};
inline B32 load32(const void* p) {
  const auto* b = static_cast<const int8_t*>(p);
  return {vld1q_s8(b), vld1q_s8(b + 16)};
}
// The 8 lanes of a 32-byte chunk's 4-byte dots.
inline I8 dot32(B32 a, B32 b) { return {dot16(vdupq_n_s32(0), a.lo, b.lo), dot16(vdupq_n_s32(0), a.hi, b.hi)}; }

// 16 packed bytes of nibbles -> 32 codes: low nibbles are values 0..15, high nibbles 16..31.
inline B32 nibbles_split16(const uint8_t* q) {
  const uint8x16_t x = vld1q_u8(q);
  return {vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F))), vreinterpretq_s8_u8(vshrq_n_u8(x, 4))};
}

// 32 bits -> 32 bytes, 0xFF where bit i is set (byte i).
inline B32 bits_to_bytes32(uint32_t bits) {
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t m = vld1q_u8(kBit);
  const uint8x16_t b01 = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits)), vdup_n_u8(static_cast<uint8_t>(bits >> 8)));
  const uint8x16_t b23 = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits >> 16)), vdup_n_u8(static_cast<uint8_t>(bits >> 24)));
  return {vreinterpretq_s8_u8(vtstq_u8(b01, m)), vreinterpretq_s8_u8(vtstq_u8(b23, m))};
}

// One IEEE half (raw bits) to float (exact, as F16C).
inline float h2f(uint16_t h) {
  float16x4_t v = vreinterpret_f16_u16(vdup_n_u16(h));
  return vgetq_lane_f32(vcvt_f32_f16(v), 0);
}

// e8m0 exponent byte -> 2^(e-128) (half the block scale, for the doubled e2m1 table).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Signed 4-bit codebooks: IQ4_NL / IQ4_XS, and MXFP4's e2m1 values times two.
alignas(16) constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,   38,  53,  69,  89,  113};
alignas(16) constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Q4_K / Q5_K: the 12-byte 6-bit scale/min field -> 8 scales and 8 mins (bytes).
inline void unpack_k4_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  uint32_t a0, a1, a2;
  std::memcpy(&a0, s, 4);
  std::memcpy(&a1, s + 4, 4);
  std::memcpy(&a2, s + 8, 4);
  const uint32_t sc_lo = a0 & 0x3F3F3F3Fu, mn_lo = a1 & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (a2 & 0x0F0F0F0Fu) | (((a0 >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((a2 >> 4) & 0x0F0F0F0Fu) | (((a1 >> 6) & 0x03030303u) << 4);
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(mn, &mn_lo, 4);
  std::memcpy(mn + 4, &mn_hi, 4);
}

// Q3_K: 16 signed 6-bit scales (offset 32). Low 4 bits: nibbles of bytes 0..7 (low nibbles for
// scales 0..7, high for 8..15); top 2 bits: bits 2*(j/4)..+1 of byte 8 + j%4.
inline void unpack_q3_scales(const uint8_t* s, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (s[j] & 0x0F) : (s[j - 8] >> 4);
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// IQ4_XS: sub-block ib's 6-bit scale (offset 32).
inline int iq4xs_scale(const block_iq4_xs& b, int ib) {
  const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
  const int hi = (b.scales_h >> (2 * ib)) & 3;
  return (lo | (hi << 4)) - 32;
}

inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
inline constexpr int kPrefetchAhead = 512;
inline void prefetch_block(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p) + kPrefetchAhead;
  for (int o = 0; o < bytes; o += 64) prefetch(c + o);
}

}  // namespace
}  // namespace strata::neon_common
