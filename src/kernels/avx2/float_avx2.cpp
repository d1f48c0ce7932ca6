// AVX2 float kernels: F16 / BF16 / F32 dot products (f32 accumulation with FMA), the
// activation converters to F16 / BF16, and the f32 vector ops of the kernel table.
#include <cmath>
#include "core/fp16.h"
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {

namespace {

inline __m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
inline __m256 load_bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
}

}  // namespace

float vec_dot_f16_f16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(x + i + kPrefetchAhead / 2);
    s0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), s0);
    s1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), load_f16x8(y + i + 8), s1);
    s2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), load_f16x8(y + i + 16), s2);
    s3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), load_f16x8(y + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), s0);
  float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += h2f(x[i]) * h2f(y[i]);
  return s;
}

// bf16 -> f32 is a 16-bit shift; interleaving with zeros (unpacklo/hi) does it for 16 values
// with two instructions, in a lane-permuted order that is the same for both operands, which a
// dot product does not care about.
float vec_dot_bf16_bf16(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint16_t*>(vw);
  const auto* y = static_cast<const uint16_t*>(va);
  const __m256i z = _mm256_setzero_si256();
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch(x + i + kPrefetchAhead / 2);
    const __m256i x0 = load256(x + i), y0 = load256(y + i);
    const __m256i x1 = load256(x + i + 16), y1 = load256(y + i + 16);
    s0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x0)),
                         _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, y0)), s0);
    s1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x0)),
                         _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, y0)), s1);
    s2 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x1)),
                         _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, y1)), s2);
    s3 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x1)),
                         _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, y1)), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), s0);
  float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; i < n; ++i) s += bf16_to_f32(x[i]) * bf16_to_f32(y[i]);
  return s;
}

// ggml's f32 dot body: 4 x 8 fused lanes over steps of 32, reduced (0+2)+(1+3) to one vector,
// then lo + hi; *i is left at the first element of the tail.
static inline __m128 dot_f32_body(int64_t n, const float* x, const float* y, int64_t* i_out) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), s3);
  }
  s0 = _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
  *i_out = i;
  return _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
}

// The table's dot_f32 (attention scores and values): ggml_vec_dot_f32 exactly as its AVX2
// build computes it (the body above, two horizontal adds, then the tail fused in float).
float dot_f32(int64_t n, const float* x, const float* y) {
  int64_t i;
  __m128 t = dot_f32_body(n, x, y, &i);
  t = _mm_hadd_ps(t, t);
  t = _mm_hadd_ps(t, t);
  float sum = _mm_cvtss_f32(t);
  for (; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

float dot_f32_x8(int64_t n, const float* x, const float* y) {
  __m256 s = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s);
  return hsum_ps(s);
}

// f32 weights in a matmul, one token: the same ggml_vec_dot_f32.
float vec_dot_f32_f32(int64_t n, const void* w, const void* a) {
  return dot_f32(n, static_cast<const float*>(w), static_cast<const float*>(a));
}

void axpy_f32(int64_t n, float a, const float* x, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// Same association as the scalar table's (8 fused lanes, then (0+4)+(2+6) + (1+5)+(3+7), tail fused).
float dot_f16_f32(int64_t n, const uint16_t* x, const float* y) {
  __m256 s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) s = _mm256_fmadd_ps(load_f16x8(x + i), _mm256_loadu_ps(y + i), s);
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // lanes l + (l+4)
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));                                          // (0+2), (1+3)
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  float r = _mm_cvtss_f32(t);
  for (; i < n; ++i) r = std::fma(f16_to_f32(x[i]), y[i], r);
  return r;
}

void axpy_f16(int64_t n, float a, const uint16_t* x, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_f16x8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, f16_to_f32(x[i]), y[i]);
}

