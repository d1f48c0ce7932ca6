// AVX-512 rows x tokens tiles (vec_dot_tile) of the grid i-quants without a delta term (IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S). Two weight rows share each 512-bit register: row r's decoded
// 32-value group in the low 256 bits, row r+1's in the high 256 bits, so one vpmaddubsw /
// vpdpwssd does the work of two AVX2 ones (Zen 5 and recent Intel cores run them at the 256-bit
// rate). A token's activation group is broadcast to both halves (one load for all rows of the
// tile). The weights are decoded signed and the activations shifted to unsigned (IqTile512).
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

// P pairs of rows (2P rows) x up to kMaxTok tokens. Up to kChunk super-blocks of the 2P rows
// are decoded at a time into signed bytes (the weight signs applied once per panel, row r in the
// low 256 bits, row r+1 in the high 256 bits); each token's activation group is made unsigned
// once (a + 128: xor 0x80) and shared by all pairs, so a (group, token, pair) costs one
// vpmaddubsw and one vpdpwssd: per int32 lane, ls * sum (a + 128) w = ls * sum a w + 128 ls sum w.
// The second term depends on the weights only: its negation (`base`, per block and lane, built by
// the same two instructions with a = 0) starts each block's int32 sums, so the sums are the
// integers of the sign-the-activation form exactly (int32 adds wrap, so any order is exact).
// No int16 saturates: |w| <= 62 (the largest grid value), a + 128 <= 255, 2 * 255 * 62 < 32767.
// Equal to that form only where a != -128 (there vpsignb / 0 - a wraps): Q8_K activations from
// quantize_act never hold -128 (DotTile.ActivationQuantizerNeverEmitsMinus128).
// A pass of M tokens keeps its P x M float accumulators in registers over a chunk, fused
// multiply-adds them per block in block order, and writes kFactor * the horizontal sum of each
// half (the AVX2 order, four rows per vector) after the last chunk; a chunk's results wait in
// `spill` only when a row has more than kChunk super-blocks.
template <class D, int P, int M>
struct IqTile512 {
  static_assert(D::kDelta == Delta::None);
  static_assert(P % 2 == 0, "rows are written four at a time");
  using Block = typename D::Block;
  static constexpr int kMaxTok = 128, kChunk = 8;
  struct PairGroup {
    __m512i w;   // signed weights: row r | row r+1
    __m512i ls;  // int16 scales
  };
  struct Panel {
    PairGroup g[kChunk][8];
    __m512i base[kChunk];  // -128 * sum over the block's groups of ls * w, per int32 lane
    __m512 wd[kChunk];     // weight scales: row r's in the low 8 lanes, row r+1's in the high 8
  };

