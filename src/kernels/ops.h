#pragma once
// Element-wise and row ops of the forward pass (f32). Accumulations that ggml does in double
// (RMSNorm, softmax sums) are done in double here too, so results match llama.cpp closely.
#include <cstdint>

namespace strata {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * (w ? w[i] : 1)
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);
// LayerNorm as ggml's CPU norm op followed by its mul and add: mean from a double sum, variance
// from 8-value groups (their squares reduced as the AVX2 code does) summed in double, then
// y = ((x - mean) * scale) * w + b (w, b optional).
void layernorm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps);
// In-place softmax of x[n] (after x *= scale); an optional extra "sink" logit joins the
// normalization but gets no output slot. Rounds as ggml's CPU softmax: exp through its
// vectorized expf in groups of 8 (the last n % 8 through expf), group sums added in double.
void softmax(float* x, int64_t n, float scale = 1.0f, const float* sink = nullptr);
// The same over attention cells: x holds cells first..first+n-1 of a row whose other cells are
// masked and whose length is a multiple of 8 (a KV view), so every cell is in a group of 8.
void softmax_cells(float* x, int64_t n, int64_t first, float scale = 1.0f, const float* sink = nullptr);
// The same with x[i] at cell[i] of the row (cells ascending).
void softmax_cells(float* x, const int32_t* cell, int64_t n, float scale = 1.0f, const float* sink = nullptr);
// silu(x) = x / (1 + exp(-x))
inline float silu(float x);
// out[i] = silu(g[i]) * u[i]
void swiglu(const float* g, const float* u, float* out, int64_t n);
// ggml's vectorized expf on AVX2/FMA builds, one lane (see ops.cpp).
float ggml_vexpf(float x);
// gpt-oss: x = min(g, limit); y = clamp(u, -limit, limit); out = x * sigmoid(alpha*x) * (y + 1)
void swiglu_oai(const float* g, const float* u, float* out, int64_t n, float alpha, float limit);
// DeepSeek-V4: out = silu(min(g, limit)) * clamp(u, -limit, limit); limit <= 0: no clamp
void swiglu_clamp(const float* g, const float* u, float* out, int64_t n, float limit);

// ggml's sigmoid and softplus ops (libm expf/logf, scalar).
inline float sigmoid_f32(float x);
inline float softplus_f32(float x);  // x > 20 ? x : log(1 + exp(x))  (not log1p: the same float as ggml)
// y[i] = silu(x[i]) as ggml_vec_silu_f32: groups of 8 through its vectorized expf, the tail
// through x/(1+expf(-x)). x and y may alias.
void silu_vec(const float* x, float* y, int64_t n);
// L2 normalization as llama.cpp computes it for the gated delta net: RMSNorm with eps/n, then
// times 1/sqrt(n); y = x / sqrt(sum(x^2) + eps) up to rounding. x and y may alias.
void l2norm(const float* x, float* y, int64_t n, float eps);

// One token of a causal depthwise convolution (ggml_ssm_conv, K taps): for every channel c,
// y[c] = sum_j w[c*K + j] * in_j[c] in tap order, products rounded as ggml's CPU build does, where
// in_j = hist[j] (the K-1 previous inputs, oldest first, rows of n_ch values) and in_{K-1} = x.
void conv1d_causal_step(const float* hist, const float* x, const float* w, int n_ch, int k, float* y);

// One token of the gated delta rule (ggml_gated_delta_net, one value head, scalar decay) on a
// state M stored transposed, m[j*S + i] = M[i][j] (i: key dim, j: value dim):
//   M *= exp(g);  d[j] = (v[j] - sum_i M[i][j] k[i]) * beta;  M[i][j] += k[i] d[j];
//   out[j] = (sum_i M[i][j] q[i]) / sqrt(S)
// The sums go through `dot` (ggml_vec_dot_f32's association: KernelTable::dot_f32), the update
// is fused as ggml_vec_mad_f32.
using DotF32Fn = float (*)(int64_t n, const float* a, const float* b);
void gated_delta_step(float* m, const float* q, const float* k, const float* v, float g, float beta, int s, float* out, DotF32Fn dot);

// Rotary embedding of one head vector (n_dims rotated values at the start of x), using a
// precomputed cache of (cos, sin) pairs for this position: cs[2*i], cs[2*i+1], i < n_dims/2.
struct RopeParams {
  int n_dims = 0;
  bool neox = false;
  float freq_base = 10000.0f, freq_scale = 1.0f;
  float ext_factor = 0.0f, attn_factor = 1.0f, beta_fast = 32.0f, beta_slow = 1.0f;
  int n_ctx_orig = 0;
  const float* freq_factors = nullptr;  // [n_dims / 2] divisors of each pair's theta (Llama 3.1 rope_freqs), or none
};
// Fills cs[n_dims] with the (cos, sin) pairs of position `pos` (YaRN aware).
void rope_cache(const RopeParams& p, float pos, float* cs);
// Applies it to x (head vector); `inverse` rotates by -theta.
void rope_apply(const RopeParams& p, const float* cs, float* x, bool inverse = false);

// Indices of the k largest values of x[n], in descending order (ties: lower index first).
void top_k(const float* x, int n, int k, int32_t* idx);

}  // namespace strata

#include <cmath>
inline float strata::silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float strata::sigmoid_f32(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float strata::softplus_f32(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }
