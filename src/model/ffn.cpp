// Feed-forward blocks: dense GLU, shared experts, and routed MoE with batch grouping (each
// expert is acquired once per batch and applied to all of its tokens as one GEMM).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/limits.h"
#include "model/forward.h"

namespace strata {
namespace {

// `limit`: the clamp of the clamped variants (routed experts: lc.swiglu_limit).
void glu(const LayerConfig& lc, float limit, const float* g, const float* u, float* out, int64_t n) {
  switch (lc.act) {
    case GluAct::SwigluOai: swiglu_oai(g, u, out, n, lc.swiglu_alpha, limit); break;
    case GluAct::SwigluClamp: swiglu_clamp(g, u, out, n, limit); break;
    case GluAct::Silu: swiglu(g, u, out, n); break;
  }
}

// out[n, n_embd] = down(act(gate(x)) * up(x)) for a dense GLU.
void glu_ffn(FwdCtx& c, const LayerConfig& lc, float limit, const QMatrix& gate, const QMatrix& up, const QMatrix& down, const float* x, int n,
             float* out) {
  auto& st = c.st;
  const int64_t f = gate.rows;
  c.mm(gate, x, n, st.gate.data());
  c.mm(up, x, n, st.up.data());
  glu(lc, limit, st.gate.data(), st.up.data(), st.gate.data(), f * n);
  c.mm(down, st.gate.data(), n, out);
}

// Weights of the selected experts: their unbiased probabilities, optionally renormalized and scaled.
void finish_weights(const LayerConfig& lc, const float* probs, const int32_t* sel, float* w) {
  const int k = lc.n_expert_used;
  for (int j = 0; j < k; ++j) w[j] = probs[sel[j]];
  if (lc.gating == GatingFunc::SoftmaxWeight) softmax(w, k);
  if (lc.norm_w) {
    double sum = 0;  // ggml's row sum accumulates in double
    for (int j = 0; j < k; ++j) sum += w[j];
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int j = 0; j < k; ++j) w[j] /= s;
  }
  if (lc.w_scale != 1.0f)
    for (int j = 0; j < k; ++j) w[j] *= lc.w_scale;
}

// --route-cache: what route() needs to prefer the experts in memory at `layer`; counts: where
// the choices are counted (nullptr: not counted, the lookahead's predictions).
struct CachePick {
  const RouteCacheOptions* opt;
  FwdCtx* c;
  int layer;
  RouteCacheCounters* counts;
};
// In RAM (the expert provider) or claimed by an offload (VRAM).
bool pick_resident(int e, const void* ctx) {
  const CachePick& p = *static_cast<const CachePick*>(ctx);
  return p.c->experts->in_memory(p.layer, e) || (p.c->offload && p.c->offload->holds(p.layer, e));
}
// The pick for `layer` when --route-cache is on, else nullopt.
std::optional<CachePick> cache_pick(FwdCtx& c, int layer, bool count) {
  if (!c.knobs || !c.knobs->route.on()) return std::nullopt;
  return CachePick{&c.knobs->route, &c, layer, count ? c.knobs->route_counts : nullptr};
}

// Router: probabilities, selection and weights for token i. logits [n_expert] -> sel/w [k].
// pick: cache-conditional selection (nullptr: the router's top k).
void route(const LayerConfig& lc, const LayerWeights& lw, float* logits, int32_t token, int32_t* sel, float* w, const CachePick* pick = nullptr) {
  const int ne = lc.n_expert, k = lc.n_expert_used;
  float probs[kMaxExperts], select[kMaxExperts];
  switch (lc.gating) {
    case GatingFunc::Softmax:
      std::copy(logits, logits + ne, probs);
      softmax(probs, ne);
      break;
    case GatingFunc::Sigmoid:
      for (int e = 0; e < ne; ++e) probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      break;
    case GatingFunc::SoftmaxWeight:
      std::copy(logits, logits + ne, probs);
      break;
    case GatingFunc::SqrtSoftplus:
      for (int e = 0; e < ne; ++e) probs[e] = std::sqrt(softplus_f32(logits[e]));
      break;
  }
  if (lc.hash_routing) {
    // Hash layers: the experts come from the token id, the weights from the router.
    const int32_t* ids = lw.tid2eid + static_cast<int64_t>(token) * k;
    for (int j = 0; j < k; ++j) {
      STRATA_CHECK(ids[j] >= 0 && ids[j] < ne, "ffn_gate_tid2eid maps token {} to expert {} (of {})", token, ids[j], ne);
      sel[j] = ids[j];
    }
    finish_weights(lc, probs, sel, w);
    return;
  }
  std::copy(probs, probs + ne, select);
  if (lc.exp_probs_bias)
    for (int e = 0; e < ne; ++e) select[e] += lw.exp_probs_b.data[e];
  if (lc.n_group > 1 && lc.n_group_used < lc.n_group) {
    const int per = ne / lc.n_group;
    float gscore[kMaxExpertGroups];
    for (int g = 0; g < lc.n_group; ++g) {
      int32_t top2[2];
      top_k(select + g * per, per, std::min(2, per), top2);
      gscore[g] = select[g * per + top2[0]] + (per > 1 ? select[g * per + top2[1]] : 0.0f);
    }
    int32_t gsel[kMaxExpertGroups];
    top_k(gscore, lc.n_group, lc.n_group_used, gsel);
    bool keep[kMaxExpertGroups] = {};
    for (int j = 0; j < lc.n_group_used; ++j) keep[gsel[j]] = true;
    for (int g = 0; g < lc.n_group; ++g)
      if (!keep[g])
        for (int e = g * per; e < (g + 1) * per; ++e) select[e] = -INFINITY;
  }
  if (pick) {
    const int changed = select_cache_aware(select, ne, k, *pick->opt, pick_resident, pick, sel);
    if (pick->counts) pick->counts->add(k, changed);
  } else {
    top_k(select, ne, k, sel);
  }
  finish_weights(lc, probs, sel, w);
}

// MoeKnobs: keeps the first of the k choices by weight (at most knobs.k, until their share of the
// chosen weight reaches min_mass; at least one) in their selection order, scales their weights to
// the chosen ones' sum, and marks the rest -1 (weight 0). Returns how many it kept.
int trim_experts(const MoeKnobs& knobs, int k, int32_t* sel, float* w) {
  int order[kMaxExpertsUsed];
  for (int j = 0; j < k; ++j) order[j] = j;
  std::stable_sort(order, order + k, [&](int a, int b) { return w[a] > w[b]; });
  double total = 0;
  for (int j = 0; j < k; ++j) total += w[j];
  const int cap = knobs.k > 0 ? std::min(knobs.k, k) : k;
  bool keep[kMaxExpertsUsed] = {};
  double mass = 0;
  int m = 0;
  while (m < cap && (m == 0 || mass < static_cast<double>(knobs.min_mass) * total)) mass += w[order[m]], keep[order[m++]] = true;
  const float scale = mass > 0 ? static_cast<float>(total / mass) : 1.0f;
  int out = 0;
  for (int j = 0; j < k; ++j)
    if (keep[j]) sel[out] = sel[j], w[out++] = w[j] * scale;
  for (int j = out; j < k; ++j) sel[j] = -1, w[j] = 0.0f;
  return out;
}

}  // namespace

