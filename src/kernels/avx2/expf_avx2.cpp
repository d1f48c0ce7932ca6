// ggml's vectorized expf (its AVX2/FMA build: ggml_v_expf), eight lanes at once: the same
// operations, in the same order, as the one-lane reference ggml_vexpf in kernels/ops.cpp, so
// every lane's bits are the reference's (tests/kernels/test_expf_table.cpp).
#include <immintrin.h>

#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {
namespace {

__m256 vexpf8(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  // fma(-n, c, a) is fnmadd(n, c, a): the negation is exact.
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 c = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  const __m256 normal = _mm256_fmadd_ps(j, k, k);
  if (!_mm256_movemask_ps(c)) return normal;
  const __m256 n_le0 = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ);
  const __m256i g = _mm256_and_si256(_mm256_castps_si256(n_le0), _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 over = _mm256_blendv_ps(_mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1), _mm256_mul_ps(s1, s1), huge);
  return _mm256_blendv_ps(normal, over, c);
}

}  // namespace

void expf_f32(int64_t n, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, vexpf8(_mm256_loadu_ps(x + i)));
  if (i == n) return;
  alignas(32) float t[8] = {};  // the tail as one padded group: each lane is computed on its own
  for (int64_t k = i; k < n; ++k) t[k - i] = x[k];
  _mm256_store_ps(t, vexpf8(_mm256_load_ps(t)));
  for (int64_t k = i; k < n; ++k) y[k] = t[k - i];
}

}  // namespace strata::avx2
