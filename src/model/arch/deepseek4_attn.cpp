// DeepSeek-V4 attention: one shared key/value vector per token (K == V), weightless per-head q
// RMSNorm, RoPE on the last dims of each head, attention sinks, a sliding window of raw keys
// plus compressed blocks (ratio 128: all completed blocks; ratio 4: the blocks the lightning
// indexer picks per query), the inverse RoPE on the output and a grouped low-rank projection.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/arch/deepseek4.h"
#include "model/attn_sum.h"
#include "model/lightning_indexer.h"

namespace strata::arch {
namespace {

// Adds the token at `pos` (features kv/sc [width], gate scores before the position embedding)
// to the compressor; when it completes block b = pos / ratio, the block's value is the
// per-channel softmax(score)-weighted sum of its tokens' values, then rmsnorm and RoPE at b*ratio.
void compressor_push(Dsv4Compressor& cp, const CompressorWeights& w, const RopeParams& rp, float eps, int pos, const float* kv, const float* sc,
                     float* cs) {
  const int W = cp.width, ring = cp.ring(), m = cp.ratio;
  const int slot = pos % ring;
  const float* ape = w.ape.data() + static_cast<size_t>(pos % m) * W;
  std::memcpy(cp.ring_kv.data() + static_cast<size_t>(slot) * W, kv, sizeof(float) * W);
  float* rs = cp.ring_sc.data() + static_cast<size_t>(slot) * W;
  for (int j = 0; j < W; ++j) rs[j] = sc[j] + ape[j];
  if ((pos + 1) % m != 0) return;
  const int b = pos / m;
  cp.blocks.resize(static_cast<size_t>(b + 1) * cp.head);
  float* out = cp.blocks.data() + static_cast<size_t>(b) * cp.head;
  float s[2 * kDsv4MaxCompressRatio], v[2 * kDsv4MaxCompressRatio];  // ratio 4 overlaps two blocks: 2 * ratio entries
  for (int ch = 0; ch < cp.head; ++ch) {
    int k = 0;
    auto take = [&](int tok, int off) {
      const size_t at = static_cast<size_t>(tok % ring) * W + off + ch;
      s[k] = cp.ring_sc[at];
      v[k] = cp.ring_kv[at];
      ++k;
    };
    if (m == 4) {
      // Overlapping: first half of the previous block's tokens, second half of this block's
      // (block 0 has no previous half: llama.cpp scores it -inf with value 0).
      if (b > 0) {
        for (int j = 0; j < m; ++j) take((b - 1) * m + j, 0);
      } else {
        for (int j = 0; j < m; ++j, ++k) s[k] = -INFINITY, v[k] = 0.0f;
      }
      for (int j = 0; j < m; ++j) take(b * m + j, cp.head);
    } else {
      for (int j = 0; j < m; ++j) take(b * m + j, 0);
    }
    // As llama.cpp's graph: p = ggml's softmax of the scores, then the sum of p * v over the
    // row (ggml's sum_rows adds in double).
    softmax(s, k);
    double acc = 0;
    for (int j = 0; j < k; ++j) acc += static_cast<double>(s[j] * v[j]);
    out[ch] = static_cast<float>(acc);
  }
  rmsnorm(out, w.norm.data, out, cp.head, eps);
  rope_cache(rp, static_cast<float>(b * m), cs);
  rope_apply(rp, cs, out + cp.head - rp.n_dims);
}

// Runs one compressor over the batch (features from st.xn).
void compress_batch(FwdCtx& c, Dsv4Cache& cache, int layer, bool indexer, const RopeParams& rp) {
  const LayerWeights& lw = c.w.layers[layer];
  const CompressorWeights& w = indexer ? lw.idx_comp : lw.comp;
  Dsv4Scratch& s = cache.scratch;
  const int n = c.b.n;
  const int W = static_cast<int>(w.kv.rows);
  s.ckv.resize(static_cast<size_t>(n) * W);
  s.csc.resize(static_cast<size_t>(n) * W);
  c.mm(w.kv, c.st.xn.data(), n, s.ckv.data());
  c.mm(w.gate, c.st.xn.data(), n, s.csc.data());
  for (int i = 0; i < n; ++i) {
    Dsv4LayerState& ls = cache.layers[layer][c.seq(i)];
    compressor_push(indexer ? ls.idx : ls.comp, w, rp, c.cfg.rms_eps, c.b.pos[i], s.ckv.data() + static_cast<size_t>(i) * W,
                    s.csc.data() + static_cast<size_t>(i) * W, c.st.rope_cs.data());
  }
}

// Lightning indexer (model/lightning_indexer.h): for every query, the top-k visible 4-token
// blocks by sum_h w_h * relu(q_h . k_b), w = proj(a) / sqrt(dim * heads).
void index_select(FwdCtx& c, Dsv4Cache& cache, int layer, const RopeParams& rp) {
  const LayerConfig& lc = c.cfg.layers[layer];
  Dsv4Scratch& s = cache.scratch;
  const int n = c.b.n, I = lc.idx_n_head, K = lc.idx_head_dim, top = lc.idx_top_k;
  s.iq.resize(static_cast<size_t>(n) * I * K);
  s.iw.resize(static_cast<size_t>(n) * I);
  s.isel.resize(static_cast<size_t>(n) * top);
  s.n_isel.resize(static_cast<size_t>(n));
  indexer_project(c, layer, s.qr.data(), s.iq.data(), s.iw.data());
  std::vector<float>& score = s.iscore;
  std::vector<int32_t>& order = s.iorder;
  for (int i = 0; i < n; ++i) {
    const int pos = c.b.pos[i];
    const int nb = (pos + 1) / 4;
    int32_t* sel = s.isel.data() + static_cast<size_t>(i) * top;
    if (nb <= top) {
      for (int b = 0; b < nb; ++b) sel[b] = b;
      s.n_isel[i] = nb;
      continue;
    }
    float* q = s.iq.data() + static_cast<size_t>(i) * I * K;
    rope_cache(rp, static_cast<float>(pos), c.st.rope_cs.data());
    for (int h = 0; h < I; ++h) rope_apply(rp, c.st.rope_cs.data(), q + h * K + K - rp.n_dims);
    const float* w = s.iw.data() + static_cast<size_t>(i) * I;
    const Dsv4Compressor& keys = cache.layers[layer][c.seq(i)].idx;
    score.resize(static_cast<size_t>(nb));
    for (int b = 0; b < nb; ++b) score[static_cast<size_t>(b)] = indexer_score(c.k, q, w, keys.block(b), I, K);
    // Blocks with equal scores (all heads clipped to 0 by the relu) are chosen as llama.cpp chooses them.
    order.resize(static_cast<size_t>(nb));
    indexer_top_k(score.data(), nb, top, order.data(), sel);
    s.n_isel[i] = top;
  }
}

// Queries (q_a -> norm -> q_b, per-head weightless norm, RoPE) into st.q and the shared key/value
// vector (norm, RoPE) into st.k and the KV cache.
void project_qkv(FwdCtx& c, Dsv4Cache& cache, int layer, const RopeParams& rp) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  Dsv4Scratch& s = cache.scratch;
  const int n = c.b.n, H = lc.n_head, d = lc.head_dim_k, r = lc.qk_rope_dim, ql = lc.q_lora_rank;
  const int hd = H * d;
  s.qr.resize(static_cast<size_t>(n) * ql);
  c.mm(lw.wq_a, st.xn.data(), n, s.qr.data());
  for (int i = 0; i < n; ++i) rmsnorm(s.qr.data() + static_cast<size_t>(i) * ql, lw.q_a_norm.data, s.qr.data() + static_cast<size_t>(i) * ql, ql, c.cfg.rms_eps);
  c.mm(lw.wq_b, s.qr.data(), n, st.q.data());  // [n, H*d]
  c.mm(lw.wkv, st.xn.data(), n, st.k.data());   // [n, d]
  for (int i = 0; i < n; ++i) {
    float* cs = st.rope_cs.data();
    rope_cache(rp, static_cast<float>(c.b.pos[i]), cs);
    float* qi = st.q.data() + static_cast<size_t>(i) * hd;
    for (int h = 0; h < H; ++h) {
      rmsnorm(qi + h * d, nullptr, qi + h * d, d, c.cfg.rms_eps);
      rope_apply(rp, cs, qi + h * d + d - r);
    }
    float* kv = st.k.data() + static_cast<size_t>(i) * d;
    rmsnorm(kv, lw.kv_a_norm.data, kv, d, c.cfg.rms_eps);
    rope_apply(rp, cs, kv + d - r);
    c.kv.store(layer, c.seq(i), c.b.pos[i], kv, nullptr);
  }
}

// Keys one query sees: at most this many (window + compressed blocks).
size_t max_visible_keys(const FwdCtx& c, const LayerConfig& lc) {
  return static_cast<size_t>(lc.sliding_window) + static_cast<size_t>(c.kv.n_ctx()) / std::max(1, lc.compress_ratio == 0 ? c.kv.n_ctx() : lc.compress_ratio) + 1;
}

// Per-thread buffers of the attention loop (already reserved by make_state; grown only if not).
void ensure_thread_buffers(Dsv4Scratch& s, int n_threads, size_t max_keys, int win, int d) {
  if (static_cast<int>(s.thread.size()) < n_threads) s.thread.resize(static_cast<size_t>(n_threads));
  if (static_cast<int>(s.thread_keys.size()) < n_threads) s.thread_keys.resize(static_cast<size_t>(n_threads));
  if (static_cast<int>(s.thread_cells.size()) < n_threads) s.thread_cells.resize(static_cast<size_t>(n_threads));
  for (int t = 0; t < n_threads; ++t) {
    const size_t need = max_keys + static_cast<size_t>(win) * d + 2 * static_cast<size_t>(d) + 32 * static_cast<size_t>(d);
    if (s.thread[t].size() < need) s.thread[t].resize(need);
    if (s.thread_keys[t].size() < max_keys) s.thread_keys[t].resize(max_keys);
    if (s.thread_cells[t].size() < max_keys) s.thread_cells[t].resize(max_keys);
  }
}

// One thread's view of the attention loop's scratch.
struct KeyScratch {
  float* scores;       // [max_keys]
  float* rows;         // [win, d] dequantized window (non-f32 caches)
  float* cs;           // [r]
  float* lanes;        // [d, 32]
  const float** keys;  // [max_keys]
  int32_t* cells;      // key j's cell in llama.cpp's KV view
};

// The keys token i sees, in llama.cpp's KV view order: raw cells of the window at their positions
// (padded to a multiple of 256), then the compressed blocks. Returns their count.
int visible_keys(const FwdCtx& c, const Dsv4Cache& cache, int layer, int i, const KeyScratch& t) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const Dsv4Scratch& s = cache.scratch;
  const int d = lc.head_dim_k, win = lc.sliding_window;
  const int pos = c.b.pos[i], seq = c.seq(i);
  const int32_t raw_cells = (c.kv.n_ctx() + 255) / 256 * 256;
  const bool kf32 = c.kv.type_k() == GgmlType::F32;
  int m = 0;
  const int j0 = std::max(0, pos - win + 1);
  for (int j = j0; j <= pos; ++j) {
    t.cells[m] = j;
    if (kf32) {
      t.keys[m++] = c.kv.k_f32(layer, seq, j);
    } else {
      float* row = t.rows + static_cast<size_t>(j - j0) * d;
      c.kv.read_k(layer, seq, j, j + 1, row);
      t.keys[m++] = row;
    }
  }
  const Dsv4Compressor& comp = cache.layers[layer][seq].comp;
  if (lc.compress_ratio == 128) {
    const int nb = (pos + 1) / 128;
    for (int b = 0; b < nb; ++b) {
      t.cells[m] = raw_cells + b;
      t.keys[m++] = comp.block(b);
    }
  } else if (lc.compress_ratio == 4) {
    const int32_t* sel = s.isel.data() + static_cast<size_t>(i) * lc.idx_top_k;
    const int m0 = m;
    for (int j = 0; j < s.n_isel[i]; ++j) t.cells[m++] = raw_cells + sel[j];
    std::sort(t.cells + m0, t.cells + m);  // the view's order
    for (int j = m0; j < m; ++j) t.keys[j] = comp.block(t.cells[j] - raw_cells);
  }
  return m;
}

