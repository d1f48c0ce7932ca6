#include "kernels/ops.h"

#include "kernels/kernel_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace strata {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

void layernorm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum) / static_cast<float>(n);
  double var = 0.0;
  int64_t i = 0;
  for (; i + 7 < n; i += 8) {  // ggml_vec_cvar_f32 (AVX2): (hi + lo), then (0+2, 1+3), then (0 + 1)
    float v[8];
    for (int l = 0; l < 8; ++l) {
      y[i + l] = x[i + l] - mean;
      v[l] = y[i + l] * y[i + l];
    }
    const float a0 = v[4] + v[0], a1 = v[5] + v[1], a2 = v[6] + v[2], a3 = v[7] + v[3];
    var += static_cast<double>((a0 + a2) + (a1 + a3));
  }
  for (; i < n; ++i) {
    y[i] = x[i] - mean;
    var += static_cast<double>(y[i] * y[i]);
  }
  const float variance = static_cast<float>(var / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t j = 0; j < n; ++j) {
    float v = y[j] * scale;
    if (w) v = v * w[j];
    if (b) v = v + b[j];
    y[j] = v;
  }
}

namespace {
// ggml_vec_soft_max_f32 on AVX2: exp through the vectorized expf in groups of 8 whose float
// sums (hi + lo, then (0+2) + (1+3)) are added in double; `row0` is x[0]'s index in ggml's row,
// which fixes the groups; with `cell`, x[i] is element cell[i] (ascending) of the row instead.
// Elements of the row that x does not hold are masked (exp 0).
double exp_sum_grouped(float* x, int64_t n, int64_t row0, const int32_t* cell, float mx, int64_t tail_from) {
  double sum = 0.0;
  int64_t i = 0;
  const auto expf8 = kernels().expf_f32;
  auto at = [&](int64_t k) { return cell ? static_cast<int64_t>(cell[k]) : row0 + k; };
  while (i < n) {
    const int64_t a = at(i);
    if (a >= tail_from) {  // ggml's scalar tail: libm expf, summed one by one
      for (; i < n; ++i) {
        x[i] = x[i] == -INFINITY ? 0.0f : std::exp(x[i] - mx);
        sum += static_cast<double>(x[i]);
      }
      break;
    }
    const int64_t g0 = a & ~int64_t{7};
    float in[8] = {}, v[8] = {};  // v: the group's 8 cells, those x does not hold masked (0)
    const int64_t i0 = i;
    for (; i < n && at(i) < g0 + 8; ++i) in[i - i0] = x[i] - mx;
    expf8(i - i0, in, in);  // the kernel table's ggml_vexpf, the group's elements at once
    for (int64_t k = i0; k < i; ++k) {
      x[k] = x[k] == -INFINITY ? 0.0f : in[k - i0];
      v[at(k) - g0] = x[k];
    }
    float s[4];
    for (int q = 0; q < 4; ++q) s[q] = v[q + 4] + v[q];
    sum += static_cast<double>((s[0] + s[2]) + (s[1] + s[3]));
  }
  return sum;
}

void softmax_impl(float* x, int64_t n, float scale, const float* sink, int64_t row0, const int32_t* cell, int64_t tail_from) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    x[i] *= scale;
    mx = std::max(mx, x[i]);
  }
  if (sink) mx = std::max(mx, *sink);
  double sum = exp_sum_grouped(x, n, row0, cell, mx, tail_from);
  if (sink) sum += static_cast<double>(std::exp(*sink - mx));
  const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.0f;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}
}  // namespace

void softmax(float* x, int64_t n, float scale, const float* sink) { softmax_impl(x, n, scale, sink, 0, nullptr, n & ~int64_t{7}); }

void softmax_cells(float* x, int64_t n, int64_t first, float scale, const float* sink) {
  softmax_impl(x, n, scale, sink, first, nullptr, INT64_MAX);
}

void softmax_cells(float* x, const int32_t* cell, int64_t n, float scale, const float* sink) {
  softmax_impl(x, n, scale, sink, 0, cell, INT64_MAX);
}

namespace {
float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
}  // namespace

