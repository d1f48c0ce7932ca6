// DeepSeek-V4 forward: the token embedding is copied into n_hc residual streams; around each
// sub-block the streams are read (pre), the block runs on attn_norm / ffn_norm of that input,
// and its output is written back with the stream mixing (post, comb). A learned read-out
// collapses the streams before the output head.
#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "kernels/quants.h"
#include "model/arch/deepseek4.h"

namespace strata::arch {

Dsv4Cache& dsv4_cache(FwdCtx& c) {
  auto& ext = c.kv.ext();
  if (!ext) {
    auto cache = std::make_unique<Dsv4Cache>();
    cache->layers.resize(c.cfg.layers.size());
    for (size_t l = 0; l < c.cfg.layers.size(); ++l) {
      const LayerConfig& lc = c.cfg.layers[l];
      cache->layers[l].resize(static_cast<size_t>(c.kv.n_seq()));
      for (auto& ls : cache->layers[l]) {
        auto init = [](Dsv4Compressor& cp, int ratio, int head) {
          cp.ratio = ratio;
          cp.head = head;
          cp.width = ratio == 4 ? 2 * head : head;
          cp.ring_kv.assign(static_cast<size_t>(cp.ring()) * cp.width, 0.0f);
          cp.ring_sc.assign(static_cast<size_t>(cp.ring()) * cp.width, 0.0f);
        };
        if (lc.compress_ratio > 0) init(ls.comp, lc.compress_ratio, lc.head_dim_k);
        if (lc.compress_ratio == 4) init(ls.idx, 4, lc.idx_head_dim);
      }
    }
    ext = std::move(cache);
  }
  auto* cache = dynamic_cast<Dsv4Cache*>(ext.get());
  STRATA_CHECK(cache != nullptr, "the KV cache holds another architecture's state");
  return *cache;
}

void deepseek4_run_layers(FwdCtx& c) {
  const Batch& b = c.b;
  auto& st = c.st;
  const int n = b.n, d = c.cfg.n_embd, nh = c.cfg.n_hc;
  Dsv4Cache& cache = dsv4_cache(c);
  Dsv4Scratch& s = cache.scratch;
  // Streams: every one starts as the token embedding.
  s.streams.resize(static_cast<size_t>(n) * nh * d);
  for (int i = 0; i < n; ++i) {
    float* x = s.streams.data() + static_cast<size_t>(i) * nh * d;
    dequantize_row(c.w.tok_embd.type, c.w.tok_embd.row(b.tokens[i]), x, d);
    for (int k = 1; k < nh; ++k) std::memcpy(x + static_cast<size_t>(k) * d, x, sizeof(float) * d);
  }
  for (int l = 0; l < c.cfg.n_layer; ++l) {
    const double t0 = clock_s();
    const LayerWeights& lw = c.w.layers[l];
    // Attention.
    hc_prepare(c, s, lw.hc_attn, n);
    hc_collapse(c, s, n, st.x.data());
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.attn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, c.cfg.rms_eps);
    dsv4_attention(c, cache, l);
    hc_expand(c, s, st.out.data(), n);
    // Feed-forward.
    hc_prepare(c, s, lw.hc_ffn, n);
    hc_collapse(c, s, n, st.x.data());
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.ffn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, c.cfg.rms_eps);
    ffn_moe(c, l);
    hc_expand(c, s, st.out.data(), n);
    if (c.layer_s) (*c.layer_s)[static_cast<size_t>(l)] += clock_s() - t0;
  }
  // Read-out into st.x for the output head.
  hc_readout(c, s, c.w.output_hc, n, st.x.data());
}

}  // namespace strata::arch