void ffn_dense(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  glu_ffn(c, lc, lc.swiglu_limit, lw.ffn_gate, lw.ffn_up, lw.ffn_down, c.st.xn.data(), c.b.n, c.st.out.data());
}

namespace {

// 1. Router for the whole batch: st.router (the router's product in, logits with its bias out),
//    st.sel / st.sel_w (choices, weights).
void route_batch(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n, ne = lc.n_expert, k = lc.n_expert_used;
  add_bias(st.router.data(), lw.router_b, n);
  const std::optional<CachePick> pick = cache_pick(c, layer, true);
  for (int i = 0; i < n; ++i) {
    int32_t* sel = st.sel.data() + static_cast<size_t>(i) * k;
    float* w = st.sel_w.data() + static_cast<size_t>(i) * k;
    route(lc, lw, st.router.data() + static_cast<size_t>(i) * ne, c.b.tokens[i], sel, w, pick ? &*pick : nullptr);
    const int kept = c.knobs && c.knobs->trims() ? trim_experts(*c.knobs, k, sel, w) : k;
    if (c.observer) c.observer->on_route(layer, i, sel, kept);
  }
  c.trace("ffn_moe_logits", layer, st.router.data(), n, ne);
}

// 2. Groups (token, slot) pairs by expert; tells the provider at once which experts we need (those
//    an ExpertOffload does not claim: away[e]).
void group_by_expert(FwdCtx& c, int layer, ExpertGroups& g, uint8_t* away) {
  const LayerConfig& lc = c.cfg.layers[layer];
  auto& st = c.st;
  const int n = c.b.n, ne = lc.n_expert, k = lc.n_expert_used;
  for (int s = 0; s < n * k; ++s)
    if (st.sel[s] >= 0) g.counts[st.sel[s]]++;  // -1: a choice MoeKnobs dropped
  g.starts[0] = 0;
  for (int e = 0; e < ne; ++e) g.starts[e + 1] = g.starts[e] + g.counts[e];
  int fill[kMaxExperts];
  std::copy(g.starts, g.starts + ne, fill);
  for (int s = 0; s < n * k; ++s) {
    const int e = st.sel[s];
    if (e < 0) continue;
    st.tok_of[fill[e]] = s / k;
    st.slot_of[fill[e]] = s % k;
    fill[e]++;
  }
  if (c.offload) c.offload->claim(c, layer, g, away);
  st.expert_list.clear();
  for (int e = 0; e < ne; ++e)
    if (g.counts[e] && away[e] != ExpertOffload::kAway) st.expert_list.push_back(e);
  c.experts->request(layer, st.expert_list.data(), static_cast<int>(st.expert_list.size()));
}

// Prefetch: applies the routers of the next --lookahead MoE layers to the current hidden state
// and asks the provider for the experts they choose (st.router is reused).
void prefetch_ahead(FwdCtx& c, int layer) {
  auto& st = c.st;
  const int n = c.b.n;
  for (int la = layer + 1, seen = 0; la < c.cfg.n_layer && seen < c.lookahead; ++la) {
    const LayerConfig& nc = c.cfg.layers[la];
    if (nc.ffn != FfnKind::Moe) continue;
    ++seen;
    const LayerWeights& nw = c.w.layers[la];
    c.mm(nw.router, st.xn.data(), n, st.router.data());
    add_bias(st.router.data(), nw.router_b, n);
    bool want[kMaxExperts] = {};
    int32_t sel[kMaxExpertsUsed];
    float wts[kMaxExpertsUsed];
    const std::optional<CachePick> pick = cache_pick(c, la, false);
    for (int i = 0; i < n; ++i) {
      route(nc, nw, st.router.data() + static_cast<size_t>(i) * nc.n_expert, c.b.tokens[i], sel, wts, pick ? &*pick : nullptr);
      const int kept = c.knobs && c.knobs->trims() ? trim_experts(*c.knobs, nc.n_expert_used, sel, wts) : nc.n_expert_used;
      for (int j = 0; j < kept; ++j) want[sel[j]] = !c.offload || !c.offload->holds(la, sel[j]);
    }
    int32_t list[kMaxExperts];
    int m = 0;
    for (int e = 0; e < nc.n_expert; ++e)
      if (want[e]) list[m++] = e;
    if (c.observer) c.observer->on_predict(la, list, m);
    c.experts->prefetch(la, list, m);
  }
}

// 3. One GEMM per expert over its tokens, hits first, then misses as they land. Experts with few
//    tokens (decoding) that are in memory together are computed as one group: one thread-pool
//    pass for all their gate/up products and one for all their down products. Writes the
//    weighted per-slot outputs into st.slots.
class ExpertRun {
 public:
  // away: ExpertOffload's marks (kAwayCopy experts are acquired and handed over, not computed).
  ExpertRun(FwdCtx& c, int layer, const ExpertGroups& g, const uint8_t* away)
      : away_(away), c_(c), st_(c.st), lc_(c.cfg.layers[layer]), lw_(c.w.layers[layer]), g_(g), layer_(layer), d_(c.cfg.n_embd),
        k_(lc_.n_expert_used), f_(lc_.n_ff_exp), n_pending_(static_cast<int>(c.st.expert_list.size())) {}

