// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (256-value super-blocks, f16 scale d): each group
// of 8 (IQ2) or 4 (IQ3) values is one point of a fixed lattice grid (kernels/iq_grids.h) with
// per-value signs, scaled per 16 or 32 values by an odd integer ls = 2*s + 1 (s 4 bits).
// Decoding gives, per block, the 256 signed grid values q and one 4-bit s per 16 values; then
//   IQ2_*:   w = d * (0.5 + s) / 4 * q   (= d * ls * q / 8)
//   IQ3_XXS: w = d * (0.5 + s) / 2 * q   (= d * ls * q / 4)
//   IQ3_S:   w = d * ls * q
// evaluated in float in exactly that order (bit-exact with ggml). The dot against Q8_K sums
// ls * q * a in integers per block and accumulates in float as llama.cpp's AVX2 kernels do
// (Lanes8 in quants_internal.h): bit-exact with its vec_dot.
// Block layouts (bytes after the f16 d):
//   IQ2_XXS: per 32 values 8 bytes: 4 grid indices, then a u32 of four 7-bit sign codes and s (bits 28..31)
//   IQ2_XS:  u16 per 8 values (9-bit grid index, 7-bit sign code), then s per 16 values (nibbles)
//   IQ2_S:   qs[32] low 8 index bits, signs[32] (one byte per 8 values), qh[8] 2 high index bits
//            per 8 values, then s per 16 values (nibbles)
//   IQ3_XXS: qs[64] grid indices (4 values each), then per 32 values a u32 as in IQ2_XXS
//   IQ3_S:   qs[64] low index bits, qh[8] 9th index bits, signs[32], s per 32 values (nibbles)
#include "kernels/iq_grids.h"
#include "kernels/scalar/quants_internal.h"

namespace strata::scalar {
namespace {

using iq::kSignsIq2;

// One decoded super-block.
struct LatticeBlock {
  float d;                // the block's f16 scale
  int8_t q[QK_K];         // signed grid values
  uint8_t s[QK_K / 16];   // 4-bit scale code per 16 values
};

// 8 magnitudes (bytes of `grid`) with signs (bit j of `signs` set: value j negative).
inline void put8(uint64_t grid, uint8_t signs, int8_t* q) {
  for (int j = 0; j < 8; ++j) {
    const int v = static_cast<int>((grid >> (8 * j)) & 0xFF);
    q[j] = static_cast<int8_t>((signs >> j) & 1 ? -v : v);
  }
}
inline uint64_t pair(uint32_t lo, uint32_t hi) { return lo | (static_cast<uint64_t>(hi) << 32); }
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void decode_iq2_xxs(const void* src, LatticeBlock& out) {
  const auto& b = *static_cast<const block_iq2_xxs*>(src);
  const auto* qs = reinterpret_cast<const uint8_t*>(b.qs);
  out.d = f16(b.d);
  for (int g = 0; g < QK_K / 32; ++g) {
    const uint8_t* p = qs + 8 * g;
    const uint32_t aux = load_u32(p + 4);
    for (int l = 0; l < 4; ++l) put8(iq::kIq2xxsGrid[p[l]], kSignsIq2[(aux >> (7 * l)) & 127], out.q + 32 * g + 8 * l);
    out.s[2 * g] = out.s[2 * g + 1] = static_cast<uint8_t>(aux >> 28);
  }
}

void decode_iq2_xs(const void* src, LatticeBlock& out) {
  const auto& b = *static_cast<const block_iq2_xs*>(src);
  out.d = f16(b.d);
  for (int k = 0; k < QK_K / 8; ++k) put8(iq::kIq2xsGrid[b.qs[k] & 511], kSignsIq2[b.qs[k] >> 9], out.q + 8 * k);
  for (int g = 0; g < QK_K / 32; ++g) {
    out.s[2 * g] = b.scales[g] & 0xF;
    out.s[2 * g + 1] = b.scales[g] >> 4;
  }
}

void decode_iq2_s(const void* src, LatticeBlock& out) {
  const auto& b = *static_cast<const block_iq2_s*>(src);
  const uint8_t* signs = b.qs + QK_K / 8;
  out.d = f16(b.d);
  for (int k = 0; k < QK_K / 8; ++k) {
    const int hi = (b.qh[k / 4] >> (2 * (k % 4))) & 3;
    put8(iq::kIq2sGrid[b.qs[k] | (hi << 8)], signs[k], out.q + 8 * k);
  }
  for (int g = 0; g < QK_K / 32; ++g) {
    out.s[2 * g] = b.scales[g] & 0xF;
    out.s[2 * g + 1] = b.scales[g] >> 4;
  }
}

void decode_iq3_xxs(const void* src, LatticeBlock& out) {
  const auto& b = *static_cast<const block_iq3_xxs*>(src);
  const uint8_t* idx = b.qs;                  // 2 grid indices per 8 values
  const uint8_t* aux_bytes = b.qs + QK_K / 4;  // u32 per 32 values
  out.d = f16(b.d);
  for (int g = 0; g < QK_K / 32; ++g) {
    const uint32_t aux = load_u32(aux_bytes + 4 * g);
    for (int l = 0; l < 4; ++l) {
      const int k = 4 * g + l;  // group of 8 values
      put8(pair(iq::kIq3xxsGrid[idx[2 * k]], iq::kIq3xxsGrid[idx[2 * k + 1]]), kSignsIq2[(aux >> (7 * l)) & 127],
           out.q + 8 * k);
    }
    out.s[2 * g] = out.s[2 * g + 1] = static_cast<uint8_t>(aux >> 28);
  }
}

void decode_iq3_s(const void* src, LatticeBlock& out) {
  const auto& b = *static_cast<const block_iq3_s*>(src);
  out.d = f16(b.d);
  for (int k = 0; k < QK_K / 8; ++k) {
    const int h = b.qh[k / 4] >> (2 * (k % 4));  // 9th index bits of the two halves
    const uint32_t lo = iq::kIq3sGrid[b.qs[2 * k] | ((h & 1) << 8)];
    const uint32_t hi = iq::kIq3sGrid[b.qs[2 * k + 1] | (((h >> 1) & 1) << 8)];
    put8(pair(lo, hi), b.signs[k], out.q + 8 * k);
  }
  for (int g = 0; g < QK_K / 32; ++g) out.s[2 * g] = out.s[2 * g + 1] = (b.scales[g / 2] >> (4 * (g % 2))) & 0xF;
}

// How the scale code s turns into the float group scale, and the dot's final factor.
enum class Scale { Iq2, Iq3xxs, Iq3s };
inline float group_scale(Scale k, float d, int s) {
  switch (k) {
    case Scale::Iq2: return d * (0.5f + static_cast<float>(s)) * 0.25f;
    case Scale::Iq3xxs: return d * (0.5f + static_cast<float>(s)) * 0.5f;
    case Scale::Iq3s: return d * static_cast<float>(1 + 2 * s);
  }
  return 0;
}
inline float dot_factor(Scale k) { return k == Scale::Iq2 ? 0.125f : k == Scale::Iq3xxs ? 0.25f : 1.0f; }

using DecodeFn = void (*)(const void* src, LatticeBlock& out);

template <DecodeFn decode, Scale kind, typename Block>
void to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  LatticeBlock x;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    decode(b + i, x);
    for (int g = 0; g < QK_K / 16; ++g, y += 16) {
      const float dl = group_scale(kind, x.d, x.s[g]);
      for (int j = 0; j < 16; ++j) y[j] = dl * static_cast<float>(x.q[16 * g + j]);
    }
  }
}

