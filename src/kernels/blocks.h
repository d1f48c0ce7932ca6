#pragma once
// Quantized block layouts, bit-compatible with GGUF / ggml. Every struct is packed to its
// on-disk size (static_assert'ed); f16 fields are raw uint16_t bits.
#include <cstdint>

namespace strata {

inline constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
inline constexpr int QK_K = 256;
inline constexpr int K_SCALE_SIZE = 12;
inline constexpr int QK4_NL = 32, QK_MXFP4 = 32;

#pragma pack(push, 1)
struct block_q4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };                    // 18 B
struct block_q4_1 { uint16_t d; uint16_t m; uint8_t qs[QK4_1 / 2]; };        // 20 B
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };     // 22 B
struct block_q5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };  // 24 B
struct block_q8_0 { uint16_t d; int8_t qs[QK8_0]; };                         // 34 B
struct block_q8_1 { uint16_t d; uint16_t s; int8_t qs[QK8_1]; };             // 36 B (s = d * sum(qs))
// K-quants (super-blocks of 256)
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d; uint16_t dmin; };  // 84 B
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };  // 110 B
struct block_q4_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };  // 144 B
struct block_q5_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };  // 176 B
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };  // 210 B
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };  // 292 B (activations)
// i-quants
struct block_iq4_nl { uint16_t d; uint8_t qs[QK4_NL / 2]; };                 // 18 B
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };  // 136 B
struct block_iq2_xxs { uint16_t d; uint16_t qs[QK_K / 8]; };                 // 66 B
struct block_iq2_xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };  // 74 B
struct block_iq2_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };  // 82 B
struct block_iq3_xxs { uint16_t d; uint8_t qs[3 * QK_K / 8]; };              // 98 B
struct block_iq3_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; };  // 110 B
struct block_iq1_s { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };  // 50 B
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };  // 56 B
struct block_tq1_0 { uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; uint8_t qh[QK_K / 64]; uint16_t d; };  // 54 B
struct block_tq2_0 { uint8_t qs[QK_K / 4]; uint16_t d; };                    // 66 B
// gpt-oss: e2m1 values, shared e8m0 exponent (scale = 2^(e-127), decoded as uint32(e) << 23)
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };                  // 17 B
#pragma pack(pop)

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 && sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 && sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292);
static_assert(sizeof(block_iq4_nl) == 18 && sizeof(block_iq4_xs) == 136 && sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74);
static_assert(sizeof(block_iq2_s) == 82 && sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110 && sizeof(block_iq1_s) == 50);
static_assert(sizeof(block_iq1_m) == 56 && sizeof(block_tq1_0) == 54 && sizeof(block_tq2_0) == 66 && sizeof(block_mxfp4) == 17);

}  // namespace strata
