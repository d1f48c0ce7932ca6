// Model loading and the forward pass: norm -> attention -> residual -> norm -> FFN -> residual.
#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "gguf/gguf_names.h"
#include "kernels/quants.h"
#include "model/executor.h"
#include "model/forward.h"

namespace strata {

ExpertMats MappedExperts::acquire(int layer, int e) {
  const int n_trunk = static_cast<int>(w_.layers.size());
  const LayerWeights& lw = layer < n_trunk ? w_.layers[layer] : w_.nextn[static_cast<size_t>(layer - n_trunk)].block;
  return ExpertMats{lw.gate_exps.mapped(e), lw.up_exps.mapped(e), lw.down_exps.mapped(e)};
}

Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& path) {
  std::unique_ptr<Model> m(new Model());
  m->gguf_ = GgufModel::open(path);
  const std::string arch = m->gguf_->architecture();
  m->arch_ = find_arch(arch);
  if (!m->arch_) {
    std::string list;
    for (const auto& a : supported_archs()) list += (list.empty() ? "" : ", ") + a;
    fail("{}: architecture '{}' is not supported (supported: {})", path, arch, list);
  }
  m->cfg_.arch = arch;
  m->cfg_.name = m->gguf_->get_string(key::kName).value_or("");
  m->arch_->load_config(*m->gguf_, m->cfg_);
  STRATA_CHECK(static_cast<int>(m->cfg_.layers.size()) == m->cfg_.n_layer, "{}: config has {} layer configs for {} layers", path,
               m->cfg_.layers.size(), m->cfg_.n_layer);
  check_limits(path, m->cfg_);
  WeightBinder b(*m->gguf_);
  m->w_.layers.resize(m->cfg_.layers.size());
  m->arch_->bind(b, m->cfg_, m->w_);
  m->setup_nextn();
  m->default_experts_ = std::make_unique<MappedExperts>(m->w_);
  m->experts_ = m->default_experts_.get();
  m->st_ = std::make_unique<State>();
  return m;
}

