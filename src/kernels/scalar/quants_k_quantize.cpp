// Reference quantizer for the K-quants (not ggml's iterative one: bytes differ, quality is
// comparable; the golden tests bound its max error by twice ggml's). Per super-block:
//  1. a float fit per sub-block: affine formats split the range [min(lo, 0), hi] into k steps
//     for every k in [q_max/2, q_max] (fewer steps put regular data such as small integers
//     exactly on the grid); symmetric formats map the largest magnitude to q_min (finer, may
//     clip the other sign) or to -q_max; the fit with the smallest error wins;
//  2. f16 super-block scales d (and dmin) so the largest sub-block scale (min) spans the
//     integer range: the nearest f16 and, when that one is smaller, the next one up;
//  3. per sub-block, integer (scale, min) candidates around the fitted ones, each scored by
//     quantizing the values and measuring the dequantized error (max abs error first, squared
//     error on ties); the best super-block over the d/dmin candidates is kept.
#include <algorithm>
#include <limits>

#include "kernels/scalar/quants_k_layout.h"

namespace strata::scalar {
namespace {

struct Score {
  float max_err = std::numeric_limits<float>::infinity();
  float sse = std::numeric_limits<float>::infinity();
  bool better_than(const Score& o) const { return max_err < o.max_err || (max_err == o.max_err && sse < o.sse); }
};

int quant_level(const KFormat& f, float x, float ds, float ms) {
  if (ds == 0.0f) return std::clamp(0, f.q_min, f.q_max);
  float v = (x + ms) / ds;
  v = std::clamp(v, static_cast<float>(f.q_min - 1), static_cast<float>(f.q_max + 1));  // keeps nearest_int in range
  return std::clamp(nearest_int(v), f.q_min, f.q_max);
}

// Quantizes one sub-block with integer scale sc and min mn; returns its error, fills q.
Score try_sub_block(const KFormat& f, const float* x, float d, float dmin, int sc, int mn, int8_t* q) {
  const float ds = d * static_cast<float>(sc);
  const float ms = dmin * static_cast<float>(mn);
  Score s{0, 0};
  for (int j = 0; j < f.sub_size; ++j) {
    const int l = quant_level(f, x[j], ds, ms);
    q[j] = static_cast<int8_t>(l);
    const float e = std::fabs(ds * static_cast<float>(l) - ms - x[j]);
    s.max_err = std::max(s.max_err, e);
    s.sse += e * e;
  }
  return s;
}

int round_div(float a, float b) { return b == 0.0f ? 0 : nearest_int(std::clamp(a / b, -1e6f, 1e6f)); }

// Error of quantizing a sub-block with float scale ds and min ms (no integer rounding yet).
Score float_fit(const KFormat& f, const float* x, float ds, float ms) {
  int8_t q[32];
  return try_sub_block(f, x, ds, ms, 1, 1, q);
}

// Ideal float fit of one sub-block: x ~ scale*q - offset.
struct SubFit {
  float scale = 0, offset = 0;
  int levels = 1;  // affine: number of steps the value range spans
};

SubFit fit_sub_block(const KFormat& f, const float* x) {
  float lo = x[0], hi = x[0], smax = 0, amax = 0;
  for (int j = 0; j < f.sub_size; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      smax = x[j];
    }
  }
  SubFit best;
  Score best_score;
  auto consider = [&](float scale, float offset, int levels) {
    const Score s = float_fit(f, x, scale, offset);
    if (s.better_than(best_score)) {
      best_score = s;
      best = {scale, offset, levels};
    }
  };
  if (f.mn_max) {
    // Affine (offset >= 0): the range [min(lo, 0), hi] spans k steps; fewer than q_max steps
    // can put regular data (integers, a few distinct values) exactly on the grid.
    lo = std::min(lo, 0.0f);
    for (int k = f.q_max; k >= (f.q_max + 1) / 2; --k) consider((hi - lo) / static_cast<float>(k), -lo, k);
  } else {
    // Symmetric: the largest magnitude maps to q_min (finer, may clip the other sign) or to -q_max.
    consider(smax / static_cast<float>(f.q_min), 0, 1);
    consider(-smax / static_cast<float>(f.q_max), 0, 1);
  }
  return best;
}

// Best integer scale/min of sub-block s for the f16 super-block scales (d, dmin); fills u.
Score search_sub_block(const KFormat& f, const float* xs, const SubFit& fit, float df, float dminf, int s,
                       KUnpacked& u) {
  int8_t q[32];
  int8_t* qs = u.q + s * f.sub_size;
  Score best;
  u.sc[s] = 0;
  u.mn[s] = 0;
  auto consider = [&](int sc, int mn) {
    const Score sco = try_sub_block(f, xs, df, dminf, sc, mn, q);
    if (sco.better_than(best)) {
      best = sco;
      u.sc[s] = sc;
      u.mn[s] = mn;
      std::memcpy(qs, q, static_cast<size_t>(f.sub_size));
    }
  };
  if (f.mn_max) {
    // Every min near the fitted one, and for each, the scales that reach the fitted maximum
    // in k steps for every k from q_max/2 to q_max (deduplicated).
    const float top = fit.scale * static_cast<float>(fit.levels) - fit.offset;  // fitted maximum
    const int m0 = round_div(fit.offset, dminf);
    for (int mn = std::clamp(m0 - 1, 0, f.mn_max); mn <= std::clamp(m0 + 1, 0, f.mn_max); ++mn) {
      uint64_t tried = 0;  // bit sc: already scored (sc_max <= 63 for affine formats)
      const float reach = top + dminf * static_cast<float>(mn);
      for (int k = (f.q_max + 1) / 2; k <= f.q_max; ++k) {
        const int s0 = round_div(reach, df * static_cast<float>(k));
        for (int sc = std::clamp(s0 - 1, 0, f.sc_max); sc <= std::clamp(s0 + 1, 0, f.sc_max); ++sc) {
          if (tried >> sc & 1) continue;
          tried |= uint64_t{1} << sc;
          consider(sc, mn);
        }
      }
    }
  } else {
    const int s0 = round_div(fit.scale, df);
    for (int sc = std::clamp(s0 - 2, f.sc_min, f.sc_max); sc <= std::clamp(s0 + 2, f.sc_min, f.sc_max); ++sc) consider(sc, 0);
  }
  return best;
}

// The f16 nearest to x, and the next one away from zero when the nearest is smaller in
// magnitude (then the largest sub-block scale would not fit its integer range).
int f16_candidates(float x, uint16_t out[2]) {
  out[0] = f32_to_f16(x);
  if (std::isfinite(x) && std::fabs(f16(out[0])) < std::fabs(x) && (out[0] & 0x7FFF) < 0x7BFF) {
    out[1] = static_cast<uint16_t>(out[0] + 1);
    return 2;
  }
  return 1;
}

}  // namespace

