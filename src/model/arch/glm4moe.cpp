// GLM-4.5 / 4.6 / 4.7 / 4.5-Air (glm4moe): GQA with q/k/v biases, optional per-head q/k RMSNorm,
// NeoX RoPE on the first rope.dimension_count dims of each head, leading dense layers, then MoE
// with a sigmoid router, selection-only bias (exp_probs_b), normalized and scaled weights and
// shared experts. The FFN input norm is post_attention_norm. The last nextn_predict_layers blocks
// are NextN (multi-token prediction) blocks: bound and checked, not run (as llama.cpp's forward).
#include "model/arch/common.h"

namespace strata::arch {

static void glm4moe_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "glm4moe."};
  read_common(m, r, cfg);  // block_count: trunk + NextN blocks
  STRATA_CHECK(!r.has(key::kRopeDimensionSections), "{}: {}{} (M-RoPE, GLM vision variants) is not supported", m.path(), r.prefix,
               key::kRopeDimensionSections);
  const int64_t n_nextn = r.opt_int(key::kNextnPredictLayers, 0);
  STRATA_CHECK(n_nextn >= 0 && n_nextn < cfg.n_layer, "{}: {}{} is {} but {}{} is {}", m.path(), r.prefix, key::kNextnPredictLayers, n_nextn,
               r.prefix, key::kBlockCount, cfg.n_layer);
  const int n_trunk = cfg.n_layer - static_cast<int>(n_nextn);
  const int64_t n_dense = r.opt_int(key::kLeadingDenseBlockCount, 0);
  STRATA_CHECK(n_dense >= 0 && n_dense <= n_trunk, "{}: {}{} is {} (the trunk has {} blocks)", m.path(), r.prefix, key::kLeadingDenseBlockCount,
               n_dense, n_trunk);
  const GatingFunc gating = read_gating(r, GatingFunc::Sigmoid);
  STRATA_CHECK(gating == GatingFunc::Sigmoid || gating == GatingFunc::Softmax, "{}: {}{} must be 1 (softmax) or 2 (sigmoid) for glm4moe", m.path(),
               r.prefix, key::kExpertGatingFunc);
  float w_scale = r.opt_float(key::kExpertWeightsScale, 1.0f);
  if (w_scale == 0.0f) w_scale = 1.0f;  // 0 or 1: no scaling
  for (int il = 0; il < cfg.n_layer; ++il) {
    LayerConfig& l = cfg.layers[il];
    read_gqa(r, cfg, RopeStyle::Neox, l);
    STRATA_CHECK(l.head_dim_k == l.head_dim_v, "{}: {}{} {} differs from {}{} {}", m.path(), r.prefix, key::kAttnKeyLength, l.head_dim_k, r.prefix,
                 key::kAttnValueLength, l.head_dim_v);
    l.qk_norm = m.tensor(blk(il, tn::kAttnQNorm)) != nullptr;  // GLM-4.5-Air has none
    l.attn_bias = m.tensor(blk(il, tn::kAttnQBias)) != nullptr;
    if (il < n_dense) {
      l.ffn = FfnKind::Dense;
      l.n_ff = static_cast<int>(r.req_int(key::kFeedForwardLength));
      continue;
    }
    l.ffn = FfnKind::Moe;
    l.n_expert = static_cast<int>(r.req_int(key::kExpertCount));
    l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
    l.n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
    l.n_expert_shared = static_cast<int>(r.opt_int(key::kExpertSharedCount, 0));
    l.n_ff_shexp = l.n_ff_exp * l.n_expert_shared;
    l.gating = gating;
    l.exp_probs_bias = true;
    l.n_group = static_cast<int>(r.opt_int(key::kExpertGroupCount, 0));
    l.n_group_used = static_cast<int>(r.opt_int(key::kExpertGroupUsedCount, 0));
    if (l.n_group > 1)
      STRATA_CHECK(l.n_expert % l.n_group == 0 && l.n_group_used >= 1 && l.n_group_used <= l.n_group,
                   "{}: invalid expert groups ({} groups, {} used, {} experts)", m.path(), l.n_group, l.n_group_used, l.n_expert);
    l.norm_w = r.opt_bool(key::kExpertWeightsNorm, false);
    l.w_scale = w_scale;
  }
  cfg.nextn.assign(cfg.layers.begin() + n_trunk, cfg.layers.end());
  cfg.layers.resize(static_cast<size_t>(n_trunk));
  cfg.n_layer = n_trunk;
}