// Head h of token i over its visible keys (values = keys), then the inverse RoPE: st.attn.
void attend_head(FwdCtx& c, int layer, int i, int h, int m, const KeyScratch& t, const RopeParams& rp) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  const int d = lc.head_dim_k, r = lc.qk_rope_dim, hd = lc.n_head * d;
  const float* q = c.st.q.data() + static_cast<size_t>(i) * hd + h * d;
  for (int j = 0; j < m; ++j) t.scores[j] = c.k.dot_f32(d, q, t.keys[j]);
  softmax_cells(t.scores, t.cells, m, lc.kq_scale, lw.sinks.data + h);
  float* out = c.st.attn.data() + static_cast<size_t>(i) * hd + h * d;
  if (c.kv.type_k() == GgmlType::F32) {  // llama.cpp's association (f32 caches are what the goldens use)
    attn_value_sum(t.scores, m, d, [&](int j) { return t.cells[j]; }, [&](int j) { return t.keys[j]; }, out, t.lanes, attn_sum_lanes(c.solo(i), d));
  } else {  // f16/q8_0: no order to follow, vectorized
    std::fill(out, out + d, 0.0f);
    for (int j = 0; j < m; ++j)
      if (t.scores[j] != 0.0f) c.k.axpy_f32(d, t.scores[j], t.keys[j], out);
  }
  rope_cache(rp, static_cast<float>(c.b.pos[i]), t.cs);
  rope_apply(rp, t.cs, out + d - r, /*inverse=*/true);
}

