// NEON dot products of the block formats with integer codes (legacy 32-value blocks, K-quants,
// IQ4_NL / IQ4_XS, MXFP4, the grid i-quants, IQ1_S / IQ1_M, TQ1_0 / TQ2_0), one weight row against N activation rows at a time, with llama.cpp's
// AVX2 association (neon_common.h): the int32 lanes of llama.cpp's 256-bit registers are
// computed exactly, then converted and fused-multiply-added lane by lane in block order, and
// reduced with its horizontal sums. The single-token vec_dot is the N = 1 case, so the
// multi-token kernel is bit-identical to it for every token.
// Compiled twice: at the ARMv8-A baseline (namespace neon) and, from dot_neon_dotprod.cpp,
// with +dotprod (namespace neon_dotprod, SDOT for the 4-byte dots); the integers are the same.
#include <cmath>
#include <type_traits>

#include "kernels/iq_grids.h"
#include "kernels/kernel_table.h"
#include "kernels/neon/kernels_neon.h"
#include "kernels/neon/neon_common.h"

#ifndef STRATA_NEON_NS
#define STRATA_NEON_NS neon
#endif

namespace strata::STRATA_NEON_NS {
namespace {

using namespace strata::neon_common;

template <class B>
inline const B* act_block(const uint8_t* act, size_t stride, int t, int64_t i) {
  return reinterpret_cast<const B*>(act + static_cast<size_t>(t) * stride) + i;
}

inline uint8x16_t u8(int8x16_t v) { return vreinterpretq_u8_s8(v); }
inline int8x16_t s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

// ---- 32-value blocks, Q8_0 / Q8_1 activations ------------------------------------------------
// Per block: codes q (int8) and the weight scale ws; the block's term is
// fma(ws * d_a, float(lane), acc) in 8 lanes. Q4_1 / Q5_1 add m_w * s_a per block to a float
// sum (llama.cpp's order: multiply, then add) that is added after the horizontal sum. IQ4_NL and
// MXFP4 (kPairs) keep llama.cpp's two accumulators (even / odd blocks, summed before the
// horizontal sum) and add a last unpaired block afterwards as one fused multiply-add of its
// exact integer sum.
struct DecQ8_0 {
  using Block = block_q8_0;
  using Act = block_q8_0;
  static constexpr bool kPairs = false, kMin = false;
  static B32 codes(const Block& b, float& ws) {
    ws = h2f(b.d);
    return load32(b.qs);
  }
};
struct DecQ4_0 {
  using Block = block_q4_0;
  using Act = block_q8_0;
  static constexpr bool kPairs = false, kMin = false;
  static B32 codes(const Block& b, float& ws) {
    ws = h2f(b.d);
    const B32 q = nibbles_split16(b.qs);
    const int8x16_t eight = vdupq_n_s8(8);
    return {vsubq_s8(q.lo, eight), vsubq_s8(q.hi, eight)};
  }
};
struct DecQ4_1 {
  using Block = block_q4_1;
  using Act = block_q8_1;
  static constexpr bool kPairs = false, kMin = true;
  static B32 codes(const Block& b, float& ws) {
    ws = h2f(b.d);
    return nibbles_split16(b.qs);
  }
};
struct DecQ5_0 {
  using Block = block_q5_0;
  using Act = block_q8_0;
  static constexpr bool kPairs = false, kMin = false;
  static B32 codes(const Block& b, float& ws) {
    ws = h2f(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    // value = (nibble | bit << 4) - 16: without the bit, nibble | 0xF0 is nibble - 16 as int8.
    const B32 q = nibbles_split16(b.qs), m = bits_to_bytes32(qh);
    const uint8x16_t f0 = vdupq_n_u8(0xF0);
    return {s8(vorrq_u8(u8(q.lo), vbicq_u8(f0, u8(m.lo)))), s8(vorrq_u8(u8(q.hi), vbicq_u8(f0, u8(m.hi))))};
  }
};
struct DecQ5_1 {
  using Block = block_q5_1;
  using Act = block_q8_1;
  static constexpr bool kPairs = false, kMin = true;
  static B32 codes(const Block& b, float& ws) {
    ws = h2f(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    const B32 q = nibbles_split16(b.qs), m = bits_to_bytes32(qh);
    const uint8x16_t b4 = vdupq_n_u8(0x10);
    return {s8(vorrq_u8(u8(q.lo), vandq_u8(u8(m.lo), b4))), s8(vorrq_u8(u8(q.hi), vandq_u8(u8(m.hi), b4)))};
  }
};
inline float block_scale(const block_iq4_nl& b) { return h2f(b.d); }
inline float block_scale(const block_mxfp4& b) { return e8m0_half(b.e); }
template <class B, const int8_t* kValues>
struct DecTable {
  using Block = B;
  using Act = block_q8_0;
  static constexpr bool kPairs = true, kMin = false;
  static B32 codes(const Block& b, float& ws) {
    ws = block_scale(b);
    const int8x16_t table = vld1q_s8(kValues);
    const B32 q = nibbles_split16(b.qs);
    return {vqtbl1q_s8(table, u8(q.lo)), vqtbl1q_s8(table, u8(q.hi))};
  }
};
using DecIq4nl = DecTable<block_iq4_nl, kIq4nlValues>;
using DecMxfp4 = DecTable<block_mxfp4, kMxfp4Values>;

inline float min_term(const block_q4_1& w, const block_q8_1& a) { return h2f(w.m) * h2f(a.s); }
inline float min_term(const block_q5_1& w, const block_q8_1& a) { return h2f(w.m) * h2f(a.s); }
template <class W, class A>
inline float min_term(const W&, const A&) { return 0.0f; }

template <class Decode>
struct Legacy {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    using W = typename Decode::Block;
    using A = typename Decode::Act;
    constexpr bool kPairs = Decode::kPairs;
    const auto* w = static_cast<const W*>(vw);
    const int64_t nb = n / 32;
    const int64_t nb_main = kPairs ? (nb & ~int64_t{1}) : nb;
    F8 acc[N], acc2[N];
    float mins[N];
    for (int t = 0; t < N; ++t) {
      acc[t] = acc2[t] = f8_zero();
      mins[t] = 0.0f;
    }
    for (int64_t i = 0; i < nb_main; ++i) {
      prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
      float ws;
      const B32 q = Decode::codes(w[i], ws);
      const bool second = kPairs && (i & 1);
      for (int t = 0; t < N; ++t) {
        const A* a = act_block<A>(act, as, t, i);
        if constexpr (Decode::kMin) mins[t] += min_term(w[i], *a);
        const I8 p = dot32(q, load32(a->qs));
        const float d = ws * h2f(a->d);
        if (second) acc2[t] = fma8(acc2[t], d, p);
        else acc[t] = fma8(acc[t], d, p);
      }
    }
    for (int t = 0; t < N; ++t) {
      y[t * ys] = hsum8(kPairs ? add8(acc[t], acc2[t]) : acc[t]);
      if constexpr (Decode::kMin) y[t * ys] += mins[t];
    }
    if (nb_main < nb) {
      const int64_t i = nb - 1;
      float ws;
      const B32 q = Decode::codes(w[i], ws);
      for (int t = 0; t < N; ++t) {
        const A* a = act_block<A>(act, as, t, i);
        const int32_t isum = hsum_i8(dot32(q, load32(a->qs)));
        y[t * ys] = std::fma(ws * h2f(a->d), static_cast<float>(isum), y[t * ys]);
      }
    }
  }
};

// ---- 256-value super-blocks, Q8_K activations ----------------------------------------------

// sum += sc_lo * (4-byte dots of bytes 0..15) and sc_hi * (those of bytes 16..31): one 32-byte
// chunk whose halves carry one scale each (K-quants with 16-value sub-blocks) or the same.
inline void add_scaled(I8& sum, B32 q, const int8_t* q8, int32_t sc_lo, int32_t sc_hi) {
  sum.lo = vmlaq_n_s32(sum.lo, dot16(vdupq_n_s32(0), q.lo, vld1q_s8(q8)), sc_lo);
  sum.hi = vmlaq_n_s32(sum.hi, dot16(vdupq_n_s32(0), q.hi, vld1q_s8(q8 + 16)), sc_hi);
}

// Lanes l = 0..3 of a madd of 8 int16 pairs: x[2l] * y[2l] + x[2l+1] * y[2l+1].
inline int32x4_t madd8(int16x8_t x, int16x8_t y) {
  return vpaddq_s32(vmull_s16(vget_low_s16(x), vget_low_s16(y)), vmull_high_s16(x, y));
}

// What every super-block kernel below shares, for N activation rows: per block (`for_blocks`:
// prefetch, lanes cleared) the exact int32 lanes of each row (`sum`: `add`, `add_dot`, or
// adjusted by the kernel), then one fused multiply-add per lane with d_a * d_w into its 8 float
// lanes (`fuse`) in block order, and llama.cpp's horizontal sum (`hsum`, `store`).
template <int N>
struct Q8KRows {
  const uint8_t* act;
  size_t as;
  F8 acc[N];
  I8 sum[N];

