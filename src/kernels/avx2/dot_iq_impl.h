#pragma once
// Grid i-quant dots against Q8_K (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) over
// 256-bit integer vectors, shared by the AVX2 table (dot_iq_avx2.cpp) and the VNNI tables
// (kernels/avxvnni): templates over the `Ops` of dot_multi_impl.h (madd_acc: vpmaddwd + vpaddd
// or vpdpwssd, the same int32 either way). Bit-identical to the scalar reference
// (kernels/scalar/quants_iq_*.cpp), which is llama.cpp's AVX2 arithmetic: per block 8 int32
// lanes (lane l: values 4l..4l+3 of every 32-value group, times the group's scale ls),
// converted and fused-multiply-added with d_w * d_a into 8 float lanes, the format's factor
// times the horizontal sum at the end.
// A group of 32 values is decoded to unsigned bytes u (grid magnitudes) and a sign source s
// (the activations are multiplied by sign(s): +-1 per value, 0 where s is 0), so that
// vpmaddubsw(u, sign(a, s)) gives the products; vpmaddwd with the int16 scales ls widens them.
// Grid rows come from the tables of kernels/iq_grids.h by scalar loads inserted into vectors
// (measured faster than vpgather on Zen 4); indices are bit fields, so always inside the table.
// Sign codes go through kSignBytesIq2, sign bits through bit -> byte masks.
// Two multi-token kernels: IqDot (each block decoded in registers once per pass of up to N
// tokens) and IqPanel (for more tokens than one pass holds: a few blocks decoded once into an
// L1 buffer, then every pass of N tokens reads them), with the same integers and the same
// float operations per token in the same order, so both equal the single-token dot.
// Include only from translation units compiled with at least -mavx2 -mfma -mf16c.
#include "kernels/avx2/dot_multi_impl.h"
#include "kernels/iq_grids.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata::avx2 {
namespace {

struct IqGroup {
  __m256i u;   // unsigned bytes (magnitudes)
  __m256i s;   // sign source for the activations
  __m256i ls;  // int16 scales: low lane for values 0..15, high lane for 16..31
};

// Eight 32-bit rows from scalar indices.
inline __m256i rows8(const uint32_t* t, const uint32_t (&i)[8]) {
  return _mm256_setr_epi32(static_cast<int>(t[i[0]]), static_cast<int>(t[i[1]]), static_cast<int>(t[i[2]]), static_cast<int>(t[i[3]]),
                           static_cast<int>(t[i[4]]), static_cast<int>(t[i[5]]), static_cast<int>(t[i[6]]), static_cast<int>(t[i[7]]));
}
// Four 64-bit rows from scalar indices (vmovq / vpinsrq: cheaper than a gather on AMD cores).
inline __m256i rows4(const uint64_t* t, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  return _mm256_set_epi64x(static_cast<int64_t>(t[i3]), static_cast<int64_t>(t[i2]), static_cast<int64_t>(t[i1]),
                           static_cast<int64_t>(t[i0]));
}
// Four 7-bit sign codes (bits 0..27 of `aux`) -> 32 int8 multipliers +-1 (kSignBytesIq2).
inline __m256i signs4(uint32_t aux) {
  return rows4(iq::kSignBytesIq2.data(), aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
}
// 32 sign bits (bit j set: value j negative) -> +-1 bytes.
inline __m256i signs32(uint32_t bits) { return _mm256_or_si256(bits_to_bytes32(bits), _mm256_set1_epi8(1)); }
inline __m256i ls_one(int s) { return _mm256_set1_epi16(static_cast<int16_t>(2 * s + 1)); }
// The 16 per-16 scales ls = 2s + 1 of IQ2_XS / IQ2_S (s: nibbles of 8 bytes, low nibble
// first) as int16, 8 per vector in both lanes (for scale_pair16).
struct NibbleScales {
  __m256i ls8[2];
  explicit NibbleScales(const uint8_t* scales) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i s = _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
    const __m128i ls = _mm_or_si128(_mm_add_epi8(s, s), _mm_set1_epi8(1));
    ls8[0] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(ls));
    ls8[1] = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(ls, 8)));
  }
  __m256i group(int g) const { return scale_pair16(ls8[g / 4], g % 4); }
};
inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// Four 7-bit sign codes (bits 0..27 of `aux`) -> 32 sign bits (bit j set: value j negative).
inline uint32_t sign_bits4(uint32_t aux) {
  const uint8_t* t = iq::kSignsIq2.data();
  return t[aux & 127] | (t[(aux >> 7) & 127] << 8) | (t[(aux >> 14) & 127] << 16) | (static_cast<uint32_t>(t[(aux >> 21) & 127]) << 24);
}

