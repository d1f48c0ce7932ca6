// Qwen3-MoE (30B-A3B, 235B-A22B, Coder-480B): GQA with per-head q/k RMSNorm, NeoX RoPE,
// softmax router with renormalized top-k weights.
#include <cmath>

#include "model/arch/common.h"

namespace strata::arch {

static void qwen3moe_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "qwen3moe."};
  read_common(m, r, cfg);
  for (auto& l : cfg.layers) {
    read_gqa(r, cfg, RopeStyle::Neox, l);
    l.qk_norm = true;
    l.ffn = FfnKind::Moe;
    l.n_expert = static_cast<int>(r.req_int(key::kExpertCount));
    l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
    l.n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
    l.gating = read_gating(r, GatingFunc::Softmax);
    l.norm_w = r.opt_bool(key::kExpertWeightsNorm, true);
  }
}

static void qwen3moe_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    lw.attn_norm = b.vec(blk(l, tn::kAttnNorm), cfg.n_embd);
    lw.wq = b.mat(blk(l, tn::kAttnQ), lc.n_head * lc.head_dim_k, cfg.n_embd);
    lw.wk = b.mat(blk(l, tn::kAttnK), lc.n_head_kv * lc.head_dim_k, cfg.n_embd);
    lw.wv = b.mat(blk(l, tn::kAttnV), lc.n_head_kv * lc.head_dim_v, cfg.n_embd);
    lw.wo = b.mat(blk(l, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.head_dim_v);
    lw.q_norm = b.vec(blk(l, tn::kAttnQNorm), lc.head_dim_k);
    lw.k_norm = b.vec(blk(l, tn::kAttnKNorm), lc.head_dim_k);
    lw.ffn_norm = b.vec(blk(l, tn::kFfnNorm), cfg.n_embd);
    bind_moe(b, cfg, l, lw);
  }
  b.check_all_used();
}

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchQwen3Moe{"qwen3moe", arch::qwen3moe_config, arch::qwen3moe_bind};
}
