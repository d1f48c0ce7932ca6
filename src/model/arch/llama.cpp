// Llama family, dense (Llama 2/3.x, with Llama 3.1's rope_freqs factors) or with experts
// (Mixtral: softmax top-2 of 8): GQA, normal RoPE.
#include <cmath>

#include "model/arch/common.h"

namespace strata::arch {

static void llama_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "llama."};
  read_common(m, r, cfg);
  const int n_expert = static_cast<int>(r.opt_int(key::kExpertCount, 0));
  for (auto& l : cfg.layers) {
    read_gqa(r, cfg, RopeStyle::Norm, l);
    if (n_expert > 0) {
      l.ffn = FfnKind::Moe;
      l.n_expert = n_expert;
      l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
      l.n_ff_exp = static_cast<int>(r.opt_int(key::kExpertFeedForwardLength, r.req_int(key::kFeedForwardLength)));
      l.gating = read_gating(r, GatingFunc::Softmax);
      l.norm_w = true;
    } else {
      l.ffn = FfnKind::Dense;
      l.n_ff = static_cast<int>(r.req_int(key::kFeedForwardLength));
    }
  }
}

static void llama_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  // Llama 3.1 rope scaling: one factor per rotated pair, shared by every layer.
  if (b.find(tn::kRopeFreqs)) w.rope_freqs = b.vec(tn::kRopeFreqs, cfg.layers[0].rope.n_dims / 2);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    lw.attn_norm = b.vec(blk(l, tn::kAttnNorm), cfg.n_embd);
    lw.wq = b.mat(blk(l, tn::kAttnQ), lc.n_head * lc.head_dim_k, cfg.n_embd);
    lw.wk = b.mat(blk(l, tn::kAttnK), lc.n_head_kv * lc.head_dim_k, cfg.n_embd);
    lw.wv = b.mat(blk(l, tn::kAttnV), lc.n_head_kv * lc.head_dim_v, cfg.n_embd);
    lw.wo = b.mat(blk(l, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.head_dim_v);
    lw.ffn_norm = b.vec(blk(l, tn::kFfnNorm), cfg.n_embd);
    if (lc.ffn == FfnKind::Moe) {
      bind_moe(b, cfg, l, lw);
    } else {
      lw.ffn_gate = b.mat(blk(l, tn::kFfnGate), lc.n_ff, cfg.n_embd);
      lw.ffn_up = b.mat(blk(l, tn::kFfnUp), lc.n_ff, cfg.n_embd);
      lw.ffn_down = b.mat(blk(l, tn::kFfnDown), cfg.n_embd, lc.n_ff);
    }
  }
  b.check_all_used();
}

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchLlama{"llama", arch::llama_config, arch::llama_bind};
}
