// AVX-VNNI kernels: the multi-token dots of dot_multi_impl.h with the integer accumulation done
// by vpdpwssd / vpdpbusd on 256-bit vectors (Alder Lake and later client cores, Zen 5), and the
// single-token dots as their one-token case. Their integers equal AVX2's, so their floats do.
// The grid i-quants (dot_iq_impl.h) likewise, with vpdpwssd for their vpmaddwd + vpaddd.
// Compiled twice: with -mavxvnni (VEX encoding, namespace avxvnni) and, from
// dot_avxvnni_evex.cpp, with -mavx512vl -mavx512vnni (EVEX encoding of the same instructions,
// namespace avxvnni_evex) for AVX-512 machines, where the same 256-bit kernels then run too.
#include "kernels/avx2/dot_iq_tile.h"
#include "kernels/avx2/dot_multi_impl.h"
#include "kernels/avxvnni/kernels_avxvnni.h"
#include "kernels/kernel_table.h"

#ifdef STRATA_VNNI_EVEX
#define STRATA_VNNI_NS avxvnni_evex
#define STRATA_DPWSSD _mm256_dpwssd_epi32
#define STRATA_DPBUSD _mm256_dpbusd_epi32
#define STRATA_IQ_PANEL_TOK 8  // 32 vector registers: passes of 8 tokens over a decoded panel
#define STRATA_IQ_TILE_ROWS 2  // ... for 2 rows at a time (16 accumulators)
#else
#define STRATA_VNNI_NS avxvnni
#define STRATA_DPWSSD _mm256_dpwssd_avx_epi32
#define STRATA_DPBUSD _mm256_dpbusd_avx_epi32
#define STRATA_IQ_PANEL_TOK 4
#define STRATA_IQ_TILE_ROWS 2
#endif

namespace strata::STRATA_VNNI_NS {

namespace {

using namespace strata::avx2;

struct Ops {
  static __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) { return STRATA_DPWSSD(acc, p16, s16); }
  static __m256i dot_u8i8(__m256i u, __m256i s) { return STRATA_DPBUSD(_mm256_setzero_si256(), u, s); }
};

using Q4K = K4<block_q4_K, false, Ops>;
using Q5K = K4<block_q5_K, true, Ops>;
using Q6 = Q6K<Ops>;
using IQ4 = IQ4XS<Ops>;
using LQ8_0 = Legacy<DecQ8_0, Ops>;
using LQ4_0 = Legacy<DecQ4_0, Ops>;
using LIq4nl = Legacy<DecIq4nl, Ops>;
using LMxfp4 = Legacy<DecMxfp4, Ops>;

template <class K, int NMax>
void set(KernelTable& t, GgmlType w) {
  t.vec_dot[static_cast<uint32_t>(w)] = one<K>;
  t.vec_dot_xn[static_cast<uint32_t>(w)] = xn<K, NMax>;
}

template <class D>
void set_iq(KernelTable& t, GgmlType w) {
  t.vec_dot[static_cast<uint32_t>(w)] = one<IqDot<D, Ops>>;
  t.vec_dot_xn[static_cast<uint32_t>(w)] = iq_xn<D, Ops, 4, STRATA_IQ_PANEL_TOK>;
  if constexpr (D::kDelta == Delta::None)
    t.vec_dot_tile[static_cast<uint32_t>(w)] = iq_tile<D, Ops, 4, STRATA_IQ_PANEL_TOK, STRATA_IQ_TILE_ROWS>;
}

}  // namespace

void fill_kernels(KernelTable& t) {
  set<Q4K, 8>(t, GgmlType::Q4_K);
  set<Q5K, 4>(t, GgmlType::Q5_K);
  set<Q6, 4>(t, GgmlType::Q6_K);
  set<IQ4, 4>(t, GgmlType::IQ4_XS);
  set<LQ8_0, 8>(t, GgmlType::Q8_0);
  set<LQ4_0, 4>(t, GgmlType::Q4_0);
  set<LIq4nl, 4>(t, GgmlType::IQ4_NL);
  set<LMxfp4, 4>(t, GgmlType::MXFP4);
  set_iq<Iq2xxs>(t, GgmlType::IQ2_XXS);
  set_iq<Iq2xs>(t, GgmlType::IQ2_XS);
  set_iq<Iq2s>(t, GgmlType::IQ2_S);
  set_iq<Iq3xxs>(t, GgmlType::IQ3_XXS);
  set_iq<Iq3s>(t, GgmlType::IQ3_S);
  set_iq<Iq1s>(t, GgmlType::IQ1_S);
  set_iq<Iq1m>(t, GgmlType::IQ1_M);
}

}  // namespace strata::STRATA_VNNI_NS