  void run() {
    const bool waves = c_.b.n > kGroupMaxTokens && st_.wave_rows > 0;
    while (n_pending_ > 0) {
      ExpertMats em;
      const int e = take(c_.experts->acquire_next(layer_, st_.expert_list.data(), n_pending_, &em));
      if (away_[e] == ExpertOffload::kAwayCopy) {  // computed elsewhere from these bytes
        c_.offload->take(c_, layer_, e, em);
        c_.experts->release(layer_, e);
        continue;
      }
      if (waves && fits_wave(e, em)) run_wave(e, em);
      else if (g_.counts[e] > kGroupMaxTokens) run_alone(e, em);
      else run_group(e, em);
    }
  }

 private:
  // Removes pending expert pi (the last pending one moves into its place); returns its id.
  int take(int pi) {
    const int e = st_.expert_list[pi];
    st_.expert_list[pi] = st_.expert_list[n_pending_ - 1];
    st_.expert_list[n_pending_ - 1] = e;
    --n_pending_;
    return e;
  }

  // Copies expert e's token rows of st.xn into x [counts[e], d].
  void gather(int e, float* x) const {
    for (int r = 0; r < g_.counts[e]; ++r)
      std::memcpy(x + static_cast<size_t>(r) * d_, st_.xn.data() + static_cast<size_t>(st_.tok_of[g_.starts[e] + r]) * d_, sizeof(float) * d_);
  }