void Model::State::ensure(const ModelConfig& cfg, int n, int n_ctx, int n_threads) {
  if (n <= cap && n_ctx <= ctx_cap && static_cast<int>(thread_buf.size()) >= n_threads) return;
  cap = std::max(cap, n);
  ctx_cap = std::max(ctx_cap, n_ctx);
  size_t w = static_cast<size_t>(cfg.n_embd);
  size_t ff = 0, ne = 1, kk = 1, row = 0, rope = 2;
  std::vector<const LayerConfig*> all;  // the trunk and the NextN blocks (run by forward_nextn)
  for (const auto& l : cfg.layers) all.push_back(&l);
  for (const auto& l : cfg.nextn) all.push_back(&l);
  for (const LayerConfig* lp : all) {
    const LayerConfig& l = *lp;
    const size_t kvw = static_cast<size_t>(l.kv_lora_rank + l.qk_rope_dim);
    w = std::max({w, static_cast<size_t>(l.n_head) * l.head_dim_k, static_cast<size_t>(l.n_head) * l.head_dim_v,
                  static_cast<size_t>(l.n_head) * (l.qk_nope_dim + l.qk_rope_dim), static_cast<size_t>(l.n_head) * kvw,
                  static_cast<size_t>(l.q_lora_rank), static_cast<size_t>(l.n_head_kv) * l.head_dim_k,
                  static_cast<size_t>(l.n_head) * (l.qk_nope_dim + l.v_head_dim), static_cast<size_t>(l.ssm_channels()),
                  static_cast<size_t>(l.n_head) * l.head_dim_k * (l.out_gate ? 2 : 1)});
    ff = std::max({ff, static_cast<size_t>(l.n_ff), static_cast<size_t>(l.n_ff_exp), static_cast<size_t>(l.n_ff_shexp)});
    ne = std::max(ne, static_cast<size_t>(l.n_expert));
    kk = std::max(kk, static_cast<size_t>(l.n_expert_used));
    row = std::max({row, kvw, static_cast<size_t>(l.n_head_kv) * std::max(l.head_dim_k, l.head_dim_v)});
    rope = std::max(rope, static_cast<size_t>(l.rope.n_dims));
  }
  const size_t N = static_cast<size_t>(cap);
  x.assign(N * cfg.n_embd, 0);
  xn.assign(N * w, 0);
  q.assign(N * w, 0);
  k.assign(N * w, 0);
  v.assign(N * w, 0);
  attn.assign(N * w, 0);
  tmp.assign(N * std::max(w, ff), 0);
  out.assign(N * w, 0);
  rope_cs.assign(rope, 0);
  router.assign(N * ne, 0);
  sel.assign(N * kk, 0);
  sel_w.assign(N * kk, 0);
  gather.assign(N * w, 0);
  gate.assign(N * std::max(ff, size_t{1}), 0);
  up.assign(N * std::max(ff, size_t{1}), 0);
  slots.assign(N * kk * cfg.n_embd, 0);
  tok_of.assign(N * kk, 0);
  slot_of.assign(N * kk, 0);
  expert_list.reserve(ne);
  logits_in.assign(N * cfg.n_embd, 0);
  if (!cfg.nextn.empty()) nextn_in.assign(N * 2 * cfg.n_embd, 0);
  grp_x.assign(static_cast<size_t>(kGroupMaxRows) * w, 0);
  grp_y.assign(static_cast<size_t>(kGroupMaxRows) * w, 0);
  grp_g.assign(static_cast<size_t>(kGroupMaxRows) * std::max(ff, size_t{1}), 0);
  grp_u.assign(static_cast<size_t>(kGroupMaxRows) * std::max(ff, size_t{1}), 0);
  wave_rows = 0;
  if (ne > 1 && cap > kGroupMaxTokens) {
    wave_rows = static_cast<int>(std::min<size_t>(N * kk, kWaveMaxRows));
    wave_g.assign(static_cast<size_t>(wave_rows) * ff, 0);
    wave_u.assign(static_cast<size_t>(wave_rows) * ff, 0);
    wave_y.assign(static_cast<size_t>(wave_rows) * cfg.n_embd, 0);
  }
  thread_buf.resize(std::max<size_t>(thread_buf.size(), static_cast<size_t>(n_threads)));
  for (auto& tb : thread_buf) tb.assign(static_cast<size_t>(ctx_cap) + row + 32 * row + 64, 0);
}

namespace {
template <typename T>
uint64_t cap_bytes(const std::vector<T>& v) {
  return static_cast<uint64_t>(v.capacity()) * sizeof(T);
}
}  // namespace

void Model::State::reserve_matmul(int n, uint64_t max_row) {
  const size_t row = static_cast<size_t>(max_row);
  mm.act.reserve(static_cast<size_t>(n) * row);
  // Grouped decode products: up to 2 jobs per grouped expert, kGroupMaxTokens rows each; q/k/v: 3.
  mm_many.act.resize(std::max<size_t>(mm_many.act.size(), 2 * kGroupMaxExperts));
  for (auto& a : mm_many.act) a.reserve(static_cast<size_t>(kGroupMaxTokens) * row);
  mm_many.first_chunk.reserve(2 * std::max(kGroupMaxExperts, kWaveMaxExperts) + 1);
  if (wave_rows > 0) {
    wave_xq.resize(std::max(wave_xq.size(), static_cast<size_t>(cap) * row));
    wave_ax.resize(std::max(wave_ax.size(), static_cast<size_t>(wave_rows) * row));
    wave_ag.resize(std::max(wave_ag.size(), static_cast<size_t>(wave_rows) * row));
  }
}

