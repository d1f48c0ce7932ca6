// AVX2 activation quantizers: f32 rows -> Q8_0 / Q8_1 / Q8_K (the vec_dot_type of the integer
// kernels). Rounding is to nearest even (cvtps_epi32 under the default MXCSR), which is what
// ggml's CPU backend produces; the golden test compares the bytes.
#include <cmath>

#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {

namespace {

// |v| (no namespace-scope vector constants: their initializers would run on any CPU).
inline __m256 abs_ps(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }

// 32 floats -> 32 int8 (x * id rounded to nearest even); returns the int32 sum of the codes.
inline int32_t quantize32(const float* x, float id, int8_t* q) {
  const __m256 m = _mm256_set1_ps(id);
  __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), m));
  __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), m));
  __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), m));
  __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), m));
  const int32_t sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
  // packs works within 128-bit lanes; the final permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(i0, i1);
  const __m256i p16b = _mm256_packs_epi32(i2, i3);
  const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(p8, order));
  return sum;
}

inline float absmax32(const float* x) {
  __m256 m = abs_ps(_mm256_loadu_ps(x));
  m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 8)));
  m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 16)));
  m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + 24)));
  return hmax_ps(m);
}

}  // namespace

void quantize_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_0*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    const float amax = absmax32(x);
    const float d = amax / 127.0f;
    y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    quantize32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
  }
}

void quantize_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_1*>(vy);
  for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
    const float amax = absmax32(x);
    const float d = amax / 127.0f;
    y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const int32_t sum = quantize32(x, amax != 0.0f ? 127.0f / amax : 0.0f, y[i].qs);
    y[i].s = _cvtss_sh(d * static_cast<float>(sum), _MM_FROUND_TO_NEAREST_INT);
  }
}

// Q8_K: the scale comes from the signed value of largest magnitude (the first one on ties),
// so that value maps to exactly -127; codes are clamped to [-127, 127] (a product that is not
// finite, e.g. a block whose largest magnitude is below 127 / FLT_MAX, would pack to -128; the
// integer kernels rely on -128 never occurring: the 512-bit tiles' a + 128 form).
void quantize_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
    const float amax = hmax_ps(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(block_q8_K));
      continue;
    }
    float max = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; j += 32) quantize32(x + j, iscale, y[i].qs + j);
    const __m256i cap = _mm256_set1_epi8(127), floor = _mm256_set1_epi8(-127);
    for (int j = 0; j < QK_K; j += 32) {
      auto* p = reinterpret_cast<__m256i*>(y[i].qs + j);
      _mm256_storeu_si256(p, _mm256_max_epi8(_mm256_min_epi8(_mm256_loadu_si256(p), cap), floor));
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const __m128i q = load128(y[i].qs + 16 * j);
      const __m256i w = _mm256_cvtepi8_epi16(q);
      y[i].bsums[j] = static_cast<int16_t>(hsum_epi32(_mm256_madd_epi16(w, _mm256_set1_epi16(1))));
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace strata::avx2