  Q8KRows(const uint8_t* a, size_t s) : act(a), as(s) {
    for (int t = 0; t < N; ++t) acc[t] = f8_zero();
  }
  const block_q8_K* a(int t, int64_t i) const { return act_block<block_q8_K>(act, as, t, i); }
  // Block i of the weight row w, for each block: fn(block, i) after the prefetch, with sum cleared.
  template <class Block, class Fn>
  void for_blocks(int64_t n, const void* w, Fn&& fn) {
    const auto* b = static_cast<const Block*>(w);
    for (int64_t i = 0; i < n / QK_K; ++i) {
      prefetch_block(b + i, sizeof(Block));
      for (int t = 0; t < N; ++t) sum[t] = i8_zero();
      fn(b[i], i);
    }
  }
  // Every row: sum += sc_lo * the 4-byte dots of q.lo with values off..off+15 of block i, sc_hi * q.hi's.
  void add(B32 q, int64_t i, int off, int32_t sc_lo, int32_t sc_hi) {
    for (int t = 0; t < N; ++t) add_scaled(sum[t], q, a(t, i)->qs + off, sc_lo, sc_hi);
  }
  // Every row: sum += the 4-byte dots of q with values off..off+31 of block i (no scale).
  void add_dot(B32 q, int64_t i, int off) {
    for (int t = 0; t < N; ++t) sum[t] = i8_add(sum[t], dot32(q, load32(a(t, i)->qs + off)));
  }
  void fuse(int64_t i, float wd) {
    for (int t = 0; t < N; ++t) acc[t] = fma8(acc[t], a(t, i)->d * wd, sum[t]);
  }
  float hsum(int t) const { return hsum8(acc[t]); }
  void store(float* y, int64_t ys) const {
    for (int t = 0; t < N; ++t) y[t * ys] = hsum8(acc[t]);
  }
};

// Q4_K and Q5_K: 8 sub-blocks of 32 values with 6-bit scales and mins; Q5_K's codes take a
// fifth bit from qh (bit 2c for the low nibbles of chunk c, 2c + 1 for the high ones). The min
// term: Q4_K in 4 float lanes (fma per block with d_a * dmin_w, (0+2)+(1+3) at the end), Q5_K in
// one float (the 4 lanes' exact sum, one fma per block); subtracted at the end.
template <class Block, bool kFifthBit>
struct K4 {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    Q8KRows<N> r(act, as);
    float32x4_t macc[N];
    float msum[N];
    for (int t = 0; t < N; ++t) {
      macc[t] = vdupq_n_f32(0.0f);
      msum[t] = 0.0f;
    }
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    r.template for_blocks<Block>(n, vw, [&](const Block& b, int64_t i) {
      const float wd = h2f(b.d), wdmin = h2f(b.dmin);
      uint8_t sc[8], mn[8];
      unpack_k4_scales(b.scales, sc, mn);
      uint8x16_t qh_lo = vdupq_n_u8(0), qh_hi = vdupq_n_u8(0);
      if constexpr (kFifthBit) {
        qh_lo = vld1q_u8(b.qh);
        qh_hi = vld1q_u8(b.qh + 16);
      }
      for (int c = 0; c < 4; ++c) {
        const uint8x16_t x0 = vld1q_u8(b.qs + 32 * c), x1 = vld1q_u8(b.qs + 32 * c + 16);
        uint8x16_t l0 = vandq_u8(x0, m4), l1 = vandq_u8(x1, m4);
        uint8x16_t h0 = vshrq_n_u8(x0, 4), h1 = vshrq_n_u8(x1, 4);
        if constexpr (kFifthBit) {
          const uint8x16_t b4 = vdupq_n_u8(0x10);
          const uint8x16_t blo = vdupq_n_u8(static_cast<uint8_t>(1 << (2 * c)));
          const uint8x16_t bhi = vdupq_n_u8(static_cast<uint8_t>(1 << (2 * c + 1)));
          l0 = vorrq_u8(l0, vandq_u8(vtstq_u8(qh_lo, blo), b4));
          l1 = vorrq_u8(l1, vandq_u8(vtstq_u8(qh_hi, blo), b4));
          h0 = vorrq_u8(h0, vandq_u8(vtstq_u8(qh_lo, bhi), b4));
          h1 = vorrq_u8(h1, vandq_u8(vtstq_u8(qh_hi, bhi), b4));
        }
        r.add(B32{s8(l0), s8(l1)}, i, 64 * c, sc[2 * c], sc[2 * c]);
        r.add(B32{s8(h0), s8(h1)}, i, 64 * c + 32, sc[2 * c + 1], sc[2 * c + 1]);
      }
      const int16x8_t mins16 = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = r.a(t, i);
        const float dmin = a->d * wdmin;
        // Per 32-value sub-block sums of the activations (pairs of the per-16 bsums), times the mins.
        const int16x8_t s = vpaddq_s16(vld1q_s16(a->bsums), vld1q_s16(a->bsums + 8));
        const int32x4_t prod = madd8(mins16, s);
        if constexpr (kFifthBit) msum[t] = std::fma(dmin, static_cast<float>(vaddvq_s32(prod)), msum[t]);
        else macc[t] = vfmaq_f32(macc[t], vdupq_n_f32(dmin), vcvtq_f32_s32(prod));
      }
      r.fuse(i, wd);
    });
    for (int t = 0; t < N; ++t) y[t * ys] = r.hsum(t) - (kFifthBit ? msum[t] : hsum4(macc[t]));
  }
};

// The offset term of Q6_K (codes are stored + 32) and the min term of Q2_K: lane l of 8 =
// sc[2l] * bsums[2l] + sc[2l+1] * bsums[2l+1], for 16 int16 scales and the 16 bsums.
inline I8 madd16(int16x8_t sc_lo, int16x8_t sc_hi, const int16_t* bsums) {
  return {madd8(sc_lo, vld1q_s16(bsums)), madd8(sc_hi, vld1q_s16(bsums + 8))};
}

struct Q6K {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    Q8KRows<N> r(act, as);
    r.template for_blocks<block_q6_K>(n, vw, [&](const block_q6_K& b, int64_t i) {
      const int8_t* sc = b.scales;
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b.ql + 64 * h;
        const uint8_t* qh = b.qh + 32 * h;
        B32 v[4];
        for (int k = 0; k < 2; ++k) {  // the two 16-byte halves of each 32-byte chunk
          const uint8x16_t l0 = vld1q_u8(ql + 16 * k), l1 = vld1q_u8(ql + 32 + 16 * k);
          const uint8x16_t hb = vld1q_u8(qh + 16 * k);
          const uint8x16_t c0 = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30));
          const uint8x16_t c1 = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30));
          const uint8x16_t c2 = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30));
          const uint8x16_t c3 = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30));
          (k ? v[0].hi : v[0].lo) = s8(c0);
          (k ? v[1].hi : v[1].lo) = s8(c1);
          (k ? v[2].hi : v[2].lo) = s8(c2);
          (k ? v[3].hi : v[3].lo) = s8(c3);
        }
        for (int j = 0; j < 4; ++j) r.add(v[j], i, 128 * h + 32 * j, sc[8 * h + 2 * j], sc[8 * h + 2 * j + 1]);
      }
      const int8x16_t sc8 = vld1q_s8(sc);
      const int16x8_t sc_lo = vmovl_s8(vget_low_s8(sc8)), sc_hi = vmovl_high_s8(sc8);
      for (int t = 0; t < N; ++t) {
        const I8 off = madd16(sc_lo, sc_hi, r.a(t, i)->bsums);
        r.sum[t] = {vsubq_s32(r.sum[t].lo, vshlq_n_s32(off.lo, 5)), vsubq_s32(r.sum[t].hi, vshlq_n_s32(off.hi, 5))};
      }
      r.fuse(i, h2f(b.d));
    });
    r.store(y, ys);
  }
};

