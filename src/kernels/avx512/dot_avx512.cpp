// AVX-512 (F/BW/VL/DQ + VNNI) dot products of the 256-value super-block formats, one token
// (vec_dot = run<1>) or several (vec_dot_xn). The integer work runs on 512-bit registers: two
// 32-value pieces side by side (the two nibble halves of a K-quant chunk, two sub-blocks),
// vpdpwssd folding the per-16 scale product into the accumulation. (The 32-value block formats
// take the 256-bit VNNI kernels: there the float part per block dominates, and pairing blocks
// in 512-bit registers measured no faster.) Every int32 lane ends up holding exactly the integer the AVX2 kernel
// holds (integer sums are exact, only their grouping changes), and the float part -- the
// conversion, the block scale product, one fused multiply-add per block in block order on
// 8 lanes, the horizontal sums -- is the AVX2 one. So each result is bit-identical to the AVX2
// table's, hence to llama.cpp's CPU kernels, on every machine (tests/kernels/test_avx512.cpp).
// GCC 12's AVX-512 headers trip -Wuninitialized on their own undefined-value placeholders in
// inserts, extracts and broadcasts (GCC bug 105593, fixed in 13): silence it for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/avx2/dot_multi_impl.h"  // act_block, xn, one
#include "kernels/avx512/kernels_avx512.h"

namespace strata::avx512 {

using namespace strata::avx2;  // h2f, hsum_ps, load256/128, unpack_*_scales, prefetch, tables,
                               // and the token dispatch (xn, one, act_block)

namespace {

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
// Sums (dot_multi_impl.h) on 512-bit registers: two chains for a lone token.
struct I32x16 {
  using V = __m512i;
  static V zero() { return _mm512_setzero_si512(); }
  static V add(V a, V b) { return _mm512_add_epi32(a, b); }
};
template <int N>
using SumsW = Sums<N, I32x16>;
// a in the low 256 bits, b in the high 256 bits.
inline __m512i join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
// The 8 lane-wise sums of the two halves: the AVX2 kernel's register for the same work.
inline __m256i fold(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
// A per-16-bit-lane shift count: lo in the low half, hi in the high half.
inline __m512i halves16(int16_t lo, int16_t hi) { return join(_mm256_set1_epi16(lo), _mm256_set1_epi16(hi)); }
// Selects int16 element base + e / group for element e (0..31): broadcasts scales per piece.
inline __m512i scale_index(int base, int group) {
  alignas(64) int16_t idx[32];
  for (int e = 0; e < 32; ++e) idx[e] = static_cast<int16_t>(base + e / group);
  return _mm512_load_si512(idx);
}
// 32 packed nibble bytes (16 of block/sub-block A, then 16 of B) -> 64 codes 0..15 in block
// order: A's low nibbles, A's high nibbles, B's low, B's high (one 128-bit quarter each).
inline __m512i nibbles_split32(__m256i x) {
  const __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(x));
  const __m512i shift = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_setzero_si512(), _mm_set1_epi16(4), 1),
                                           _mm_set1_epi16(4), 3);
  return _mm512_and_si512(_mm512_srlv_epi16(z, shift), _mm512_set1_epi8(0x0F));
}
// y with the sign of x (x < 0 -> -y): multiplied by |x| it gives the signed product. Where
// x == 0 AVX2's sign_epi8 zeroes y instead; |x| = 0 there, so every product is the same.
inline __m512i apply_sign(__m512i y, __mmask64 x_neg) {
  return _mm512_mask_sub_epi8(y, x_neg, _mm512_setzero_si512(), y);
}

// ---- 256-value super-blocks, Q8_K activations (W: the wide versions of dot_multi_impl.h's) ----

// Q4_K / Q5_K: chunk c (32 bytes of codes) holds sub-block 2c in its low nibbles and 2c + 1 in
// its high nibbles; with both in one register the 64 activations of the chunk are one load.
template <class Block, bool kFifthBit>
struct K4W {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const auto* w = static_cast<const Block*>(vw);
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i shift = halves16(0, 4);
    __m512i sidx[4], bit[4];
    for (int c = 0; c < 4; ++c) {
      sidx[c] = scale_index(2 * c, 16);
      bit[c] = join(_mm256_set1_epi8(static_cast<char>(1 << (2 * c))), _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))));
    }
    __m256 acc[N];
    K4MinAcc<kFifthBit> acc_m[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(Block));
      const float wd = h2f(w[i].d), wdmin = h2f(w[i].dmin);
      __m128i sc8, mn8;
      unpack_k4_scales(w[i].scales, sc8, mn8);
      const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sc8));
      const __m128i mins = _mm_cvtepu8_epi16(mn8);
      __m512i qh = _mm512_setzero_si512();
      if constexpr (kFifthBit) qh = _mm512_broadcast_i64x4(load256(w[i].qh));
      SumsW<N> sum;
      for (int c = 0; c < 4; ++c) {
        const __m512i q = _mm512_broadcast_i64x4(load256(w[i].qs + 32 * c));
        __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);
        if constexpr (kFifthBit)
          codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(qh, bit[c]), codes, _mm512_set1_epi8(16));
        const __m512i scale = _mm512_permutexvar_epi16(sidx[c], sc16);
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = act_block<block_q8_K>(act, as, t, i)->qs + 64 * c;
          sum(t, c) = _mm512_dpwssd_epi32(sum(t, c), _mm512_maddubs_epi16(codes, load512(q8)), scale);
        }
      }
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = act_block<block_q8_K>(act, as, t, i);
        const float d = a->d * wd, dmin = a->d * wdmin;
        acc_m[t].add(dmin, k4_min_prod(mins, a->bsums));
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold(sum.total(t))), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]) - acc_m[t].total();
  }
};

