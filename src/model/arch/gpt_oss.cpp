// gpt-oss (20b / 120b): GQA with biases and per-head attention sinks, sliding-window attention
// on every other layer (even layers), NeoX RoPE with YaRN, MoE with router bias, softmax over
// the selected logits, expert biases and the clamped SwiGLU variant; MXFP4 experts.
#include <cmath>

#include "model/arch/common.h"

namespace strata::arch {

static void gpt_oss_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "gpt-oss."};
  read_common(m, r, cfg);
  const int swa = static_cast<int>(r.opt_int(key::kAttnSlidingWindow, 0));
  for (int il = 0; il < cfg.n_layer; ++il) {
    LayerConfig& l = cfg.layers[il];
    read_gqa(r, cfg, RopeStyle::Neox, l);
    l.attn_bias = true;
    l.sinks = true;
    l.sliding_window = (il % 2 == 0) ? swa : 0;
    l.ffn = FfnKind::Moe;
    l.n_expert = static_cast<int>(r.req_int(key::kExpertCount));
    l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
    l.n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
    l.gating = read_gating(r, GatingFunc::SoftmaxWeight);
    l.router_bias = true;
    l.expert_bias = true;
    l.act = GluAct::SwigluOai;
    l.swiglu_alpha = 1.702f;
    l.swiglu_limit = r.opt_float(key::kSwigluLimit, 7.0f);
  }
}

static void gpt_oss_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    const int dq = lc.n_head * lc.head_dim_k, dk = lc.n_head_kv * lc.head_dim_k, dv = lc.n_head_kv * lc.head_dim_v;
    lw.attn_norm = b.vec(blk(l, tn::kAttnNorm), cfg.n_embd);
    lw.wq = b.mat(blk(l, tn::kAttnQ), dq, cfg.n_embd);
    lw.wk = b.mat(blk(l, tn::kAttnK), dk, cfg.n_embd);
    lw.wv = b.mat(blk(l, tn::kAttnV), dv, cfg.n_embd);
    lw.wo = b.mat(blk(l, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.head_dim_v);
    lw.bq = b.vec(blk(l, tn::kAttnQBias), dq);
    lw.bk = b.vec(blk(l, tn::kAttnKBias), dk);
    lw.bv = b.vec(blk(l, tn::kAttnVBias), dv);
    lw.bo = b.vec(blk(l, tn::kAttnOutputBias), cfg.n_embd);
    lw.sinks = b.vec(blk(l, tn::kAttnSinks), lc.n_head);
    lw.ffn_norm = b.vec(blk(l, tn::kPostAttnNorm), cfg.n_embd);
    bind_moe(b, cfg, l, lw);
    lw.router_b = b.vec(blk(l, tn::kFfnGateInpBias), lc.n_expert);
    lw.gate_exps_b = b.opt_expert_bias(blk(l, tn::kFfnGateExpsBias), lc.n_expert, lc.n_ff_exp);
    lw.up_exps_b = b.opt_expert_bias(blk(l, tn::kFfnUpExpsBias), lc.n_expert, lc.n_ff_exp);
    lw.down_exps_b = b.opt_expert_bias(blk(l, tn::kFfnDownExpsBias), lc.n_expert, cfg.n_embd);
    STRATA_CHECK(!lw.gate_exps_b.empty() && !lw.up_exps_b.empty() && !lw.down_exps_b.empty(), "layer {}: gpt-oss expert biases missing", l);
  }
  b.check_all_used();
}

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchGptOss{"gpt-oss", arch::gpt_oss_config, arch::gpt_oss_bind};
}