// Q2_K (2-bit codes, 4-bit scale and min per 16 values) and Q3_K (2 low bits + a high bit that
// subtracts 4 when clear, signed 6-bit scales): chunk j of half h is bits 2j..2j+1 of
// qs[32h..32h+31], against q8[128h + 32j..], scales 8h + 2j (bytes 0..15) and 8h + 2j + 1.
// Q2_K adds its min term first (llama.cpp's order: fma with -dmin), then the scale term.
template <bool kQ3>
struct K23 {
  using Block = std::conditional_t<kQ3, block_q3_K, block_q2_K>;
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    Q8KRows<N> r(act, as);
    r.template for_blocks<Block>(n, vw, [&](const Block& b, int64_t i) {
      int8_t sc[16];
      int16x8_t mn_lo = vdupq_n_s16(0), mn_hi = vdupq_n_s16(0);
      if constexpr (kQ3) {
        unpack_q3_scales(b.scales, sc);
      } else {
        const uint8x16_t raw = vld1q_u8(b.scales);
        vst1q_s8(sc, s8(vandq_u8(raw, vdupq_n_u8(0x0F))));
        const uint8x16_t mn = vshrq_n_u8(raw, 4);
        mn_lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mn)));
        mn_hi = vreinterpretq_s16_u16(vmovl_high_u8(mn));
      }
      if constexpr (!kQ3) {
        const float wdmin = h2f(b.dmin);
        for (int t = 0; t < N; ++t) {
          const block_q8_K* a = r.a(t, i);
          r.acc[t] = fma8(r.acc[t], -(a->d * wdmin), madd16(mn_lo, mn_hi, a->bsums));
        }
      }
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t q0 = vld1q_u8(b.qs + 32 * h), q1 = vld1q_u8(b.qs + 32 * h + 16);
        for (int j = 0; j < 4; ++j) {
          const int8x16_t sh = vdupq_n_s8(static_cast<int8_t>(-2 * j));
          uint8x16_t v0 = vandq_u8(vshlq_u8(q0, sh), m3), v1 = vandq_u8(vshlq_u8(q1, sh), m3);
          B32 v{s8(v0), s8(v1)};
          if constexpr (kQ3) {
            const uint8x16_t bit = vdupq_n_u8(static_cast<uint8_t>(1 << (4 * h + j)));
            const uint8x16_t four = vdupq_n_u8(4);
            const uint8x16_t n0 = vbicq_u8(four, vtstq_u8(vld1q_u8(b.hmask), bit));
            const uint8x16_t n1 = vbicq_u8(four, vtstq_u8(vld1q_u8(b.hmask + 16), bit));
            v = {vsubq_s8(s8(v0), s8(n0)), vsubq_s8(s8(v1), s8(n1))};
          }
          r.add(v, i, 128 * h + 32 * j, sc[8 * h + 2 * j], sc[8 * h + 2 * j + 1]);
        }
      }
      r.fuse(i, h2f(b.d));
    });
    r.store(y, ys);
  }
};

