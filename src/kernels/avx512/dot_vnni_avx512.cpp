// AVX-512 VNNI dot products (compiled with -mavx512f/bw/vl/dq/vnni). vpdpbusd sums four
// u8 x s8 products into each int32 lane with no int16 saturation step. Written to be obviously
// correct: they mirror the AVX2 kernels with maddubs+madd replaced by vpdpbusd, on 256-bit
// (AVX512VL) vectors. NOT yet run on AVX-512 hardware (the development machine has none):
// the golden tests run them automatically where kernel_table(Isa::Avx512) is available.
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx512/kernels_avx512.h"

namespace strata::avx512 {

using namespace strata::avx2;  // hsum_*, h2f, load*, nibbles_split16, unpack_k4_scales

namespace {

// Signed x signed bytes via |x| and y with x's sign (x must not hold -128): 8 int32.
inline __m256i vnni_i8i8(__m256i x, __m256i y) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}
// Unsigned x signed bytes: 8 int32.
inline __m256i vnni_u8i8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

}  // namespace

float vec_dot_q8_0_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q8_0*>(vw);
  const auto* a = static_cast<const block_q8_0*>(va);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i p = vnni_i8i8(load256(w[i].qs), load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

float vec_dot_q4_0_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q4_0*>(vw);
  const auto* a = static_cast<const block_q8_0*>(va);
  const __m256i eight = _mm256_set1_epi8(8);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / QK4_0; ++i) {
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i q = _mm256_sub_epi8(nibbles_split16(w[i].qs), eight);  // -8..7
    const __m256i p = vnni_i8i8(q, load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

// Q4_K: each 32-byte slice of codes is one sub-block of 32 values with one scale.
float vec_dot_q4_K_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q4_K*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = a[i].d * h2f(w[i].d);
    const float dmin = a[i].d * h2f(w[i].dmin);
    __m128i sc8, mn8;
    unpack_k4_scales(w[i].scales, sc8, mn8);
    // mins: sum_j mn[j] * (bsums[2j] + bsums[2j+1])
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));
    const int32_t msum = hsum_epi32(_mm256_madd_epi16(mins, load256(a[i].bsums)));
    const __m256i scales = _mm256_cvtepu8_epi32(sc8);  // 8 int32, sub-blocks 0..7
    alignas(32) int32_t sc[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), scales);
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(w[i].qs + 32 * c);
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m256i plo = vnni_u8i8(lo, load256(a[i].qs + 64 * c));
      const __m256i phi = vnni_u8i8(hi, load256(a[i].qs + 64 * c + 32));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(plo, _mm256_set1_epi32(sc[2 * c])));
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(phi, _mm256_set1_epi32(sc[2 * c + 1])));
    }
    sum += d * static_cast<float>(hsum_epi32(acc)) - dmin * static_cast<float>(msum);
  }
  return sum;
}

// Q6_K: each 32-byte slice covers two 16-value sub-blocks (scales 2g, 2g+1); the code offset
// of 32 is applied through the activation's bsums.
float vec_dot_q6_K_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q6_K*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = a[i].d * h2f(w[i].d);
    const int8_t* sc = w[i].scales;
    const int32_t off = hsum_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(load128(sc)), load256(a[i].bsums)));
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(w[i].ql + 64 * h);
      const __m256i ql1 = load256(w[i].ql + 64 * h + 32);
      const __m256i qh = load256(w[i].qh + 32 * h);
      __m256i v[4];
      v[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      v[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      for (int k = 0; k < 4; ++k) {
        const int g = 4 * h + k;  // slice index: sub-blocks 2g (low lane) and 2g+1 (high lane)
        const __m256i p = vnni_u8i8(v[k], load256(a[i].qs + 32 * g));
        const __m256i s = _mm256_set_m128i(_mm_set1_epi32(sc[2 * g + 1]), _mm_set1_epi32(sc[2 * g]));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(p, s));
      }
    }
    sum += d * static_cast<float>(hsum_epi32(acc) - 32 * off);
  }
  return sum;
}

}  // namespace strata::avx512
