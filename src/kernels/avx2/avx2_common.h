#pragma once
// Shared AVX2 helpers for the kernels in this folder (only included by files compiled with
// -mavx2 -mfma -mf16c). Everything is static inline: no symbol leaves these translation units.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/blocks.h"

namespace strata::avx2 {

// Horizontal sums.
static inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
static inline float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// One IEEE half (raw bits) to float, with F16C.
static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// e8m0 exponent byte -> 2^(e-128) (half the block scale, for the doubled e2m1 table).
static inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Signed 4-bit codebooks (the same values ggml uses on disk): IQ4_NL / IQ4_XS, and MXFP4's
// e2m1 values times two (the block scale is halved to compensate).
alignas(16) static constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};
alignas(16) static constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
static inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 packed bytes of nibbles -> 32 bytes: low nibbles in bytes 0..15, high nibbles in 16..31
// (the order of Q4_0 / IQ4_NL / MXFP4 blocks).
static inline __m256i nibbles_split16(const uint8_t* q) {
  const __m128i x = load128(q);
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// Sum of products of 32 unsigned bytes (<= 127 after the sign trick, or small) with 32 signed
// bytes -> 8 int32 (each the sum of 4 adjacent products).
static inline __m256i dot_u8i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Signed x signed bytes (x must not hold -128): |x| * (y with x's sign).
static inline __m256i dot_i8i8(__m256i x, __m256i y) {
  return dot_u8i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}
// Same, but returns the 16 int16 pair sums (for a later madd with per-16 scales).
static inline __m256i pairs_i8i8(__m256i x, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set (bit i -> byte i).
static inline __m256i bits_to_bytes32(uint32_t bits) {
  const __m256i v = _mm256_set1_epi32(static_cast<int32_t>(bits));
  const __m256i pick = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL,
                                          0x0303030303030303LL);
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, pick), mask), mask);
}

// Per-16 scales of a K-quant super-block. `sc8` holds 8 int16 scales (sub-blocks 8h..8h+7)
// in both 128-bit lanes. Returns the int16 vector whose low lane is scale 2g and high lane
// scale 2g+1 (g in 0..3), matching a 32-byte slice that covers sub-blocks 2g and 2g+1.
static inline __m256i scale_pair16(__m256i sc8, int g) {
  const int16_t lo = static_cast<int16_t>(((4 * g + 1) << 8) | (4 * g));
  const int16_t hi = static_cast<int16_t>(((4 * g + 3) << 8) | (4 * g + 2));
  return _mm256_shuffle_epi8(sc8, _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)));
}
// Unpacks the 12-byte 6-bit scale/min field of Q4_K / Q5_K: scales[j] for j < 4 are the low 6
// bits of bytes 0..3 and mins[j] of bytes 4..7; for j >= 4 the low 4 bits come from the nibbles
// of bytes 8..11 and the top 2 bits from bits 6..7 of bytes 0..3 (scales) / 4..7 (mins).
// Done in general registers and returned as vectors (bytes 0..7): going through a byte array
// costs a store-forwarding stall per block.
static inline void unpack_k4_scales(const uint8_t* s, __m128i& scales8, __m128i& mins8) {
  uint32_t a0, a1, a2;
  std::memcpy(&a0, s, 4);
  std::memcpy(&a1, s + 4, 4);
  std::memcpy(&a2, s + 8, 4);
  const uint32_t sc_lo = a0 & 0x3F3F3F3Fu;
  const uint32_t mn_lo = a1 & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (a2 & 0x0F0F0F0Fu) | (((a0 >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((a2 >> 4) & 0x0F0F0F0Fu) | (((a1 >> 6) & 0x03030303u) << 4);
  scales8 = _mm_cvtsi64_si128(static_cast<int64_t>(sc_lo | (static_cast<uint64_t>(sc_hi) << 32)));
  mins8 = _mm_cvtsi64_si128(static_cast<int64_t>(mn_lo | (static_cast<uint64_t>(mn_hi) << 32)));
}

// Q4_K / Q5_K super-block scales for the int8 dots: `sc16` holds the 8 sub-block scales as
// int16 in both lanes (bcast_i16(sc16, j) is sub-block j's), `mins` the 8 mins as int16.
struct K4Scales {
  __m256i sc16;
  __m128i mins;
};
static inline K4Scales k4_scales(const uint8_t* scales) {
  __m128i sc8, mn8;
  unpack_k4_scales(scales, sc8, mn8);
  return {_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8)), _mm_cvtepu8_epi16(mn8)};
}
// The min term of a Q4_K / Q5_K super-block as llama.cpp's AVX2 kernels group it: the 16
// per-16 activation sums added in pairs (one per 32-value sub-block, vphaddw), times the 8
// mins (int16), in 4 int32 lanes: lane k = min[2k] * s[2k] + min[2k+1] * s[2k+1].
static inline __m128i k4_min_prod(__m128i mins16, const int16_t* bsums) {
  const __m256i b = load256(bsums);
  const __m128i s = _mm_hadd_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  return _mm_madd_epi16(mins16, s);
}
// llama.cpp's reduction of a 4-lane float accumulator: (l0 + l2) + (l1 + l3).
static inline float hsum4_ps(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}
// llama.cpp's exact integer sum of 4 int32 lanes ((l0 + l1) + (l2 + l3), vphaddd twice).
static inline int32_t hsum4_epi32(__m128i v) {
  const __m128i z = _mm_setzero_si128();
  return _mm_cvtsi128_si32(_mm_hadd_epi32(_mm_hadd_epi32(v, z), z));
}

// The running min term of a Q4_K / Q5_K row, accumulated as llama.cpp's AVX2 kernels do:
// Q4_K in 4 float lanes (one fused multiply-add per block with d_a * dmin_w, reduced by
// hsum4_ps at the end), Q5_K in one float (the 4 lanes' exact integer sum, converted, one fused
// multiply-add per block). Kept positive and subtracted at the end, which rounds the same as
// llama.cpp's accumulation of -dmin (round to nearest is symmetric).
namespace {  // no weak symbol may leave an ISA's objects (scripts/check-isa.sh)
template <bool kScalar>
struct K4MinAcc {
  __m128 v = _mm_setzero_ps();
  float s = 0.0f;
  void add(float dmin, __m128i prod) {
    if constexpr (kScalar) s = std::fma(dmin, static_cast<float>(hsum4_epi32(prod)), s);
    else v = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), v);
  }
  float total() const {
    if constexpr (kScalar) return s;
    else return hsum4_ps(v);
  }
};
}  // namespace