// Decoders: Dec(block) prepares per-block state, group(g) decodes values 32g..32g+31; the
// formats without a delta term also give sign_bits(g): bit j set where value 32g+j is negative
// (the sign of group(g).s, for kernels that apply the signs to the weights).
// kFactor: the final factor of the horizontal sum; kDelta: IQ1 delta term (None, S: one int
// per block from the activation's per-16 sums, M: lanes of their own).
enum class Delta { None, S, M };

struct Iq2xxs {
  using Block = block_iq2_xxs;
  static constexpr float kFactor = 0.125f;
  static constexpr Delta kDelta = Delta::None;
  const uint8_t* q;
  explicit Iq2xxs(const Block& b) : q(reinterpret_cast<const uint8_t*>(b.qs)) {}
  IqGroup group(int g) const {
    const uint32_t aux = load_u32(q + 8 * g + 4);
    const uint8_t* p = q + 8 * g;
    return {rows4(iq::kIq2xxsGrid.data(), p[0], p[1], p[2], p[3]), signs4(aux), ls_one(aux >> 28)};
  }
  uint32_t sign_bits(int g) const { return sign_bits4(load_u32(q + 8 * g + 4)); }
};

struct Iq2xs {
  using Block = block_iq2_xs;
  static constexpr float kFactor = 0.125f;
  static constexpr Delta kDelta = Delta::None;
  const Block& b;
  const NibbleScales ls;
  explicit Iq2xs(const Block& blk) : b(blk), ls(blk.scales) {}
  IqGroup group(int g) const {
    const uint16_t* q = b.qs + 4 * g;
    const __m256i u = rows4(iq::kIq2xsGrid.data(), q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
    const __m256i s = rows4(iq::kSignBytesIq2.data(), q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
    return {u, s, ls.group(g)};
  }
  uint32_t sign_bits(int g) const {
    const uint16_t* q = b.qs + 4 * g;
    const uint8_t* t = iq::kSignsIq2.data();
    return t[q[0] >> 9] | (t[q[1] >> 9] << 8) | (t[q[2] >> 9] << 16) | (static_cast<uint32_t>(t[q[3] >> 9]) << 24);
  }
};

struct Iq2s {
  using Block = block_iq2_s;
  static constexpr float kFactor = 0.125f;
  static constexpr Delta kDelta = Delta::None;
  const Block& b;
  const NibbleScales ls;
  explicit Iq2s(const Block& blk) : b(blk), ls(blk.scales) {}
  IqGroup group(int g) const {
    const uint32_t h = b.qh[g];
    const uint8_t* q = b.qs + 4 * g;
    const __m256i u = rows4(iq::kIq2sGrid.data(), q[0] | ((h << 8) & 0x300), q[1] | ((h << 6) & 0x300), q[2] | ((h << 4) & 0x300),
                            q[3] | ((h << 2) & 0x300));
    return {u, signs32(load_u32(b.qs + QK_K / 8 + 4 * g)), ls.group(g)};
  }
  uint32_t sign_bits(int g) const { return load_u32(b.qs + QK_K / 8 + 4 * g); }
};

struct Iq3xxs {
  using Block = block_iq3_xxs;
  static constexpr float kFactor = 0.25f;
  static constexpr Delta kDelta = Delta::None;
  const Block& b;
  explicit Iq3xxs(const Block& blk) : b(blk) {}
  IqGroup group(int g) const {
    const uint8_t* q = b.qs + 8 * g;
    const uint32_t idx[8] = {q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]};
    const uint32_t aux = load_u32(b.qs + QK_K / 4 + 4 * g);
    return {rows8(iq::kIq3xxsGrid.data(), idx), signs4(aux), ls_one(aux >> 28)};
  }
  uint32_t sign_bits(int g) const { return sign_bits4(load_u32(b.qs + QK_K / 4 + 4 * g)); }
};

struct Iq3s {
  using Block = block_iq3_s;
  static constexpr float kFactor = 1.0f;
  static constexpr Delta kDelta = Delta::None;
  const Block& b;
  explicit Iq3s(const Block& blk) : b(blk) {}
  IqGroup group(int g) const {
    const uint8_t* q = b.qs + 8 * g;
    const uint32_t h = b.qh[g];
    const uint32_t idx[8] = {q[0] | ((h << 8) & 256), q[1] | ((h << 7) & 256), q[2] | ((h << 6) & 256), q[3] | ((h << 5) & 256),
                             q[4] | ((h << 4) & 256), q[5] | ((h << 3) & 256), q[6] | ((h << 2) & 256), q[7] | ((h << 1) & 256)};
    return {rows8(iq::kIq3sGrid.data(), idx), signs32(load_u32(b.signs + 4 * g)), ls_one((b.scales[g / 2] >> (4 * (g % 2))) & 0xF)};
  }
  uint32_t sign_bits(int g) const { return load_u32(b.signs + 4 * g); }
};

// IQ1_S / IQ1_M grid values are signed (-1, 0, +1): u = |v|, s = v.
struct Iq1s {
  using Block = block_iq1_s;
  static constexpr float kFactor = 1.0f;
  static constexpr Delta kDelta = Delta::S;
  const Block& b;
  explicit Iq1s(const Block& blk) : b(blk) {}
  IqGroup group(int g) const {
    const uint32_t h = b.qh[g];
    const uint8_t* q = b.qs + 4 * g;
    const __m256i v = rows4(iq::kIq1sGrid.data(), q[0] | ((h << 8) & 0x700), q[1] | ((h << 5) & 0x700), q[2] | ((h << 2) & 0x700),
                            q[3] | ((h >> 1) & 0x700));
    return {_mm256_abs_epi8(v), v, ls_one((h >> 12) & 7)};
  }
  // Per 16 values (int16): ls with the delta's sign, for a vpmaddwd with the activation's
  // per-16 sums (the int sum over groups of ls * sign * sum(a)).
  __m256i delta_ls() const {
    const __m128i h = load128(b.qh);
    const __m128i ls = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(h, 11), _mm_set1_epi16(14)), _mm_set1_epi16(1));
    const __m128i sls = _mm_sign_epi16(ls, _mm_or_si128(_mm_srai_epi16(h, 15), _mm_set1_epi16(1)));
    return _mm256_set_m128i(_mm_unpackhi_epi16(sls, sls), _mm_unpacklo_epi16(sls, sls));
  }
  float scale() const { return h2f(b.d); }
};

