// AVX2 dots of the lattice i-quants against Q8_K: IQ2_XXS, IQ2_XS, IQ3_XXS and IQ1_S, one
// token (vec_dot) and several (vec_dot_xn, each weight block decoded once for all tokens).
// Bit-identical to the scalar reference (kernels/scalar/quants_iq_*.cpp): the per-block sums
// are the same integers (int32 adds are exact in any order), scaled and accumulated over blocks
// in double exactly as the reference does, then rounded once.
// A block is 8 groups of 32 values, each decoded to magnitudes (unsigned bytes) with +-1 signs
// (IQ2/IQ3 types) or signed values (-1, 0, +1; IQ1_S), and an int16 scale ls per 16 values.
#include <algorithm>

#include "kernels/avx2/avx2_common.h"
#include "kernels/avx2/kernels_avx2.h"
#include "kernels/iq_grids.h"

namespace strata::avx2 {
namespace {

// One group of 32 values.
struct IqGroup {
  __m256i v;    // magnitudes (IQ2/IQ3) or signed values (IQ1_S)
  __m256i sgn;  // +1 / -1 per value (IQ2/IQ3 only)
  __m256i ls;   // int16 scale, low lane for values 0..15, high lane for 16..31
  int neg_ls;   // IQ1_S: ls with the delta's sign, for the sum(a) term
};

// Four 7-bit sign codes (bits 0..27 of `codes`) -> 32 int8 multipliers +-1.
inline __m256i signs4(uint32_t codes) {
  const uint64_t* sb = iq::kSignBytesIq2.data();
  return _mm256_set_epi64x(static_cast<int64_t>(sb[(codes >> 21) & 127]), static_cast<int64_t>(sb[(codes >> 14) & 127]),
                           static_cast<int64_t>(sb[(codes >> 7) & 127]), static_cast<int64_t>(sb[codes & 127]));
}
inline __m256i ls_pair(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(hi)), _mm_set1_epi16(static_cast<int16_t>(lo))); }
inline __m256i grid4(const uint64_t* g, int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x(static_cast<int64_t>(g[i3]), static_cast<int64_t>(g[i2]), static_cast<int64_t>(g[i1]),
                           static_cast<int64_t>(g[i0]));
}

struct Iq2xxs {
  using Block = block_iq2_xxs;
  static constexpr double kFactor = 0.125;
  static constexpr bool kDelta = false;
  static void group(const Block& b, int g, IqGroup& x) {
    const auto* qs = reinterpret_cast<const uint8_t*>(b.qs);
    const uint8_t* p = qs + 8 * g;
    uint32_t aux;
    std::memcpy(&aux, p + 4, 4);
    x.v = grid4(iq::kIq2xxsGrid.data(), p[0], p[1], p[2], p[3]);
    x.sgn = signs4(aux);
    x.ls = _mm256_set1_epi16(static_cast<int16_t>(2 * (aux >> 28) + 1));
  }
};

