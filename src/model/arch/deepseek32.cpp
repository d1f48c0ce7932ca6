// DeepSeek-V3.2 (`deepseek32`): DeepSeek-V3's MLA model (deepseek2.h) plus DeepSeek Sparse
// Attention. In every layer a lightning indexer (model/lightning_indexer.h) scores the cached
// positions of the query's sequence and MLA attends to the idx_top_k best (all of them while
// there are no more than that).
//   indexer query  iq = idx_q_b . qr            idx_n_head heads, NeoX RoPE on the first r dims
//   indexer key    ik = LayerNorm(idx_k . a)    weight + bias, eps 1e-6, the same RoPE; one per token
//   head weights   iw = idx_proj . a / sqrt(idx_head_dim * idx_n_head)
// (qr: the normalized q latent of MLA, a: the attention input, r: rope.dimension_count). The keys
// live per (layer, sequence, position) in Dsv32Cache::keys beside the KV rows, in the K cache's
// type. Nothing else is kept per sequence, so a sequence can be cut back to any position and a
// prompt prefix reused like the KV rows (rewindable): a key depends only on its own token and
// position, a selection only on the keys up to the query.
//
// llama.cpp multiplies indexer queries and keys by one orthogonal Hadamard matrix first; the dot
// products are the same up to rounding, and only the choice of positions depends on them. Its
// top-k runs over the KV view (the masked cells at -inf), so ties resolve as there.
#include <algorithm>
#include <cmath>

#include "model/arch/deepseek2.h"
#include "model/lightning_indexer.h"

namespace strata::arch {
namespace {

constexpr float kIndexerNormEps = 1e-6f;  // LayerNorm of the indexer keys (llama.cpp's f_norm_eps for deepseek32)
constexpr int kKvViewPad = 256;           // llama.cpp pads its KV view (and so the indexer's top-k row) to this

void deepseek32_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "deepseek32."};
  // The absorbed layout only (llama.cpp refuses deepseek32 without the *_mla keys), a q latent (the
  // indexer reads it), an explicit router and no NextN/MTP blocks.
  for (const char* k : {key::kAttnKeyLengthMla, key::kAttnValueLengthMla, key::kAttnQLoraRank, key::kExpertGatingFunc})
    STRATA_CHECK(r.has(k), "{}: missing required metadata '{}{}' (deepseek32)", m.path(), r.prefix, k);
  const int64_t nextn = r.opt_int(key::kNextnPredictLayers, 0);
  STRATA_CHECK(nextn == 0, "{}: {}{} is {}: deepseek32 NextN/MTP blocks are not supported", m.path(), r.prefix, key::kNextnPredictLayers, nextn);
  deepseek2_read_config(m, r, cfg);
  const int n_head = static_cast<int>(r.req_int(key::kAttnIndexerHeadCount));
  const int dim = static_cast<int>(r.req_int(key::kAttnIndexerKeyLength));
  const int top = static_cast<int>(r.req_int(key::kAttnIndexerTopK));
  const int rope = cfg.layers[0].qk_rope_dim;
  STRATA_CHECK(cfg.layers[0].q_lora_rank > 0, "{}: {}{} must be > 0 (the indexer reads the q latent)", m.path(), r.prefix, key::kAttnQLoraRank);
  STRATA_CHECK(n_head > 0, "{}: {}{} must be > 0 (got {})", m.path(), r.prefix, key::kAttnIndexerHeadCount, n_head);
  STRATA_CHECK(dim >= rope && dim % 2 == 0 && rope % 2 == 0, "{}: {}{} {} must be even and at least rope.dimension_count {}", m.path(), r.prefix,
               key::kAttnIndexerKeyLength, dim, rope);
  STRATA_CHECK(top > 0, "{}: {}{} must be > 0 (got {})", m.path(), r.prefix, key::kAttnIndexerTopK, top);
  for (LayerConfig& l : cfg.layers) {
    l.attn = AttnKind::MlaSparse;
    l.idx_n_head = n_head;
    l.idx_head_dim = dim;
    l.idx_top_k = top;
  }
}

