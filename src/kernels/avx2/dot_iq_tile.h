#pragma once
// A tile of R weight rows x up to IqPanel::kMaxTok tokens for the grid i-quants without a delta
// term (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): kPanelBlocks super-blocks of each of the R rows
// are decoded once into L1 panels (IqPanel's layout), then every pass of N tokens loads each
// activation vector once and uses it for all R rows, and each decoded group once per pass for
// all N tokens. Against IqPanel (one row at a time) the activation loads drop by R, which is
// what limits a prompt's expert products (each expert sees ~32 tokens at 512 prompt tokens).
// The panels hold signed weights (the signs applied once per decode) and each activation group
// is made unsigned once per pass (a + 128: xor 0x80) for all R rows: per (group, token, row)
// one vpmaddubsw and one madd_acc instead of a vpsignb more. Per int32 lane that adds
// 128 * sum ls * w, which depends on the weights only: its negation (`base`, the same two
// instructions with a = 0) starts each block's sums. No int16 saturates (|w| <= 62, a + 128 <=
// 255); the integers equal the sign-the-activation form's wherever a != -128, which the Q8_K
// quantizer never emits (DotTile.ActivationQuantizerNeverEmitsMinus128).
// Per (row, token): the same int32 lanes as IqDot / IqPanel (int32 adds wrap, exact in any
// order), the same block scale product wd * d_a, the same fused multiply-add per block in block
// order and the same horizontal sum, so every result is bit-identical to the single-token dot
// of the same table.
// Include only from translation units compiled with at least -mavx2 -mfma -mf16c.
#include "kernels/avx2/dot_iq_impl.h"

namespace strata::avx2 {
namespace {

template <class D, class Ops, int R, int N>
struct IqTile {
  static_assert(D::kDelta == Delta::None);
  using Block = typename D::Block;
  static constexpr int kMaxTok = IqPanel<D, Ops, N>::kMaxTok;
  struct Group {
    __m256i w;   // signed weights
    __m256i ls;  // int16 scales
  };
  struct Panel {
    Group g[kPanelBlocks][8];
    __m256i base[kPanelBlocks];  // -128 * sum over the block's groups of ls * w, per int32 lane
    float wd[kPanelBlocks];
  };

  // Tokens t0..t0+M-1 against blocks i0..i0+nc-1 of the R panels.
  template <int M>
  static void tokens(const Panel* p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, __m256 (*acc)[kMaxTok]) {
    for (int c = 0; c < nc; ++c) {
      const __m256i k80 = _mm256_set1_epi8(static_cast<char>(0x80));
      __m256i sum[R][M];
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < M; ++t) sum[r][t] = p[r].base[c];
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
        for (int t = 0; t < M; ++t) {
          const __m256i a = _mm256_xor_si256(load256(act_block<block_q8_K>(act, as, t0 + t, i0 + c)->qs + 32 * g), k80);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            const Group& x = p[r].g[c][g];
            sum[r][t] = Ops::madd_acc(sum[r][t], _mm256_maddubs_epi16(a, x.w), x.ls);
          }
        }
      }
      for (int t = 0; t < M; ++t) {
        const float ad = act_block<block_q8_K>(act, as, t0 + t, i0 + c)->d;
        for (int r = 0; r < R; ++r) {
          const float d = p[r].wd[c] * ad;
          acc[r][t0 + t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum[r][t]), acc[r][t0 + t]);
        }
      }
    }
  }
  template <int M>
  static void tail(int m, const Panel* p, int nc, int64_t i0, const uint8_t* act, size_t as, int t0, __m256 (*acc)[kMaxTok]) {
    if constexpr (M >= 1) {
      if (m == M) tokens<M>(p, nc, i0, act, as, t0, acc);
      else tail<M - 1>(m, p, nc, i0, act, as, t0, acc);
    }
  }

  // Rows w, w + ws, ..., w + (R-1) ws against n_tok <= kMaxTok tokens; y[t * ys + r].
  static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* act, size_t as, int n_tok, float* y, int64_t ys) {
    const int64_t nb = n / QK_K;
    __m256 acc[R][kMaxTok];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < n_tok; ++t) acc[r][t] = _mm256_setzero_ps();
    Panel p[R];
    for (int64_t i0 = 0; i0 < nb; i0 += kPanelBlocks) {
      const int nc = static_cast<int>(std::min<int64_t>(kPanelBlocks, nb - i0));
      for (int r = 0; r < R; ++r) {
        const auto* row = reinterpret_cast<const Block*>(w + static_cast<size_t>(r) * ws);
        for (int c = 0; c < nc; ++c) {
          const Block& b = row[i0 + c];
          prefetch_block(&b, sizeof(Block));
          const D dec(b);
          p[r].wd[c] = weight_scale(dec, b);
          __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) {
            const IqGroup x = dec.group(g);
            const __m256i w = _mm256_sign_epi8(x.u, x.s);
            p[r].g[c][g] = {w, x.ls};
            corr = Ops::madd_acc(corr, _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(0x80)), w), x.ls);
          }
          p[r].base[c] = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
        }
      }
      int t0 = 0;
      for (; t0 + N <= n_tok; t0 += N) tokens<N>(p, nc, i0, act, as, t0, acc);
      if (t0 < n_tok) tail<N - 1>(n_tok - t0, p, nc, i0, act, as, t0, acc);
    }
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < n_tok; ++t) y[t * ys + r] = D::kFactor * hsum_ps(acc[r][t]);
  }
};

// vec_dot_tile (kernel_table.h) of a grid i-quant: n_rows rows ws bytes apart against n_tok
// tokens. More tokens than one IqDot pass (N), rows of at least one full panel and a format
// without a delta term: tiles of R rows (IqTile, passes of NPanel tokens) over token slices of
// up to kMaxTok; the rows left over and every other case: vec_dot_xn row by row (iq_xn). Every
// result equals the single-token dot. (Rows shorter than a panel, e.g. an expert's 768-wide
// down projection, measured ~10 % slower in 256-bit tiles than row by row, 2048-wide ones
// ~15 % faster: bench_kernels gemm/ int8 vs int8-row.)
template <class D, class Ops, int N, int NPanel, int R>
void iq_tile(int64_t n, const void* vw, size_t ws, int n_rows, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  int r = 0;
  if constexpr (D::kDelta == Delta::None) {
    if (n_tok > N && n / QK_K >= kPanelBlocks) {
      using T = IqTile<D, Ops, R, NPanel>;
      for (; r + R <= n_rows; r += R)
        for (int t0 = 0; t0 < n_tok; t0 += T::kMaxTok)
          T::run(n, w + static_cast<size_t>(r) * ws, ws, a + static_cast<size_t>(t0) * as, as, std::min(n_tok - t0, T::kMaxTok),
                 y + t0 * ys + r, ys);
    }
  }
  for (; r < n_rows; ++r) iq_xn<D, Ops, N, NPanel>(n, w + static_cast<size_t>(r) * ws, va, as, n_tok, y + r, ys);
}

}  // namespace
}  // namespace strata::avx2