  // Expert output rows -> weighted slots.
  void scatter(int e, const float* out_rows) {
    for (int r = 0; r < g_.counts[e]; ++r) {
      const int i = st_.tok_of[g_.starts[e] + r], slot = st_.slot_of[g_.starts[e] + r];
      float* dst = st_.slots.data() + (static_cast<size_t>(i) * k_ + slot) * d_;
      const float* src = out_rows + static_cast<size_t>(r) * d_;
      const float wgt = st_.sel_w[static_cast<size_t>(i) * k_ + slot];
      if (!lw_.down_exps_b.empty()) {
        const float* bb = lw_.down_exps_b.of(e);
        for (int j = 0; j < d_; ++j) dst[j] = (src[j] + bb[j]) * wgt;
      } else {
        for (int j = 0; j < d_; ++j) dst[j] = src[j] * wgt;
      }
    }
  }

  void add_gate_up_bias(int e, float* g, float* u, int m) const {
    if (lw_.gate_exps_b.empty()) return;
    for (int r = 0; r < m; ++r)
      for (int64_t j = 0; j < f_; ++j) {
        g[r * f_ + j] += lw_.gate_exps_b.of(e)[j];
        u[r * f_ + j] += lw_.up_exps_b.of(e)[j];
      }
  }

  // An expert with many tokens: its own products.
  void run_alone(int e, const ExpertMats& em) {
    const int m = g_.counts[e];
    gather(e, st_.gather.data());
    c_.mm_rows(em.gate, st_.gather.data(), m, st_.gate.data());
    c_.mm_rows(em.up, st_.gather.data(), m, st_.up.data());
    add_gate_up_bias(e, st_.gate.data(), st_.up.data(), m);
    glu(lc_, lc_.swiglu_limit, st_.gate.data(), st_.up.data(), st_.gate.data(), f_ * m);
    c_.mm_rows(em.down, st_.gate.data(), m, st_.tmp.data());
    c_.experts->release(layer_, e);
    scatter(e, st_.tmp.data());
  }

