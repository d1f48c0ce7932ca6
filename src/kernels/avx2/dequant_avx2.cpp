// AVX2 dequantization (weight rows -> f32) for the most used formats. Bit-exact with ggml's
// reference: the same float operations in the same order (no FMA contraction), checked
// against the golden <type>.f32 files.
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {

namespace {

// 8 int8 -> 8 floats.
inline __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// 32 int8 codes (in a 256-bit register) times a broadcast scale -> y[0..31].
inline void store_scaled32(__m256i q, __m256 d, float* y) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(y, _mm256_mul_ps(i8x8_to_ps(lo), d));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(lo, 8)), d));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(i8x8_to_ps(hi), d));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(hi, 8)), d));
}

}  // namespace

void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q8_0*>(src);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0)
    store_scaled32(load256(x[i].qs), _mm256_set1_ps(h2f(x[i].d)), y);
}

void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_0*>(src);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0)
    store_scaled32(_mm256_sub_epi8(nibbles_split16(x[i].qs), _mm256_set1_epi8(8)), _mm256_set1_ps(h2f(x[i].d)), y);
}

// y = (d * sc) * q - (dmin * m), per sub-block of 32.
void dequantize_q4_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_K*>(src);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d), dmin = h2f(x[i].dmin);
    __m128i sc8, mn8;
    unpack_k4_scales(x[i].scales, sc8, mn8);
    alignas(16) uint8_t sc[16], mn[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), sc8);
    _mm_store_si128(reinterpret_cast<__m128i*>(mn), mn8);
    for (int c = 0; c < 4; ++c, y += 64) {
      const __m256i q = load256(x[i].qs + 32 * c);
      const __m256i nib[2] = {_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
      for (int h = 0; h < 2; ++h) {
        const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc[2 * c + h]));
        const __m256 m1 = _mm256_set1_ps(dmin * static_cast<float>(mn[2 * c + h]));
        const __m128i lo = _mm256_castsi256_si128(nib[h]), hi = _mm256_extracti128_si256(nib[h], 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; ++k)
          _mm256_storeu_ps(y + 32 * h + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, i8x8_to_ps(parts[k])), m1));
      }
    }
  }
}

// y = (d * sc) * (q - 32), 16 sub-blocks of 16.
void dequantize_q6_K(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const block_q6_K*>(src);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), off = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const __m256i ql0 = load256(x[i].ql + 64 * h), ql1 = load256(x[i].ql + 64 * h + 32);
      const __m256i qh = load256(x[i].qh + 32 * h);
      __m256i v[4];
      v[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      v[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      for (int k = 0; k < 4; ++k) {
        const __m256i q = _mm256_sub_epi8(v[k], off);  // -32..31
        const int8_t* sc = x[i].scales + 8 * h + 2 * k;
        const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        const __m256 d0 = _mm256_set1_ps(d * static_cast<float>(sc[0]));
        const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc[1]));
        float* yk = y + 32 * k;
        _mm256_storeu_ps(yk, _mm256_mul_ps(d0, i8x8_to_ps(lo)));
        _mm256_storeu_ps(yk + 8, _mm256_mul_ps(d0, i8x8_to_ps(_mm_srli_si128(lo, 8))));
        _mm256_storeu_ps(yk + 16, _mm256_mul_ps(d1, i8x8_to_ps(hi)));
        _mm256_storeu_ps(yk + 24, _mm256_mul_ps(d1, i8x8_to_ps(_mm_srli_si128(hi, 8))));
      }
    }
  }
}

void dequantize_f16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(load128(x + i)));
  for (; i < n; ++i) y[i] = h2f(x[i]);
}

void dequantize_bf16(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(x + i)), 16));
  for (; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

}  // namespace strata::avx2
