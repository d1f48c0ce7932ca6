// DeepSeek-V2/V3/R1/V3.1 and Kimi K2: multi-head latent attention (absorbed form: the cache
// holds the compressed latent + shared rope key; files of the older attn_kv_b layout run as
// plain multi-head attention, as llama.cpp does), first k dense layers, shared experts,
// sigmoid (or softmax) router with selection bias, group-limited top-k, YaRN.
#include <cmath>
#include <string>

#include "model/arch/deepseek2.h"

namespace strata::arch {

// The YaRN magnitudes as llama.cpp v0.5.0 computes them for deepseek2 and deepseek32
// (llama-context.cpp's yarn_attn_factor, then the graphs' kq_scale), float for float. The rope
// gets attn_factor (ggml multiplies it by 1 + 0.1 ln(factor) when ext_factor != 0); returned: the
// mscale of kq_scale = mscale^2 / sqrt(key_length_mla). With mscale_all_dim (yarn_log_multiplier
// / 0.1) = 1, as in DeepSeek-V3/V3.2 and Kimi K2, the rope's magnitude cancels to 1 and mscale =
// 1 + 0.1 ln(factor); without the key (or with another value on deepseek32) neither holds.
static float deepseek_yarn(const MetaReader& r, RopeConfig& rope) {
  auto get_mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : (0.1f * m * std::log(scale) + 1.0f); };
  const float mscale_all_dims = r.opt_float(key::kRopeScalingYarnLogMul, 0.0f) / 0.1f;  // llama.cpp's rope_yarn_log_mul
  float attn_factor = 1.0f;
  if (rope.ext_factor != 0.0f) {
    const float factor = 1.0f / rope.freq_scale;
    if (mscale_all_dims != 0.0f) {
      // llama.cpp assumes mscale = 1, except on deepseek2 files (DeepSeek-V2's config) where it is mscale_all_dim.
      const float ms = r.prefix == "deepseek2." && mscale_all_dims != 1.0f ? mscale_all_dims : 1.0f;
      attn_factor = get_mscale(factor, ms) / get_mscale(factor, mscale_all_dims);
    } else {
      attn_factor = get_mscale(factor, 1.0f);
    }
    attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  }
  rope.attn_factor = attn_factor;
  const float attn_factor_org = attn_factor * (1.0f + 0.1f * std::log(1.0f / rope.freq_scale));
  return attn_factor_org * (1.0f + 0.1f * mscale_all_dims * std::log(1.0f / rope.freq_scale));
}

void deepseek2_read_config(const GgufModel& m, const MetaReader& r, ModelConfig& cfg) {
  read_common(m, r, cfg);
  const int n_head = static_cast<int>(r.req_int(key::kAttnHeadCount));
  const int q_lora = static_cast<int>(r.opt_int(key::kAttnQLoraRank, 0));
  const int kv_lora = static_cast<int>(r.req_int(key::kAttnKvLoraRank));
  const int rope_dim = static_cast<int>(r.req_int(key::kRopeDimensionCount));
  // Absorbed layout (attn_k_b / attn_v_b): *_mla keys give the per-head sizes. Older layout
  // (attn_kv_b, no *_mla keys): key_length / value_length do, and every head has its own K/V rows.
  const bool kvb = !r.has(key::kAttnKeyLengthMla);
  STRATA_CHECK(kvb == !r.has(key::kAttnValueLengthMla), "{}: {}{} and {}{} must be both present (attn_k_b / attn_v_b layout) or both absent (attn_kv_b layout)",
               m.path(), r.prefix, key::kAttnKeyLengthMla, r.prefix, key::kAttnValueLengthMla);
  const int k_mla = static_cast<int>(r.req_int(kvb ? key::kAttnKeyLength : key::kAttnKeyLengthMla));
  const int v_mla = static_cast<int>(r.req_int(kvb ? key::kAttnValueLength : key::kAttnValueLengthMla));
  STRATA_CHECK(k_mla > rope_dim, "{}: {}{} {} must exceed rope.dimension_count {}", m.path(), r.prefix, kvb ? key::kAttnKeyLength : key::kAttnKeyLengthMla,
               k_mla, rope_dim);
  if (kvb) {
    const int64_t n_head_kv = r.opt_int(key::kAttnHeadCountKv, n_head);
    STRATA_CHECK(n_head_kv == n_head, "{}: {}{} is {} but the attn_kv_b layout needs one K/V head per query head ({})", m.path(), r.prefix,
                 key::kAttnHeadCountKv, n_head_kv, n_head);
  }
  const int n_dense = static_cast<int>(r.opt_int(key::kLeadingDenseBlockCount, 0));
  const int n_expert = static_cast<int>(r.req_int(key::kExpertCount));
  const int n_shared = static_cast<int>(r.opt_int(key::kExpertSharedCount, 0));
  const int n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
  RopeConfig rope;
  rope.style = RopeStyle::Norm;
  rope.n_dims = rope_dim;
  rope.freq_base = r.opt_float(key::kRopeFreqBase, 10000.0f);
  read_rope_scaling(r, rope, cfg.n_ctx_train);
  // DeepSeek's YaRN: attention temperature moves from the rope into the kq scale.
  const float mscale = deepseek_yarn(r, rope);
  const GatingFunc gating = read_gating(r, GatingFunc::Softmax);
  for (int il = 0; il < cfg.n_layer; ++il) {
    LayerConfig& l = cfg.layers[il];
    l.attn = kvb ? AttnKind::MlaKvB : AttnKind::Mla;
    l.n_head = n_head;
    l.n_head_kv = kvb ? n_head : 1;
    l.q_lora_rank = q_lora;
    l.kv_lora_rank = kv_lora;
    l.qk_rope_dim = rope_dim;
    l.qk_nope_dim = k_mla - rope_dim;
    l.v_head_dim = v_mla;
    l.head_dim_k = kvb ? k_mla : kv_lora + rope_dim;  // as cached
    l.head_dim_v = kvb ? v_mla : kv_lora;
    l.kq_scale = mscale * mscale / std::sqrt(static_cast<float>(k_mla));
    l.rope = rope;
    if (il < n_dense) {
      l.ffn = FfnKind::Dense;
      l.n_ff = static_cast<int>(r.req_int(key::kFeedForwardLength));
    } else {
      l.ffn = FfnKind::Moe;
      l.n_expert = n_expert;
      l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
      l.n_expert_shared = n_shared;
      l.n_ff_exp = n_ff_exp;
      STRATA_CHECK(static_cast<int64_t>(n_ff_exp) * n_shared <= (int64_t{1} << 24), "{}: shared experts {} x {} wide are too large", m.path(), n_shared, n_ff_exp);
      l.n_ff_shexp = n_ff_exp * n_shared;
      l.gating = gating;
      l.n_group = static_cast<int>(r.opt_int(key::kExpertGroupCount, 0));
      l.n_group_used = static_cast<int>(r.opt_int(key::kExpertGroupUsedCount, 0));
      if (l.n_group > 1) {
        STRATA_CHECK(n_expert % l.n_group == 0 && l.n_group_used >= 1 && l.n_group_used <= l.n_group,
                     "{}: invalid expert groups ({} groups, {} used, {} experts)", m.path(), l.n_group, l.n_group_used, n_expert);
      }
      l.exp_probs_bias = m.tensor(blk(il, tn::kExpProbsBias)) != nullptr;
      l.norm_w = r.opt_bool(key::kExpertWeightsNorm, false);
      l.w_scale = r.opt_float(key::kExpertWeightsScale, 1.0f);
    }
  }
}

