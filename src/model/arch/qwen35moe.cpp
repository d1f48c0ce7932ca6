// Qwen3.5 MoE (35B-A3B, 122B-A10B, 397B-A17B): a hybrid of Gated DeltaNet linear-attention
// blocks (model/delta_net.cpp) and, every full_attention_interval-th block (or where
// attention.recurrent_layers says false), gated full attention: GQA with per-head q/k RMSNorm,
// NeoX RoPE on the first rope.dimension_count dims (llama.cpp's interleaved M-RoPE, which is that
// for text positions) and a sigmoid gate from attn_q on the attention output. Every block has the
// same MoE FFN: softmax router with renormalized top-k weights and one shared expert scaled by a
// per-token sigmoid gate. The FFN input norm is post_attention_norm.
//
// Prefix reuse: the DeltaNet state of a sequence summarizes all its tokens and cannot be cut back,
// so the architecture is not rewindable: no prompt reuses another's prefix, and a sequence
// restarts at position 0 (which clears its state) unless it continues exactly where it ended.
//
// Multi-token-prediction blocks (nextn_predict_layers, the last blocks of real checkpoints) are
// skipped as llama.cpp's forward skips them: neither bound nor run.
#include <cstdlib>

#include "model/arch/common.h"
#include "model/delta_net.h"