uint64_t Model::State::bytes() const {
  uint64_t b = 0;
  for (const auto* v : {&x, &xn, &q, &k, &v, &attn, &tmp, &out, &rope_cs, &router, &sel_w, &gather, &gate, &up, &slots, &logits_in, &nextn_in, &grp_x,
                        &grp_y, &grp_g, &grp_u, &wave_g, &wave_u, &wave_y})
    b += cap_bytes(*v);
  for (const auto* v : {&sel, &tok_of, &slot_of, &expert_list, &seq_count}) b += cap_bytes(*v);
  for (const auto* v : {&solo, &in_gemm, &in_gemm_out, &wave_xq, &wave_ax, &wave_ag}) b += cap_bytes(*v);
  for (const auto& t : thread_buf) b += cap_bytes(t);
  b += cap_bytes(mm.act) + cap_bytes(mm.tile) + cap_bytes(mm_many.first_chunk);
  for (const auto& a : mm_many.act) b += cap_bytes(a);
  return b;
}

void Model::prepare(KvCache& kv, int n_batch, int n_threads) {
  prepare_state(*st_, kv, n_batch, n_threads);
  if (arch_->make_state && !kv.ext()) kv.ext() = arch_->make_state(cfg_, kv, n_batch, n_threads);
}

void Model::prepare_state(State& st, KvCache& kv, int n_batch, int n_threads) const {
  st.ensure(cfg_, n_batch, kv.n_ctx(), n_threads);
  st.seq_count.reserve(static_cast<size_t>(std::max(1, kv.n_seq())));
  for (auto* v : {&st.solo, &st.in_gemm, &st.in_gemm_out}) v->reserve(static_cast<size_t>(n_batch));
  // The widest quantized activation row any weight matrix asks for (F32 weights read x directly).
  uint64_t max_row = 0;
  for (const auto& t : gguf_->tensors()) {
    if (t.n_dims < 2 || !quant_traits(t.type).vec_dot) continue;  // not a matrix any kernel multiplies
    const GgmlType at = matmul_act_type(t.type);
    if (at != GgmlType::F32 && t.ne[0] % ggml_info(at).block_size == 0) max_row = std::max(max_row, ggml_row_size(at, t.ne[0]));
  }
  st.reserve_matmul(n_batch, max_row);
}

RoutedWorker::~RoutedWorker() = default;
uint64_t RoutedWorker::scratch_bytes() const { return st_ ? st_->bytes() : 0; }

std::unique_ptr<RoutedWorker> Model::make_routed_worker(KvCache& kv, int n_batch, ThreadPool* pool, ExpertProvider* experts) const {
  std::unique_ptr<RoutedWorker> w(new RoutedWorker());
  w->st_ = std::make_unique<State>();
  w->pool_ = pool;
  w->experts_ = experts;
  prepare_state(*w->st_, kv, n_batch, pool ? pool->size() : 1);
  return w;
}

void Model::run_routed(const RoutedJob& j, KvCache& kv, float* out) { run_routed_on(j, kv, out, *st_, pool_, experts_, routed_last_layer_); }

void Model::run_routed(const RoutedJob& j, KvCache& kv, float* out, RoutedWorker& w) {
  run_routed_on(j, kv, out, *w.st_, w.pool_, w.experts_, w.last_layer_);
}

uint64_t Model::scratch_bytes() const { return st_->bytes(); }

