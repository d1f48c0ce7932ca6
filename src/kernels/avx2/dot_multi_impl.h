#pragma once
// Multi-token dot products over 256-bit integer vectors, shared by the AVX2 table
// (dot_multi_avx2.cpp) and the AVX-VNNI table (kernels/avxvnni): templates over `Ops`, which
// supplies the two integer accumulation steps --
//   Ops::madd_acc(acc, p16, s16)  acc + madd(p16, s16)   (AVX2: vpmaddwd + vpaddd; VNNI: vpdpwssd)
//   Ops::dot_u8i8(u, s)           8 int32 sums of 4 u8 x s8 products (AVX2: vpmaddubsw +
//                                 vpmaddwd with ones; VNNI: vpdpbusd)
// Both give the same integers, so every table built on these gives the same floats.
// One weight row against up to N activation rows: each weight block is unpacked once (codes,
// scales, sign masks) and reused for every token; per token the integer products and the float
// accumulation are exactly those of the AVX2 single-token kernels in dot_kquants_avx2.cpp /
// dot_legacy_avx2.cpp: the same int32 value in every lane before the conversion (int32 adds are
// exact, so grouping them differently changes nothing), the same block scale product, the same
// fused multiply-add per block in block order, the same horizontal sums. Result: bit-identical
// to vec_dot for every token, whatever the batch (tests/kernels/test_dot_multi.cpp).
// Include only from translation units compiled with at least -mavx2 -mfma -mf16c; everything
// here has internal linkage, so each table's copy keeps its own instructions.
#include "kernels/avx2/avx2_common.h"

namespace strata::avx2 {
namespace {

// Activation block i of token t.
template <class B>
inline const B* act_block(const uint8_t* act, size_t stride, int t, int64_t i) {
  return reinterpret_cast<const B*>(act + static_cast<size_t>(t) * stride) + i;
}

// ---- 256-value super-blocks, Q8_K activations ---------------------------------------------

// Q4_K and Q5_K: 8 sub-blocks of 32 values with 6-bit scales and mins; Q5_K's codes take a
// fifth bit from qh (k4_codes).
// Per-token int32 accumulators. A lone token (gemv) would be bound by the latency of the chain
// through its accumulator (VNNI adds into it), so it gets two chains, taken in turn; integer
// sums are exact, so the split changes no result.
// The int32 vector the sums live in: 8 lanes here, 16 in the AVX-512 kernels (I32x16).
struct I32x8 {
  using V = __m256i;
  static V zero() { return _mm256_setzero_si256(); }
  static V add(V a, V b) { return _mm256_add_epi32(a, b); }
};
template <int N, class I = I32x8>
struct Sums {
  using V = typename I::V;
  static constexpr int kChains = N == 1 ? 2 : 1;
  V s[N][kChains];
  Sums() {
    for (auto& t : s)
      for (auto& c : t) c = I::zero();
  }
  V& operator()(int t, int chain) { return s[t][chain % kChains]; }
  V total(int t) const {
    if constexpr (kChains == 2) return I::add(s[t][0], s[t][1]);
    else return s[t][0];
  }
};

template <class Block, bool kFifthBit, class Ops>
struct K4 {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const auto* w = static_cast<const Block*>(vw);
    const int64_t nb = n / QK_K;
    __m256 acc[N];
    K4MinAcc<kFifthBit> acc_m[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(Block));
      const float wd = h2f(w[i].d), wdmin = h2f(w[i].dmin);
      const K4Scales ks = k4_scales(w[i].scales);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kFifthBit) qh = load256(w[i].qh);
      Sums<N> sum;
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        k4_codes<kFifthBit>(w[i].qs, qh, c, lo, hi);
        const __m256i slo = bcast_i16(ks.sc16, 2 * c), shi = bcast_i16(ks.sc16, 2 * c + 1);
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = act_block<block_q8_K>(act, as, t, i)->qs + 64 * c;
          sum(t, 0) = Ops::madd_acc(sum(t, 0), _mm256_maddubs_epi16(lo, load256(q8)), slo);
          sum(t, 1) = Ops::madd_acc(sum(t, 1), _mm256_maddubs_epi16(hi, load256(q8 + 32)), shi);
        }
      }
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = act_block<block_q8_K>(act, as, t, i);
        const float d = a->d * wd, dmin = a->d * wdmin;
        acc_m[t].add(dmin, k4_min_prod(ks.mins, a->bsums));
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum.total(t)), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]) - acc_m[t].total();
  }
};