  // A group: expert e plus every other small pending one already in memory.
  void run_group(int e, const ExpertMats& em) {
    int grp[kGroupMaxExperts], rows0[kGroupMaxExperts + 1];
    ExpertMats mats[kGroupMaxExperts];
    const int ng = collect_group(e, em, grp, mats, rows0);
    float* gx = st_.grp_x.data();  // [rows, d]
    float* gg = st_.grp_g.data();  // [rows, f]
    float* gu = st_.grp_u.data();  // [rows, f]
    float* gy = st_.grp_y.data();  // [rows, d]
    MatmulJob jobs[2 * kGroupMaxExperts];
    for (int gi = 0; gi < ng; ++gi) {
      const int ex = grp[gi];
      float* x = gx + static_cast<size_t>(rows0[gi]) * d_;
      gather(ex, x);
      jobs[2 * gi] = MatmulJob{mats[gi].gate, x, g_.counts[ex], gg + static_cast<size_t>(rows0[gi]) * f_};
      jobs[2 * gi + 1] = MatmulJob{mats[gi].up, x, g_.counts[ex], gu + static_cast<size_t>(rows0[gi]) * f_};
    }
    matmul_many(c_.k, c_.pool, jobs, 2 * ng, st_.mm_many);
    for (int gi = 0; gi < ng; ++gi)
      add_gate_up_bias(grp[gi], gg + static_cast<size_t>(rows0[gi]) * f_, gu + static_cast<size_t>(rows0[gi]) * f_, g_.counts[grp[gi]]);
    glu(lc_, lc_.swiglu_limit, gg, gu, gg, f_ * rows0[ng]);
    for (int gi = 0; gi < ng; ++gi)
      jobs[gi] = MatmulJob{mats[gi].down, gg + static_cast<size_t>(rows0[gi]) * f_, g_.counts[grp[gi]], gy + static_cast<size_t>(rows0[gi]) * d_};
    matmul_many(c_.k, c_.pool, jobs, ng, st_.mm_many);
    for (int gi = 0; gi < ng; ++gi) {
      c_.experts->release(layer_, grp[gi]);
      scatter(grp[gi], gy + static_cast<size_t>(rows0[gi]) * d_);
    }
  }

  // Wave members share their gate/up activation format (st.xn's rows are quantized once per
  // layer) and down's; a product matmul() would hand to BLAS keeps its own path.
  bool fits_wave(int e, const ExpertMats& em) {
    const GgmlType ax = matmul_act_type(em.gate.type), ag = matmul_act_type(em.down.type);
    if (ax == GgmlType::F32 || ag == GgmlType::F32 || matmul_act_type(em.up.type) != ax || !c_.k.quantize_act[static_cast<uint32_t>(ax)] ||
        !c_.k.quantize_act[static_cast<uint32_t>(ag)])
      return false;
    if (wave_ax_ != GgmlType::F32 && (ax != wave_ax_ || ag != wave_ag_)) return false;
    const int m = g_.counts[e];
    if (m > st_.wave_rows || matmul_blas_applies(c_.k, em.gate, m) || matmul_blas_applies(c_.k, em.up, m) ||
        matmul_blas_applies(c_.k, em.down, m))
      return false;
    const size_t rx = ggml_row_size(ax, d_), rg = ggml_row_size(ag, f_);
    if (rx * c_.b.n > st_.wave_xq.size() || rx * st_.wave_rows > st_.wave_ax.size() || rg * st_.wave_rows > st_.wave_ag.size()) return false;
    if (wave_ax_ == GgmlType::F32) quantize_tokens(ax, ag);
    return true;
  }

  // st.xn's rows in the gate/up activation format, once per layer (the pool's threads split them).
  void quantize_tokens(GgmlType ax, GgmlType ag) {
    wave_ax_ = ax;
    wave_ag_ = ag;
    row_x_ = ggml_row_size(ax, d_);
    row_g_ = ggml_row_size(ag, f_);
    const FromFloatFn quant = c_.k.quantize_act[static_cast<uint32_t>(ax)];
    c_.parallel(c_.b.n, [&](int64_t a, int64_t b, int) {
      for (int64_t t = a; t < b; ++t) quant(st_.xn.data() + t * d_, st_.wave_xq.data() + t * row_x_, d_);
    });
  }