// Attention per (token, head) over window + compressed keys into st.attn [n, H*d].
void attend_all(FwdCtx& c, Dsv4Cache& cache, int layer, const RopeParams& rp) {
  const LayerConfig& lc = c.cfg.layers[layer];
  Dsv4Scratch& s = cache.scratch;
  const int n = c.b.n, H = lc.n_head, d = lc.head_dim_k, win = lc.sliding_window;
  const size_t max_keys = max_visible_keys(c, lc);
  ensure_thread_buffers(s, c.pool ? c.pool->size() : 1, max_keys, win, d);
  c.parallel(static_cast<int64_t>(n) * H, [&](int64_t a, int64_t e, int tid) {
    KeyScratch t;
    t.scores = s.thread[tid].data();
    t.rows = t.scores + max_keys;
    t.cs = t.rows + static_cast<size_t>(win) * d;
    t.lanes = t.cs + 2 * static_cast<size_t>(d);
    t.keys = s.thread_keys[tid].data();
    t.cells = s.thread_cells[tid].data();
    for (int64_t it = a; it < e; ++it) {
      const int i = static_cast<int>(it / H), h = static_cast<int>(it % H);
      const int m = visible_keys(c, cache, layer, i, t);
      attend_head(c, layer, i, h, m, t, rp);
    }
  });
}

