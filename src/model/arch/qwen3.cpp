// Dense Qwen3 (0.6B..32B; small ones serve as speculative-decoding drafts of Qwen3-MoE targets):
// GQA with per-head q/k RMSNorm, NeoX RoPE, SiLU-gated FFN in every layer.
#include "model/arch/common.h"

namespace strata::arch {

static void qwen3_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "qwen3."};
  read_common(m, r, cfg);
  for (auto& l : cfg.layers) {
    read_gqa(r, cfg, RopeStyle::Neox, l);
    l.qk_norm = true;
    l.ffn = FfnKind::Dense;
    l.n_ff = static_cast<int>(r.req_int(key::kFeedForwardLength));
  }
}

static void qwen3_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
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
    lw.ffn_gate = b.mat(blk(l, tn::kFfnGate), lc.n_ff, cfg.n_embd);
    lw.ffn_up = b.mat(blk(l, tn::kFfnUp), lc.n_ff, cfg.n_embd);
    lw.ffn_down = b.mat(blk(l, tn::kFfnDown), cfg.n_embd, lc.n_ff);
  }
  b.check_all_used();
}

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchQwen3{"qwen3", arch::qwen3_config, arch::qwen3_bind};
}