struct Iq1m {
  using Block = block_iq1_m;
  static constexpr float kFactor = 1.0f;
  static constexpr Delta kDelta = Delta::M;
  const Block& b;
  uint16_t sc[4];
  __m256i ls8[2];  // the 16 per-16 scales ls as int16, 8 per vector (in both lanes)
  explicit Iq1m(const Block& blk) : b(blk) {
    std::memcpy(sc, b.scales, sizeof(sc));
    // Scale k is bits 3(k%4)..+2 of sc[k/4]: each u16 repeated 4 times, the field moved to the
    // top 3 bits by a multiply, then shifted down.
    const __m128i s4 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i mul = _mm_setr_epi16(1 << 13, 1 << 10, 1 << 7, 1 << 4, 1 << 13, 1 << 10, 1 << 7, 1 << 4);
    for (int h = 0; h < 2; ++h) {
      const char o = static_cast<char>(4 * h);
      const __m128i rep = _mm_shuffle_epi8(s4, _mm_setr_epi8(o, o + 1, o, o + 1, o, o + 1, o, o + 1, o + 2, o + 3, o + 2, o + 3,
                                                             o + 2, o + 3, o + 2, o + 3));
      const __m128i f = _mm_srli_epi16(_mm_mullo_epi16(rep, mul), 13);
      ls8[h] = _mm256_broadcastsi128_si256(_mm_or_si128(_mm_slli_epi16(f, 1), _mm_set1_epi16(1)));
    }
  }
  // Values 32g..: index nibbles of qh[2g], qh[2g+1] (3 high bits + delta sign), scales of the
  // 16-value halves 2g, 2g+1.
  IqGroup group(int g, __m256i& ls_delta) const {
    const uint32_t hq = b.qh[2 * g] | (b.qh[2 * g + 1] << 8);
    const uint8_t* q = b.qs + 4 * g;
    const __m256i v = rows4(iq::kIq1sGrid.data(), q[0] | ((hq << 8) & 0x700), q[1] | ((hq << 4) & 0x700), q[2] | (hq & 0x700),
                            q[3] | ((hq >> 4) & 0x700));
    const __m256i ls = scale_pair16(ls8[g / 4], g % 4);
    // ls negated per 8 values whose sign bit (bit 3 of the nibble) is set.
    const __m256i bit = _mm256_setr_epi64x(0x0008000800080008LL, 0x0080008000800080LL, 0x0800080008000800LL,
                                           static_cast<int64_t>(0x8000800080008000ULL));
    const __m256i neg = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(hq)), bit), bit);
    ls_delta = _mm256_sub_epi16(_mm256_xor_si256(ls, neg), neg);
    return {_mm256_abs_epi8(v), v, ls};
  }
  float scale() const {
    return h2f(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
  }
};