struct Iq2xs {
  using Block = block_iq2_xs;
  static constexpr double kFactor = 0.125;
  static constexpr bool kDelta = false;
  static void group(const Block& b, int g, IqGroup& x) {
    const uint64_t* grid = iq::kIq2xsGrid.data();
    const uint16_t* q = b.qs + 4 * g;
    x.v = grid4(grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
    const uint32_t codes = (q[0] >> 9) | ((q[1] >> 9) << 7) | ((q[2] >> 9) << 14) | (static_cast<uint32_t>(q[3] >> 9) << 21);
    x.sgn = signs4(codes);
    x.ls = ls_pair(2 * (b.scales[g] & 0xF) + 1, 2 * (b.scales[g] >> 4) + 1);
  }
};

struct Iq3xxs {
  using Block = block_iq3_xxs;
  static constexpr double kFactor = 0.25;
  static constexpr bool kDelta = false;
  static void group(const Block& b, int g, IqGroup& x) {
    const uint32_t* grid = iq::kIq3xxsGrid.data();
    const uint8_t* p = b.qs + 8 * g;
    uint32_t aux;
    std::memcpy(&aux, b.qs + QK_K / 4 + 4 * g, 4);
    x.v = _mm256_setr_epi32(static_cast<int>(grid[p[0]]), static_cast<int>(grid[p[1]]), static_cast<int>(grid[p[2]]),
                               static_cast<int>(grid[p[3]]), static_cast<int>(grid[p[4]]), static_cast<int>(grid[p[5]]),
                               static_cast<int>(grid[p[6]]), static_cast<int>(grid[p[7]]));
    x.sgn = signs4(aux);
    x.ls = _mm256_set1_epi16(static_cast<int16_t>(2 * (aux >> 28) + 1));
  }
};

struct Iq1s {
  using Block = block_iq1_s;
  static constexpr double kFactor = 1.0;
  static constexpr bool kDelta = true;
  static void group(const Block& b, int g, IqGroup& x) {
    const uint64_t* grid = iq::kIq1sGrid.data();
    const int h = b.qh[g];
    const uint8_t* q = b.qs + 4 * g;
    x.v = grid4(grid, q[0] | ((h & 7) << 8), q[1] | (((h >> 3) & 7) << 8), q[2] | (((h >> 6) & 7) << 8),
                   q[3] | (((h >> 9) & 7) << 8));
    const int ls = 2 * ((h >> 12) & 7) + 1;
    x.ls = _mm256_set1_epi16(static_cast<int16_t>(ls));
    x.neg_ls = (h & 0x8000) ? -ls : ls;
  }
};

// Integer products of one group with 32 activations, as 8 int32 lanes scaled by ls.
template <class T>
inline __m256i group_dot(const IqGroup& x, const int8_t* a32) {
  const __m256i q8 = load256(a32);
  __m256i p16;
  if constexpr (T::kDelta) p16 = pairs_i8i8(x.v, q8);  // signed values
  else p16 = _mm256_maddubs_epi16(x.v, _mm256_sign_epi8(q8, x.sgn));
  return _mm256_madd_epi16(p16, x.ls);
}

// Block contribution, as the scalar reference computes it: d_w * d_a * (sum1 + delta * sum2).
template <class T>
inline double block_term(float dw, const block_q8_K& a, int32_t sum1, int32_t sum2) {
  if constexpr (T::kDelta) {
    return static_cast<double>(dw) * static_cast<double>(a.d) *
           (static_cast<double>(sum1) + static_cast<double>(iq::kIq1Delta) * sum2);
  } else {
    return static_cast<double>(dw) * static_cast<double>(a.d) * static_cast<double>(sum1);
  }
}
inline int32_t sum_a32(const block_q8_K& a, int g) { return a.bsums[2 * g] + a.bsums[2 * g + 1]; }

// One token: each group decoded and used at once.
template <class T>
float dot1(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const typename T::Block*>(vw);
  const auto* a = static_cast<const block_q8_K*>(va);
  double s = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    prefetch_block(w + i, sizeof(typename T::Block));
    __m256i acc = _mm256_setzero_si256();
    int32_t sum2 = 0;
    for (int g = 0; g < 8; ++g) {
      IqGroup x;
      T::group(w[i], g, x);
      acc = _mm256_add_epi32(acc, group_dot<T>(x, a[i].qs + 32 * g));
      if constexpr (T::kDelta) sum2 += x.neg_ls * sum_a32(a[i], g);
    }
    s += block_term<T>(h2f(w[i].d), a[i], hsum_epi32(acc), sum2);
  }
  return static_cast<float>(T::kFactor * s);
}

// Several tokens: each block decoded once, its 8 groups reused for up to kTile tokens.
template <class T>
void dot_xn(int64_t n, const void* vw, const void* va, size_t as, int n_tok, float* y, int64_t ys) {
  constexpr int kTile = 16;
  const auto* w = static_cast<const typename T::Block*>(vw);
  const auto* abase = static_cast<const uint8_t*>(va);
  IqGroup x[8];
  for (int t0 = 0; t0 < n_tok; t0 += kTile) {
    const int nt = std::min(kTile, n_tok - t0);
    double s[kTile] = {};
    for (int64_t i = 0; i < n / QK_K; ++i) {
      for (int g = 0; g < 8; ++g) T::group(w[i], g, x[g]);
      const float dw = h2f(w[i].d);
      for (int t = 0; t < nt; ++t) {
        const auto& a = reinterpret_cast<const block_q8_K*>(abase + static_cast<size_t>(t0 + t) * as)[i];
        __m256i acc = _mm256_setzero_si256();
        int32_t sum2 = 0;
        for (int g = 0; g < 8; ++g) {
          acc = _mm256_add_epi32(acc, group_dot<T>(x[g], a.qs + 32 * g));
          if constexpr (T::kDelta) sum2 += x[g].neg_ls * sum_a32(a, g);
        }
        s[t] += block_term<T>(dw, a, hsum_epi32(acc), sum2);
      }
    }
    for (int t = 0; t < nt; ++t) y[static_cast<int64_t>(t0 + t) * ys] = static_cast<float>(T::kFactor * s[t]);
  }
}

}  // namespace

float vec_dot_iq2_xxs_q8_K(int64_t n, const void* w, const void* a) { return dot1<Iq2xxs>(n, w, a); }
float vec_dot_iq2_xs_q8_K(int64_t n, const void* w, const void* a) { return dot1<Iq2xs>(n, w, a); }
float vec_dot_iq3_xxs_q8_K(int64_t n, const void* w, const void* a) { return dot1<Iq3xxs>(n, w, a); }
float vec_dot_iq1_s_q8_K(int64_t n, const void* w, const void* a) { return dot1<Iq1s>(n, w, a); }
void vec_dot_xn_iq2_xxs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys) {
  dot_xn<Iq2xxs>(n, w, a, as, n_tok, y, ys);
}
void vec_dot_xn_iq2_xs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys) {
  dot_xn<Iq2xs>(n, w, a, as, n_tok, y, ys);
}
void vec_dot_xn_iq3_xxs_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys) {
  dot_xn<Iq3xxs>(n, w, a, as, n_tok, y, ys);
}
void vec_dot_xn_iq1_s_q8_K(int64_t n, const void* w, const void* a, size_t as, int n_tok, float* y, int64_t ys) {
  dot_xn<Iq1s>(n, w, a, as, n_tok, y, ys);
}

}  // namespace strata::avx2