// llama.cpp's arithmetic (Lanes8): per block the lanes of ls * q * a, one fused multiply-add
// with d_w * d_a per lane, and the format's factor (1/8, 1/4, 1) times the horizontal sum.
template <DecodeFn decode, Scale kind, typename Block>
float vec_dot(int64_t n, const void* w, const void* a) {
  const auto* b = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  LatticeBlock x;
  Lanes8 acc;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    decode(b + i, x);
    int32_t lane[8] = {};
    for (int v = 0; v < QK_K; ++v) lane[iq_lane(v)] += (2 * x.s[v / 16] + 1) * x.q[v] * y[i].qs[v];
    acc.fma(x.d * y[i].d, lane);
  }
  return dot_factor(kind) * acc.hsum();
}

}  // namespace

void register_iq_lattice_quants(QuantTable& t) {
  set_traits(t, GgmlType::IQ2_XXS, to_float<decode_iq2_xxs, Scale::Iq2, block_iq2_xxs>, nullptr, GgmlType::Q8_K,
             vec_dot<decode_iq2_xxs, Scale::Iq2, block_iq2_xxs>);
  set_traits(t, GgmlType::IQ2_XS, to_float<decode_iq2_xs, Scale::Iq2, block_iq2_xs>, nullptr, GgmlType::Q8_K,
             vec_dot<decode_iq2_xs, Scale::Iq2, block_iq2_xs>);
  set_traits(t, GgmlType::IQ2_S, to_float<decode_iq2_s, Scale::Iq2, block_iq2_s>, nullptr, GgmlType::Q8_K,
             vec_dot<decode_iq2_s, Scale::Iq2, block_iq2_s>);
  set_traits(t, GgmlType::IQ3_XXS, to_float<decode_iq3_xxs, Scale::Iq3xxs, block_iq3_xxs>, nullptr, GgmlType::Q8_K,
             vec_dot<decode_iq3_xxs, Scale::Iq3xxs, block_iq3_xxs>);
  set_traits(t, GgmlType::IQ3_S, to_float<decode_iq3_s, Scale::Iq3s, block_iq3_s>, nullptr, GgmlType::Q8_K,
             vec_dot<decode_iq3_s, Scale::Iq3s, block_iq3_s>);
}

}  // namespace strata::scalar