struct IQ4XS {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const int8x16_t table = vld1q_s8(kIq4nlValues);
    Q8KRows<N> r(act, as);
    r.template for_blocks<block_iq4_xs>(n, vw, [&](const block_iq4_xs& b, int64_t i) {
      for (int ib = 0; ib < 8; ++ib) {
        const B32 nib = nibbles_split16(b.qs + 16 * ib);
        const int s = iq4xs_scale(b, ib);
        r.add(B32{vqtbl1q_s8(table, u8(nib.lo)), vqtbl1q_s8(table, u8(nib.hi))}, i, 32 * ib, s, s);
      }
      r.fuse(i, h2f(b.d));
    });
    r.store(y, ys);
  }
};

// ---- grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), Q8_K activations ---------------
// Each 8-value group is a lattice point (kernels/iq_grids.h) with per-value signs; each 16 values
// a 4-bit s, weighted ls = 2s + 1. The scalar reference's arithmetic (Lanes8, llama.cpp's AVX2
// kernels): per block the exact lanes of ls * q * a (value v in lane (v % 32) / 4, i.e. the
// 4-byte dots of each 32-value chunk), one fma with d_w * d_a per lane, and the format's factor
// times the horizontal sum. Dec::group(b, k) gives group k's 8 grid magnitudes and sign bits,
// Dec::scale(b, j) the s of values 16j..16j+15.