// Grouped low-rank output: group g's heads through its slice of attn_output_a, then attn_output_b.
// llama.cpp multiplies a permuted (non-contiguous) view of the heads there, so its tiled GEMM
// never applies: every token takes the dot association (mm_rows), chunk or not.
void grouped_output(FwdCtx& c, Dsv4Cache& cache, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  Dsv4Scratch& s = cache.scratch;
  const int n = c.b.n, hd = lc.n_head * lc.head_dim_k;
  const int G = lc.n_out_group, ol = lc.o_lora_rank, gw = hd / G;
  s.grp_in.resize(static_cast<size_t>(n) * gw);
  s.grp_out.resize(static_cast<size_t>(n) * ol);
  s.grp_cat.resize(static_cast<size_t>(n) * G * ol);
  for (int g = 0; g < G; ++g) {
    for (int i = 0; i < n; ++i)
      std::memcpy(s.grp_in.data() + static_cast<size_t>(i) * gw, st.attn.data() + static_cast<size_t>(i) * hd + static_cast<size_t>(g) * gw,
                  sizeof(float) * gw);
    const QMatrix wa{lw.wo_a.type, ol, gw, lw.wo_a.row(static_cast<int64_t>(g) * ol), lw.wo_a.row_stride_bytes};
    c.mm_rows(wa, s.grp_in.data(), n, s.grp_out.data());
    for (int i = 0; i < n; ++i)
      std::memcpy(s.grp_cat.data() + static_cast<size_t>(i) * G * ol + static_cast<size_t>(g) * ol, s.grp_out.data() + static_cast<size_t>(i) * ol,
                  sizeof(float) * ol);
  }
  c.mm(lw.wo_b, s.grp_cat.data(), n, st.out.data());
}

}  // namespace

void dsv4_attention(FwdCtx& c, Dsv4Cache& cache, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  check_batch_positions(c);
  const RopeParams rp = rope_params(lc.rope);
  project_qkv(c, cache, layer, rp);
  // Compressed blocks (and the indexer's keys and choices).
  if (lc.compress_ratio > 0) compress_batch(c, cache, layer, false, rp);
  if (lc.compress_ratio == 4) {
    compress_batch(c, cache, layer, true, rp);
    index_select(c, cache, layer, rp);
  }
  attend_all(c, cache, layer, rp);
  grouped_output(c, cache, layer);
}

}  // namespace strata::arch
