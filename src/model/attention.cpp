// Attention blocks: grouped-query (Llama/Mixtral/Qwen3/gpt-oss) and multi-head latent (DeepSeek).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>

#include "core/error.h"
#include "model/attn_sum.h"
#include "model/forward.h"

namespace strata {

RopeParams rope_params(const RopeConfig& r) {
  RopeParams p;
  p.n_dims = r.n_dims;
  p.neox = r.style == RopeStyle::Neox;
  p.freq_base = r.freq_base;
  p.freq_scale = r.freq_scale;
  p.ext_factor = r.ext_factor;
  p.attn_factor = r.attn_factor;
  p.beta_fast = r.beta_fast;
  p.beta_slow = r.beta_slow;
  p.n_ctx_orig = r.n_ctx_orig;
  return p;
}

void add_bias(float* y, const VecF32& b, int64_t n_rows) {
  if (b.empty()) return;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < b.n; ++i) y[r * b.n + i] += b.data[i];
}

namespace {

// One query head against positions [j0, j1] of its sequence (or the listed cells of a sparse
// selection). Scores and rows live in `buf`.
struct HeadAttn {
  const float* q;     // [dk]
  int dk, dv;
  int layer, seq, kv_head;
  int k_off, v_off;   // offsets of this head's values inside the cache rows
  bool v_in_k;        // MLA: V is the first dv values of the K row
  float scale;
  const float* sink;  // nullptr or the head's sink logit
  const KernelTable* k;  // f32 dot (ggml's association), y += a*x, their f16 forms
  // llama.cpp's CPU association (f32 caches): scores through ggml's f32 dot, its softmax,
  // then the value sum of a lone decode token through the same dot over the 256-padded view
  // (32 lanes), of a multi-token chunk through its tiled GEMM (8 lanes); lanes follow cell index.
  bool solo = false;
  // Sparse attention: the ascending positions the query sees (n_cells of them) instead of j0..j1;
  // llama.cpp masks the others, so every key keeps its cell (softmax groups, value-sum lanes).
  const int32_t* cells = nullptr;
  int n_cells = 0;
};

void attend(const KvCache& kv, const HeadAttn& h, int j0, int j1, float* out, float* buf) {
  const int n = h.cells ? h.n_cells : j1 - j0 + 1;
  auto at = [&](int j) -> int { return h.cells ? h.cells[j] : j0 + j; };  // the position (cell) of key j
  float* scores = buf;                 // [n]
  float* row = buf + n;                // [k or v row width]
  float* lanes = row + std::max(kv.k_width(h.layer), std::max(kv.v_width(h.layer), h.dv));  // [dv * 32]
  const bool kf32 = kv.type_k() == GgmlType::F32, kf16 = kv.type_k() == GgmlType::F16;
  for (int j = 0; j < n; ++j) {
    if (kf16) {  // converted inside the dot
      scores[j] = h.k->dot_f16_f32(h.dk, kv.k_f16(h.layer, h.seq, at(j)) + h.k_off, h.q);
      continue;
    }
    const float* kr;
    if (kf32) {
      kr = kv.k_f32(h.layer, h.seq, at(j)) + h.k_off;
    } else {
      kv.read_k_slice(h.layer, h.seq, at(j), h.k_off, h.dk, row);  // only this head's slice
      kr = row;
    }
    scores[j] = h.k->dot_f32(h.dk, h.q, kr);
  }
  if (h.cells) softmax_cells(scores, h.cells, n, h.scale, h.sink);
  else softmax_cells(scores, n, j0, h.scale, h.sink);
  const bool vf32 = h.v_in_k ? kf32 : kv.type_v() == GgmlType::F32;
  if (!vf32) {  // f16/q8_0 values: vectorized accumulation, one value row at a time
    std::fill(out, out + h.dv, 0.0f);
    const bool vf16 = (h.v_in_k ? kv.type_k() : kv.type_v()) == GgmlType::F16;
    for (int j = 0; j < n; ++j) {
      if (scores[j] == 0.0f) continue;
      if (vf16) {
        const uint16_t* vr = h.v_in_k ? kv.k_f16(h.layer, h.seq, at(j)) : kv.v_f16(h.layer, h.seq, at(j));
        h.k->axpy_f16(h.dv, scores[j], vr + h.v_off, out);
        continue;
      }
      if (h.v_in_k) kv.read_k_slice(h.layer, h.seq, at(j), h.v_off, h.dv, row);
      else kv.read_v_slice(h.layer, h.seq, at(j), h.v_off, h.dv, row);
      h.k->axpy_f32(h.dv, scores[j], row, out);
    }
    return;
  }
  attn_value_sum(scores, n, h.dv, at, [&](int j) -> const float* {
    if (h.v_in_k) {
      if (vf32) return kv.k_f32(h.layer, h.seq, at(j)) + h.v_off;
      kv.read_k_slice(h.layer, h.seq, at(j), h.v_off, h.dv, row);
      return row;
    }
    if (vf32) return kv.v_f32(h.layer, h.seq, at(j)) + h.v_off;
    kv.read_v_slice(h.layer, h.seq, at(j), h.v_off, h.dv, row);
    return row;
  }, out, lanes, attn_sum_lanes(h.solo, h.dv));
}

// The m query heads hs[0..m) of one KV head (same sequence, positions, f16 K and V caches, no
// sparse selection): each key and value row is converted once for all of them. Per head the
// arithmetic is attend()'s (dot_f16_f32, softmax, axpy_f16 skipping zero weights), bit for bit.
// buf: [m * n] scores.
void attend_group_f16(const KvCache& kv, const HeadAttn* hs, int m, int j0, int j1, float* const* out, float* buf) {
  const HeadAttn& h = hs[0];
  const int n = j1 - j0 + 1;
  constexpr int kMaxGroup = 64;
  const float* qs[kMaxGroup];
  float w[kMaxGroup];
  for (int g = 0; g < m; ++g) qs[g] = hs[g].q;
  for (int j = 0; j < n; ++j) {
    h.k->dot_f16_f32_multi(h.dk, kv.k_f16(h.layer, h.seq, j0 + j) + h.k_off, qs, m, w);
    for (int g = 0; g < m; ++g) buf[static_cast<size_t>(g) * n + j] = w[g];
  }
  for (int g = 0; g < m; ++g) softmax_cells(buf + static_cast<size_t>(g) * n, n, j0, hs[g].scale, hs[g].sink);
  const uint16_t* v0 = kv.v_f16(h.layer, h.seq, j0);
  const int64_t v_stride = n > 1 ? kv.v_f16(h.layer, h.seq, j0 + 1) - v0 : 0;
  h.k->vsum_f16_multi(n, h.dv, v0 + h.v_off, v_stride, buf, n, out, m);
}

// Gated attention (Qwen3.5): the q projection holds per head [query (head_dim_k) | gate
// (head_dim_k)]; queries go to st.q [n, n_head * head_dim_k], gates to st.gather (same shape).
void split_query_gate(FwdCtx& c, const LayerConfig& lc, const float* qg) {
  const int d = lc.head_dim_k, nh = lc.n_head;
  for (int i = 0; i < c.b.n; ++i)
    for (int h = 0; h < nh; ++h) {
      const float* src = qg + (static_cast<size_t>(i) * nh + h) * 2 * d;
      const size_t dst = (static_cast<size_t>(i) * nh + h) * d;
      std::memcpy(c.st.q.data() + dst, src, sizeof(float) * d);
      std::memcpy(c.st.gather.data() + dst, src + d, sizeof(float) * d);
    }
}

int window_start(const LayerConfig& lc, int pos) { return lc.sliding_window > 0 ? std::max(0, pos - lc.sliding_window + 1) : 0; }

// Every query head of the batch (st.q: [n, n_head * head_dim_k]) against its sequence's cached
// K/V rows of n_head_kv heads; output [n, n_head * head_dim_v] in st.attn. With f16 K and V
// caches the query heads of one KV head go together (attend_group_f16, as many as the thread's
// buffer holds scores for), each row converted once for all of them; results are the same bits.
void attend_heads(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n;
  const int dq = lc.n_head * lc.head_dim_k;
  const int group = lc.n_head / lc.n_head_kv;
  const int dvo = lc.n_head * lc.head_dim_v;
  auto head = [&](int i, int h) {
    HeadAttn ha;
    ha.q = st.q.data() + static_cast<size_t>(i) * dq + h * lc.head_dim_k;
    ha.dk = lc.head_dim_k;
    ha.dv = lc.head_dim_v;
    ha.layer = layer;
    ha.seq = c.seq(i);
    ha.kv_head = h / group;
    ha.k_off = ha.kv_head * lc.head_dim_k;
    ha.v_off = ha.kv_head * lc.head_dim_v;
    ha.v_in_k = false;
    ha.scale = lc.kq_scale;
    ha.sink = lc.sinks ? lw.sinks.data + h : nullptr;
    ha.k = &c.k;
    ha.solo = c.solo(i);
    return ha;
  };
  auto out_of = [&](int i, int h) { return st.attn.data() + static_cast<size_t>(i) * dvo + h * lc.head_dim_v; };
  const bool grouped = group > 1 && c.kv.type_k() == GgmlType::F16 && c.kv.type_v() == GgmlType::F16;
  const int per_item = grouped ? group : 1;
  // Items from the last token back: the costliest (most keys) first, the cheap ones even out the end.
  const int64_t items = static_cast<int64_t>(n) * (lc.n_head / per_item);
  const int64_t grain = std::clamp<int64_t>(items / 16, 1, lc.n_head / per_item);
  c.parallel_dynamic(items, grain, [&](int64_t a, int64_t e, int tid) {
    float* buf = st.thread_buf[tid].data();
    const size_t buf_floats = st.thread_buf[tid].size();
    for (int64_t x = a; x < e; ++x) {
      const int64_t it = items - 1 - x;
      const int i = static_cast<int>(it / (lc.n_head / per_item)), h0 = static_cast<int>(it % (lc.n_head / per_item)) * per_item;
      const int pos = c.b.pos[i], j0 = window_start(lc, pos);
      const int n_keys = pos - j0 + 1;
      const int fit = static_cast<int>(std::min<size_t>(64, buf_floats / static_cast<size_t>(n_keys)));
      if (per_item == 1 || fit < 2) {
        for (int h = h0; h < h0 + per_item; ++h) attend(c.kv, head(i, h), j0, pos, out_of(i, h), buf);
        continue;
      }
      for (int g0 = 0; g0 < per_item; g0 += fit) {
        const int m = std::min(fit, per_item - g0);
        HeadAttn hs[64];
        float* outs[64];
        for (int g = 0; g < m; ++g) {
          hs[g] = head(i, h0 + g0 + g);
          outs[g] = out_of(i, h0 + g0 + g);
        }
        attend_group_f16(c.kv, hs, m, j0, pos, outs, buf);
      }
    }
  });
}

}  // namespace

