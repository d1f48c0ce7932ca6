// DeepSeek-V4 hyper-connections (mHC): n_hc residual streams, mixed around every sub-block by
// a per-token pre (read), post (write) and Sinkhorn-normalized comb (stream mixing) matrix.
#include <cmath>
#include <cstring>

#include "model/arch/deepseek4.h"

namespace strata::arch {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// flat[i] = rmsnorm(concat(streams[i])) (no weight); mix[i] = fn . flat[i]
void mixes(FwdCtx& c, Dsv4Scratch& s, const HcWeights& w, int n) {
  const int64_t width = static_cast<int64_t>(c.cfg.n_hc) * c.cfg.n_embd;
  s.flat.resize(static_cast<size_t>(n * width));
  s.mix.resize(static_cast<size_t>(n * w.fn.rows));
  for (int i = 0; i < n; ++i) rmsnorm(s.streams.data() + i * width, nullptr, s.flat.data() + i * width, width, c.cfg.rms_eps);
  c.mm(w.fn, s.flat.data(), n, s.mix.data());
}

// Sinkhorn normalization of one comb matrix m(dst, src) = m[dst + n*src], already holding
// mix*scale + base. Float association as llama.cpp's fused CPU op (ggml's scalar loops are built
// with FMA contraction): sums start at eps, divisions are products with the reciprocal.
void sinkhorn(float* m, int nh, int iters, float eps) {
  // softmax over dst for every src, + eps
  for (int src = 0; src < nh; ++src) {
    float* col = m + nh * src;
    float mx = col[0];
    for (int dst = 1; dst < nh; ++dst) mx = std::max(mx, col[dst]);
    float sum = 0;
    for (int dst = 0; dst < nh; ++dst) {
      col[dst] = std::exp(col[dst] - mx);
      sum += col[dst];
    }
    const float inv = 1.0f / sum;
    for (int dst = 0; dst < nh; ++dst) col[dst] = std::fma(col[dst], inv, eps);
  }
  auto norm_over_src = [&] {  // each dst divided by its sum over src
    for (int dst = 0; dst < nh; ++dst) {
      float sum = eps;
      for (int src = 0; src < nh; ++src) sum += m[dst + nh * src];
      const float inv = 1.0f / sum;
      for (int src = 0; src < nh; ++src) m[dst + nh * src] *= inv;
    }
  };
  auto norm_over_dst = [&] {  // each src divided by its sum over dst
    for (int src = 0; src < nh; ++src) {
      float sum = eps;
      for (int dst = 0; dst < nh; ++dst) sum += m[dst + nh * src];
      const float inv = 1.0f / sum;
      for (int dst = 0; dst < nh; ++dst) m[dst + nh * src] *= inv;
    }
  };
  norm_over_src();
  for (int it = 1; it < iters; ++it) {
    norm_over_dst();
    norm_over_src();
  }
}

}  // namespace

void hc_prepare(FwdCtx& c, Dsv4Scratch& s, const HcWeights& w, int n) {
  const int nh = c.cfg.n_hc;
  const int n_mix = 2 * nh + nh * nh;
  mixes(c, s, w, n);
  s.pre.resize(static_cast<size_t>(n * nh));
  s.post.resize(static_cast<size_t>(n * nh));
  s.comb.resize(static_cast<size_t>(n * nh * nh));
  const float* base = w.base.data;
  const float* scale = w.scale.data;  // [pre, post, comb]
  const float eps = c.cfg.hc_eps;
  for (int i = 0; i < n; ++i) {
    const float* mx = s.mix.data() + static_cast<size_t>(i) * n_mix;
    float* pre = s.pre.data() + static_cast<size_t>(i) * nh;
    float* post = s.post.data() + static_cast<size_t>(i) * nh;
    float* comb = s.comb.data() + static_cast<size_t>(i) * nh * nh;
    for (int k = 0; k < nh; ++k) {
      pre[k] = sigmoid(mx[k] * scale[0] + base[k]) + eps;
      post[k] = 2.0f * sigmoid(mx[nh + k] * scale[1] + base[nh + k]);
    }
    for (int k = 0; k < nh * nh; ++k) comb[k] = std::fma(mx[2 * nh + k], scale[2], base[2 * nh + k]);
    sinkhorn(comb, nh, c.cfg.hc_sinkhorn_iters, eps);
  }
}