void Model::forward(const Batch& b, KvCache& kv, float* logits) {
  STRATA_CHECK(b.n > 0, "empty batch");
  const int d = cfg_.n_embd;
  for (int i = 0; i < b.n; ++i)
    STRATA_CHECK(b.tokens[i] >= 0 && b.tokens[i] < cfg_.n_vocab, "token id {} at batch index {} is outside the vocabulary (0..{})", b.tokens[i], i,
                 cfg_.n_vocab - 1);
  const KernelTable& k = kernels();
  const int n_threads = pool_ ? pool_->size() : 1;
  st_->ensure(cfg_, b.n, kv.n_ctx(), n_threads);
  State& st = *st_;
  // Which tokens are alone in their sequence (with one sequence: b.n == 1, as before), or are to
  // be computed as if they were (Batch::solo).
  st.seq_count.assign(static_cast<size_t>(std::max(1, kv.n_seq())), 0);
  for (int i = 0; i < b.n; ++i) {
    const int s = b.seq ? b.seq[i] : 0;
    STRATA_CHECK(s >= 0 && s < kv.n_seq(), "sequence slot {} out of range ({} slots)", s, kv.n_seq());
    st.seq_count[s]++;
  }
  st.solo.resize(static_cast<size_t>(b.n));
  st.in_gemm_out.resize(static_cast<size_t>(b.n));
  st.in_gemm.resize(static_cast<size_t>(b.n));
  for (int i = 0; i < b.n; ++i) {
    st.solo[i] = st.seq_count[b.seq ? b.seq[i] : 0] == 1 || (b.solo && b.solo[i]) ? 1 : 0;
    st.in_gemm[i] = st.solo[i] ? 0 : 1;
  }
  FwdCtx c{cfg_, w_, k, pool_, st, kv, b, experts_, observers_.empty() ? nullptr : &observers_, lookahead_, &layer_s_, tensors_,
           moe_knobs_.active() ? &moe_knobs_ : nullptr, offload_};
  hidden_rows_ = nextn_rows_ = 0;
  experts_->begin_batch(b.n);
  try {
    run_layers(c);
  } catch (...) {
    experts_->on_abort();
    throw;
  }

  // Output head for the requested rows.
  int n_out = 0;
  for (int i = 0; i < b.n; ++i) {
    const bool want = b.logits ? b.logits[i] != 0 : i == b.n - 1;
    if (!want) continue;
    rmsnorm(st.x.data() + static_cast<size_t>(i) * d, w_.output_norm.data, st.logits_in.data() + static_cast<size_t>(n_out) * d, d, cfg_.rms_eps);
    st.in_gemm_out[static_cast<size_t>(n_out)] = st.in_gemm[i];
    ++n_out;
  }
  if (n_out) matmul(k, pool_, w_.output, st.logits_in.data(), n_out, logits, st.mm, st.in_gemm_out.data());
  if (n_out) {
    c.trace("result_norm", -1, st.logits_in.data(), n_out, d);
    c.trace("result_output", -1, logits, n_out, cfg_.n_vocab);
  }
  head_rows_ += static_cast<uint64_t>(n_out);
  hidden_rows_ = b.n;  // st.x: the final hidden rows, before the output norm
}

void Model::run_routed_on(const RoutedJob& j, KvCache& kv, float* out, State& st, ThreadPool* pool, ExpertProvider* experts, int& last_layer) {
  STRATA_CHECK(j.layer >= 0 && j.layer < cfg_.n_layer && cfg_.layers[j.layer].ffn == FfnKind::Moe, "routed job: layer {} is not a MoE layer", j.layer);
  STRATA_CHECK(j.n > 0 && j.n_tok <= j.n && j.n_pairs >= 0, "routed job: {} rows of a {}-token batch", j.n_tok, j.n);
  const LayerConfig& lc = cfg_.layers[j.layer];
  const int d = cfg_.n_embd, k = lc.n_expert_used, ne = lc.n_expert;
  st.ensure(cfg_, j.n, kv.n_ctx(), pool ? pool->size() : 1);
  for (int t = 0; t < j.n_tok; ++t) {
    STRATA_CHECK(j.tok[t] >= 0 && j.tok[t] < j.n, "routed job: token row {} outside the batch of {}", j.tok[t], j.n);
    std::memcpy(st.xn.data() + static_cast<size_t>(j.tok[t]) * d, j.rows + static_cast<size_t>(t) * d, sizeof(float) * d);
  }
  ExpertGroups g;
  int list[kMaxExperts], m = 0;
  for (int p = 0; p < j.n_pairs; ++p) {
    const int e = j.pair_exp[p], i = j.pair_tok[p], s = j.pair_slot[p];
    STRATA_CHECK(e >= 0 && e < ne && i >= 0 && i < j.n && s >= 0 && s < k && (m == 0 || e >= list[m - 1]),
                 "routed job: pair {} (token {}, slot {}, expert {}) is out of range or order", p, i, s, e);
    if (m == 0 || list[m - 1] != e) list[m++] = e, g.starts[e] = p;
    g.counts[e]++;
    st.tok_of[p] = i;
    st.slot_of[p] = s;
    st.sel_w[static_cast<size_t>(i) * k + s] = j.pair_w[p];
  }
  Batch b;
  b.n = j.n;
  FwdCtx c{cfg_, w_, kernels(), pool, st, kv, b, experts, nullptr};
  if (j.layer <= last_layer) experts->begin_batch(j.n);
  last_layer = j.layer;
  try {
    routed_experts_for(c, j.layer, g, list, m);
  } catch (...) {
    experts->on_abort();
    throw;
  }
  for (int p = 0; p < j.n_pairs; ++p)
    std::memcpy(out + static_cast<size_t>(p) * d, st.slots.data() + (static_cast<size_t>(j.pair_tok[p]) * k + j.pair_slot[p]) * d, sizeof(float) * d);
}

