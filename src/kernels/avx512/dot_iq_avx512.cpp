// AVX-512 rows x tokens tiles (vec_dot_tile) of the grid i-quants without a delta term (IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S). Two weight rows share each 512-bit register: row r's decoded
// 32-value group in the low 256 bits, row r+1's in the high 256 bits, so one vpmaddubsw /
// vpdpwssd does the work of two AVX2 ones (Zen 5 and recent Intel cores run them at the 256-bit
// rate). A token's activation group is broadcast to both halves (one load for all rows of the
// tile). AVX-512 has no vpsignb: the activations are negated under a byte mask of the weight
// signs instead (0 - a, which wraps -128 exactly as vpsignb does; the sign sources of these
// formats are +-1, never 0).
// Each half holds, lane for lane, the int32 sums of the AVX2 kernel for its row (the same
// products, int32 adds exact in any order); the block scale wd * d_a, the conversion, one fused
// multiply-add per block in block order and the horizontal sum of each half are the AVX2 ones.
// So every element is bit-identical to the single-token dot (this table's = AVX2's).
// Rows left over (an odd one) and short token counts take this table's 256-bit kernels (iq_xn).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kernels/avx2/dot_iq_impl.h"
#include "kernels/avx512/kernels_avx512.h"

namespace strata::avx512 {

using namespace strata::avx2;

namespace {

struct Ops {
  static __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) { return _mm256_dpwssd_epi32(acc, p16, s16); }
};
// This table's multi-token kernels for the grid i-quants (the EVEX VNNI ones): passes of 4
// tokens in registers, 8 over a decoded panel.
constexpr int kTok = 4, kPanelTok = 8;

inline __m512i join(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

// One 32-value group of two rows.
struct PairGroup {
  __m512i u;       // magnitudes: row r | row r+1
  __m512i ls;      // int16 scales
  __mmask64 neg;   // bytes whose activation is negated
};

// P pairs of rows (2P rows) x up to kMaxTok tokens, kPanelBlocks super-blocks decoded at a time.
template <class D, int P, int M>
struct IqTile512 {
  static_assert(D::kDelta == Delta::None);
  using Block = typename D::Block;
  static constexpr int kMaxTok = 32;
  struct Panel {
    PairGroup g[kPanelBlocks][8];
    __m512 wd[kPanelBlocks];  // weight scales: row r's in the low 8 lanes, row r+1's in the high 8
  };

  static void decode(const uint8_t* w, size_t ws, int64_t i0, int nc, Panel& p) {
    const auto* r0 = reinterpret_cast<const Block*>(w);
    const auto* r1 = reinterpret_cast<const Block*>(w + ws);
    for (int c = 0; c < nc; ++c) {
      const Block &b0 = r0[i0 + c], &b1 = r1[i0 + c];
      prefetch_block(&b0, sizeof(Block));
      prefetch_block(&b1, sizeof(Block));
      const D d0(b0), d1(b1);
      p.wd[c] = _mm512_insertf32x8(_mm512_set1_ps(weight_scale(d0, b0)), _mm256_set1_ps(weight_scale(d1, b1)), 1);
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const IqGroup x0 = d0.group(g), x1 = d1.group(g);
        p.g[c][g] = {join(x0.u, x1.u), join(x0.ls, x1.ls), _mm512_movepi8_mask(join(x0.s, x1.s))};
      }
    }
  }

  // Tokens t0..t0+m-1 (m <= M) against blocks i0..i0+nc-1 of the P panels.
  template <int MM>
  static void tokens(const Panel* p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, __m512 (*acc)[kMaxTok]) {
    for (int c = 0; c < nc; ++c) {
      __m512i sum[P][MM];
      for (int q = 0; q < P; ++q)
        for (int t = 0; t < MM; ++t) sum[q][t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
        for (int t = 0; t < MM; ++t) {
          const __m512i q8 = _mm512_broadcast_i64x4(load256(act_block<block_q8_K>(act, as, t0 + t, i0 + c)->qs + 32 * g));
#pragma GCC unroll 4
          for (int q = 0; q < P; ++q) {
            const PairGroup& x = p[q].g[c][g];
            const __m512i sq = _mm512_mask_sub_epi8(q8, x.neg, _mm512_setzero_si512(), q8);
            sum[q][t] = _mm512_dpwssd_epi32(sum[q][t], _mm512_maddubs_epi16(x.u, sq), x.ls);
          }
        }
      }
      for (int t = 0; t < MM; ++t) {
        const __m512 ad = _mm512_set1_ps(act_block<block_q8_K>(act, as, t0 + t, i0 + c)->d);
        for (int q = 0; q < P; ++q)
          acc[q][t0 + t] = _mm512_fmadd_ps(_mm512_mul_ps(p[q].wd[c], ad), _mm512_cvtepi32_ps(sum[q][t]), acc[q][t0 + t]);
      }
    }
  }
  template <int MM>
  static void tail(int m, const Panel* p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, __m512 (*acc)[kMaxTok]) {
    if constexpr (MM >= 1) {
      if (m == MM) tokens<MM>(p, nc, i0, act, as, t0, acc);
      else tail<MM - 1>(m, p, nc, i0, act, as, t0, acc);
    }
  }

  // Rows w + k ws (k < 2P) against n_tok <= kMaxTok tokens; y[t * ys + k].
  static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* act, size_t as, int n_tok, float* y, int64_t ys) {
    const int64_t nb = n / QK_K;
    __m512 acc[P][kMaxTok];
    for (int q = 0; q < P; ++q)
      for (int t = 0; t < n_tok; ++t) acc[q][t] = _mm512_setzero_ps();
    Panel p[P];
    for (int64_t i0 = 0; i0 < nb; i0 += kPanelBlocks) {
      const int nc = static_cast<int>(std::min<int64_t>(kPanelBlocks, nb - i0));
      for (int q = 0; q < P; ++q) decode(w + static_cast<size_t>(2 * q) * ws, ws, i0, nc, p[q]);
      int t0 = 0;
      for (; t0 + M <= n_tok; t0 += M) tokens<M>(p, nc, i0, act, as, t0, acc);
      if (t0 < n_tok) tail<M - 1>(n_tok - t0, p, nc, i0, act, as, t0, acc);
    }
    for (int q = 0; q < P; ++q)
      for (int t = 0; t < n_tok; ++t) {
        y[t * ys + 2 * q] = D::kFactor * hsum_ps(_mm512_castps512_ps256(acc[q][t]));
        y[t * ys + 2 * q + 1] = D::kFactor * hsum_ps(_mm512_extractf32x8_ps(acc[q][t], 1));
      }
  }
};