// 8 magnitudes (bytes of g) with signs (bit j of sgn set: value j negative).
inline int8x8_t signed8(uint64_t g, uint8_t sgn) {
  static constexpr uint8_t kBit8[8] = {1, 2, 4, 8, 16, 32, 64, 128};
  const int8x8_t m = vreinterpret_s8_u8(vtst_u8(vdup_n_u8(sgn), vld1_u8(kBit8)));
  return vsub_s8(veor_s8(vreinterpret_s8_u64(vcreate_u64(g)), m), m);
}
inline uint32_t load_u32le(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t pair32(uint32_t lo, uint32_t hi) { return lo | (static_cast<uint64_t>(hi) << 32); }

struct DecIq2xxs {
  using Block = block_iq2_xxs;
  static constexpr float kFactor = 0.125f;
  static int8x8_t group(const Block& b, int k) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.qs) + 8 * (k / 4);
    const uint32_t aux = load_u32le(p + 4);
    return signed8(iq::kIq2xxsGrid[p[k % 4]], iq::kSignsIq2[(aux >> (7 * (k % 4))) & 127]);
  }
  static int scale(const Block& b, int j) { return static_cast<int>(load_u32le(reinterpret_cast<const uint8_t*>(b.qs) + 8 * (j / 2) + 4) >> 28); }
};
struct DecIq2xs {
  using Block = block_iq2_xs;
  static constexpr float kFactor = 0.125f;
  static int8x8_t group(const Block& b, int k) { return signed8(iq::kIq2xsGrid[b.qs[k] & 511], iq::kSignsIq2[b.qs[k] >> 9]); }
  static int scale(const Block& b, int j) { return (b.scales[j / 2] >> (4 * (j % 2))) & 0xF; }
};
struct DecIq2s {
  using Block = block_iq2_s;
  static constexpr float kFactor = 0.125f;
  static int8x8_t group(const Block& b, int k) {
    const int hi = (b.qh[k / 4] >> (2 * (k % 4))) & 3;
    return signed8(iq::kIq2sGrid[b.qs[k] | (hi << 8)], b.qs[QK_K / 8 + k]);
  }
  static int scale(const Block& b, int j) { return (b.scales[j / 2] >> (4 * (j % 2))) & 0xF; }
};
struct DecIq3xxs {
  using Block = block_iq3_xxs;
  static constexpr float kFactor = 0.25f;
  static int8x8_t group(const Block& b, int k) {
    const uint32_t aux = load_u32le(b.qs + QK_K / 4 + 4 * (k / 4));
    return signed8(pair32(iq::kIq3xxsGrid[b.qs[2 * k]], iq::kIq3xxsGrid[b.qs[2 * k + 1]]),
                   iq::kSignsIq2[(aux >> (7 * (k % 4))) & 127]);
  }
  static int scale(const Block& b, int j) { return static_cast<int>(load_u32le(b.qs + QK_K / 4 + 4 * (j / 2)) >> 28); }
};
struct DecIq3s {
  using Block = block_iq3_s;
  static constexpr float kFactor = 1.0f;
  static int8x8_t group(const Block& b, int k) {
    const int h = b.qh[k / 4] >> (2 * (k % 4));
    const uint32_t lo = iq::kIq3sGrid[b.qs[2 * k] | ((h & 1) << 8)];
    const uint32_t hi = iq::kIq3sGrid[b.qs[2 * k + 1] | (((h >> 1) & 1) << 8)];
    return signed8(pair32(lo, hi), b.signs[k]);
  }
  static int scale(const Block& b, int j) { return (b.scales[j / 4] >> (4 * ((j / 2) % 2))) & 0xF; }
};