template <class D>
inline float weight_scale(const D& dec, const typename D::Block& b) {
  if constexpr (requires { dec.scale(); }) return dec.scale();
  else return h2f(b.d);
}

template <class D, class Ops>
struct IqDot {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    using Block = typename D::Block;
    const auto* w = static_cast<const Block*>(vw);
    const int64_t nb = n / QK_K;
    const __m256i ones = _mm256_set1_epi8(1);
    __m256 acc[N], acc2[N];
    float accd[N];
    for (int t = 0; t < N; ++t) acc[t] = acc2[t] = _mm256_setzero_ps(), accd[t] = 0.0f;
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(Block));
      const D dec(w[i]);
      Sums<N> sum;
      __m256i sum2[N];
      for (int t = 0; t < N; ++t) sum2[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        IqGroup x;
        __m256i ls_delta = _mm256_setzero_si256();
        if constexpr (D::kDelta == Delta::M) x = dec.group(g, ls_delta);
        else x = dec.group(g);
#pragma GCC unroll 4
        for (int t = 0; t < N; ++t) {
          const __m256i q8 = load256(act_block<block_q8_K>(act, as, t, i)->qs + 32 * g);
          const __m256i p16 = _mm256_maddubs_epi16(x.u, _mm256_sign_epi8(q8, x.s));
          sum(t, g) = Ops::madd_acc(sum(t, g), p16, x.ls);
          if constexpr (D::kDelta == Delta::M) sum2[t] = Ops::madd_acc(sum2[t], _mm256_maddubs_epi16(ones, q8), ls_delta);
        }
      }
      const float wd = weight_scale(dec, w[i]);
      __m256i dls = _mm256_setzero_si256();
      if constexpr (D::kDelta == Delta::S) dls = dec.delta_ls();
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = act_block<block_q8_K>(act, as, t, i);
        const float d = wd * a->d;
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum.total(t)), acc[t]);
        if constexpr (D::kDelta == Delta::M) acc2[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum2[t]), acc2[t]);
        if constexpr (D::kDelta == Delta::S) {
          const int32_t s2 = hsum_epi32(_mm256_madd_epi16(load256(a->bsums), dls));
          accd[t] = std::fma(d, static_cast<float>(s2), accd[t]);
        }
      }
    }
    for (int t = 0; t < N; ++t) {
      float r = D::kFactor * hsum_ps(acc[t]);
      if constexpr (D::kDelta == Delta::M) r += iq::kIq1Delta * hsum_ps(acc2[t]);
      if constexpr (D::kDelta == Delta::S) r += iq::kIq1Delta * accd[t];
      y[t * ys] = r;
    }
  }
};