// Tiles of 2P rows for more than kTok tokens; the rest row by row through iq_xn.
constexpr int kPairs = 2, kTileTok = 4;
template <class D>
void iq_tile512(int64_t n, const void* vw, size_t ws, int n_rows, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  int r = 0;
  if (n_tok > kTok) {
    using T = IqTile512<D, kPairs, kTileTok>;
    for (; r + 2 * kPairs <= n_rows; r += 2 * kPairs)
      for (int t0 = 0; t0 < n_tok; t0 += T::kMaxTok)
        T::run(n, w + static_cast<size_t>(r) * ws, ws, a + static_cast<size_t>(t0) * as, as, std::min(n_tok - t0, T::kMaxTok),
               y + t0 * ys + r, ys);
  }
  for (; r < n_rows; ++r) iq_xn<D, Ops, kTok, kPanelTok>(n, w + static_cast<size_t>(r) * ws, va, as, n_tok, y + r, ys);
}

}  // namespace

#define STRATA_IQ_TILE512(name, Dec)                                                                                  \
  void vec_dot_tile_##name##_q8_K(int64_t n, const void* w, size_t ws, int nr, const void* a, size_t as, int nt,     \
                                  float* y, int64_t ys) {                                                           \
    iq_tile512<Dec>(n, w, ws, nr, a, as, nt, y, ys);                                                                 \
  }
STRATA_IQ_TILE512(iq2_xxs, Iq2xxs)
STRATA_IQ_TILE512(iq2_xs, Iq2xs)
STRATA_IQ_TILE512(iq2_s, Iq2s)
STRATA_IQ_TILE512(iq3_xxs, Iq3xxs)
STRATA_IQ_TILE512(iq3_s, Iq3s)
#undef STRATA_IQ_TILE512

}  // namespace strata::avx512