void hc_collapse(FwdCtx& c, const Dsv4Scratch& s, int n, float* out) {
  const int nh = c.cfg.n_hc, d = c.cfg.n_embd;
  for (int i = 0; i < n; ++i) {
    const float* x = s.streams.data() + static_cast<size_t>(i) * nh * d;
    const float* pre = s.pre.data() + static_cast<size_t>(i) * nh;
    float* o = out + static_cast<size_t>(i) * d;
    // sum_k pre[k] * x_k, fused multiply-adds in stream order (llama.cpp's fused op)
    for (int j = 0; j < d; ++j) o[j] = x[j] * pre[0];
    for (int k = 1; k < nh; ++k)
      for (int j = 0; j < d; ++j) o[j] = std::fma(x[static_cast<size_t>(k) * d + j], pre[k], o[j]);
  }
}

void hc_expand(FwdCtx& c, Dsv4Scratch& s, const float* f, int n) {
  const int nh = c.cfg.n_hc, d = c.cfg.n_embd;
  s.streams_new.resize(s.streams.size());
  for (int i = 0; i < n; ++i) {
    const float* x = s.streams.data() + static_cast<size_t>(i) * nh * d;
    float* y = s.streams_new.data() + static_cast<size_t>(i) * nh * d;
    const float* post = s.post.data() + static_cast<size_t>(i) * nh;
    const float* comb = s.comb.data() + static_cast<size_t>(i) * nh * nh;
    const float* fi = f + static_cast<size_t>(i) * d;
    for (int dst = 0; dst < nh; ++dst) {
      float* yd = y + static_cast<size_t>(dst) * d;
      for (int j = 0; j < d; ++j) yd[j] = post[dst] * fi[j];
      for (int src = 0; src < nh; ++src) {
        const float m = comb[dst + nh * src];
        const float* xs = x + static_cast<size_t>(src) * d;
        for (int j = 0; j < d; ++j) yd[j] = std::fma(xs[j], m, yd[j]);
      }
    }
  }
  s.streams.swap(s.streams_new);
}

void hc_readout(FwdCtx& c, Dsv4Scratch& s, const HcWeights& w, int n, float* out) {
  const int nh = c.cfg.n_hc;
  mixes(c, s, w, n);
  s.pre.resize(static_cast<size_t>(n * nh));
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < nh; ++k)
      s.pre[static_cast<size_t>(i) * nh + k] = sigmoid(s.mix[static_cast<size_t>(i) * nh + k] * w.scale.data[0] + w.base.data[k]) + c.cfg.hc_eps;
  // sum_k pre[k] * x_k in stream order, but unlike the sub-blocks' fused op llama.cpp builds the
  // head's read-out from separate ggml mul and add ops: every product is rounded before its add.
  const int d = c.cfg.n_embd;
  for (int i = 0; i < n; ++i) {
    const float* x = s.streams.data() + static_cast<size_t>(i) * nh * d;
    const float* pre = s.pre.data() + static_cast<size_t>(i) * nh;
    float* o = out + static_cast<size_t>(i) * d;
    for (int j = 0; j < d; ++j) o[j] = x[j] * pre[0];
    for (int k = 1; k < nh; ++k)
      for (int j = 0; j < d; ++j) {
        const float prod = x[static_cast<size_t>(k) * d + j] * pre[k];
        o[j] = o[j] + prod;
      }
  }
}

}  // namespace strata::arch