namespace strata::arch {

namespace {

// Which trunk blocks are DeltaNet blocks: attention.recurrent_layers when present, else every
// block but each full_attention_interval-th (default 4).
std::vector<bool> recurrent_layers(const GgufModel& m, const MetaReader& r, int n_all, int n_trunk) {
  std::vector<bool> rec(static_cast<size_t>(n_trunk));
  if (const GgufValue* v = m.find(r.prefix + key::kAttnRecurrentLayers)) {
    STRATA_CHECK(v->is_array() && v->raw != nullptr && v->count == static_cast<uint64_t>(n_all),
                 "{}: metadata '{}{}' must be an array of {} booleans (one per block)", m.path(), r.prefix, key::kAttnRecurrentLayers, n_all);
    for (int i = 0; i < n_trunk; ++i) rec[static_cast<size_t>(i)] = v->array_int(static_cast<uint64_t>(i)) != 0;
    return rec;
  }
  const int64_t every = r.opt_int(key::kFullAttentionInterval, 4);
  STRATA_CHECK(every > 0, "{}: {}{} is {} (must be positive)", m.path(), r.prefix, key::kFullAttentionInterval, every);
  for (int i = 0; i < n_trunk; ++i) rec[static_cast<size_t>(i)] = (i + 1) % every != 0;
  return rec;
}

void read_rope_sections(const GgufModel& m, const MetaReader& r) {
  const GgufValue* v = m.find(r.prefix + key::kRopeDimensionSections);
  STRATA_CHECK(v != nullptr, "{}: missing required metadata '{}{}'", m.path(), r.prefix, key::kRopeDimensionSections);
  STRATA_CHECK(v->is_array() && v->raw != nullptr && v->count == 4, "{}: metadata '{}{}' must be an array of 4 integers", m.path(), r.prefix,
               key::kRopeDimensionSections);
  // The sections pick the position component (text, height, width) of each rotary pair; for text
  // tokens every component is the token's position, so they do not change the rotation.
  int64_t sum = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    const int64_t s = v->array_int(i);
    STRATA_CHECK(s >= 0, "{}: metadata '{}{}' has a negative section {}", m.path(), r.prefix, key::kRopeDimensionSections, s);
    sum += s;
  }
  STRATA_CHECK(sum > 0, "{}: metadata '{}{}' has no sections", m.path(), r.prefix, key::kRopeDimensionSections);
}

void read_delta_net(const MetaReader& r, LayerConfig& l) {
  l.attn = AttnKind::DeltaNet;
  l.ssm_conv = static_cast<int>(r.req_int(key::kSsmConvKernel));
  l.ssm_state = static_cast<int>(r.req_int(key::kSsmStateSize));
  l.ssm_k_heads = static_cast<int>(r.req_int(key::kSsmGroupCount));
  l.ssm_v_heads = static_cast<int>(r.req_int(key::kSsmTimeStepRank));
  const int64_t inner = r.req_int(key::kSsmInnerSize);
  STRATA_CHECK(l.ssm_conv > 0 && l.ssm_state > 0 && l.ssm_k_heads > 0 && l.ssm_v_heads > 0 && l.ssm_v_heads % l.ssm_k_heads == 0,
               "{}: invalid DeltaNet sizes ({}{} {}, {}{} {}, {}{} {}, {}{} {}: value heads must be a multiple of key heads)", r.m.path(), r.prefix,
               key::kSsmConvKernel, l.ssm_conv, r.prefix, key::kSsmStateSize, l.ssm_state, r.prefix, key::kSsmGroupCount, l.ssm_k_heads, r.prefix,
               key::kSsmTimeStepRank, l.ssm_v_heads);
  STRATA_CHECK(inner == static_cast<int64_t>(l.ssm_v_heads) * l.ssm_state, "{}: {}{} is {} but {}{} x {}{} is {} (value heads of state_size values)",
               r.m.path(), r.prefix, key::kSsmInnerSize, inner, r.prefix, key::kSsmTimeStepRank, r.prefix, key::kSsmStateSize,
               l.ssm_v_heads * l.ssm_state);
}

void read_full_attention(const MetaReader& r, const ModelConfig& cfg, LayerConfig& l) {
  for (const char* k : {key::kAttnHeadCount, key::kAttnHeadCountKv}) {  // per-layer arrays would be read as absent
    const GgufValue* v = r.m.find(r.prefix + k);
    STRATA_CHECK(!v || !v->is_array(), "{}: metadata '{}{}' is a per-layer array (only one value for every block is supported)", r.m.path(),
                 r.prefix, k);
  }
  read_gqa(r, cfg, RopeStyle::Neox, l);
  STRATA_CHECK(l.head_dim_k == l.head_dim_v, "{}: {}{} {} differs from {}{} {}", r.m.path(), r.prefix, key::kAttnKeyLength, l.head_dim_k, r.prefix,
               key::kAttnValueLength, l.head_dim_v);
  l.qk_norm = true;
  l.out_gate = true;
}

void qwen35moe_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "qwen35moe."};
  read_common(m, r, cfg);  // block_count: trunk + MTP blocks
  const int n_all = cfg.n_layer;
  const int64_t n_mtp = r.opt_int(key::kNextnPredictLayers, 0);
  STRATA_CHECK(n_mtp >= 0 && n_mtp < n_all, "{}: {}{} is {} but {}{} is {}", m.path(), r.prefix, key::kNextnPredictLayers, n_mtp, r.prefix,
               key::kBlockCount, n_all);
  const int n_trunk = n_all - static_cast<int>(n_mtp);
  read_rope_sections(m, r);
  const auto rec = recurrent_layers(m, r, n_all, n_trunk);
  // Not read by llama.cpp here (routing is fixed): expert_gating_func, expert_weights_norm/scale.
  const int n_expert = static_cast<int>(r.req_int(key::kExpertCount));
  const int n_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
  const int n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
  const int n_ff_shexp = static_cast<int>(r.has(key::kExpertSharedFeedForwardLength) ? r.req_int(key::kExpertSharedFeedForwardLength)
                                                                                       : r.req_int(key::kFeedForwardLength));
  cfg.layers.resize(static_cast<size_t>(n_trunk));
  cfg.n_layer = n_trunk;
  for (int il = 0; il < n_trunk; ++il) {
    LayerConfig& l = cfg.layers[static_cast<size_t>(il)];
    if (rec[static_cast<size_t>(il)]) read_delta_net(r, l);
    else read_full_attention(r, cfg, l);
    l.ffn = FfnKind::Moe;
    l.n_expert = n_expert;
    l.n_expert_used = n_used;
    l.n_ff_exp = n_ff_exp;
    l.gating = GatingFunc::Softmax;
    l.norm_w = true;
    l.n_expert_shared = 1;
    l.n_ff_shexp = n_ff_shexp;
    l.shexp_gate = true;
  }
}