template <class Ops>
struct Q6K {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const auto* w = static_cast<const block_q6_K*>(vw);
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m30 = _mm256_set1_epi8(0x30);
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(block_q6_K));
      const float wd = h2f(w[i].d);
      const __m128i sc8 = load128(w[i].scales);
      const __m256i sc_all = _mm256_cvtepi8_epi16(sc8);
      Sums<N> sum;
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(w[i].ql + 64 * h);
        const __m256i ql1 = load256(w[i].ql + 64 * h + 32);
        const __m256i qh = load256(w[i].qh + 32 * h);
        const __m256i sch = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
        const __m256i v0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        const __m256i v1 = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
        const __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        const __m256i s0 = scale_pair16(sch, 0), s1 = scale_pair16(sch, 1);
        const __m256i s2 = scale_pair16(sch, 2), s3 = scale_pair16(sch, 3);
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = act_block<block_q8_K>(act, as, t, i)->qs + 128 * h;
          sum(t, 0) = Ops::madd_acc(sum(t, 0), _mm256_maddubs_epi16(v0, load256(q8)), s0);
          sum(t, 1) = Ops::madd_acc(sum(t, 1), _mm256_maddubs_epi16(v1, load256(q8 + 32)), s1);
          sum(t, 0) = Ops::madd_acc(sum(t, 0), _mm256_maddubs_epi16(v2, load256(q8 + 64)), s2);
          sum(t, 1) = Ops::madd_acc(sum(t, 1), _mm256_maddubs_epi16(v3, load256(q8 + 96)), s3);
        }
      }
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = act_block<block_q8_K>(act, as, t, i);
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc_all, load256(a->bsums)), 5);
        const float d = a->d * wd;
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sum.total(t), off)), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]);
  }
};

template <class Ops>
struct IQ4XS {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const auto* w = static_cast<const block_iq4_xs*>(vw);
    const int64_t nb = n / QK_K;
    const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(block_iq4_xs));
      const float wd = h2f(w[i].d);
      const __m256i sc16 = _mm256_broadcastsi128_si256(unpack_iq4xs_scales(w[i].scales_l, w[i].scales_h));
      Sums<N> sum;
      for (int ib = 0; ib < 8; ib += 2) {
        const __m256i q0 = _mm256_shuffle_epi8(table, nibbles_split16(w[i].qs + 16 * ib));
        const __m256i q1 = _mm256_shuffle_epi8(table, nibbles_split16(w[i].qs + 16 * ib + 16));
        const __m256i u0 = _mm256_sign_epi8(q0, q0), u1 = _mm256_sign_epi8(q1, q1);
        const __m256i s0 = bcast_i16(sc16, ib), s1 = bcast_i16(sc16, ib + 1);
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = act_block<block_q8_K>(act, as, t, i)->qs + 32 * ib;
          sum(t, 0) = Ops::madd_acc(sum(t, 0), _mm256_maddubs_epi16(u0, _mm256_sign_epi8(load256(q8), q0)), s0);
          sum(t, 1) = Ops::madd_acc(sum(t, 1), _mm256_maddubs_epi16(u1, _mm256_sign_epi8(load256(q8 + 32), q1)), s1);
        }
      }
      for (int t = 0; t < N; ++t) {
        const float d = act_block<block_q8_K>(act, as, t, i)->d * wd;
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum.total(t)), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]);
  }
};

// ---- 32-value blocks with signed codes, Q8_0 activations ----------------------------------
// Every format below reduces to: signed codes q (no -128) and a float weight scale per block;
// per block, fmadd(set1(wscale * h2f(a.d)), cvt(dot_i8i8(q, a.qs)), acc).
// Decode(block) -> {q, wscale} is the only per-format part. Q8_0 and Q4_0 keep one
// accumulator, blocks in order (llama.cpp's AVX2 kernels); IQ4_NL and MXFP4 (Decode::kPairs)
// follow llama.cpp's two: even blocks in one, odd blocks in the other, summed before the
// horizontal sum, and a last unpaired block added after it as one fused multiply-add of its
// exact integer sum.