namespace {
// M queries (M <= 8) against one f16 row: each query's accumulator, reduction and tail as in
// dot_f16_f32, the row's 8 values converted once for all of them.
template <int M>
void dot_f16_f32_m(int64_t n, const uint16_t* x, const float* const* y, float* out) {
  __m256 s[M];
  for (int q = 0; q < M; ++q) s[q] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xv = load_f16x8(x + i);
    for (int q = 0; q < M; ++q) s[q] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y[q] + i), s[q]);
  }
  for (int q = 0; q < M; ++q) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s[q]), _mm256_extractf128_ps(s[q], 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    float r = _mm_cvtss_f32(t);
    for (int64_t k = i; k < n; ++k) r = std::fma(f16_to_f32(x[k]), y[q][k], r);
    out[q] = r;
  }
}
}  // namespace

void dot_f16_f32_multi(int64_t n, const uint16_t* x, const float* const* y, int m, float* out) {
  using Fn = void (*)(int64_t, const uint16_t*, const float* const*, float*);
  static constexpr Fn kFns[9] = {nullptr, dot_f16_f32_m<1>, dot_f16_f32_m<2>, dot_f16_f32_m<3>, dot_f16_f32_m<4>,
                                 dot_f16_f32_m<5>, dot_f16_f32_m<6>, dot_f16_f32_m<7>, dot_f16_f32_m<8>};
  for (int q = 0; q < m; q += 8) kFns[std::min(8, m - q)](n, x, y + q, out + q);
}

namespace {
// Up to 8 queries' value sums over one 8-wide column of the value rows, accumulators in registers.
template <int M>
void vsum_f16_col(int64_t n_keys, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride, float* const* y, int64_t c) {
  __m256 acc[M];
  for (int q = 0; q < M; ++q) acc[q] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n_keys; ++j) {
    const __m256 xv = load_f16x8(v + j * v_stride + c);
    for (int q = 0; q < M; ++q)
      if (const float a = w[q * w_stride + j]; a != 0.0f) acc[q] = _mm256_fmadd_ps(_mm256_set1_ps(a), xv, acc[q]);
  }
  for (int q = 0; q < M; ++q) _mm256_storeu_ps(y[q] + c, acc[q]);
}
}  // namespace

void vsum_f16_multi(int64_t n_keys, int64_t dv, const uint16_t* v, int64_t v_stride, const float* w, int64_t w_stride, float* const* y, int m) {
  using Fn = void (*)(int64_t, const uint16_t*, int64_t, const float*, int64_t, float* const*, int64_t);
  static constexpr Fn kFns[9] = {nullptr, vsum_f16_col<1>, vsum_f16_col<2>, vsum_f16_col<3>, vsum_f16_col<4>,
                                 vsum_f16_col<5>, vsum_f16_col<6>, vsum_f16_col<7>, vsum_f16_col<8>};
  const int64_t d8 = dv / 8 * 8;
  for (int q0 = 0; q0 < m; q0 += 8) {
    const int mq = std::min(8, m - q0);
    for (int64_t c = 0; c < d8; c += 8) kFns[mq](n_keys, v, v_stride, w + q0 * w_stride, w_stride, y + q0, c);
  }
  for (int q = 0; q < m; ++q) {  // columns past the last 8: as axpy_f16's tail
    std::fill(y[q] + d8, y[q] + dv, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j)
      if (const float a = w[q * w_stride + j]; a != 0.0f)
        for (int64_t k = d8; k < dv; ++k) y[q][k] = std::fma(a, f16_to_f32(v[j * v_stride + k]), y[q][k]);
  }
}

void scale_f32(int64_t n, float a, float* y) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

void quantize_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

// Round to nearest even; NaN stays a quiet NaN (bit 6 of the result set), as fp16.h does.
void quantize_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i quiet = _mm256_set1_epi32(64);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i + 8 * h));
      const __m256i hi = _mm256_srli_epi32(u, 16);
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      r[h] = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, quiet), nan);
    }
    // packus works per 128-bit lane: restore the order of the 4 quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

}  // namespace strata::avx2