// The tensors of one decoder block (trunk or NextN): file block `il`, configuration `lc`.
static void bind_block(const WeightBinder& b, const ModelConfig& cfg, const LayerConfig& lc, int il, LayerWeights& lw) {
  const int dq = lc.n_head * lc.head_dim_k, dk = lc.n_head_kv * lc.head_dim_k, dv = lc.n_head_kv * lc.head_dim_v;
  lw.attn_norm = b.vec(blk(il, tn::kAttnNorm), cfg.n_embd);
  lw.wq = b.mat(blk(il, tn::kAttnQ), dq, cfg.n_embd);
  lw.wk = b.mat(blk(il, tn::kAttnK), dk, cfg.n_embd);
  lw.wv = b.mat(blk(il, tn::kAttnV), dv, cfg.n_embd);
  lw.wo = b.mat(blk(il, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.head_dim_v);
  if (lc.attn_bias) {
    lw.bq = b.vec(blk(il, tn::kAttnQBias), dq);
    lw.bk = b.vec(blk(il, tn::kAttnKBias), dk);
    lw.bv = b.vec(blk(il, tn::kAttnVBias), dv);
  }
  if (lc.qk_norm) {
    lw.q_norm = b.vec(blk(il, tn::kAttnQNorm), lc.head_dim_k);
    lw.k_norm = b.vec(blk(il, tn::kAttnKNorm), lc.head_dim_k);
  }
  lw.ffn_norm = b.vec(blk(il, tn::kPostAttnNorm), cfg.n_embd);
  if (lc.ffn == FfnKind::Dense) {
    lw.ffn_gate = b.mat(blk(il, tn::kFfnGate), lc.n_ff, cfg.n_embd);
    lw.ffn_up = b.mat(blk(il, tn::kFfnUp), lc.n_ff, cfg.n_embd);
    lw.ffn_down = b.mat(blk(il, tn::kFfnDown), cfg.n_embd, lc.n_ff);
    return;
  }
  bind_moe(b, cfg, lc, il, lw);
  lw.exp_probs_b = b.vec(blk(il, tn::kExpProbsBias), lc.n_expert);
  if (lc.n_expert_shared > 0) {
    lw.shexp_gate = b.mat(blk(il, tn::kFfnGateShexp), lc.n_ff_shexp, cfg.n_embd);
    lw.shexp_up = b.mat(blk(il, tn::kFfnUpShexp), lc.n_ff_shexp, cfg.n_embd);
    lw.shexp_down = b.mat(blk(il, tn::kFfnDownShexp), cfg.n_embd, lc.n_ff_shexp);
  }
}

static void glm4moe_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  for (int l = 0; l < cfg.n_layer; ++l) bind_block(b, cfg, cfg.layers[l], l, w.layers[l]);
  w.nextn.resize(cfg.nextn.size());
  for (size_t j = 0; j < cfg.nextn.size(); ++j) {
    const int il = cfg.n_layer + static_cast<int>(j);
    NextnWeights& nw = w.nextn[j];
    // As llama.cpp: without eh_proj the whole NextN block is absent (nothing left to bind).
    if (!b.find(blk(il, tn::kNextnEhProj))) continue;
    bind_block(b, cfg, cfg.nextn[j], il, nw.block);
    nw.eh_proj = b.mat(blk(il, tn::kNextnEhProj), cfg.n_embd, 2 * cfg.n_embd);
    nw.enorm = b.vec(blk(il, tn::kNextnEnorm), cfg.n_embd);
    nw.hnorm = b.vec(blk(il, tn::kNextnHnorm), cfg.n_embd);
    if (b.find(blk(il, tn::kNextnEmbedTokens))) nw.embed_tokens = b.mat(blk(il, tn::kNextnEmbedTokens), cfg.n_vocab, cfg.n_embd);
    if (b.find(blk(il, tn::kNextnSharedHeadHead))) nw.shared_head_head = b.mat(blk(il, tn::kNextnSharedHeadHead), cfg.n_vocab, cfg.n_embd);
    if (b.find(blk(il, tn::kNextnSharedHeadNorm))) nw.shared_head_norm = b.vec(blk(il, tn::kNextnSharedHeadNorm), cfg.n_embd);
  }
  b.check_all_used();
}

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchGlm4Moe{"glm4moe", arch::glm4moe_config, arch::glm4moe_bind};
}