  // A prompt-size wave: expert e and every other pending expert in memory now (all of them when
  // resident): one thread-pool pass for all gate/up products, one for GLU and down's activations,
  // one for all down products. Every value is the one run_alone computes.
  void run_wave(int e, const ExpertMats& em) {
    int grp[kWaveMaxExperts], rows0[kWaveMaxExperts + 1];
    ExpertMats mats[kWaveMaxExperts];
    const int ng = collect(
        e, em, grp, mats, rows0, kWaveMaxExperts, [&](int ex, int rows) { return rows + g_.counts[ex] <= st_.wave_rows; },
        [&](int ex, const ExpertMats& mx) { return fits_wave(ex, mx); });
    uint8_t* ax = st_.wave_ax.data();
    for (int gi = 0; gi < ng; ++gi)
      for (int r = 0; r < g_.counts[grp[gi]]; ++r)
        std::memcpy(ax + static_cast<size_t>(rows0[gi] + r) * row_x_,
                    st_.wave_xq.data() + static_cast<size_t>(st_.tok_of[g_.starts[grp[gi]] + r]) * row_x_, row_x_);
    float *gg = st_.wave_g.data(), *gu = st_.wave_u.data(), *gy = st_.wave_y.data();
    MatmulJob jobs[2 * kWaveMaxExperts];
    for (int gi = 0; gi < ng; ++gi) {
      const int m = g_.counts[grp[gi]];
      const uint8_t* xq = ax + static_cast<size_t>(rows0[gi]) * row_x_;
      jobs[2 * gi] = MatmulJob{mats[gi].gate, nullptr, m, gg + static_cast<size_t>(rows0[gi]) * f_, nullptr, xq};
      jobs[2 * gi + 1] = MatmulJob{mats[gi].up, nullptr, m, gu + static_cast<size_t>(rows0[gi]) * f_, nullptr, xq};
    }
    matmul_many(c_.k, c_.pool, jobs, 2 * ng, st_.mm_many);
    glu_rows(grp, rows0, ng);
    for (int gi = 0; gi < ng; ++gi)
      jobs[gi] = MatmulJob{mats[gi].down, nullptr, g_.counts[grp[gi]], gy + static_cast<size_t>(rows0[gi]) * d_, nullptr,
                           st_.wave_ag.data() + static_cast<size_t>(rows0[gi]) * row_g_};
    matmul_many(c_.k, c_.pool, jobs, ng, st_.mm_many);
    for (int gi = 0; gi < ng; ++gi) {
      c_.experts->release(layer_, grp[gi]);
      scatter(grp[gi], gy + static_cast<size_t>(rows0[gi]) * d_);
    }
  }

  // Bias, GLU (row by row, as ggml applies it) and down's activations of a wave's rows.
  void glu_rows(const int* grp, const int* rows0, int ng) {
    const FromFloatFn quant = c_.k.quantize_act[static_cast<uint32_t>(wave_ag_)];
    float *gg = st_.wave_g.data(), *gu = st_.wave_u.data();
    c_.parallel(rows0[ng], [&](int64_t a, int64_t b, int) {
      for (int64_t r = a; r < b; ++r) {
        const int gi = static_cast<int>(std::upper_bound(rows0, rows0 + ng + 1, static_cast<int>(r)) - rows0) - 1;
        float* g = gg + r * f_;
        add_gate_up_bias(grp[gi], g, gu + r * f_, 1);
        glu(lc_, lc_.swiglu_limit, g, gu + r * f_, g, f_);
        quant(g, st_.wave_ag.data() + r * row_g_, f_);
      }
    });
  }

  // Fills grp/mats/rows0 (first rows of each member) with e and the small pending experts the
  // provider has in memory now, up to kGroupMaxExperts / kGroupMaxRows; returns the member count.
  int collect_group(int e, const ExpertMats& em, int* grp, ExpertMats* mats, int* rows0) {
    return collect(
        e, em, grp, mats, rows0, kGroupMaxExperts,
        [&](int ex, int rows) { return g_.counts[ex] <= kGroupMaxTokens && rows + g_.counts[ex] <= kGroupMaxRows; },
        [](int, const ExpertMats&) { return true; });
  }

  // e, then pending experts the provider has in memory now, while fewer than max_n: those that
  // `admit` (expert, rows so far) before they are acquired and `fits` (expert, mats) after (else
  // released). grp/mats/rows0: members and their first rows; returns the member count.
  template <class Admit, class Fits>
  int collect(int e, const ExpertMats& em, int* grp, ExpertMats* mats, int* rows0, int max_n, Admit&& admit, Fits&& fits) {
    int ng = 0;
    rows0[0] = 0;
    auto add = [&](int ex, const ExpertMats& mx) {
      grp[ng] = ex;
      mats[ng] = mx;
      rows0[ng + 1] = rows0[ng] + g_.counts[ex];
      ++ng;
    };
    add(e, em);
    for (int pi = 0; pi < n_pending_ && ng < max_n;) {
      const int ex = st_.expert_list[pi];
      ExpertMats mx;
      if (away_[ex] == ExpertOffload::kLocal && admit(ex, rows0[ng]) && c_.experts->try_acquire(layer_, ex, &mx)) {
        if (fits(ex, mx)) {
          add(take(pi), mx);  // the last pending moved into pi: look at pi again
          continue;
        }
        c_.experts->release(layer_, ex);
      }
      ++pi;
    }
    return ng;
  }