// MLA projections of st.xn: queries [n, n_head * (nope + rope)] in st.q (low-rank with its norm,
// or direct), the compressed latent + shared rope key [n, kv_lora + rope] in st.k (not yet normalized).
void mla_project(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n;
  if (!lw.wq_a.empty()) {
    c.mm(lw.wq_a, st.xn.data(), n, st.tmp.data());
    for (int i = 0; i < n; ++i) {
      float* r = st.tmp.data() + static_cast<size_t>(i) * lc.q_lora_rank;
      rmsnorm(r, lw.q_a_norm.data, r, lc.q_lora_rank, c.cfg.rms_eps);
    }
    c.trace("qr", layer, st.tmp.data(), n, lc.q_lora_rank);
    c.mm(lw.wq_b, st.tmp.data(), n, st.q.data());
  } else {
    c.mm(lw.wq, st.xn.data(), n, st.q.data());
  }
  c.mm(lw.wkv_a, st.xn.data(), n, st.k.data());  // [n, kv_lora + rope]
  c.trace("q", layer, st.q.data(), n, lc.n_head * (lc.qk_nope_dim + lc.qk_rope_dim));
  c.trace("kv_cmpr_pe", layer, st.k.data(), n, lc.kv_lora_rank + lc.qk_rope_dim);
}