void bind_delta_net(const WeightBinder& b, const ModelConfig& cfg, const LayerConfig& lc, int il, LayerWeights& lw) {
  const int C = lc.ssm_channels(), V = lc.ssm_v_heads * lc.ssm_state, d = cfg.n_embd;
  lw.wqkv = b.mat(blk(il, tn::kAttnQkv), C, d);
  lw.wz = b.mat(blk(il, tn::kAttnGate), V, d);
  const std::string conv = blk(il, tn::kSsmConv1d);
  const GgufTensor& ct = b.get(conv);
  STRATA_CHECK(ct.n_dims == 2 && ct.ne[0] == static_cast<uint64_t>(lc.ssm_conv) && ct.ne[1] == static_cast<uint64_t>(C),
               "{}: tensor '{}' has shape {} but {}x{} (ne0 x ne1) was expected", b.gguf().path(), conv, ct.shape_string(), lc.ssm_conv, C);
  lw.ssm_conv1d = b.vec(conv, static_cast<int64_t>(C) * lc.ssm_conv);
  lw.ssm_dt = b.vec(blk(il, tn::kSsmDtBias), lc.ssm_v_heads);
  lw.ssm_a = b.vec(blk(il, tn::kSsmA), lc.ssm_v_heads);
  lw.ssm_beta = b.mat(blk(il, tn::kSsmBeta), lc.ssm_v_heads, d);
  lw.ssm_alpha = b.mat(blk(il, tn::kSsmAlpha), lc.ssm_v_heads, d);
  lw.ssm_norm = b.vec(blk(il, tn::kSsmNorm), lc.ssm_state);
  lw.ssm_out = b.mat(blk(il, tn::kSsmOut), d, V);
}

void bind_attention(const WeightBinder& b, const ModelConfig& cfg, const LayerConfig& lc, int il, LayerWeights& lw) {
  const int dq = lc.n_head * lc.head_dim_k;
  lw.wq = b.mat(blk(il, tn::kAttnQ), 2 * dq, cfg.n_embd);  // per head: query | gate
  lw.wk = b.mat(blk(il, tn::kAttnK), lc.n_head_kv * lc.head_dim_k, cfg.n_embd);
  lw.wv = b.mat(blk(il, tn::kAttnV), lc.n_head_kv * lc.head_dim_v, cfg.n_embd);
  lw.wo = b.mat(blk(il, tn::kAttnOutput), cfg.n_embd, lc.n_head * lc.head_dim_v);
  lw.q_norm = b.vec(blk(il, tn::kAttnQNorm), lc.head_dim_k);
  lw.k_norm = b.vec(blk(il, tn::kAttnKNorm), lc.head_dim_k);
}

void qwen35moe_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  for (int il = 0; il < cfg.n_layer; ++il) {
    const LayerConfig& lc = cfg.layers[static_cast<size_t>(il)];
    LayerWeights& lw = w.layers[static_cast<size_t>(il)];
    lw.attn_norm = b.vec(blk(il, tn::kAttnNorm), cfg.n_embd);
    if (lc.attn == AttnKind::DeltaNet) bind_delta_net(b, cfg, lc, il, lw);
    else bind_attention(b, cfg, lc, il, lw);
    lw.ffn_norm = b.vec(blk(il, tn::kPostAttnNorm), cfg.n_embd);
    bind_moe(b, cfg, il, lw);
    lw.shexp_gate = b.mat(blk(il, tn::kFfnGateShexp), lc.n_ff_shexp, cfg.n_embd);
    lw.shexp_up = b.mat(blk(il, tn::kFfnUpShexp), lc.n_ff_shexp, cfg.n_embd);
    lw.shexp_down = b.mat(blk(il, tn::kFfnDownShexp), cfg.n_embd, lc.n_ff_shexp);
    lw.shexp_gate_inp = b.mat(blk(il, tn::kFfnGateInpShexp), 1, cfg.n_embd);
  }
  // MTP blocks (after the trunk) are skipped, as llama.cpp skips them unless it drafts with them.
  std::vector<std::string> mtp;
  for (const auto& t : b.gguf().tensors()) {
    const std::string_view n = t.name;
    if (n.rfind(tn::kBlockPrefix, 0) != 0) continue;
    const size_t dot = n.find('.', tn::kBlockPrefix.size());
    const int il = std::atoi(std::string(n.substr(tn::kBlockPrefix.size(), dot - tn::kBlockPrefix.size())).c_str());
    if (il >= cfg.n_layer) mtp.emplace_back(n);
  }
  b.check_all_used(mtp);
}

}  // namespace

}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchQwen35Moe{"qwen35moe", arch::qwen35moe_config, arch::qwen35moe_bind, nullptr, /*rewindable=*/false,
                                    delta_net_make_state};
}
