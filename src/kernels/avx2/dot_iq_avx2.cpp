// AVX2 dots of the grid i-quants against Q8_K (the kernels of dot_iq_impl.h with vpmaddwd +
// vpaddd), one token (vec_dot), several (vec_dot_xn) and rows x tokens (vec_dot_tile,
// dot_iq_tile.h; registered for the formats without a delta term).
#include "kernels/avx2/dot_iq_tile.h"
#include "kernels/avx2/kernels_avx2.h"

namespace strata::avx2 {
namespace {

struct Ops {
  static __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16)); }
};
constexpr int kTok = 4;   // tokens per pass of the multi-token kernels
constexpr int kRows = 2;  // weight rows per tile

}  // namespace

#define STRATA_IQ_KERNELS(name, Dec)                                                                              \
  float vec_dot_##name##_q8_K(int64_t n, const void* w, const void* a) { return one<IqDot<Dec, Ops>>(n, w, a); }   \
  void vec_dot_xn_##name##_q8_K(int64_t n, const void* w, const void* a, size_t as, int nt, float* y, int64_t ys) { \
    iq_xn<Dec, Ops, kTok>(n, w, a, as, nt, y, ys);                                                                 \
  }                                                                                                                 \
  void vec_dot_tile_##name##_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt,    \
                                  float* y, int64_t ys) {                                                          \
    iq_tile<Dec, Ops, kTok, kTok, kRows>(n, w, ws, nr, a, as, nt, y, ys);                                           \
  }
STRATA_IQ_KERNELS(iq2_xxs, Iq2xxs)
STRATA_IQ_KERNELS(iq2_xs, Iq2xs)
STRATA_IQ_KERNELS(iq2_s, Iq2s)
STRATA_IQ_KERNELS(iq3_xxs, Iq3xxs)
STRATA_IQ_KERNELS(iq3_s, Iq3s)
STRATA_IQ_KERNELS(iq1_s, Iq1s)
STRATA_IQ_KERNELS(iq1_m, Iq1m)
#undef STRATA_IQ_KERNELS

}  // namespace strata::avx2
