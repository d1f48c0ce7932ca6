// AVX2 multi-token dot products (KernelTable::vec_dot_xn): the kernels of dot_multi_impl.h
// with the integer accumulation done by vpmaddubsw / vpmaddwd / vpaddd.
#include "kernels/avx2/dot_multi_impl.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {

namespace {

struct Ops {
  static __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16));
  }
  static __m256i dot_u8i8(__m256i u, __m256i s) { return avx2::dot_u8i8(u, s); }
};

}  // namespace

void vec_dot_xn_q4_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<K4<block_q4_K, false, Ops>, 8>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_q5_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<K4<block_q5_K, true, Ops>, 4>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_q6_K_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Q6K<Ops>, 4>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_iq4_xs_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<IQ4XS<Ops>, 4>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_q8_0_q8_0(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Legacy<DecQ8_0, Ops>, 8>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_q4_0_q8_0(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Legacy<DecQ4_0, Ops>, 4>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_iq4_nl_q8_0(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Legacy<DecIq4nl, Ops>, 4>(n, w, a, as, nt, y, ys);
}
void vec_dot_xn_mxfp4_q8_0(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) {
  xn<Legacy<DecMxfp4, Ops>, 4>(n, w, a, as, nt, y, ys);
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a) { return one<Legacy<DecIq4nl, Ops>>(n, w, a); }
float vec_dot_mxfp4_q8_0(int64_t n, const void* w, const void* a) { return one<Legacy<DecMxfp4, Ops>>(n, w, a); }

}  // namespace strata::avx2