void quantize_k_superblock(const KFormat& f, const float* x, KUnpacked& u) {
  const int n_sub = QK_K / f.sub_size;
  SubFit fit[16];  // [n_sub]
  float top_scale = 0, top_offset = 0;  // largest magnitudes (scale signed)
  for (int s = 0; s < n_sub; ++s) {
    fit[s] = fit_sub_block(f, x + s * f.sub_size);
    if (std::fabs(fit[s].scale) > std::fabs(top_scale)) top_scale = fit[s].scale;
    top_offset = std::max(top_offset, fit[s].offset);
  }
  // Symmetric formats map the top scale to sc_min (the wider, negative side), affine ones to sc_max.
  const float d = f.mn_max ? top_scale / static_cast<float>(f.sc_max) : top_scale / static_cast<float>(f.sc_min);
  const float dmin = f.mn_max ? top_offset / static_cast<float>(f.mn_max) : 0.0f;
  uint16_t d_cand[2], m_cand[2];
  const int n_d = f16_candidates(d, d_cand), n_m = f16_candidates(dmin, m_cand);
  Score best;
  KUnpacked trial;
  for (int i = 0; i < n_d; ++i) {
    for (int k = 0; k < n_m; ++k) {
      trial.d = d_cand[i];
      trial.dmin = m_cand[k];
      Score total{0, 0};
      for (int s = 0; s < n_sub; ++s) {
        const Score sc = search_sub_block(f, x + s * f.sub_size, fit[s], f16(trial.d), f16(trial.dmin), s, trial);
        total.max_err = std::max(total.max_err, sc.max_err);
        total.sse += sc.sse;
      }
      if (total.better_than(best) || (i == 0 && k == 0)) {
        best = total;
        u = trial;
      }
    }
  }
}

}  // namespace strata::scalar
