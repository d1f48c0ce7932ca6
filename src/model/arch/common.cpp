#include "model/arch/common.h"

#include <cmath>

#include "core/limits.h"

namespace strata::arch {

void read_common(const GgufModel& m, const MetaReader& r, ModelConfig& cfg) {
  cfg.n_embd = static_cast<int>(r.req_int(key::kEmbeddingLength));
  cfg.n_layer = static_cast<int>(r.req_int(key::kBlockCount));
  cfg.n_ctx_train = static_cast<int>(r.opt_int(key::kContextLength, 0));
  cfg.rms_eps = r.req_float(key::kAttnRmsEps);
  int64_t vocab = r.opt_int(key::kVocabSize, 0);
  if (vocab == 0) {
    const GgufValue* t = m.find(key::kTokTokens);
    STRATA_CHECK(t && t->is_array(), "{}: cannot tell the vocabulary size (no {}vocab_size, no tokenizer.ggml.tokens)", m.path(), r.prefix);
    vocab = static_cast<int64_t>(t->count);
  }
  cfg.n_vocab = static_cast<int>(vocab);
  STRATA_CHECK(cfg.n_embd > 0 && cfg.n_layer > 0 && cfg.n_vocab > 0, "{}: invalid sizes (embedding {}, layers {}, vocab {})", m.path(), cfg.n_embd,
               cfg.n_layer, cfg.n_vocab);
  STRATA_CHECK(cfg.n_layer <= kMaxLayers, "{}: {}{} is {} (at most {} supported)", m.path(), r.prefix, key::kBlockCount, cfg.n_layer, kMaxLayers);
  cfg.layers.assign(static_cast<size_t>(cfg.n_layer), LayerConfig{});
}

void bind_common(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  w.tok_embd = b.mat(tn::kTokenEmbd, cfg.n_vocab, cfg.n_embd);
  w.output_norm = b.vec(tn::kOutputNorm, cfg.n_embd);
  w.output = b.find(tn::kOutput) ? b.mat(tn::kOutput, cfg.n_vocab, cfg.n_embd) : w.tok_embd;
}

void read_gqa(const MetaReader& r, const ModelConfig& cfg, RopeStyle style, LayerConfig& l) {
  const int n_head = static_cast<int>(r.req_int(key::kAttnHeadCount));
  const int n_head_kv = static_cast<int>(r.opt_int(key::kAttnHeadCountKv, n_head));
  STRATA_CHECK(n_head > 0 && n_head_kv > 0 && n_head <= kMaxHeads && n_head % n_head_kv == 0, "{}: head counts {} / {} are invalid (1..{})", r.m.path(),
               n_head, n_head_kv, kMaxHeads);
  l.attn = AttnKind::Gqa;
  l.n_head = n_head;
  l.n_head_kv = n_head_kv;
  l.head_dim_k = static_cast<int>(r.opt_int(key::kAttnKeyLength, cfg.n_embd / n_head));
  l.head_dim_v = static_cast<int>(r.opt_int(key::kAttnValueLength, l.head_dim_k));
  l.kq_scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim_k));
  l.rope.style = style;
  l.rope.n_dims = static_cast<int>(r.opt_int(key::kRopeDimensionCount, l.head_dim_k));
  STRATA_CHECK(l.head_dim_k > 0 && l.head_dim_v > 0 && l.head_dim_k <= kMaxHeadDim && l.head_dim_v <= kMaxHeadDim,
               "{}: head sizes {}{} {} / {}{} {} are invalid (1..{})", r.m.path(), r.prefix, key::kAttnKeyLength, l.head_dim_k, r.prefix,
               key::kAttnValueLength, l.head_dim_v, kMaxHeadDim);
  // Rope writes n_dims values per head: never more than the head holds.
  STRATA_CHECK(l.rope.n_dims > 0 && l.rope.n_dims <= l.head_dim_k && l.rope.n_dims % 2 == 0, "{}: {}{} {} must be even and at most the head size {}",
               r.m.path(), r.prefix, key::kRopeDimensionCount, l.rope.n_dims, l.head_dim_k);
  l.rope.freq_base = r.opt_float(key::kRopeFreqBase, 10000.0f);
  read_rope_scaling(r, l.rope, cfg.n_ctx_train);
}

GatingFunc read_gating(const MetaReader& r, GatingFunc def) {
  if (!r.has(key::kExpertGatingFunc)) return def;
  const int64_t g = r.req_int(key::kExpertGatingFunc);
  switch (g) {
    case 1: return GatingFunc::Softmax;
    case 2: return GatingFunc::Sigmoid;
    case 3: return GatingFunc::SoftmaxWeight;
    case 4: return GatingFunc::SqrtSoftplus;
    default: fail("{}: unknown {}expert_gating_func {} (known: 1 softmax, 2 sigmoid, 3 softmax_weight, 4 sqrt_softplus)", r.m.path(), r.prefix, g);
  }
}

void bind_moe(const WeightBinder& b, const ModelConfig& cfg, int l, LayerWeights& lw) { bind_moe(b, cfg, cfg.layers[l], l, lw); }

void bind_moe(const WeightBinder& b, const ModelConfig& cfg, const LayerConfig& lc, int l, LayerWeights& lw) {
  STRATA_CHECK(lc.n_expert > 0 && lc.n_expert_used > 0 && lc.n_expert_used <= lc.n_expert,
               "layer {}: invalid expert counts ({} experts, {} used)", l, lc.n_expert, lc.n_expert_used);
  lw.router = b.mat(blk(l, tn::kFfnGateInp), lc.n_expert, cfg.n_embd);
  lw.gate_exps = b.experts(blk(l, tn::kFfnGateExps), lc.n_expert, lc.n_ff_exp, cfg.n_embd);
  lw.up_exps = b.experts(blk(l, tn::kFfnUpExps), lc.n_expert, lc.n_ff_exp, cfg.n_embd);
  lw.down_exps = b.experts(blk(l, tn::kFfnDownExps), lc.n_expert, cfg.n_embd, lc.n_ff_exp);
}

}  // namespace strata::arch
