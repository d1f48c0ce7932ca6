// Feed-forward blocks: dense GLU, shared experts, and routed MoE with batch grouping (each
// expert is acquired once per batch and applied to all of its tokens as one GEMM).
#include <algorithm>
#include <cmath>
#include <cstring>

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

// As ggml computes it (log of 1 + exp, not log1p): the same float, so the same routing.
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

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

// Router: probabilities, selection and weights for token i. logits [n_expert] -> sel/w [k].
void route(const LayerConfig& lc, const LayerWeights& lw, float* logits, int32_t token, int32_t* sel, float* w) {
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
      for (int e = 0; e < ne; ++e) probs[e] = std::sqrt(softplus(logits[e]));
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
  top_k(select, ne, k, sel);
  finish_weights(lc, probs, sel, w);
}

}  // namespace

void ffn_dense(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  glu_ffn(c, lc, lc.swiglu_limit, lw.ffn_gate, lw.ffn_up, lw.ffn_down, c.st.xn.data(), c.b.n, c.st.out.data());
}

void ffn_moe(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n, ne = lc.n_expert, k = lc.n_expert_used, d = c.cfg.n_embd;
  // 1. Router for the whole batch.
  c.mm(lw.router, st.xn.data(), n, st.router.data());
  add_bias(st.router.data(), lw.router_b, n);
  for (int i = 0; i < n; ++i) {
    route(lc, lw, st.router.data() + static_cast<size_t>(i) * ne, c.b.tokens[i], st.sel.data() + static_cast<size_t>(i) * k, st.sel_w.data() + static_cast<size_t>(i) * k);
    if (c.observer) c.observer->on_route(layer, i, st.sel.data() + static_cast<size_t>(i) * k, k);
  }
  c.trace("ffn_moe_logits", layer, st.router.data(), n, ne);
  // 2. Group (token, slot) pairs by expert; tell the provider at once which experts we need.
  int counts[kMaxExperts] = {}, starts[kMaxExperts + 1];
  for (int s = 0; s < n * k; ++s) counts[st.sel[s]]++;
  starts[0] = 0;
  for (int e = 0; e < ne; ++e) starts[e + 1] = starts[e] + counts[e];
  int fill[kMaxExperts];
  std::copy(starts, starts + ne, fill);
  for (int s = 0; s < n * k; ++s) {
    const int e = st.sel[s];
    st.tok_of[fill[e]] = s / k;
    st.slot_of[fill[e]] = s % k;
    fill[e]++;
  }
  st.expert_list.clear();
  for (int e = 0; e < ne; ++e)
    if (counts[e]) st.expert_list.push_back(e);
  c.experts->request(layer, st.expert_list.data(), static_cast<int>(st.expert_list.size()));
  // Prefetch: apply the routers of the next MoE layers to the current hidden state.
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
    for (int i = 0; i < n; ++i) {
      route(nc, nw, st.router.data() + static_cast<size_t>(i) * nc.n_expert, c.b.tokens[i], sel, wts);
      for (int j = 0; j < nc.n_expert_used; ++j) want[sel[j]] = true;
    }
    int32_t list[kMaxExperts];
    int m = 0;
    for (int e = 0; e < nc.n_expert; ++e)
      if (want[e]) list[m++] = e;
    if (c.observer) c.observer->on_predict(la, list, m);
    c.experts->prefetch(la, list, m);
  }
  // 3. One GEMM per expert over its tokens, hits first, then misses as they land. Experts
  //    with few tokens (decoding) that are in memory together are computed as one group: one
  //    thread-pool pass for all their gate/up products and one for all their down products.
  const int64_t f = lc.n_ff_exp;
  int n_pending = static_cast<int>(st.expert_list.size());
  auto take = [&](int pi) {  // removes pending[pi], returns the expert id
    const int e = st.expert_list[pi];
    st.expert_list[pi] = st.expert_list[n_pending - 1];
    st.expert_list[n_pending - 1] = e;
    --n_pending;
    return e;
  };
  auto scatter = [&](int e, const float* out_rows) {  // expert output rows -> weighted slots
    for (int r = 0; r < counts[e]; ++r) {
      const int i = st.tok_of[starts[e] + r], slot = st.slot_of[starts[e] + r];
      float* dst = st.slots.data() + (static_cast<size_t>(i) * k + slot) * d;
      const float* src = out_rows + static_cast<size_t>(r) * d;
      const float wgt = st.sel_w[static_cast<size_t>(i) * k + slot];
      if (!lw.down_exps_b.empty()) {
        const float* bb = lw.down_exps_b.of(e);
        for (int j = 0; j < d; ++j) dst[j] = (src[j] + bb[j]) * wgt;
      } else {
        for (int j = 0; j < d; ++j) dst[j] = src[j] * wgt;
      }
    }
  };
  auto add_gate_up_bias = [&](int e, float* g, float* u, int m) {
    if (lw.gate_exps_b.empty()) return;
    for (int r = 0; r < m; ++r)
      for (int64_t j = 0; j < f; ++j) {
        g[r * f + j] += lw.gate_exps_b.of(e)[j];
        u[r * f + j] += lw.up_exps_b.of(e)[j];
      }
  };
  while (n_pending > 0) {
    ExpertMats em;
    const int e = take(c.experts->acquire_next(layer, st.expert_list.data(), n_pending, &em));
    const int m = counts[e];
    if (m > kGroupMaxTokens) {
      for (int r = 0; r < m; ++r)
        std::memcpy(st.gather.data() + static_cast<size_t>(r) * d, st.xn.data() + static_cast<size_t>(st.tok_of[starts[e] + r]) * d, sizeof(float) * d);
      c.mm_rows(em.gate, st.gather.data(), m, st.gate.data());
      c.mm_rows(em.up, st.gather.data(), m, st.up.data());
      add_gate_up_bias(e, st.gate.data(), st.up.data(), m);
      glu(lc, lc.swiglu_limit, st.gate.data(), st.up.data(), st.gate.data(), f * m);
      c.mm_rows(em.down, st.gate.data(), m, st.tmp.data());
      c.experts->release(layer, e);
      scatter(e, st.tmp.data());
      continue;
    }
    // A group: this expert plus every other small pending one already in memory.
    int grp[kGroupMaxExperts], rows0[kGroupMaxExperts + 1];
    ExpertMats mats[kGroupMaxExperts];
    int ng = 0;
    rows0[0] = 0;
    auto add = [&](int ex, const ExpertMats& mx) {
      grp[ng] = ex;
      mats[ng] = mx;
      rows0[ng + 1] = rows0[ng] + counts[ex];
      ++ng;
    };
    add(e, em);
    for (int pi = 0; pi < n_pending && ng < kGroupMaxExperts;) {
      const int ex = st.expert_list[pi];
      ExpertMats mx;
      if (counts[ex] <= kGroupMaxTokens && rows0[ng] + counts[ex] <= kGroupMaxRows && c.experts->try_acquire(layer, ex, &mx)) {
        add(take(pi), mx);  // the last pending moved into pi: look at pi again
      } else {
        ++pi;
      }
    }
    float* gx = st.grp_x.data();   // [rows, d]
    float* gg = st.grp_g.data();   // [rows, f]
    float* gu = st.grp_u.data();   // [rows, f]
    float* gy = st.grp_y.data();   // [rows, d]
    MatmulJob jobs[2 * kGroupMaxExperts];
    for (int g = 0; g < ng; ++g) {
      const int ex = grp[g];
      for (int r = 0; r < counts[ex]; ++r)
        std::memcpy(gx + static_cast<size_t>(rows0[g] + r) * d, st.xn.data() + static_cast<size_t>(st.tok_of[starts[ex] + r]) * d, sizeof(float) * d);
      jobs[2 * g] = MatmulJob{mats[g].gate, gx + static_cast<size_t>(rows0[g]) * d, counts[ex], gg + static_cast<size_t>(rows0[g]) * f};
      jobs[2 * g + 1] = MatmulJob{mats[g].up, gx + static_cast<size_t>(rows0[g]) * d, counts[ex], gu + static_cast<size_t>(rows0[g]) * f};
    }
    matmul_many(c.k, c.pool, jobs, 2 * ng, st.mm_many);
    for (int g = 0; g < ng; ++g) add_gate_up_bias(grp[g], gg + static_cast<size_t>(rows0[g]) * f, gu + static_cast<size_t>(rows0[g]) * f, counts[grp[g]]);
    glu(lc, lc.swiglu_limit, gg, gu, gg, f * rows0[ng]);
    for (int g = 0; g < ng; ++g)
      jobs[g] = MatmulJob{mats[g].down, gg + static_cast<size_t>(rows0[g]) * f, counts[grp[g]], gy + static_cast<size_t>(rows0[g]) * d};
    matmul_many(c.k, c.pool, jobs, ng, st.mm_many);
    for (int g = 0; g < ng; ++g) {
      c.experts->release(layer, grp[g]);
      scatter(grp[g], gy + static_cast<size_t>(rows0[g]) * d);
    }
  }
  // 4. Sum the slots in selection order (as llama.cpp does).
  for (int i = 0; i < n; ++i) {
    float* o = st.out.data() + static_cast<size_t>(i) * d;
    const float* s0 = st.slots.data() + static_cast<size_t>(i) * k * d;
    std::memcpy(o, s0, sizeof(float) * d);
    for (int j = 1; j < k; ++j)
      for (int x = 0; x < d; ++x) o[x] += s0[static_cast<size_t>(j) * d + x];
  }
  c.trace("ffn_moe_out", layer, st.out.data(), n, d);
  // 5. Shared experts (dense, resident).
  if (!lw.shexp_gate.empty()) {
    float* sh = st.attn.data();  // free at this point
    const float limit = lc.act == GluAct::SwigluClamp ? lc.swiglu_limit_shexp : lc.swiglu_limit;
    glu_ffn(c, lc, limit, lw.shexp_gate, lw.shexp_up, lw.shexp_down, st.xn.data(), n, sh);
    for (size_t x = 0; x < static_cast<size_t>(n) * d; ++x) st.out[x] += sh[x];
  }
}

}  // namespace strata
