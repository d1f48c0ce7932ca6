// AVX2 dot products of the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)
// with Q8_0 / Q8_1 activations. Integer products per block (maddubs + madd), float
// accumulation across blocks with the product of the two block scales.
#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {

float vec_dot_q4_0_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q4_0*>(vw);
  const auto* a = static_cast<const block_q8_0*>(va);
  const int64_t nb = n / QK4_0;
  __m256 acc = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < nb; ++i) {
    prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i q = _mm256_sub_epi8(nibbles_split16(w[i].qs), eight);
    const __m256i p = dot_i8i8(q, load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

float vec_dot_q4_1_q8_1(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q4_1*>(vw);
  const auto* a = static_cast<const block_q8_1*>(va);
  const int64_t nb = n / QK4_1;
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
    mins += h2f(w[i].m) * h2f(a[i].s);
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i p = dot_u8i8(nibbles_split16(w[i].qs), load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc) + mins;
}

float vec_dot_q5_0_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q5_0*>(vw);
  const auto* a = static_cast<const block_q8_0*>(va);
  const int64_t nb = n / QK5_0;
  __m256 acc = _mm256_setzero_ps();
  const __m256i f0 = _mm256_set1_epi8(static_cast<char>(0xF0));
  for (int64_t i = 0; i < nb; ++i) {
    prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    // value = (nibble | bit << 4) - 16: without the bit, nibble | 0xF0 is nibble - 16 as int8.
    const __m256i hb = _mm256_andnot_si256(bits_to_bytes32(qh), f0);
    const __m256i q = _mm256_or_si256(nibbles_split16(w[i].qs), hb);
    const __m256i p = dot_i8i8(q, load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

float vec_dot_q5_1_q8_1(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q5_1*>(vw);
  const auto* a = static_cast<const block_q8_1*>(va);
  const int64_t nb = n / QK5_1;
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  const __m256i b4 = _mm256_set1_epi8(0x10);
  for (int64_t i = 0; i < nb; ++i) {
    prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
    mins += h2f(w[i].m) * h2f(a[i].s);
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    const __m256i q = _mm256_or_si256(nibbles_split16(w[i].qs), _mm256_and_si256(bits_to_bytes32(qh), b4));
    const __m256i p = dot_u8i8(q, load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc) + mins;
}

// Q8_0 is the densest legacy format (34 B / 32 values) and the one most likely to be
// bandwidth-bound: prefetch ahead. One accumulator, blocks in order: the same float
// association as ggml's AVX2 kernel, so Q8_0 models give llama.cpp's logits bit for bit
// (two accumulators were measured no faster at DRAM bandwidth and change the rounding).
float vec_dot_q8_0_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const block_q8_0*>(vw);
  const auto* a = static_cast<const block_q8_0*>(va);
  const int64_t nb = n / QK8_0;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    if ((i & 1) == 0) {
      prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead);
      prefetch(reinterpret_cast<const char*>(w + i) + kPrefetchAhead + 64);
    }
    const __m256 d = _mm256_set1_ps(h2f(w[i].d) * h2f(a[i].d));
    const __m256i p = dot_i8i8(load256(w[i].qs), load256(a[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc);
}

// IQ4_NL and MXFP4: dot_multi_avx2.cpp (llama.cpp's two accumulators, dot_multi_impl.h).

}  // namespace strata::avx2
