// AVX2 dot products of the 256-value super-block formats (Q2_K..Q6_K, IQ4_XS) with Q8_K
// activations. Each super-block is summed exactly in int32 (maddubs gives int16 pair sums,
// madd with the sub-block scale widens to int32), then scaled once in float. Min / offset
// terms use the activation's per-16 sums (bsums).
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {

namespace {

// Q3_K: 16 6-bit scales (offset 32). Low 4 bits: nibbles of bytes 0..7 (low nibbles for
// scales 0..7, high for 8..15); top 2 bits: bits 2*(j/4)..+1 of byte 8 + j%4.
inline __m128i unpack_q3_scales(const uint8_t* s) {
  uint64_t lo8;
  uint32_t hi4;
  std::memcpy(&lo8, s, 8);
  std::memcpy(&hi4, s + 8, 4);
  const uint64_t low_a = lo8 & 0x0F0F0F0F0F0F0F0FULL;          // scales 0..7, low bits
  const uint64_t low_b = (lo8 >> 4) & 0x0F0F0F0F0F0F0F0FULL;   // scales 8..15, low bits
  // top bits: scales 4g..4g+3 take bits 2g..2g+1 of bytes 8..11.
  const uint64_t h = hi4;
  const uint64_t top_a = ((h & 0x03030303u) | (((h >> 2) & 0x03030303u) << 32)) << 4;
  const uint64_t top_b = (((h >> 4) & 0x03030303u) | (((h >> 6) & 0x03030303u) << 32)) << 4;
  const __m128i v = _mm_set_epi64x(static_cast<int64_t>(low_b | top_b), static_cast<int64_t>(low_a | top_a));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

}  // namespace

// Q2_K: 16 sub-blocks of 16 values; 4-bit scale and 4-bit min per sub-block; 2-bit codes.
float vec_dot_q2_K_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q2_K*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const int64_t nb = n / QK_K;
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_block(w + i, sizeof(block_q2_K));
    const float d = a[i].d * h2f(w[i].d);
    const float dmin = a[i].d * h2f(w[i].dmin);
    const __m128i sc_raw = load128(w[i].scales);
    const __m128i sc = _mm_and_si128(sc_raw, m4);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_raw, 4), m4));
    // llama.cpp's order: the block's min term (8 lanes, -dmin) first, then its scale term.
    const __m256i mprod = _mm256_madd_epi16(mins, load256(a[i].bsums));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(-dmin), _mm256_cvtepi32_ps(mprod), acc);
    const __m256i sc_lo = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc));
    const __m256i sc_hi = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(sc, 8)));
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(w[i].qs + 32 * h);
      const __m256i sch = h ? sc_hi : sc_lo;
      const int8_t* q8 = a[i].qs + 128 * h;
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const __m256i p = _mm256_maddubs_epi16(v, load256(q8 + 32 * j));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, scale_pair16(sch, j)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return hsum_ps(acc);
}

// Q3_K: 16 sub-blocks of 16 values, signed 6-bit scales (offset 32), 2 low bits + 1 high bit;
// the value is low - 4 when the high bit is clear.
float vec_dot_q3_K_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q3_K*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const int64_t nb = n / QK_K;
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i four = _mm256_set1_epi8(4);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_block(w + i, sizeof(block_q3_K));
    const float d = a[i].d * h2f(w[i].d);
    const __m128i sc8 = unpack_q3_scales(w[i].scales);
    const __m256i sc_lo = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
    const __m256i sc_hi = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    const __m256i hm = load256(w[i].hmask);
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(w[i].qs + 32 * h);
      const __m256i sch = h ? sc_hi : sc_lo;
      const int8_t* q8 = a[i].qs + 128 * h;
      for (int j = 0; j < 4; ++j) {
        const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + j)));
        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
        const __m256i neg = _mm256_andnot_si256(set, four);
        const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const __m256i y = load256(q8 + 32 * j);
        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(v, y), _mm256_maddubs_epi16(neg, y));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, scale_pair16(sch, j)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return hsum_ps(acc);
}