template <class Dec>
struct Lattice {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    using Block = typename Dec::Block;
    Q8KRows<N> r(act, as);
    r.template for_blocks<Block>(n, vw, [&](const Block& b, int64_t i) {
      for (int g = 0; g < QK_K / 32; ++g) {
        const B32 q{vcombine_s8(Dec::group(b, 4 * g), Dec::group(b, 4 * g + 1)),
                    vcombine_s8(Dec::group(b, 4 * g + 2), Dec::group(b, 4 * g + 3))};
        r.add(q, i, 32 * g, 2 * Dec::scale(b, 2 * g) + 1, 2 * Dec::scale(b, 2 * g + 1) + 1);
      }
      r.fuse(i, h2f(b.d));
    });
    for (int t = 0; t < N; ++t) y[t * ys] = Dec::kFactor * r.hsum(t);
  }
};

// ---- IQ1_S / IQ1_M: grid values -1, 0, +1 per 8, a shared delta +-1/8, odd ls per 16 or 32 ---
// The scalar reference's arithmetic (vec_dot_iq1 in kernels/scalar): lanes of ls * grid * a fused
// with d = d_w * d_a; the delta term ls * sign * sum(a) as IQ1_S: one int per block fused into a
// float, IQ1_M: lanes of its own; result hsum + kIq1Delta * (delta term).
template <bool kM>
struct Iq1 {
  using Block = std::conditional_t<kM, block_iq1_m, block_iq1_s>;
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    Q8KRows<N> r1(act, as), r2(act, as);  // the grid term; IQ1_M's delta term
    float acc_delta[N];                     // IQ1_S's delta term
    for (int t = 0; t < N; ++t) acc_delta[t] = 0.0f;
    r1.template for_blocks<Block>(n, vw, [&](const Block& b, int64_t i) {
      float wd;
      int s[QK_K / 16];   // 3-bit scale code per 16 values
      bool neg[QK_K / 8];  // delta sign per 8 values
      int8x8_t q[QK_K / 8];
      if constexpr (kM) {
        uint16_t sc[4];
        std::memcpy(sc, b.scales, sizeof(sc));
        wd = h2f(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
        for (int k = 0; k < QK_K / 8; ++k) {
          const int h = (b.qh[k / 2] >> (4 * (k % 2))) & 0xF;
          q[k] = vreinterpret_s8_u64(vcreate_u64(iq::kIq1sGrid[b.qs[k] | ((h & 7) << 8)]));
          neg[k] = (h & 8) != 0;
        }
        for (int g = 0; g < QK_K / 16; ++g) s[g] = (sc[g / 4] >> (3 * (g % 4))) & 7;
      } else {
        wd = h2f(b.d);
        for (int g = 0; g < QK_K / 32; ++g) {
          const int h = b.qh[g];
          for (int l = 0; l < 4; ++l) {
            q[4 * g + l] = vreinterpret_s8_u64(vcreate_u64(iq::kIq1sGrid[b.qs[4 * g + l] | (((h >> (3 * l)) & 7) << 8)]));
            neg[4 * g + l] = (h & 0x8000) != 0;
          }
          s[2 * g] = s[2 * g + 1] = (h >> 12) & 7;
        }
      }
      for (int t = 0; t < N; ++t) r2.sum[t] = i8_zero();
      for (int g = 0; g < QK_K / 32; ++g) {
        const B32 qv{vcombine_s8(q[4 * g], q[4 * g + 1]), vcombine_s8(q[4 * g + 2], q[4 * g + 3])};
        const int ls_lo = 2 * s[2 * g] + 1, ls_hi = 2 * s[2 * g + 1] + 1;
        B32 sg{};
        if constexpr (kM) {
          auto sign8 = [&](int k) { return vdup_n_s8(neg[k] ? -1 : 1); };
          sg = {vcombine_s8(sign8(4 * g), sign8(4 * g + 1)), vcombine_s8(sign8(4 * g + 2), sign8(4 * g + 3))};
        }
        r1.add(qv, i, 32 * g, ls_lo, ls_hi);
        if constexpr (kM) r2.add(sg, i, 32 * g, ls_lo, ls_hi);
      }
      r1.fuse(i, wd);
      if constexpr (kM) {
        r2.fuse(i, wd);
      } else {
        for (int t = 0; t < N; ++t) {
          const block_q8_K* a = r1.a(t, i);
          int32_t delta = 0;
          for (int g = 0; g < QK_K / 32; ++g) {
            const int ls = 2 * s[2 * g] + 1;
            const int32_t sa = a->bsums[2 * g] + a->bsums[2 * g + 1];
            delta += neg[4 * g] ? -ls * sa : ls * sa;
          }
          acc_delta[t] = std::fma(a->d * wd, static_cast<float>(delta), acc_delta[t]);
        }
      }
    });
    for (int t = 0; t < N; ++t) y[t * ys] = r1.hsum(t) + iq::kIq1Delta * (kM ? r2.hsum(t) : acc_delta[t]);
  }
};