// ggml's vectorized expf (its AVX2/FMA build), one lane: a rounding-to-integer split
// x = n*ln2 + b, a degree-5 polynomial for exp(b), the exponent added in the bits, and the
// over/underflow branches. Not correctly rounded; followed to the bit because llama.cpp's
// SwiGLU and softmax round through it before activations are quantized.
float ggml_vexpf(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = f_bits(z) << 23;
  const float k = bits_f(e + f_bits(1.0f));
  const bool c = std::fabs(n) > 126.0f;
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                           0x1.ffffecp-1f * b);
  if (!c) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = bits_f(g + 0x7f000000u);
  const float s2 = bits_f(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// As ggml_vec_swiglu_f32: groups of 8 through the vectorized silu, the tail through x/(1+expf(-x)).
// silu(x) * (u ? u : 1) over the groups of 8 (ggml's vectorized expf: the kernel table's
// expf_f32, blocks of kExpBlock on the stack), the tail through x/(1+expf(-x)).
void silu_mul(const float* x, const float* u, float* y, int64_t n) {
  constexpr int64_t kExpBlock = 256;
  const int64_t nv = n & ~int64_t{7};
  const auto expf8 = kernels().expf_f32;
  float e[kExpBlock];
  for (int64_t b = 0; b < nv; b += kExpBlock) {
    const int64_t m = std::min(kExpBlock, nv - b);
    for (int64_t i = 0; i < m; ++i) e[i] = 0.0f - x[b + i];
    expf8(m, e, e);
    for (int64_t i = 0; i < m; ++i) {
      const float v = x[b + i] / (1.0f + e[i]);
      y[b + i] = u ? v * u[b + i] : v;
    }
  }
  for (int64_t i = nv; i < n; ++i) y[i] = u ? silu(x[i]) * u[i] : silu(x[i]);
}

void swiglu(const float* g, const float* u, float* out, int64_t n) { silu_mul(g, u, out, n); }

void silu_vec(const float* x, float* y, int64_t n) { silu_mul(x, nullptr, y, n); }

void l2norm(const float* x, float* y, int64_t n, float eps) {
  const float fn = static_cast<float>(n);
  rmsnorm(x, nullptr, y, n, eps / fn);
  const float s = 1.0f / std::sqrt(fn);
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

void conv1d_causal_step(const float* hist, const float* x, const float* w, int n_ch, int k, float* y) {
  for (int c = 0; c < n_ch; ++c) {
    const float* wc = w + static_cast<size_t>(c) * k;
    float sum = 0.0f;  // products rounded, then added (ggml's CPU build does not fuse this loop)
    for (int j = 0; j + 1 < k; ++j) sum += hist[static_cast<size_t>(j) * n_ch + c] * wc[j];
    y[c] = sum + x[c] * wc[k - 1];
  }
}

void gated_delta_step(float* m, const float* q, const float* k, const float* v, float g, float beta, int s, float* out, DotF32Fn dot) {
  const float decay = std::exp(g);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s));
  // Row j of m only ever meets d[j]: decay, delta, update and read-out run row by row.
  for (int j = 0; j < s; ++j) {
    float* row = m + static_cast<size_t>(j) * s;
    for (int i = 0; i < s; ++i) row[i] *= decay;
    const float d = (v[j] - dot(s, row, k)) * beta;
    for (int i = 0; i < s; ++i) row[i] = std::fma(k[i], d, row[i]);
    out[j] = dot(s, row, q) * scale;
  }
}

void swiglu_clamp(const float* g, const float* u, float* out, int64_t n, float limit) {
  if (limit <= 0.0f) {
    swiglu(g, u, out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = silu(std::min(g[i], limit)) * std::clamp(u[i], -limit, limit);
}

void swiglu_oai(const float* g, const float* u, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(g[i], limit);
    const float y = std::clamp(u[i], -limit, limit);
    const float glu = x / (1.0f + std::exp(alpha * (-x)));
    out[i] = glu * (y + 1.0f);
  }
}

namespace {
float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(M_PI))) / (2.0f * std::log(base));
}
float yarn_ramp(float low, float high, int i0) {
  const float y = (static_cast<float>(i0 / 2) - low) / std::max(0.001f, high - low);
  return 1.0f - std::min(1.0f, std::max(0.0f, y));
}
}  // namespace

void rope_cache(const RopeParams& p, float pos, float* cs) {
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_dims));
  float corr0 = 0, corr1 = 0;
  if (p.ext_factor != 0.0f) {
    const float start = std::floor(yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base));
    const float end = std::ceil(yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base));
    corr0 = std::max(0.0f, start);
    corr1 = std::min(static_cast<float>(p.n_dims - 1), end);
  }
  float theta = pos;
  for (int i0 = 0; i0 < p.n_dims; i0 += 2) {
    // Llama 3.1's rope_freqs divide each pair's angle (as ggml's rope cache does).
    const float theta_extrap = p.freq_factors ? theta / p.freq_factors[i0 / 2] : theta;
    const float theta_interp = p.freq_scale * theta_extrap;
    float th = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float ramp_mix = yarn_ramp(corr0, corr1, i0) * p.ext_factor;
      // Contracted as ggml's CPU build computes them (checked bit for bit on its YaRN layers).
      th = std::fma(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
      mscale *= std::fma(0.1f, std::log(1.0f / p.freq_scale), 1.0f);
    }
    cs[i0] = std::cos(th) * mscale;
    cs[i0 + 1] = std::sin(th) * mscale;
    theta *= theta_scale;
  }
}

// The rotation as ggml's CPU build computes it (its compiler fuses the x0 products).
void rope_apply(const RopeParams& p, const float* cs, float* x, bool inverse) {
  const float sgn = inverse ? -1.0f : 1.0f;
  if (p.neox) {
    const int half = p.n_dims / 2;
    for (int i = 0; i < half; ++i) {
      const float c = cs[2 * i], s = sgn * cs[2 * i + 1];
      const float x0 = x[i], x1 = x[i + half];
      x[i] = std::fma(x0, c, -(x1 * s));
      x[i + half] = std::fma(x0, s, x1 * c);
    }
  } else {
    for (int i = 0; i < p.n_dims; i += 2) {
      const float c = cs[i], s = sgn * cs[i + 1];
      const float x0 = x[i], x1 = x[i + 1];
      x[i] = std::fma(x0, c, -(x1 * s));
      x[i + 1] = std::fma(x0, s, x1 * c);
    }
  }
}

void top_k(const float* x, int n, int k, int32_t* idx) {
  // Small k: partial selection sort, stable on ties.
  int32_t buf[1024];
  int32_t* order = n <= 1024 ? buf : new int32_t[n];
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + k, order + n, [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  std::copy(order, order + k, idx);
  if (order != buf) delete[] order;
}

}  // namespace strata