void check_batch_positions(const FwdCtx& c) {
  for (int i = 0; i < c.b.n; ++i) {
    STRATA_CHECK(c.b.pos[i] >= 0 && c.b.pos[i] < c.kv.n_ctx(), "position {} is outside the context (size {}): the prompt is too long for -c {}",
                 c.b.pos[i], c.kv.n_ctx(), c.kv.n_ctx());
    STRATA_CHECK(c.seq(i) >= 0 && c.seq(i) < c.kv.n_seq(), "sequence slot {} out of range ({} slots)", c.seq(i), c.kv.n_seq());
  }
}

void attention_gqa(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n;
  const int dq = lc.n_head * lc.head_dim_k, dk = lc.n_head_kv * lc.head_dim_k, dv = lc.n_head_kv * lc.head_dim_v;
  check_batch_positions(c);
  float* qproj = lc.out_gate ? st.tmp.data() : st.q.data();  // gated: [n, n_head, (query | gate)]
  if (n <= kGroupMaxTokens) {  // decoding: q, k and v in one thread-pool pass
    const MatmulJob jobs[3] = {{lw.wq, st.xn.data(), n, qproj, st.in_gemm.data()},
                               {lw.wk, st.xn.data(), n, st.k.data(), st.in_gemm.data()},
                               {lw.wv, st.xn.data(), n, st.v.data(), st.in_gemm.data()}};
    matmul_many(c.k, c.pool, jobs, 3, st.mm_many);
  } else {
    c.mm(lw.wq, st.xn.data(), n, qproj);
    c.mm(lw.wk, st.xn.data(), n, st.k.data());
    c.mm(lw.wv, st.xn.data(), n, st.v.data());
  }
  if (lc.out_gate) split_query_gate(c, lc, qproj);
  add_bias(st.q.data(), lw.bq, n);
  add_bias(st.k.data(), lw.bk, n);
  add_bias(st.v.data(), lw.bv, n);
  RopeParams rp = rope_params(lc.rope);
  if (!c.w.rope_freqs.empty()) rp.freq_factors = c.w.rope_freqs.data;
  for (int i = 0; i < n; ++i) {
    float* qi = st.q.data() + static_cast<size_t>(i) * dq;
    float* ki = st.k.data() + static_cast<size_t>(i) * dk;
    if (lc.qk_norm_full) {  // one RMSNorm over all heads' values at once
      rmsnorm(qi, lw.q_norm.data, qi, dq, c.cfg.rms_eps);
      rmsnorm(ki, lw.k_norm.data, ki, dk, c.cfg.rms_eps);
    } else if (lc.qk_norm) {
      for (int h = 0; h < lc.n_head; ++h) rmsnorm(qi + h * lc.head_dim_k, lw.q_norm.data, qi + h * lc.head_dim_k, lc.head_dim_k, c.cfg.rms_eps);
      for (int h = 0; h < lc.n_head_kv; ++h) rmsnorm(ki + h * lc.head_dim_k, lw.k_norm.data, ki + h * lc.head_dim_k, lc.head_dim_k, c.cfg.rms_eps);
    }
    float* cs = st.rope_cs.data();
    rope_cache(rp, static_cast<float>(c.b.pos[i]), cs);
    for (int h = 0; h < lc.n_head; ++h) rope_apply(rp, cs, qi + h * lc.head_dim_k);
    for (int h = 0; h < lc.n_head_kv; ++h) rope_apply(rp, cs, ki + h * lc.head_dim_k);
    c.kv.store(layer, c.seq(i), c.b.pos[i], ki, st.v.data() + static_cast<size_t>(i) * dv);
  }
  attend_heads(c, layer);
  if (lc.out_gate) {  // o_h *= sigmoid(gate_h), elementwise
    const size_t m = static_cast<size_t>(n) * lc.n_head * lc.head_dim_v;
    for (size_t x = 0; x < m; ++x) st.attn[x] *= sigmoid_f32(st.gather[x]);
  }
  c.mm(lw.wo, st.attn.data(), n, st.out.data());
  add_bias(st.out.data(), lw.bo, n);
}