void attention_block(FwdCtx& c, int l) {
  switch (c.cfg.layers[l].attn) {
    case AttnKind::Mla: attention_mla(c, l); break;
    case AttnKind::MlaSparse: attention_mla_sparse(c, l); break;
    case AttnKind::MlaKvB: attention_mla_kvb(c, l); break;
    case AttnKind::Gqa: attention_gqa(c, l); break;
    case AttnKind::DeltaNet: delta_net(c, l); break;
    case AttnKind::SharedKv: fail("layer {}: shared-KV attention needs its architecture's own layer loop", l);
  }
}

void Model::set_executor(std::unique_ptr<LayerExecutor> e) { exec_ = std::move(e); }

void Model::run_layers(FwdCtx& c) {
  if (layer_s_.size() != cfg_.layers.size()) layer_s_.assign(cfg_.layers.size(), 0.0);
  int first = 0;  // the first layer the CPU runs
  if (exec_) {     // a device runs the leading layers (model/executor.h); below, the CPU the rest from st.x
    first = exec_->run_layers(c);
    if (first >= cfg_.n_layer) return;
    STRATA_CHECK(!arch_->run_layers, "{}: a device executor ran {} of {} layers; this architecture's own layer loop cannot run the rest", cfg_.arch,
                 first, cfg_.n_layer);
  } else if (arch_->run_layers) {
    arch_->run_layers(c);
    return;
  }
  const Batch& b = c.b;
  State& st = c.st;
  const int d = cfg_.n_embd;
  // Embeddings (dequantized rows).
  if (first == 0)
    for (int i = 0; i < b.n; ++i) dequantize_row(w_.tok_embd.type, w_.tok_embd.row(b.tokens[i]), st.x.data() + static_cast<size_t>(i) * d, d);

  const int n = b.n;
  for (int l = first; l < cfg_.n_layer; ++l) {
    const double t0 = clock_s();
    const LayerConfig& lc = cfg_.layers[l];
    const LayerWeights& lw = w_.layers[l];
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.attn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, cfg_.rms_eps);
    c.trace("attn_norm", l, st.xn.data(), n, d);
    attention_block(c, l);
    c.trace("attn_out", l, st.out.data(), n, d);
    for (size_t x = 0; x < static_cast<size_t>(n) * d; ++x) st.x[x] += st.out[x];
    c.trace("ffn_inp", l, st.x.data(), n, d);
    for (int i = 0; i < n; ++i) rmsnorm(st.x.data() + static_cast<size_t>(i) * d, lw.ffn_norm.data, st.xn.data() + static_cast<size_t>(i) * d, d, cfg_.rms_eps);
    c.trace("ffn_norm", l, st.xn.data(), n, d);
    if (lc.ffn == FfnKind::Moe) ffn_moe(c, l);
    else ffn_dense(c, l);
    c.trace("ffn_out", l, st.out.data(), n, d);
    for (size_t x = 0; x < static_cast<size_t>(n) * d; ++x) st.x[x] += st.out[x];
    c.trace("l_out", l, st.x.data(), n, d);
    layer_s_[l] += clock_s() - t0;
  }
}

}  // namespace strata