// ---- TQ1_0 / TQ2_0: ternary codes c = value + 1 (0..3) -------------------------------------
// The scalar reference's arithmetic: lanes of c * a, minus in lane l the activation's sum over
// values 32l..32l+31 (its per-16 sums 2l and 2l+1), fused with d = d_w * d_a.

// Ternary digit k of each of 16 base-3 fraction bytes: (uint8(b * 3^k) * 3) >> 8.
inline uint8x16_t trits16(uint8x16_t b, uint8_t pow3) {
  const uint8x16_t q = vmulq_u8(b, vdupq_n_u8(pow3));
  const uint8x16_t three = vdupq_n_u8(3);
  return vcombine_u8(vshrn_n_u16(vmull_u8(vget_low_u8(q), vget_low_u8(three)), 8), vshrn_n_u16(vmull_high_u8(q, three), 8));
}
struct DecTq1 {
  using Block = block_tq1_0;
  static void codes(const Block& b, uint8_t* c) {
    static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    const uint8x16_t q0 = vld1q_u8(b.qs), q1 = vld1q_u8(b.qs + 16), q2 = vld1q_u8(b.qs + 32);
    for (int k = 0; k < 5; ++k) {
      vst1q_u8(c + 32 * k, trits16(q0, kPow3[k]));
      vst1q_u8(c + 32 * k + 16, trits16(q1, kPow3[k]));
      vst1q_u8(c + 160 + 16 * k, trits16(q2, kPow3[k]));
    }
    for (int k = 0; k < 4; ++k)
      for (int m = 0; m < 4; ++m) c[240 + 4 * k + m] = static_cast<uint8_t>((static_cast<uint8_t>(b.qh[m] * kPow3[k]) * 3) >> 8);
  }
};
struct DecTq2 {
  using Block = block_tq2_0;
  static void codes(const Block& b, uint8_t* c) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {
        const uint8x16_t q = vld1q_u8(b.qs + 32 * h + 16 * half);
        for (int l = 0; l < 4; ++l) vst1q_u8(c + 128 * h + 32 * l + 16 * half, vandq_u8(vshlq_u8(q, vdupq_n_s8(static_cast<int8_t>(-2 * l))), m3));
      }
  }
};

