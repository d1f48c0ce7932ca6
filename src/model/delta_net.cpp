// Gated DeltaNet block (linear attention of Qwen3.5's hybrid models), per token as llama.cpp's
// CPU build computes it (its fused ggml_gated_delta_net op runs the recurrence token by token for
// prompts too, so a prompt in one pass, in chunks or token by token gives the same state):
//   p = W_qkv a, z = W_z a, beta = sigmoid(W_beta a), g = a_h * softplus(W_alpha a + dt)
//   u = silu(causal_conv(p)); q, k = l2norm per head of u's first two parts, v = the rest
//   per value head h (query/key head h % Hk): M = exp(g) M + k (beta (v - M^T k))^T; o = M^T q / sqrt(S)
//   out = W_out (rmsnorm(o_h) * norm * silu(z_h) for every head)
#include "model/delta_net.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "model/forward.h"

namespace strata {

namespace {
template <typename T>
uint64_t cap_bytes(const std::vector<T>& v) {
  return static_cast<uint64_t>(v.capacity()) * sizeof(T);
}
}  // namespace

uint64_t DeltaNetState::bytes() const {
  uint64_t b = cap_bytes(slot) + cap_bytes(seen);
  for (const Layer& l : layers) b += cap_bytes(l.conv) + cap_bytes(l.ssm) + cap_bytes(l.pos);
  return b;
}

uint64_t DeltaNetState::seq_bytes() const {
  uint64_t b = 0;
  for (const Layer& l : layers) b += (l.conv_width + l.ssm_width) * sizeof(float) + sizeof(int32_t);
  return b;
}

void DeltaNetState::seq_regions(int seq, int n, std::vector<std::span<uint8_t>>& out) {
  (void)n;  // the same size at any position
  STRATA_CHECK(seq >= 0 && static_cast<size_t>(seq) < seen.size(), "sequence {} has no DeltaNet state", seq);
  auto bytes_of = [](auto* p, size_t count) { return std::span<uint8_t>(reinterpret_cast<uint8_t*>(p), count * sizeof(*p)); };
  for (Layer& l : layers) {
    out.push_back(bytes_of(l.conv_of(seq), l.conv_width));
    out.push_back(bytes_of(l.ssm_of(seq), l.ssm_width));
    out.push_back(bytes_of(l.pos.data() + seq, 1));
  }
}

std::unique_ptr<KvCacheExt> delta_net_make_state(const ModelConfig& cfg, const KvCache& kv, int n_batch, int n_threads) {
  (void)n_batch, (void)n_threads;  // the state does not grow with the context or the batch; scratch is Model::State's
  const int n_seq = kv.n_seq();
  auto st = std::make_unique<DeltaNetState>();
  st->slot.assign(cfg.layers.size(), -1);
  for (size_t l = 0; l < cfg.layers.size(); ++l) {
    const LayerConfig& lc = cfg.layers[l];
    if (lc.attn != AttnKind::DeltaNet) continue;
    st->slot[l] = static_cast<int>(st->layers.size());
    DeltaNetState::Layer& ls = st->layers.emplace_back();
    ls.conv_width = static_cast<size_t>(lc.ssm_conv - 1) * static_cast<size_t>(lc.ssm_channels());
    ls.ssm_width = static_cast<size_t>(lc.ssm_v_heads) * lc.ssm_state * lc.ssm_state;
    ls.conv.assign(ls.conv_width * static_cast<size_t>(n_seq), 0.0f);
    ls.ssm.assign(ls.ssm_width * static_cast<size_t>(n_seq), 0.0f);
    ls.pos.assign(static_cast<size_t>(n_seq), 0);
  }
  st->seen.assign(static_cast<size_t>(n_seq), 0);
  return st;
}

namespace {

DeltaNetState::Layer& layer_state(FwdCtx& c, int layer) {
  auto& ext = c.kv.ext();
  if (!ext) ext = delta_net_make_state(c.cfg, c.kv, c.b.n, c.pool ? c.pool->size() : 1);
  auto* s = dynamic_cast<DeltaNetState*>(ext.get());
  STRATA_CHECK(s != nullptr, "the KV cache holds another architecture's state");
  const int slot = s->slot[static_cast<size_t>(layer)];
  STRATA_CHECK(slot >= 0, "layer {} has no DeltaNet state", layer);
  return s->layers[static_cast<size_t>(slot)];
}

// Projections of st.xn: p -> st.q [n, C], z -> st.v [n, Hv*S], beta and alpha -> st.tmp [n, Hv] each.
void project(FwdCtx& c, const LayerWeights& lw, int n_v) {
  auto& st = c.st;
  const int n = c.b.n;
  float* beta = st.tmp.data();
  float* alpha = beta + static_cast<size_t>(n) * n_v;
  if (n <= kGroupMaxTokens) {  // decoding: one thread-pool pass
    const MatmulJob jobs[4] = {{lw.wqkv, st.xn.data(), n, st.q.data(), st.in_gemm.data()},
                               {lw.wz, st.xn.data(), n, st.v.data(), st.in_gemm.data()},
                               {lw.ssm_beta, st.xn.data(), n, beta, st.in_gemm.data()},
                               {lw.ssm_alpha, st.xn.data(), n, alpha, st.in_gemm.data()}};
    matmul_many(c.k, c.pool, jobs, 4, st.mm_many);
    return;
  }
  c.mm(lw.wqkv, st.xn.data(), n, st.q.data());
  c.mm(lw.wz, st.xn.data(), n, st.v.data());
  c.mm(lw.ssm_beta, st.xn.data(), n, beta);
  c.mm(lw.ssm_alpha, st.xn.data(), n, alpha);
}

// A sequence continues where its state ends, or restarts at position 0 (clearing the state) with
// its first token of the pass; anything else would read a state of another prefix.
void check_position(FwdCtx& c, int layer, DeltaNetState& all, DeltaNetState::Layer& ls, int i) {
  const int s = c.seq(i), pos = c.b.pos[i];
  const bool first = !all.seen[static_cast<size_t>(s)];
  all.seen[static_cast<size_t>(s)] = 1;
  if (pos == 0 && first) {
    std::fill(ls.conv_of(s), ls.conv_of(s) + ls.conv_width, 0.0f);
    std::fill(ls.ssm_of(s), ls.ssm_of(s) + ls.ssm_width, 0.0f);
    ls.pos[static_cast<size_t>(s)] = 0;
  }
  STRATA_CHECK(pos == ls.pos[static_cast<size_t>(s)],
               "layer {}: sequence {} continues at position {} but its recurrent state holds {} positions (the state cannot be rewound)", layer, s,
               pos, ls.pos[static_cast<size_t>(s)]);
  ls.pos[static_cast<size_t>(s)] = pos + 1;
}

// Token by token in batch order (each sequence's tokens in position order): the convolution over
// the state's previous inputs (st.q -> st.k, silu), q/k L2 norms, beta and the decay g (st.tmp).
void conv_and_gates(FwdCtx& c, int layer, DeltaNetState& all, DeltaNetState::Layer& ls) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int n = c.b.n, C = lc.ssm_channels(), K = lc.ssm_conv, S = lc.ssm_state, nv = lc.ssm_v_heads;
  std::fill(all.seen.begin(), all.seen.end(), 0);
  float* beta = st.tmp.data();
  float* g = beta + static_cast<size_t>(n) * nv;
  for (int i = 0; i < n; ++i) {
    check_position(c, layer, all, ls, i);
    float* hist = ls.conv_of(c.seq(i));  // [K-1, C]
    const float* p = st.q.data() + static_cast<size_t>(i) * C;
    float* u = st.k.data() + static_cast<size_t>(i) * C;
    conv1d_causal_step(hist, p, lw.ssm_conv1d.data, C, K, u);
    if (K > 1) {  // shift the window: drop the oldest input, append p
      std::memmove(hist, hist + C, sizeof(float) * static_cast<size_t>(K - 2) * C);
      std::memcpy(hist + static_cast<size_t>(K - 2) * C, p, sizeof(float) * C);
    }
    silu_vec(u, u, C);
    for (int h = 0; h < 2 * lc.ssm_k_heads; ++h) l2norm(u + h * S, u + h * S, S, c.cfg.rms_eps);
    for (int h = 0; h < nv; ++h) {
      const size_t at = static_cast<size_t>(i) * nv + h;
      beta[at] = sigmoid_f32(beta[at]);
      g[at] = softplus_f32(g[at] + lw.ssm_dt.data[h]) * lw.ssm_a.data[h];
    }
  }
}

// The recurrence, value heads in parallel; each head walks the batch's tokens in order.
// Output o -> st.attn [n, Hv*S].
void recurrence(FwdCtx& c, int layer, DeltaNetState::Layer& ls) {
  const LayerConfig& lc = c.cfg.layers[layer];
  auto& st = c.st;
  const int n = c.b.n, C = lc.ssm_channels(), S = lc.ssm_state, nk = lc.ssm_k_heads, nv = lc.ssm_v_heads;
  const float* beta = st.tmp.data();
  const float* g = beta + static_cast<size_t>(n) * nv;
  const DotF32Fn dot = c.k.dot_f32;
  c.parallel(nv, [&](int64_t a, int64_t e, int) {
    for (int64_t h = a; h < e; ++h) {
      const int kh = static_cast<int>(h) % nk;
      for (int i = 0; i < n; ++i) {
        const float* u = st.k.data() + static_cast<size_t>(i) * C;
        const float* q = u + kh * S;
        const float* k = u + (nk + kh) * S;
        const float* v = u + 2 * nk * S + h * S;
        float* m = ls.ssm_of(c.seq(i)) + static_cast<size_t>(h) * S * S;
        const size_t at = static_cast<size_t>(i) * nv + h;
        gated_delta_step(m, q, k, v, g[at], beta[at], S, st.attn.data() + static_cast<size_t>(i) * nv * S + h * S, dot);
      }
    }
  });
}

// o_h = rmsnorm(o_h) * ssm_norm * silu(z_h) per token and value head (in st.attn).
void gated_norm(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  auto& st = c.st;
  const int S = lc.ssm_state;
  const size_t heads = static_cast<size_t>(c.b.n) * lc.ssm_v_heads;
  for (size_t r = 0; r < heads; ++r) {
    float* o = st.attn.data() + r * S;
    float* z = st.v.data() + r * S;
    rmsnorm(o, lw.ssm_norm.data, o, S, c.cfg.rms_eps);
    silu_vec(z, z, S);
    for (int j = 0; j < S; ++j) o[j] *= z[j];
  }
}

}  // namespace

void delta_net(FwdCtx& c, int layer) {
  const LayerConfig& lc = c.cfg.layers[layer];
  const LayerWeights& lw = c.w.layers[layer];
  check_batch_positions(c);
  DeltaNetState::Layer& ls = layer_state(c, layer);
  auto& all = static_cast<DeltaNetState&>(*c.kv.ext());
  const int n = c.b.n, nv = lc.ssm_v_heads;
  project(c, lw, nv);
  c.trace("linear_attn_qkv_mixed", layer, c.st.q.data(), n, lc.ssm_channels());
  c.trace("z", layer, c.st.v.data(), n, nv * lc.ssm_state);
  conv_and_gates(c, layer, all, ls);
  c.trace("beta_sigmoid", layer, c.st.tmp.data(), n, nv);
  c.trace("gate", layer, c.st.tmp.data() + static_cast<size_t>(n) * nv, n, nv);
  recurrence(c, layer, ls);
  gated_norm(c, layer);
  c.trace("final_output", layer, c.st.attn.data(), n, nv * lc.ssm_state);
  c.mm(lw.ssm_out, c.st.attn.data(), c.b.n, c.st.out.data());
}

}  // namespace strata