void deepseek32_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  deepseek2_bind_layers(b, cfg, w);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    lw.idx_q_b = b.mat(blk(l, tn::kIndexerQB), static_cast<int64_t>(lc.idx_n_head) * lc.idx_head_dim, lc.q_lora_rank);
    lw.idx_k = b.mat(blk(l, tn::kIndexerAttnK), lc.idx_head_dim, cfg.n_embd);
    lw.idx_k_norm = b.vec(blk(l, tn::kIndexerKNorm), lc.idx_head_dim);
    lw.idx_k_norm_b = b.vec(blk(l, tn::kIndexerKNormBias), lc.idx_head_dim);
    lw.idx_proj = b.mat(blk(l, tn::kIndexerProj), lc.idx_n_head, cfg.n_embd);
  }
  b.check_all_used();
}

// ---- Per-sequence state: the indexer's keys, and the scratch of the selection ----------------

template <typename T>
uint64_t cap_bytes(const std::vector<T>& v) {
  return static_cast<uint64_t>(v.capacity()) * sizeof(T);
}

// The indexer keys have the shape of a one-vector-per-token cache of idx_head_dim values.
ModelConfig key_cache_config(const ModelConfig& cfg) {
  ModelConfig k;
  k.layers = cfg.layers;
  for (LayerConfig& l : k.layers) {
    l.attn = AttnKind::SharedKv;
    l.head_dim_k = l.idx_head_dim;
  }
  return k;
}

KvCacheOptions key_cache_options(const KvCache& kv) {
  KvCacheOptions o;
  o.n_ctx = kv.n_ctx();
  o.n_seq = kv.n_seq();
  o.type_k = o.type_v = kv.type_k();
  return o;
}

struct Dsv32Cache : KvCacheExt {
  Dsv32Cache(const ModelConfig& cfg, const KvCache& kv) : keys(key_cache_config(cfg), key_cache_options(kv)) {}
  KvCache keys;                  // [layer][seq][pos] one indexer key [idx_head_dim] per position
  int n_view = 0;                // cells of the widest KV view: n_ctx padded to kKvViewPad
  std::vector<float> iq;         // [n, idx_n_head * idx_head_dim] indexer queries (roped)
  std::vector<float> iw;         // [n, idx_n_head] head weights (pre-scaled)
  std::vector<float> ik;         // [n, idx_head_dim] the batch's keys
  std::vector<int32_t> cells;    // [n, idx_top_k] the positions each token attends to, ascending
  std::vector<int32_t> count;    // [n] how many (-1: every position up to its own)
  std::vector<int32_t> seq_end;  // [n_seq] 1 + the highest position of each sequence in the batch
  std::vector<std::vector<float>> thread_f;      // per thread: scores [n_view] + a key row [idx_head_dim]
  std::vector<std::vector<int32_t>> thread_ord;  // per thread: [n_view] top-k order
  uint64_t bytes() const override {
    uint64_t b = keys.bytes();
    for (const auto* v : {&iq, &iw, &ik}) b += cap_bytes(*v);
    for (const auto* v : {&cells, &count, &seq_end}) b += cap_bytes(*v);
    for (const auto& t : thread_f) b += cap_bytes(t);
    for (const auto& t : thread_ord) b += cap_bytes(t);
    return b;
  }
  // Slot files: the indexer keys of positions [0, n), per layer, in the cache's type.
  const char* slot_kind() const override { return "dsv32-indexer-keys"; }
  void seq_regions(int seq, int n, std::vector<std::span<uint8_t>>& out) override {
    for (int l = 0; l < keys.n_layer(); ++l)
      if (const auto k = keys.k_bytes(l, seq, n); !k.empty()) out.push_back(k);
  }
  // Room for passes of n tokens on n_threads threads (grows only what is not there yet).
  void reserve(const ModelConfig& cfg, int n, int n_threads) {
    int I = 0, D = 0, top = 0;
    for (const LayerConfig& l : cfg.layers) I = std::max(I, l.idx_n_head), D = std::max(D, l.idx_head_dim), top = std::max(top, l.idx_top_k);
    const size_t N = static_cast<size_t>(n);
    iq.reserve(N * I * D);
    iw.reserve(N * I);
    ik.reserve(N * D);
    cells.reserve(N * top);
    count.reserve(N);
    seq_end.reserve(static_cast<size_t>(keys.n_seq()));
    n_view = (keys.n_ctx() + kKvViewPad - 1) / kKvViewPad * kKvViewPad;
    if (static_cast<int>(thread_f.size()) < n_threads) thread_f.resize(static_cast<size_t>(n_threads));
    if (static_cast<int>(thread_ord.size()) < n_threads) thread_ord.resize(static_cast<size_t>(n_threads));
    for (auto& t : thread_f) t.reserve(static_cast<size_t>(n_view + D));
    for (auto& t : thread_ord) t.reserve(static_cast<size_t>(n_view));
  }
};