// Q6_K: per half h, 64 bytes of low bits (ql) and 32 of high bits (qh) give four 32-byte code
// slices; two slices per register, their four 16-value sub-blocks one scale per quarter.
struct Q6KW {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const auto* w = static_cast<const block_q6_K*>(vw);
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    const __m512i sh_left = halves16(4, 2), sh_right = halves16(0, 2);
    const __m512i sidx[4] = {scale_index(0, 8), scale_index(4, 8), scale_index(8, 8), scale_index(12, 8)};
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(block_q6_K));
      const float wd = h2f(w[i].d);
      const __m256i sc_all = _mm256_cvtepi8_epi16(load128(w[i].scales));  // 16 int16
      const __m512i sc512 = _mm512_castsi256_si512(sc_all);
      SumsW<N> sum;
      for (int h = 0; h < 2; ++h) {
        const __m512i ql = load512(w[i].ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(load256(w[i].qh + 32 * h));
        // slices 0|1: low nibbles of ql with qh bits 0-1 | 2-3; slices 2|3: high nibbles, bits 4-5 | 6-7
        const __m512i v01 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh_left), m30));
        const __m512i v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                            _mm512_and_si512(_mm512_srlv_epi16(qh, sh_right), m30));
        const __m512i s01 = _mm512_permutexvar_epi16(sidx[2 * h], sc512);
        const __m512i s23 = _mm512_permutexvar_epi16(sidx[2 * h + 1], sc512);
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = act_block<block_q8_K>(act, as, t, i)->qs + 128 * h;
          sum(t, 0) = _mm512_dpwssd_epi32(sum(t, 0), _mm512_maddubs_epi16(v01, load512(q8)), s01);
          sum(t, 1) = _mm512_dpwssd_epi32(sum(t, 1), _mm512_maddubs_epi16(v23, load512(q8 + 64)), s23);
        }
      }
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = act_block<block_q8_K>(act, as, t, i);
        const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc_all, load256(a->bsums)), 5);
        const float d = a->d * wd;
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(fold(sum.total(t)), off)), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]);
  }
};

// IQ4_XS: two 32-value sub-blocks per register, codes through the 16-entry codebook.
struct IQ4XSW {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    const auto* w = static_cast<const block_iq4_xs*>(vw);
    const int64_t nb = n / QK_K;
    const __m512i table = _mm512_broadcast_i32x4(load128(kIq4nlValues));
    const __m512i sidx[4] = {scale_index(0, 16), scale_index(2, 16), scale_index(4, 16), scale_index(6, 16)};
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(block_iq4_xs));
      const float wd = h2f(w[i].d);
      const __m512i sc = _mm512_castsi128_si512(unpack_iq4xs_scales(w[i].scales_l, w[i].scales_h));
      SumsW<N> sum;
      for (int p = 0; p < 4; ++p) {  // sub-blocks 2p and 2p + 1
        const __m512i q = _mm512_shuffle_epi8(table, nibbles_split32(load256(w[i].qs + 32 * p)));
        const __m512i u = _mm512_abs_epi8(q);
        const __mmask64 neg = _mm512_movepi8_mask(q);
        const __m512i scale = _mm512_permutexvar_epi16(sidx[p], sc);
        for (int t = 0; t < N; ++t) {
          const int8_t* q8 = act_block<block_q8_K>(act, as, t, i)->qs + 64 * p;
          sum(t, p) = _mm512_dpwssd_epi32(sum(t, p), _mm512_maddubs_epi16(u, apply_sign(load512(q8), neg)), scale);
        }
      }
      for (int t = 0; t < N; ++t) {
        const float d = act_block<block_q8_K>(act, as, t, i)->d * wd;
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold(sum.total(t))), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]);
  }
};

using Q4K = K4W<block_q4_K, false>;
using Q5K = K4W<block_q5_K, true>;

}  // namespace

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) { return one<Q4K>(n, w, a); }
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) { return one<Q5K>(n, w, a); }
float vec_dot_q6_K_q8_K(int64_t n, const void* w, const void* a) { return one<Q6KW>(n, w, a); }
float vec_dot_iq4_xs_q8_K(int64_t n, const void* w, const void* a) { return one<IQ4XSW>(n, w, a); }

void vec_dot_xn_q4_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Q4K, 8>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_q5_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Q5K, 8>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_q6_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Q6KW, 8>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_iq4_xs_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<IQ4XSW, 8>(n, w, a, as, nt, y, ys);
}

}  // namespace strata::avx512
