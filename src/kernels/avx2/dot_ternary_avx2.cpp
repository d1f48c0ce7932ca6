// AVX2 dots of the ternary formats TQ1_0 and TQ2_0 against Q8_K, one token and several.
// Bit-identical to the scalar reference (kernels/scalar/quants_iq1_ternary.cpp), which is
// llama.cpp's AVX2 arithmetic: codes c = value + 1 (0..2, 3 for TQ2_0's unused code) times the
// activations with vpmaddubsw, summed in int16 (exact: at most 8 products of |c*a| <= 384 per
// lane, plus the activation sums), minus the activation's per-16 sums (so int16 lane j ends up
// with -bsums[j]), widened to int32 by vpmaddwd with ones, then one fused multiply-add per block
// with d_w * d_a into 8 float lanes and the horizontal sum.
#include "kernels/avx2/dot_multi_impl.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {
namespace {

// Base-3 digit of every byte: ((uint8)(b * m) * 3) >> 8, with the multiplier m (a power of 3)
// given per byte as int16 pairs: m_even for the even bytes, m_odd for the odd ones.
inline __m256i trits(__m256i b, __m256i m_even, __m256i m_odd) {
  const __m256i lo8 = _mm256_set1_epi16(0x00FF), hi8 = _mm256_set1_epi16(static_cast<int16_t>(0xFF00));
  const __m256i q_even = _mm256_and_si256(_mm256_mullo_epi16(b, m_even), lo8);  // (b*m) mod 256, even bytes
  const __m256i q_odd = _mm256_mullo_epi16(_mm256_and_si256(b, hi8), m_odd);    // same << 8, odd bytes
  const __m256i d_even = _mm256_mulhi_epu16(q_even, _mm256_set1_epi16(3 << 8));  // (q*3) >> 8
  const __m256i d_odd = _mm256_slli_epi16(_mm256_mulhi_epu16(q_odd, _mm256_set1_epi16(3)), 8);
  return _mm256_or_si256(d_even, d_odd);
}
inline __m256i pow3_16(int k) { return _mm256_set1_epi16(static_cast<int16_t>(k == 0 ? 1 : k == 1 ? 3 : k == 2 ? 9 : k == 3 ? 27 : 81)); }

// The 8 chunks of 32 codes of a TQ1_0 block: chunk c pairs with activations 32c..32c+31.
struct Tq1 {
  using Block = block_tq1_0;
  static void codes(const Block& b, __m256i (&c)[8]) {
    const __m256i q = load256(b.qs);
    for (int k = 0; k < 5; ++k) c[k] = trits(q, pow3_16(k), pow3_16(k));
    // qs[32..47] in both lanes: digits (0 | 1), (2 | 3), (4 | qh digits 0..3).
    const __m128i q2 = load128(b.qs + 32);
    const __m256i q22 = _mm256_set_m128i(q2, q2);
    auto lanes = [](int lo, int hi) { return _mm256_set_m128i(_mm256_castsi256_si128(pow3_16(hi)), _mm256_castsi256_si128(pow3_16(lo))); };
    c[5] = trits(q22, lanes(0, 1), lanes(0, 1));
    c[6] = trits(q22, lanes(2, 3), lanes(2, 3));
    // High lane of chunk 7: byte j = digit j/4 of qh[j%4] (values 240 + j).
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    const __m256i h = _mm256_set_m128i(_mm_set1_epi32(static_cast<int>(qh)), q2);
    const __m256i m7 = _mm256_set_epi16(27, 27, 9, 9, 3, 3, 1, 1, 81, 81, 81, 81, 81, 81, 81, 81);
    c[7] = trits(h, m7, m7);
  }
};

// TQ2_0: value 128h + 32l + m is bits 2l..2l+1 of qs[32h + m].
struct Tq2 {
  using Block = block_tq2_0;
  static void codes(const Block& b, __m256i (&c)[8]) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(b.qs + 32 * h);
      for (int l = 0; l < 4; ++l) c[4 * h + l] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3);
    }
  }
};

template <class D>
struct Ternary {
  template <int N>
  static void run(int64_t n, const void* vw, const uint8_t* act, size_t as, float* y, int64_t ys) {
    using Block = typename D::Block;
    const auto* w = static_cast<const Block*>(vw);
    const int64_t nb = n / QK_K;
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256 acc[N];
    for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      prefetch_block(w + i, sizeof(Block));
      __m256i c[8];
      D::codes(w[i], c);
      const float wd = h2f(w[i].d);
      for (int t = 0; t < N; ++t) {
        const block_q8_K* a = act_block<block_q8_K>(act, as, t, i);
        __m256i s0 = _mm256_sub_epi16(_mm256_setzero_si256(), load256(a->bsums)), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
          s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(c[k], load256(a->qs + 32 * k)));
          s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(c[k + 1], load256(a->qs + 32 * k + 32)));
        }
        const __m256i s = _mm256_madd_epi16(_mm256_add_epi16(s0, s1), ones16);
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(wd * a->d), _mm256_cvtepi32_ps(s), acc[t]);
      }
    }
    for (int t = 0; t < N; ++t) y[t * ys] = hsum_ps(acc[t]);
  }
};

}  // namespace

float vec_dot_tq1_0_q8_K(int64_t n, const void* w, const void* a) { return one<Ternary<Tq1>>(n, w, a); }
float vec_dot_tq2_0_q8_K(int64_t n, const void* w, const void* a) { return one<Ternary<Tq2>>(n, w, a); }
void vec_dot_xn_tq1_0_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Ternary<Tq1>, 4>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_tq2_0_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Ternary<Tq2>, 4>(n, w, a, as, nt, y, ys);
}

}  // namespace strata::avx2