std::unique_ptr<KvCacheExt> deepseek32_make_state(const ModelConfig& cfg, const KvCache& kv, int n_batch, int n_threads) {
  auto s = std::make_unique<Dsv32Cache>(cfg, kv);
  s->reserve(cfg, n_batch, n_threads);
  return s;
}

Dsv32Cache& dsv32_cache(FwdCtx& c) {
  const int n_threads = c.pool ? c.pool->size() : 1;
  auto& ext = c.kv.ext();
  if (!ext) ext = deepseek32_make_state(c.cfg, c.kv, c.b.n, n_threads);
  auto* s = dynamic_cast<Dsv32Cache*>(ext.get());
  STRATA_CHECK(s != nullptr, "the KV cache holds another architecture's state");
  s->reserve(c.cfg, c.b.n, n_threads);  // a no-op after Model::prepare
  return *s;
}

// ---- The indexer ------------------------------------------------------------------------------

// Queries and head weights of the batch (qr in st.tmp after mla_project), its keys into the cache.
void index_batch(FwdCtx& c, Dsv32Cache& s, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  const int n = c.b.n, I = lc.idx_n_head, D = lc.idx_head_dim;
  s.iq.resize(static_cast<size_t>(n) * I * D);
  s.iw.resize(static_cast<size_t>(n) * I);
  s.ik.resize(static_cast<size_t>(n) * D);
  indexer_project(c, layer, c.st.tmp.data(), s.iq.data(), s.iw.data());
  c.mm(lw.idx_k, c.st.xn.data(), n, s.ik.data());
  RopeParams rp = rope_params(lc.rope);
  rp.neox = true;  // the indexer heads are [rope | nope], rotated NeoX style
  float* cs = c.st.rope_cs.data();
  for (int i = 0; i < n; ++i) {
    rope_cache(rp, static_cast<float>(c.b.pos[i]), cs);
    float* q = s.iq.data() + static_cast<size_t>(i) * I * D;
    for (int h = 0; h < I; ++h) rope_apply(rp, cs, q + static_cast<size_t>(h) * D);
    float* k = s.ik.data() + static_cast<size_t>(i) * D;
    layernorm(k, lw.idx_k_norm.data, lw.idx_k_norm_b.data, k, D, kIndexerNormEps);
    rope_apply(rp, cs, k);
    s.keys.store(layer, c.seq(i), c.b.pos[i], k, nullptr);
  }
  c.trace("indexer_q", layer, s.iq.data(), n, I * D);  // roped (llama.cpp's then go through its Hadamard matrix)
  c.trace("indexer_k", layer, s.ik.data(), n, D);
  c.trace("indexer_weights", layer, s.iw.data(), n, I);
}