namespace {

// Q4_K and Q5_K: 8 sub-blocks of 32 values, 6-bit scale and min each, 4-bit codes; Q5_K adds
// one high bit per value (qh bit 2c for the low nibbles of chunk c, 2c+1 for the high nibbles).
template <class Block, bool kFifthBit>
float dot_k4(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const Block*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const int64_t nb = n / QK_K;
  __m256 acc = _mm256_setzero_ps();
  K4MinAcc<kFifthBit> acc_m;
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_block(w + i, sizeof(Block));
    const float d = a[i].d * h2f(w[i].d);
    const float dmin = a[i].d * h2f(w[i].dmin);
    const K4Scales ks = k4_scales(w[i].scales);
    acc_m.add(dmin, k4_min_prod(ks.mins, a[i].bsums));
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load256(w[i].qh);
    __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      k4_codes<kFifthBit>(w[i].qs, qh, c, lo, hi);
      const __m256i plo = _mm256_maddubs_epi16(lo, load256(a[i].qs + 64 * c));
      const __m256i phi = _mm256_maddubs_epi16(hi, load256(a[i].qs + 64 * c + 32));
      sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(plo, bcast_i16(ks.sc16, 2 * c)));
      sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(phi, bcast_i16(ks.sc16, 2 * c + 1)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), acc);
  }
  return hsum_ps(acc) - acc_m.total();
}

}  // namespace

float vec_dot_q4_K_q8_K(int64_t n, const void* w, const void* a) { return dot_k4<block_q4_K, false>(n, w, a); }
float vec_dot_q5_K_q8_K(int64_t n, const void* w, const void* a) { return dot_k4<block_q5_K, true>(n, w, a); }

// Q6_K: 16 sub-blocks of 16 values, signed 8-bit scales, 6-bit codes with offset 32
// (the offset is applied through the activation's bsums).
float vec_dot_q6_K_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q6_K*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const int64_t nb = n / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_block(w + i, sizeof(block_q6_K));
    const float d = a[i].d * h2f(w[i].d);
    const __m128i sc8 = load128(w[i].scales);
    const __m256i sc_all = _mm256_cvtepi8_epi16(sc8);
    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(sc_all, load256(a[i].bsums)), 5);
    const __m256i sc_lo = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
    const __m256i sc_hi = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    __m256i sum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[i].ql + 64 * h);
      const __m256i ql1 = load256(w[i].ql + 64 * h + 32);
      const __m256i qh = load256(w[i].qh + 32 * h);
      const __m256i sch = h ? sc_hi : sc_lo;
      const int8_t* q8 = a[i].qs + 128 * h;
      const __m256i v0 = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      const __m256i v1 = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      const __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(v0, load256(q8)), scale_pair16(sch, 0)));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(v1, load256(q8 + 32)), scale_pair16(sch, 1)));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(v2, load256(q8 + 64)), scale_pair16(sch, 2)));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(v3, load256(q8 + 96)), scale_pair16(sch, 3)));
    }
    sum = _mm256_sub_epi32(sum, off);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum), acc);
  }
  return hsum_ps(acc);
}

// IQ4_XS: 8 sub-blocks of 32 values, 6-bit scales (offset 32), non-linear 4-bit codebook.
float vec_dot_iq4_xs_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_iq4_xs*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const int64_t nb = n / QK_K;
  const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    prefetch_block(w + i, sizeof(block_iq4_xs));
    const float d = a[i].d * h2f(w[i].d);
    const __m256i sc16 = _mm256_broadcastsi128_si256(unpack_iq4xs_scales(w[i].scales_l, w[i].scales_h));
    __m256i sum0 = _mm256_setzero_si256(), sum1 = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib += 2) {
      const __m256i q0 = _mm256_shuffle_epi8(table, nibbles_split16(w[i].qs + 16 * ib));
      const __m256i q1 = _mm256_shuffle_epi8(table, nibbles_split16(w[i].qs + 16 * ib + 16));
      const __m256i p0 = pairs_i8i8(q0, load256(a[i].qs + 32 * ib));
      const __m256i p1 = pairs_i8i8(q1, load256(a[i].qs + 32 * ib + 32));
      sum0 = _mm256_add_epi32(sum0, _mm256_madd_epi16(p0, bcast_i16(sc16, ib)));
      sum1 = _mm256_add_epi32(sum1, _mm256_madd_epi16(p1, bcast_i16(sc16, ib + 1)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), acc);
  }
  return hsum_ps(acc);
}

}  // namespace strata::avx2