void attention_mla(FwdCtx& c, int layer) {
  check_batch_positions(c);
  mla_project(c, layer);
  mla_attend(c, layer, nullptr);
}

void mla_attend(FwdCtx& c, int layer, const KeySelection* sel) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n;
  const int dqh = lc.qk_nope_dim + lc.qk_rope_dim;   // per-head q width
  const int dq = lc.n_head * dqh;
  const int kvw = lc.kv_lora_rank + lc.qk_rope_dim;  // cache row
  const RopeParams rp = rope_params(lc.rope);
  // Absorbed queries: [n, n_head, kv_lora + rope]
  float* qabs = st.v.data();
  const GgufTensor& kb = *lw.wk_b;
  const size_t kb_head = static_cast<size_t>(ggml_row_size(kb.type, lc.qk_nope_dim)) * lc.kv_lora_rank;
  for (int i = 0; i < n; ++i) {
    float* kvi = st.k.data() + static_cast<size_t>(i) * kvw;
    rmsnorm(kvi, lw.kv_a_norm.data, kvi, lc.kv_lora_rank, c.cfg.rms_eps);
    float* cs = st.rope_cs.data();
    rope_cache(rp, static_cast<float>(c.b.pos[i]), cs);
    rope_apply(rp, cs, kvi + lc.kv_lora_rank);
    c.kv.store(layer, c.seq(i), c.b.pos[i], kvi, nullptr);
    for (int h = 0; h < lc.n_head; ++h) {
      float* qh = st.q.data() + static_cast<size_t>(i) * dq + h * dqh;
      rope_apply(rp, cs, qh + lc.qk_nope_dim);
      float* qa = qabs + (static_cast<size_t>(i) * lc.n_head + h) * kvw;
      std::memcpy(qa + lc.kv_lora_rank, qh + lc.qk_nope_dim, sizeof(float) * lc.qk_rope_dim);
    }
  }
  // q_nope absorbed through k_b, head by head: [kv_lora] = Wkb[h] (kv_lora x nope) q_nope[h].
  // llama.cpp multiplies by a permuted (non-contiguous) view of q_nope here, so its tiled f32
  // GEMM never applies: f32 weights take the dot association for every token (mm_rows). For
  // quantized weights it first quantizes that view into a contiguous buffer, and its tiled GEMM
  // does take the tokens of a chunk (where its rounding differs from the dot, IQ4_NL: c.mm).
  for (int h = 0; h < lc.n_head; ++h) {
    QMatrix m{kb.type, lc.kv_lora_rank, lc.qk_nope_dim, kb.data + h * kb_head, static_cast<size_t>(ggml_row_size(kb.type, lc.qk_nope_dim))};
    for (int i = 0; i < n; ++i) std::memcpy(st.gather.data() + static_cast<size_t>(i) * lc.qk_nope_dim, st.q.data() + static_cast<size_t>(i) * dq + h * dqh,
                                            sizeof(float) * lc.qk_nope_dim);
    if (kb.type == GgmlType::F32) c.mm_rows(m, st.gather.data(), n, st.tmp.data());
    else c.mm(m, st.gather.data(), n, st.tmp.data());
    for (int i = 0; i < n; ++i)
      std::memcpy(qabs + (static_cast<size_t>(i) * lc.n_head + h) * kvw, st.tmp.data() + static_cast<size_t>(i) * lc.kv_lora_rank,
                  sizeof(float) * lc.kv_lora_rank);
  }
  // Attention in the latent space; output [n, n_head, kv_lora] in st.attn.
  const int64_t items = static_cast<int64_t>(n) * lc.n_head;
  c.parallel_dynamic(items, std::clamp<int64_t>(items / 16, 1, lc.n_head), [&](int64_t a, int64_t e, int tid) {
    float* buf = st.thread_buf[tid].data();
    for (int64_t x = a; x < e; ++x) {
      const int64_t it = items - 1 - x;  // the costliest first, as in attend_heads
      const int i = static_cast<int>(it / lc.n_head), h = static_cast<int>(it % lc.n_head);
      HeadAttn ha;
      ha.q = qabs + (static_cast<size_t>(i) * lc.n_head + h) * kvw;
      ha.dk = kvw;
      ha.dv = lc.kv_lora_rank;
      ha.layer = layer;
      ha.seq = c.seq(i);
      ha.kv_head = 0;
      ha.k_off = 0;
      ha.v_off = 0;
      ha.v_in_k = true;
      ha.scale = lc.kq_scale;
      ha.sink = nullptr;
      ha.k = &c.k;
      ha.solo = c.solo(i);
      if (sel && sel->count[i] >= 0) {
        ha.cells = sel->cells + static_cast<size_t>(i) * sel->stride;
        ha.n_cells = sel->count[i];
      }
      const int pos = c.b.pos[i];
      attend(c.kv, ha, window_start(lc, pos), pos, st.attn.data() + (static_cast<size_t>(i) * lc.n_head + h) * lc.kv_lora_rank, buf);
    }
  });
  // Per head: [v_dim] = Wvb[h] (v_dim x kv_lora) latent[h]; concatenated into st.q as [n, n_head*v_dim].
  const GgufTensor& vb = *lw.wv_b;
  const size_t vb_row = static_cast<size_t>(ggml_row_size(vb.type, lc.kv_lora_rank));
  for (int h = 0; h < lc.n_head; ++h) {
    QMatrix m{vb.type, lc.v_head_dim, lc.kv_lora_rank, vb.data + h * vb_row * lc.v_head_dim, vb_row};
    for (int i = 0; i < n; ++i)
      std::memcpy(st.gather.data() + static_cast<size_t>(i) * lc.kv_lora_rank, st.attn.data() + (static_cast<size_t>(i) * lc.n_head + h) * lc.kv_lora_rank,
                  sizeof(float) * lc.kv_lora_rank);
    c.mm(m, st.gather.data(), n, st.tmp.data());
    for (int i = 0; i < n; ++i)
      std::memcpy(st.q.data() + static_cast<size_t>(i) * lc.n_head * lc.v_head_dim + h * lc.v_head_dim, st.tmp.data() + static_cast<size_t>(i) * lc.v_head_dim,
                  sizeof(float) * lc.v_head_dim);
  }
  c.mm(lw.wo, st.q.data(), n, st.out.data());
}