void deepseek2_bind_layers(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    const int qh = lc.qk_nope_dim + lc.qk_rope_dim;
    lw.attn_norm = b.vec(blk(l, tn::kAttnNorm), cfg.n_embd);
    if (lc.q_lora_rank > 0) {
      lw.wq_a = b.mat(blk(l, tn::kAttnQA), lc.q_lora_rank, cfg.n_embd);
      lw.q_a_norm = b.vec(blk(l, tn::kAttnQANorm), lc.q_lora_rank);
      lw.wq_b = b.mat(blk(l, tn::kAttnQB), lc.n_head * qh, lc.q_lora_rank);
    } else {
      lw.wq = b.mat(blk(l, tn::kAttnQ), lc.n_head * qh, cfg.n_embd);
    }
    lw.wkv_a = b.mat(blk(l, tn::kAttnKvAMqa), lc.kv_lora_rank + lc.qk_rope_dim, cfg.n_embd);
    lw.kv_a_norm = b.vec(blk(l, tn::kAttnKvANorm), lc.kv_lora_rank);
    if (lc.attn == AttnKind::MlaKvB) {
      lw.wkv_b = b.mat(blk(l, tn::kAttnKvB), lc.n_head * (lc.qk_nope_dim + lc.v_head_dim), lc.kv_lora_rank);
    } else {
      lw.wk_b = b.tensor3(blk(l, tn::kAttnKB), lc.qk_nope_dim, lc.kv_lora_rank, lc.n_head);
      lw.wv_b = b.tensor3(blk(l, tn::kAttnVB), lc.kv_lora_rank, lc.v_head_dim, lc.n_head);
    }
    lw.wo = b.mat(blk(l, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.v_head_dim);
    lw.ffn_norm = b.vec(blk(l, tn::kFfnNorm), cfg.n_embd);
    if (lc.ffn == FfnKind::Dense) {
      lw.ffn_gate = b.mat(blk(l, tn::kFfnGate), lc.n_ff, cfg.n_embd);
      lw.ffn_up = b.mat(blk(l, tn::kFfnUp), lc.n_ff, cfg.n_embd);
      lw.ffn_down = b.mat(blk(l, tn::kFfnDown), cfg.n_embd, lc.n_ff);
      continue;
    }
    bind_moe(b, cfg, l, lw);
    if (lc.exp_probs_bias) lw.exp_probs_b = b.vec(blk(l, tn::kExpProbsBias), lc.n_expert);
    if (lc.n_expert_shared > 0) {
      lw.shexp_gate = b.mat(blk(l, tn::kFfnGateShexp), lc.n_ff_shexp, cfg.n_embd);
      lw.shexp_up = b.mat(blk(l, tn::kFfnUpShexp), lc.n_ff_shexp, cfg.n_embd);
      lw.shexp_down = b.mat(blk(l, tn::kFfnDownShexp), cfg.n_embd, lc.n_ff_shexp);
    }
  }
}

namespace {
void deepseek2_config(const GgufModel& m, ModelConfig& cfg) { deepseek2_read_config(m, MetaReader{m, "deepseek2."}, cfg); }

void deepseek2_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  deepseek2_bind_layers(b, cfg, w);
  b.check_all_used();
}
}  // namespace

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchDeepseek2{"deepseek2", arch::deepseek2_config, arch::deepseek2_bind};
}