template <class Decode, class Ops>
struct Legacy {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    using W = typename Decode::Block;
    constexpr bool kPairs = Decode::kPairs;
    const auto* w = static_cast<const W*>(vw);
    const int64_t nb = n / 32;
    const int64_t nb_main = kPairs ? (nb & ~int64_t{1}) : nb;
    const Decode dec;
    __m256 acc[N], acc2[N];
    for (int t = 0; t < N; ++t) acc[t] = acc2[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb_main; ++i) {
      Decode::prefetch(w, i);
      float ws;
      const __m256i q = dec.codes(w[i], ws);
      const __m256i u = _mm256_sign_epi8(q, q);
      const bool second = kPairs && (i & 1);
      for (int t = 0; t < N; ++t) {
        const block_q8_0* a = act_block<block_q8_0>(act, as, t, i);
        const __m256 d = _mm256_set1_ps(ws * h2f(a->d));
        const __m256i p = Ops::dot_u8i8(u, _mm256_sign_epi8(load256(a->qs), q));
        if (second) acc2[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc2[t]);
        else acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(kPairs ? _mm256_add_ps(acc[t], acc2[t]) : acc[t]);
    if (nb_main < nb) {
      const int64_t i = nb - 1;
      float ws;
      const __m256i q = dec.codes(w[i], ws);
      const __m256i u = _mm256_sign_epi8(q, q);
      for (int t = 0; t < N; ++t) {
        const block_q8_0* a = act_block<block_q8_0>(act, as, t, i);
        const int32_t isum = hsum_epi32(Ops::dot_u8i8(u, _mm256_sign_epi8(load256(a->qs), q)));
        y[t * ys] = std::fma(ws * h2f(a->d), static_cast<float>(isum), y[t * ys]);
      }
    }
  }
};

struct DecQ8_0 {
  using Block = block_q8_0;
  static constexpr bool kPairs = false;
  static void prefetch(const Block* w, int64_t i) {
    if ((i & 1) == 0) {
      avx2::prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
      avx2::prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead + 64);
    }
  }
  __m256i codes(const Block& b, float& ws) const {
    ws = h2f(b.d);
    return load256(b.qs);
  }
};

struct DecQ4_0 {
  using Block = block_q4_0;
  static constexpr bool kPairs = false;
  const __m256i eight = _mm256_set1_epi8(8);
  static void prefetch(const Block* w, int64_t i) { avx2::prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead); }
  __m256i codes(const Block& b, float& ws) const {
    ws = h2f(b.d);
    return _mm256_sub_epi8(nibbles_split16(b.qs), eight);
  }
};

// IQ4_NL and MXFP4: nibbles through a 16-entry signed codebook, one scale per block.
inline float block_scale(const block_iq4_nl& b) { return h2f(b.d); }
inline float block_scale(const block_mxfp4& b) { return e8m0_half(b.e); }
template <class B, const int8_t* kValues>
struct DecTable {
  using Block = B;
  static constexpr bool kPairs = true;
  const __m256i table = _mm256_broadcastsi128_si256(load128(kValues));
  static void prefetch(const Block* w, int64_t i) { avx2::prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead); }
  __m256i codes(const Block& b, float& ws) const {
    ws = block_scale(b);
    return _mm256_shuffle_epi8(table, nibbles_split16(b.qs));
  }
};
using DecIq4nl = DecTable<block_iq4_nl, kIq4nlValues>;
using DecMxfp4 = DecTable<block_mxfp4, kMxfp4Values>;

// ---- dispatch: groups of NMax tokens, then one call for the remainder ----------------------

template <class K, int M>
inline void run_tail(int m, int64_t n, const void* w, const uint8_t* a, size_t as, float* y, int64_t ys) {
  if constexpr (M >= 1) {
    if (m == M) K::template run<M>(n, w, a, as, y, ys);
    else run_tail<K, M - 1>(m, n, w, a, as, y, ys);
  }
}

template <class K, int NMax>
void xn(int64_t n, const void* w, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  const auto* a = static_cast<const uint8_t*>(va);
  for (; n_tok >= NMax; n_tok -= NMax, a += NMax * as, y += NMax * ys) K::template run<NMax>(n, w, a, as, y, ys);
  if (n_tok > 0) run_tail<K, NMax - 1>(n_tok, n, w, a, as, y, ys);
}


// One token through a multi-token kernel: the single-token vec_dot of a table built on these.
template <class K>
float one(int64_t n, const void* w, const void* a) {
  float y;
  K::template run<1>(n, w, static_cast<const uint8_t*>(a), 0, &y, 1);
  return y;
}

}  // namespace
}  // namespace strata::avx2