// The older DeepSeek layout (attn_kv_b): plain multi-head attention, as llama.cpp computes it
// for such files. Key of head h = [k_nope_h, k_pe] with k_nope_h from attn_kv_b . latent and the
// shared RoPE'd k_pe; query [q_nope_h, RoPE(q_pe_h)]; value v_h from attn_kv_b. The cache holds
// n_head * (nope + rope) key and n_head * v_dim value numbers per token.
void attention_mla_kvb(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n;
  const int dqh = lc.qk_nope_dim + lc.qk_rope_dim;   // per-head q/k width (= head_dim_k)
  const int dq = lc.n_head * dqh;
  const int kvw = lc.kv_lora_rank + lc.qk_rope_dim;  // kv_a row
  const int dkvb = lc.qk_nope_dim + lc.v_head_dim;   // per-head rows of attn_kv_b
  const int dv = lc.n_head * lc.v_head_dim;
  check_batch_positions(c);
  mla_project(c, layer);
  const RopeParams rp = rope_params(lc.rope);
  float* latent = st.gather.data();  // [n, kv_lora]
  for (int i = 0; i < n; ++i) {
    float* kvi = st.k.data() + static_cast<size_t>(i) * kvw;
    rmsnorm(kvi, lw.kv_a_norm.data, latent + static_cast<size_t>(i) * lc.kv_lora_rank, lc.kv_lora_rank, c.cfg.rms_eps);
  }
  c.mm(lw.wkv_b, latent, n, st.tmp.data());  // [n, n_head * (nope + v_dim)]
  for (int i = 0; i < n; ++i) {
    float* k_pe = st.k.data() + static_cast<size_t>(i) * kvw + lc.kv_lora_rank;
    float* cs = st.rope_cs.data();
    rope_cache(rp, static_cast<float>(c.b.pos[i]), cs);
    rope_apply(rp, cs, k_pe);
    const float* kv = st.tmp.data() + static_cast<size_t>(i) * lc.n_head * dkvb;
    float* krow = st.v.data() + static_cast<size_t>(i) * dq;    // [n_head, nope + rope]
    float* vrow = st.out.data() + static_cast<size_t>(i) * dv;  // [n_head, v_dim]
    for (int h = 0; h < lc.n_head; ++h) {
      rope_apply(rp, cs, st.q.data() + static_cast<size_t>(i) * dq + h * dqh + lc.qk_nope_dim);
      std::memcpy(krow + h * dqh, kv + h * dkvb, sizeof(float) * lc.qk_nope_dim);
      std::memcpy(krow + h * dqh + lc.qk_nope_dim, k_pe, sizeof(float) * lc.qk_rope_dim);
      std::memcpy(vrow + h * lc.v_head_dim, kv + h * dkvb + lc.qk_nope_dim, sizeof(float) * lc.v_head_dim);
    }
    c.kv.store(layer, c.seq(i), c.b.pos[i], krow, vrow);
  }
  attend_heads(c, layer);
  c.mm(lw.wo, st.attn.data(), n, st.out.data());
}

}  // namespace strata