// Codes of 32-byte chunk c (0..3) of a Q4_K / Q5_K super-block: `lo` = sub-block 2c (low
// nibbles), `hi` = sub-block 2c + 1 (high nibbles). With kFifthBit (Q5_K), bits 2c / 2c + 1 of
// each qh byte add 16.
template <bool kFifthBit>
static inline void k4_codes(const uint8_t* qs, __m256i qh, int c, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i q = load256(qs + 32 * c);
  lo = _mm256_and_si256(q, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if constexpr (kFifthBit) {
    const __m256i b4 = _mm256_set1_epi8(0x10);
    const __m256i blo = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
    const __m256i bhi = _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)));
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, blo), blo), b4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bhi), bhi), b4));
  }
}

// Prefetch distance (bytes ahead of the current weight block) for streamed rows.
#ifndef STRATA_AVX2_PF
#define STRATA_AVX2_PF 512
#endif
inline constexpr int kPrefetchAhead = STRATA_AVX2_PF;
static inline void prefetch(const void* p) {
  if constexpr (kPrefetchAhead > 0) _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// Broadcasts int16 element k (0..7) of a 128-bit vector held in both lanes of `v`.
static inline __m256i bcast_i16(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(((2 * k + 1) << 8) | (2 * k))));
}

// IQ4_XS: 8 6-bit scales (offset 32) from 4-bit fields (scales_l, sub-block ib in nibble ib)
// and 2-bit fields (scales_h, bits 2ib..2ib+1), spread to one byte each with shifts and masks
// (no pdep: it is microcoded on older AMD cores). Returns 8 int16.
static inline __m128i unpack_iq4xs_scales(const uint8_t* scales_l, uint16_t scales_h) {
  uint32_t l32;
  std::memcpy(&l32, scales_l, 4);
  uint64_t lo = l32;  // nibble k -> byte k
  lo = (lo | (lo << 16)) & 0x0000FFFF0000FFFFULL;
  lo = (lo | (lo << 8)) & 0x00FF00FF00FF00FFULL;
  lo = (lo | (lo << 4)) & 0x0F0F0F0F0F0F0F0FULL;
  uint64_t hi = scales_h;  // 2-bit field k -> byte k
  hi = (hi | (hi << 24)) & 0x000000FF000000FFULL;
  hi = (hi | (hi << 12)) & 0x000F000F000F000FULL;
  hi = (hi | (hi << 6)) & 0x0303030303030303ULL;
  const __m128i v = _mm_cvtsi64_si128(static_cast<int64_t>(lo | (hi << 4)));
  return _mm_sub_epi16(_mm_cvtepu8_epi16(v), _mm_set1_epi16(32));
}

static inline void prefetch_block(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p) + kPrefetchAhead;
  for (int o = 0; o < bytes; o += 64) prefetch(c + o);
}

}  // namespace strata::avx2
