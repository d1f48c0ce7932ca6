// MiniMax-M2: GQA with q/k RMSNorm over the full q/k width (all heads at once, before the head
// split), NeoX RoPE on the first rope.dimension_count dims of each head, every layer MoE with a
// sigmoid router, selection-only bias (exp_probs_b) and renormalized, unscaled weights; no
// shared expert, no dense layer, no tied output.
#include "model/arch/common.h"

namespace strata::arch {

static void minimax_m2_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "minimax-m2."};
  read_common(m, r, cfg);
  // llama.cpp has no default gating function for this architecture: the key must say sigmoid.
  STRATA_CHECK(r.has(key::kExpertGatingFunc), "{}: missing required metadata '{}{}'", m.path(), r.prefix, key::kExpertGatingFunc);
  const GatingFunc gating = read_gating(r, GatingFunc::Sigmoid);
  STRATA_CHECK(gating == GatingFunc::Sigmoid, "{}: {}{} is {} but minimax-m2 routes with a sigmoid (2)", m.path(), r.prefix, key::kExpertGatingFunc,
               r.req_int(key::kExpertGatingFunc));
  // llama.cpp sizes the experts from feed_forward_length; the loader also requires the expert key.
  const int n_ff = static_cast<int>(r.req_int(key::kFeedForwardLength));
  const int n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
  STRATA_CHECK(n_ff == n_ff_exp, "{}: {}{} {} differs from {}{} {} (both give the expert width)", m.path(), r.prefix, key::kFeedForwardLength, n_ff,
               r.prefix, key::kExpertFeedForwardLength, n_ff_exp);
  for (auto& l : cfg.layers) {
    read_gqa(r, cfg, RopeStyle::Neox, l);
    STRATA_CHECK(l.head_dim_k == l.head_dim_v, "{}: {}{} {} differs from {}{} {}", m.path(), r.prefix, key::kAttnKeyLength, l.head_dim_k, r.prefix,
                 key::kAttnValueLength, l.head_dim_v);
    l.qk_norm_full = true;
    l.ffn = FfnKind::Moe;
    l.n_expert = static_cast<int>(r.req_int(key::kExpertCount));
    l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
    l.n_ff_exp = n_ff;
    l.gating = gating;
    l.exp_probs_bias = true;
    l.norm_w = true;  // always, whatever expert_weights_norm says (llama.cpp does not read it here)
  }
}

static void minimax_m2_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  w.tok_embd = b.mat(tn::kTokenEmbd, cfg.n_vocab, cfg.n_embd);
  w.output_norm = b.vec(tn::kOutputNorm, cfg.n_embd);
  w.output = b.mat(tn::kOutput, cfg.n_vocab, cfg.n_embd);  // required: no tied fallback
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    const int dq = lc.n_head * lc.head_dim_k, dk = lc.n_head_kv * lc.head_dim_k;
    lw.attn_norm = b.vec(blk(l, tn::kAttnNorm), cfg.n_embd);
    lw.wq = b.mat(blk(l, tn::kAttnQ), dq, cfg.n_embd);
    lw.wk = b.mat(blk(l, tn::kAttnK), dk, cfg.n_embd);
    lw.wv = b.mat(blk(l, tn::kAttnV), lc.n_head_kv * lc.head_dim_v, cfg.n_embd);
    lw.wo = b.mat(blk(l, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.head_dim_v);
    lw.q_norm = b.vec(blk(l, tn::kAttnQNorm), dq);  // full width: one weight per channel of every head
    lw.k_norm = b.vec(blk(l, tn::kAttnKNorm), dk);
    lw.ffn_norm = b.vec(blk(l, tn::kFfnNorm), cfg.n_embd);
    bind_moe(b, cfg, l, lw);
    lw.exp_probs_b = b.vec(blk(l, tn::kExpProbsBias), lc.n_expert);
  }
  b.check_all_used();
}

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchMinimaxM2{"minimax-m2", arch::minimax_m2_config, arch::minimax_m2_bind};
}
