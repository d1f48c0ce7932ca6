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

namespace {
template <typename T>
uint64_t cap_bytes(const std::vector<T>& v) {
  return static_cast<uint64_t>(v.capacity()) * sizeof(T);
}

void init_compressor(Dsv4Compressor& cp, int ratio, int head, int n_ctx) {
  cp.ratio = ratio;
  cp.head = head;
  cp.width = ratio == 4 ? 2 * head : head;
  cp.ring_kv.assign(static_cast<size_t>(cp.ring()) * cp.width, 0.0f);
  cp.ring_sc.assign(static_cast<size_t>(cp.ring()) * cp.width, 0.0f);
  cp.blocks.reserve(static_cast<size_t>(n_ctx / ratio + 1) * head);
}

// Room for passes of n tokens: every buffer the deepseek4 forward sizes from the batch.
void reserve_scratch(Dsv4Scratch& s, const ModelConfig& cfg, int n_ctx, int n, int n_threads) {
  const size_t N = static_cast<size_t>(n), nh = static_cast<size_t>(cfg.n_hc), d = static_cast<size_t>(cfg.n_embd);
  size_t ql = 0, w = 0, iqk = 0, ih = 0, top = 0, gw = 0, ol = 0, gol = 0, thread = 0, keys = 0;
  for (const LayerConfig& lc : cfg.layers) {
    const size_t hd = static_cast<size_t>(lc.n_head) * lc.head_dim_k, win = static_cast<size_t>(lc.sliding_window);
    ql = std::max(ql, static_cast<size_t>(lc.q_lora_rank));
    w = std::max({w, 2 * static_cast<size_t>(lc.head_dim_k), 2 * static_cast<size_t>(lc.idx_head_dim)});
    iqk = std::max(iqk, static_cast<size_t>(lc.idx_n_head) * lc.idx_head_dim);
    ih = std::max(ih, static_cast<size_t>(lc.idx_n_head));
    top = std::max(top, static_cast<size_t>(lc.idx_top_k));
    if (lc.n_out_group > 0) gw = std::max(gw, hd / static_cast<size_t>(lc.n_out_group));
    ol = std::max(ol, static_cast<size_t>(lc.o_lora_rank));
    gol = std::max(gol, static_cast<size_t>(lc.n_out_group) * lc.o_lora_rank);
    const size_t mk = win + static_cast<size_t>(n_ctx) / static_cast<size_t>(std::max(1, lc.compress_ratio == 0 ? n_ctx : lc.compress_ratio)) + 1;
    keys = std::max(keys, mk);
    thread = std::max(thread, mk + win * lc.head_dim_k + 34 * static_cast<size_t>(lc.head_dim_k));
  }
  for (auto* v : {&s.streams, &s.streams_new, &s.flat}) v->reserve(N * nh * d);
  s.mix.reserve(N * nh * (nh + 2));
  for (auto* v : {&s.pre, &s.post}) v->reserve(N * nh);
  s.comb.reserve(N * nh * nh);
  s.qr.reserve(N * ql);
  for (auto* v : {&s.ckv, &s.csc}) v->reserve(N * w);
  s.iq.reserve(N * iqk);
  s.iw.reserve(N * ih);
  s.isel.reserve(N * top);
  s.n_isel.reserve(N);
  s.iscore.reserve(static_cast<size_t>(n_ctx) / 4 + 1);
  s.iorder.reserve(static_cast<size_t>(n_ctx) / 4 + 1);
  s.grp_in.reserve(N * gw);
  s.grp_out.reserve(N * ol);
  s.grp_cat.reserve(N * gol);
  s.thread.resize(static_cast<size_t>(n_threads));
  s.thread_keys.resize(static_cast<size_t>(n_threads));
  s.thread_cells.resize(static_cast<size_t>(n_threads));
  for (int t = 0; t < n_threads; ++t) {
    s.thread[t].reserve(thread);
    s.thread_keys[t].reserve(keys);
    s.thread_cells[t].reserve(keys);
  }
}
}  // namespace

uint64_t Dsv4Cache::bytes() const {
  uint64_t b = 0;
  for (const auto& layer : layers)
    for (const Dsv4LayerState& ls : layer)
      for (const Dsv4Compressor* cp : {&ls.comp, &ls.idx}) b += cap_bytes(cp->ring_kv) + cap_bytes(cp->ring_sc) + cap_bytes(cp->blocks);
  const Dsv4Scratch& s = scratch;
  for (const auto* v : {&s.streams, &s.streams_new, &s.flat, &s.mix, &s.pre, &s.post, &s.comb, &s.qr, &s.ckv, &s.csc, &s.iq, &s.iw, &s.iscore,
                        &s.grp_in, &s.grp_out, &s.grp_cat})
    b += cap_bytes(*v);
  for (const auto* v : {&s.isel, &s.n_isel, &s.iorder}) b += cap_bytes(*v);
  for (const auto& t : s.thread) b += cap_bytes(t);
  for (const auto& t : s.thread_keys) b += cap_bytes(t);
  for (const auto& t : s.thread_cells) b += cap_bytes(t);
  return b;
}

std::unique_ptr<KvCacheExt> deepseek4_make_state(const ModelConfig& cfg, const KvCache& kv, int n_batch, int n_threads) {
  const int n_ctx = kv.n_ctx(), n_seq = kv.n_seq();
  auto cache = std::make_unique<Dsv4Cache>();
  cache->layers.resize(cfg.layers.size());
  for (size_t l = 0; l < cfg.layers.size(); ++l) {
    const LayerConfig& lc = cfg.layers[l];
    cache->layers[l].resize(static_cast<size_t>(n_seq));
    for (auto& ls : cache->layers[l]) {
      if (lc.compress_ratio > 0) init_compressor(ls.comp, lc.compress_ratio, lc.head_dim_k, n_ctx);
      if (lc.compress_ratio == 4) init_compressor(ls.idx, 4, lc.idx_head_dim, n_ctx);
    }
  }
  reserve_scratch(cache->scratch, cfg, n_ctx, n_batch, n_threads);
  return cache;
}

Dsv4Cache& dsv4_cache(FwdCtx& c) {
  auto& ext = c.kv.ext();
  if (!ext) ext = deepseek4_make_state(c.cfg, c.kv, c.b.n, c.pool ? c.pool->size() : 1);
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
    c.trace("hc_attn_pre", l, st.x.data(), n, d);
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.attn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, c.cfg.rms_eps);
    c.trace("attn_norm", l, st.xn.data(), n, d);
    dsv4_attention(c, cache, l);
    c.trace("attn_out", l, st.out.data(), n, d);
    hc_expand(c, s, st.out.data(), n);
    // Feed-forward.
    hc_prepare(c, s, lw.hc_ffn, n);
    hc_collapse(c, s, n, st.x.data());
    c.trace("hc_ffn_pre", l, st.x.data(), n, d);
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.ffn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, c.cfg.rms_eps);
    c.trace("ffn_norm", l, st.xn.data(), n, d);
    ffn_moe(c, l);
    c.trace("ffn_out", l, st.out.data(), n, d);
    hc_expand(c, s, st.out.data(), n);
    c.trace("l_out", l, s.streams.data(), n, nh * d);
    if (c.layer_s) (*c.layer_s)[static_cast<size_t>(l)] += clock_s() - t0;
  }
  // Read-out into st.x for the output head.
  hc_readout(c, s, c.w.output_hc, n, st.x.data());
}

}  // namespace strata::arch