template <class Dec>
struct Ternary {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    using Block = typename Dec::Block;
    alignas(16) uint8_t c[QK_K];
    Q8KRows<N> r(act, as);
    r.template for_blocks<Block>(n, vw, [&](const Block& b, int64_t i) {
      Dec::codes(b, c);
      for (int g = 0; g < QK_K / 32; ++g) r.add_dot(load32(c + 32 * g), i, 32 * g);
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = r.a(t, i);
        r.sum[t] = i8_sub(r.sum[t], I8{vpaddlq_s16(vld1q_s16(a->bsums)), vpaddlq_s16(vld1q_s16(a->bsums + 8))});
      }
      r.fuse(i, h2f(b.d));
    });
    r.store(y, ys);
  }
};

// ---- dispatch: groups of kMaxTok tokens, then one call for the remainder ---------------------
constexpr int kMaxTok = 4;

template <class K, int M>
inline void run_tail(int m, int64_t n, const void* w, const uint8_t* a, size_t as, float* y, int64_t ys) {
  if constexpr (M >= 1) {
    if (m == M) K::template run<M>(n, w, a, as, y, ys);
    else run_tail<K, M - 1>(m, n, w, a, as, y, ys);
  }
}

template <class K>
void xn(int64_t n, const void* w, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  const auto* a = static_cast<const uint8_t*>(va);
  for (; n_tok >= kMaxTok; n_tok -= kMaxTok, a += kMaxTok * as, y += kMaxTok * ys) K::template run<kMaxTok>(n, w, a, as, y, ys);
  if (n_tok > 0) run_tail<K, kMaxTok - 1>(n_tok, n, w, a, as, y, ys);
}

template <class K>
float one(int64_t n, const void* w, const void* a) {
  float y;
  K::template run<1>(n, w, static_cast<const uint8_t*>(a), 0, &y, 1);
  return y;
}

template <class K>
void set(KernelTable& t, GgmlType type) {
  t.vec_dot[static_cast<uint32_t>(type)] = one<K>;
  t.vec_dot_xn[static_cast<uint32_t>(type)] = xn<K>;
}

}  // namespace

void fill_dots(KernelTable& t) {
  set<Legacy<DecQ8_0>>(t, GgmlType::Q8_0);
  set<Legacy<DecQ4_0>>(t, GgmlType::Q4_0);
  set<Legacy<DecQ4_1>>(t, GgmlType::Q4_1);
  set<Legacy<DecQ5_0>>(t, GgmlType::Q5_0);
  set<Legacy<DecQ5_1>>(t, GgmlType::Q5_1);
  set<Legacy<DecIq4nl>>(t, GgmlType::IQ4_NL);
  set<Legacy<DecMxfp4>>(t, GgmlType::MXFP4);
  set<K4<block_q4_K, false>>(t, GgmlType::Q4_K);
  set<K4<block_q5_K, true>>(t, GgmlType::Q5_K);
  set<Q6K>(t, GgmlType::Q6_K);
  set<K23<false>>(t, GgmlType::Q2_K);
  set<K23<true>>(t, GgmlType::Q3_K);
  set<IQ4XS>(t, GgmlType::IQ4_XS);
  set<Lattice<DecIq2xxs>>(t, GgmlType::IQ2_XXS);
  set<Lattice<DecIq2xs>>(t, GgmlType::IQ2_XS);
  set<Lattice<DecIq2s>>(t, GgmlType::IQ2_S);
  set<Lattice<DecIq3xxs>>(t, GgmlType::IQ3_XXS);
  set<Lattice<DecIq3s>>(t, GgmlType::IQ3_S);
  set<Iq1<false>>(t, GgmlType::IQ1_S);
  set<Iq1<true>>(t, GgmlType::IQ1_M);
  set<Ternary<DecTq1>>(t, GgmlType::TQ1_0);
  set<Ternary<DecTq2>>(t, GgmlType::TQ2_0);
}

}  // namespace strata::STRATA_NEON_NS