// Many tokens (more than one pass of N): kPanelBlocks super-blocks decoded once into `buf`
// (u, s, ls per 32-value group), then each pass of N tokens dots them. Per token: the same
// Sums, the same fused multiply-add per block in block order and the same final sum as IqDot,
// so the same float. Formats without a delta term only (IQ1 keeps IqDot).
inline constexpr int kPanelBlocks = 4;
template <class D, class Ops, int N>
struct IqPanel {
  static_assert(D::kDelta == Delta::None);
  using Block = typename D::Block;
  struct Panel {
    IqGroup g[kPanelBlocks][8];  // [block][group] decoded codes: 96 bytes per 32 values
    float wd[kPanelBlocks];      // weight scale per block
  };

  // Tokens t0..t0+M-1 against blocks i0..i0+nc-1 of the panel; acc: [n_tok] float lanes.
  template <int M>
  static void tokens(const Panel& p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, __m256* acc) {
    for (int c = 0; c < nc; ++c) {
      Sums<M> sum;
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const IqGroup& x = p.g[c][g];
#pragma GCC unroll 8
        for (int t = 0; t < M; ++t) {
          const __m256i q8 = load256(act_block<block_q8_K>(act, as, t0 + t, i0 + c)->qs + 32 * g);
          sum(t, g) = Ops::madd_acc(sum(t, g), _mm256_maddubs_epi16(x.u, _mm256_sign_epi8(q8, x.s)), x.ls);
        }
      }
      for (int t = 0; t < M; ++t) {
        const float d = p.wd[c] * act_block<block_q8_K>(act, as, t0 + t, i0 + c)->d;
        acc[t0 + t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum.total(t)), acc[t0 + t]);
      }
    }
  }
  template <int M>
  static void tail(int m, const Panel& p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, __m256* acc) {
    if constexpr (M >= 1) {
      if (m == M) tokens<M>(p, nc, i0, act, as, t0, acc);
      else tail<M - 1>(m, p, nc, i0, act, as, t0, acc);
    }
  }

  // n_tok <= kMaxTok tokens.
  static constexpr int kMaxTok = 32;
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, int n_tok, float* y, int64_t ys) {
    const auto* w = static_cast<const Block*>(vw);
    const int64_t nb = n / QK_K;
    __m256 acc[kMaxTok];
    for (int t = 0; t < n_tok; ++t) acc[t] = _mm256_setzero_ps();
    Panel p;
    for (int64_t i0 = 0; i0 < nb; i0 += kPanelBlocks) {
      const int nc = static_cast<int>(std::min<int64_t>(kPanelBlocks, nb - i0));
      for (int c = 0; c < nc; ++c) {
        const Block& b = w[i0 + c];
        prefetch_block(&b, sizeof(Block));
        const D dec(b);
        p.wd[c] = weight_scale(dec, b);
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) p.g[c][g] = dec.group(g);
      }
      int t0 = 0;
      for (; t0 + N <= n_tok; t0 += N) tokens<N>(p, nc, i0, act, as, t0, acc);
      if (t0 < n_tok) tail<N - 1>(n_tok - t0, p, nc, i0, act, as, t0, acc);
    }
    for (int t = 0; t < n_tok; ++t) y[t * ys] = D::kFactor * hsum_ps(acc[t]);
  }
};

// vec_dot_xn of a grid i-quant: IqDot passes of up to N tokens, or, for more tokens and a
// format without a delta term, IqPanel (passes of NPanel tokens) over slices of up to kMaxTok.
template <class D, class Ops, int N, int NPanel = N>
void iq_xn(int64_t n, const void* w, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  if constexpr (D::kDelta == Delta::None) {
    if (n_tok > N) {
      using P = IqPanel<D, Ops, NPanel>;
      const auto* a = static_cast<const uint8_t*>(va);
      for (; n_tok > 0; n_tok -= P::kMaxTok, a += P::kMaxTok * as, y += P::kMaxTok * ys)
        P::run(n, w, a, as, std::min(n_tok, P::kMaxTok), y, ys);
      return;
    }
  }
  xn<IqDot<D, Ops>, N>(n, w, va, as, n_tok, y, ys);
}

}  // namespace
}  // namespace strata::avx2