  static void decode(const uint8_t* w, size_t ws, int64_t i0, int nc, Panel& p) {
    const auto* r0 = reinterpret_cast<const Block*>(w);
    const auto* r1 = reinterpret_cast<const Block*>(w + ws);
    const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int c = 0; c < nc; ++c) {
      const Block &b0 = r0[i0 + c], &b1 = r1[i0 + c];
      prefetch_block(&b0, sizeof(Block));
      prefetch_block(&b1, sizeof(Block));
      const D d0(b0), d1(b1);
      p.wd[c] = _mm512_insertf32x8(_mm512_set1_ps(weight_scale(d0, b0)), _mm256_set1_ps(weight_scale(d1, b1)), 1);
      __m512i corr = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        const IqGroup x0 = d0.group(g), x1 = d1.group(g);  // their sign bytes unused (left to the optimizer)
        const __m512i u = join(x0.u, x1.u), ls = join(x0.ls, x1.ls);
        const __mmask64 neg = _cvtu64_mask64(d0.sign_bits(g) | (static_cast<uint64_t>(d1.sign_bits(g)) << 32));
        const __m512i sw = _mm512_mask_sub_epi8(u, neg, _mm512_setzero_si512(), u);
        p.g[c][g] = {sw, ls};
        corr = _mm512_dpwssd_epi32(corr, _mm512_maddubs_epi16(k128, sw), ls);
      }
      p.base[c] = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
    }
  }

  // kFactor * the horizontal sum of each 256-bit half of f[0..P) (rows 2q, 2q+1) into y[0..2P):
  // per row (lo128 + hi128), then + its upper pair, then element 0 + element 1: hsum_ps's order.
  static void store_rows(const __m512 (&f)[P], float* y) {
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int q = 0; q < P; q += 2) {
      const __m512 lo = _mm512_shuffle_f32x4(f[q], f[q + 1], _MM_SHUFFLE(2, 0, 2, 0));
      const __m512 hi = _mm512_shuffle_f32x4(f[q], f[q + 1], _MM_SHUFFLE(3, 1, 3, 1));
      const __m512 s = _mm512_add_ps(lo, hi);
      const __m512 s2 = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(3, 2, 3, 2)));
      const __m512 s3 = _mm512_add_ps(s2, _mm512_movehdup_ps(s2));
      const __m128 r = _mm512_castps512_ps128(_mm512_permutexvar_ps(first, s3));
      _mm_storeu_ps(y + 2 * q, _mm_mul_ps(_mm_set1_ps(D::kFactor), r));
    }
  }

  // Tokens t0..t0+MM-1 against blocks i0..i0+nc-1 of the P panels; `first` / `last`: the
  // row's first / last chunk (otherwise the accumulators come from / go to `spill`).
  template <int MM>
  static void tokens(const Panel* p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, bool first, bool last,
                     __m512 (*spill)[kMaxTok], float* y, int64_t ys) {
    const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 f[MM][P];
    for (int t = 0; t < MM; ++t)
      for (int q = 0; q < P; ++q) f[t][q] = first ? _mm512_setzero_ps() : spill[q][t0 + t];
    for (int c = 0; c < nc; ++c) {
      __m512i sum[P][MM];
      for (int q = 0; q < P; ++q)
        for (int t = 0; t < MM; ++t) sum[q][t] = p[q].base[c];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
        for (int t = 0; t < MM; ++t) {
          const __m512i q8 = _mm512_broadcast_i64x4(load256(act_block<block_q8_K>(act, as, t0 + t, i0 + c)->qs + 32 * g));
          const __m512i a = _mm512_xor_si512(q8, k80);
#pragma GCC unroll 4
          for (int q = 0; q < P; ++q) {
            const PairGroup& x = p[q].g[c][g];
            sum[q][t] = _mm512_dpwssd_epi32(sum[q][t], _mm512_maddubs_epi16(a, x.w), x.ls);
          }
        }
      }
      for (int t = 0; t < MM; ++t) {
        const __m512 ad = _mm512_set1_ps(act_block<block_q8_K>(act, as, t0 + t, i0 + c)->d);
        for (int q = 0; q < P; ++q)
          f[t][q] = _mm512_fmadd_ps(_mm512_mul_ps(p[q].wd[c], ad), _mm512_cvtepi32_ps(sum[q][t]), f[t][q]);
      }
    }
    for (int t = 0; t < MM; ++t) {
      if (last) store_rows(f[t], y + (t0 + t) * ys);
      else
        for (int q = 0; q < P; ++q) spill[q][t0 + t] = f[t][q];
    }
  }
  template <int MM>
  static void tail(int m, const Panel* p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, bool first, bool last,
                   __m512 (*spill)[kMaxTok], float* y, int64_t ys) {
    if constexpr (MM >= 1) {
      if (m == MM) tokens<MM>(p, nc, i0, act, as, t0, first, last, spill, y, ys);
      else tail<MM - 1>(m, p, nc, i0, act, as, t0, first, last, spill, y, ys);
    }
  }

  // Rows w + k ws (k < 2P) against n_tok <= kMaxTok tokens; y[t * ys + k].
  static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* act, size_t as, int n_tok, float* y, int64_t ys) {
    const int64_t nb = n / QK_K;
    __m512 spill[P][kMaxTok];
    Panel p[P];
    for (int64_t i0 = 0; i0 < nb; i0 += kChunk) {
      const int nc = static_cast<int>(std::min<int64_t>(kChunk, nb - i0));
      const bool first = i0 == 0, last = i0 + nc == nb;
      for (int q = 0; q < P; ++q) decode(w + static_cast<size_t>(2 * q) * ws, ws, i0, nc, p[q]);
      int t0 = 0;
      for (; t0 + M <= n_tok; t0 += M) tokens<M>(p, nc, i0, act, as, t0, first, last, spill, y, ys);
      if (t0 < n_tok) tail<M - 1>(n_tok - t0, p, nc, i0, act, as, t0, first, last, spill, y, ys);
    }
  }
};

// Rows w + k ws (k < rows) of `bytes` each, towards L1: a tile's weights stream from memory,
// and without this the next tile's first decode waits on them (perf: ~10 % of the tile's time
// on its first weight load at pp512).
inline void prefetch_rows(const uint8_t* w, size_t ws, int rows, size_t bytes) {
  for (int k = 0; k < rows; ++k) {
    const char* row = reinterpret_cast<const char*>(w + static_cast<size_t>(k) * ws);
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(row + o, _MM_HINT_T0);
    _mm_prefetch(row + bytes - 1, _MM_HINT_T0);
  }
}

// Tiles of 2P rows for more than kTok tokens (the next tile's rows prefetched while one
// computes); the rest row by row through iq_xn.
constexpr int kPairs = 2, kTileTok = 4;
template <class D>
void iq_tile512(int64_t n, const void* vw, size_t ws, int n_rows, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  const size_t row_bytes = static_cast<size_t>(n / QK_K) * sizeof(typename D::Block);
  int r = 0;
  if (n_tok > kTok) {
    using T = IqTile512<D, kPairs, kTileTok>;
    for (; r + 2 * kPairs <= n_rows; r += 2 * kPairs) {
      const int next = std::min(2 * kPairs, n_rows - r - 2 * kPairs);
      if (next > 0) prefetch_rows(w + static_cast<size_t>(r + 2 * kPairs) * ws, ws, next, row_bytes);
      for (int t0 = 0; t0 < n_tok; t0 += T::kMaxTok)
        T::run(n, w + static_cast<size_t>(r) * ws, ws, a + static_cast<size_t>(t0) * as, as, std::min(n_tok - t0, T::kMaxTok),
               y + t0 * ys + r, ys);
    }
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