  const uint8_t* away_;
  FwdCtx& c_;
  Model::State& st_;
  const LayerConfig& lc_;
  const LayerWeights& lw_;
  const ExpertGroups& g_;
  const int layer_, d_, k_;
  const int64_t f_;
  int n_pending_;
  // The wave activation formats of this layer (F32: no wave yet) and their row sizes.
  GgmlType wave_ax_ = GgmlType::F32, wave_ag_ = GgmlType::F32;
  size_t row_x_ = 0, row_g_ = 0;
};

// 4. Sums each token's slots in selection order (as llama.cpp does) into st.out (slots MoeKnobs
//    dropped, at the end, are left out).
void sum_slots(FwdCtx& c, int k) {
  auto& st = c.st;
  const int d = c.cfg.n_embd;
  for (int i = 0; i < c.b.n; ++i) {
    float* o = st.out.data() + static_cast<size_t>(i) * d;
    const float* s0 = st.slots.data() + static_cast<size_t>(i) * k * d;
    std::memcpy(o, s0, sizeof(float) * d);
    for (int j = 1; j < k && st.sel[static_cast<size_t>(i) * k + j] >= 0; ++j)
      for (int x = 0; x < d; ++x) o[x] += s0[static_cast<size_t>(j) * d + x];
  }
}

// 5. Shared experts (dense, resident), added to st.out.
void add_shared_experts(FwdCtx& c, const LayerConfig& lc, const LayerWeights& lw) {
  auto& st = c.st;
  const int n = c.b.n, d = c.cfg.n_embd;
  float* sh = st.attn.data();  // free at this point
  const float limit = lc.act == GluAct::SwigluClamp ? lc.swiglu_limit_shexp : lc.swiglu_limit;
  glu_ffn(c, lc, limit, lw.shexp_gate, lw.shexp_up, lw.shexp_down, st.xn.data(), n, sh);
  if (lc.shexp_gate) {  // Qwen3.5: one sigmoid gate per token, from its own f32 projection
    float* gl = st.router.data();  // [n] (the router logits are traced and used by now)
    c.mm(lw.shexp_gate_inp, st.xn.data(), n, gl);
    for (int i = 0; i < n; ++i) {
      const float g = sigmoid_f32(gl[i]);
      float* r = sh + static_cast<size_t>(i) * d;
      for (int x = 0; x < d; ++x) r[x] *= g;
    }
  }
  for (size_t x = 0; x < static_cast<size_t>(n) * d; ++x) st.out[x] += sh[x];
}

}  // namespace

void moe_routed_experts(FwdCtx& c, int layer) {
  route_batch(c, layer);
  ExpertGroups groups;
  uint8_t away[kMaxExperts] = {};
  group_by_expert(c, layer, groups, away);
  prefetch_ahead(c, layer);
  ExpertRun(c, layer, groups, away).run();
  if (c.offload) c.offload->finish(c, layer, groups, away);
  sum_slots(c, c.cfg.layers[layer].n_expert_used);
  c.trace("ffn_moe_out", layer, c.st.out.data(), c.b.n, c.cfg.n_embd);
}

void routed_experts_for(FwdCtx& c, int layer, const ExpertGroups& g, const int32_t* list, int m) {
  c.st.expert_list.assign(list, list + m);
  c.experts->request(layer, c.st.expert_list.data(), m);
  const uint8_t away[kMaxExperts] = {};  // every one computed here
  ExpertRun(c, layer, g, away).run();
}

void ffn_moe(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  c.mm(lw.router, c.st.xn.data(), c.b.n, c.st.router.data());
  moe_routed_experts(c, layer);
  if (!lw.shexp_gate.empty()) add_shared_experts(c, lc, lw);
}

}  // namespace strata