// The positions token i attends to. With more visible positions than idx_top_k: the top-k of the
// scores over llama.cpp's KV view of n_kv cells (positions after the token's own masked at -inf).
void select_token(FwdCtx& c, Dsv32Cache& s, int layer, int i, float* score, int32_t* order) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const int I = lc.idx_n_head, D = lc.idx_head_dim, top = lc.idx_top_k;
  const int pos = c.b.pos[i], seq = c.seq(i);
  if (pos + 1 <= top) {
    s.count[i] = -1;
    return;
  }
  // llama.cpp's view: at least one pad, covering the sequence's cells so far, at most the cache.
  const int end = s.seq_end[static_cast<size_t>(seq)];
  const int n_kv = std::min(s.n_view, std::max(kKvViewPad, (end + kKvViewPad - 1) / kKvViewPad * kKvViewPad));
  const float* q = s.iq.data() + static_cast<size_t>(i) * I * D;
  const float* w = s.iw.data() + static_cast<size_t>(i) * I;
  float* row = score + s.n_view;
  const bool f32 = s.keys.type_k() == GgmlType::F32;
  for (int j = 0; j <= pos; ++j) {
    const float* key = s.keys.k_f32(layer, seq, j);
    if (!f32) {
      s.keys.read_k(layer, seq, j, j + 1, row);
      key = row;
    }
    score[j] = indexer_score(c.k, q, w, key, I, D);
  }
  std::fill(score + pos + 1, score + n_kv, -INFINITY);
  int32_t* cells = s.cells.data() + static_cast<size_t>(i) * top;
  indexer_top_k(score, n_kv, top, order, cells);
  std::sort(cells, cells + top);  // the view's order
  s.count[i] = top;
}

// For tensor traces only: every token's scores over the widest view (positions after its own
// at -inf), llama.cpp's "indexer_score" [n, n_kv] of one sequence.
void trace_scores(FwdCtx& c, Dsv32Cache& s, int layer) {
  if (!c.tensors || !c.tensors->wants("indexer_score", layer)) return;
  const LayerConfig& lc = c.cfg.layers[layer];
  const int n = c.b.n, I = lc.idx_n_head, D = lc.idx_head_dim;
  std::vector<float> out(static_cast<size_t>(n) * s.n_view, -INFINITY), key(static_cast<size_t>(D));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= c.b.pos[i]; ++j) {
      s.keys.read_k(layer, c.seq(i), j, j + 1, key.data());
      out[static_cast<size_t>(i) * s.n_view + j] =
          indexer_score(c.k, s.iq.data() + static_cast<size_t>(i) * I * D, s.iw.data() + static_cast<size_t>(i) * I, key.data(), I, D);
    }
  c.trace("indexer_score", layer, out.data(), n, s.n_view);
}

void select_batch(FwdCtx& c, Dsv32Cache& s, int layer) {
  trace_scores(c, s, layer);
  const int n = c.b.n;
  s.cells.resize(static_cast<size_t>(n) * c.cfg.layers[layer].idx_top_k);
  s.count.resize(static_cast<size_t>(n));
  s.seq_end.assign(static_cast<size_t>(c.kv.n_seq()), 0);
  for (int i = 0; i < n; ++i) s.seq_end[static_cast<size_t>(c.seq(i))] = std::max(s.seq_end[static_cast<size_t>(c.seq(i))], c.b.pos[i] + 1);
  const int D = c.cfg.layers[layer].idx_head_dim;
  c.parallel(n, [&](int64_t a, int64_t e, int tid) {
    std::vector<float>& f = s.thread_f[static_cast<size_t>(tid)];
    std::vector<int32_t>& ord = s.thread_ord[static_cast<size_t>(tid)];
    f.resize(static_cast<size_t>(s.n_view + D));  // within the reserved capacity
    ord.resize(static_cast<size_t>(s.n_view));
    for (int64_t i = a; i < e; ++i) select_token(c, s, layer, static_cast<int>(i), f.data(), ord.data());
  });
}

}  // namespace
}  // namespace strata::arch

namespace strata {

void attention_mla_sparse(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  check_batch_positions(c);
  arch::Dsv32Cache& s = arch::dsv32_cache(c);
  mla_project(c, layer);  // the normalized q latent stays in st.tmp for the indexer
  arch::index_batch(c, s, layer);
  arch::select_batch(c, s, layer);
  const KeySelection sel{s.cells.data(), s.count.data(), lc.idx_top_k};
  mla_attend(c, layer, &sel);
}

extern const ArchDef kArchDeepseek32{"deepseek32", arch::deepseek32_config, arch::deepseek32_bind, nullptr, /*rewindable=*/true,
                                     arch::deepseek32_make_state};

}  // namespace strata
