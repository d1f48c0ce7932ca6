#include "model/arch/common.h"

#include <cmath>

namespace strata::arch {

void read_common(const GgufModel& m, const MetaReader& r, ModelConfig& cfg) {
  cfg.n_embd = static_cast<int>(r.req_int("embedding_length"));
  cfg.n_layer = static_cast<int>(r.req_int("block_count"));
  cfg.n_ctx_train = static_cast<int>(r.opt_int("context_length", 0));
  cfg.rms_eps = r.req_float("attention.layer_norm_rms_epsilon");
  int64_t vocab = r.opt_int("vocab_size", 0);
  if (vocab == 0) {
    const GgufValue* t = m.find("tokenizer.ggml.tokens");
    STRATA_CHECK(t && t->is_array(), "{}: cannot tell the vocabulary size (no {}vocab_size, no tokenizer.ggml.tokens)", m.path(), r.prefix);
    vocab = static_cast<int64_t>(t->count);
  }
  cfg.n_vocab = static_cast<int>(vocab);
  STRATA_CHECK(cfg.n_embd > 0 && cfg.n_layer > 0 && cfg.n_vocab > 0, "{}: invalid sizes (embedding {}, layers {}, vocab {})", m.path(), cfg.n_embd,
               cfg.n_layer, cfg.n_vocab);
  STRATA_CHECK(cfg.n_layer <= 4096, "{}: block_count {} is implausible", m.path(), cfg.n_layer);
  cfg.layers.assign(static_cast<size_t>(cfg.n_layer), LayerConfig{});
}

void bind_common(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  w.tok_embd = b.mat("token_embd.weight", cfg.n_vocab, cfg.n_embd);
  w.output_norm = b.vec("output_norm.weight", cfg.n_embd);
  w.output = b.find("output.weight") ? b.mat("output.weight", cfg.n_vocab, cfg.n_embd) : w.tok_embd;
}

void read_gqa(const MetaReader& r, const ModelConfig& cfg, RopeStyle style, LayerConfig& l) {
  const int n_head = static_cast<int>(r.req_int("attention.head_count"));
  const int n_head_kv = static_cast<int>(r.opt_int("attention.head_count_kv", n_head));
  STRATA_CHECK(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0, "{}: head counts {} / {} are invalid", r.m.path(), n_head, n_head_kv);
  l.attn = AttnKind::Gqa;
  l.n_head = n_head;
  l.n_head_kv = n_head_kv;
  l.head_dim_k = static_cast<int>(r.opt_int("attention.key_length", cfg.n_embd / n_head));
  l.head_dim_v = static_cast<int>(r.opt_int("attention.value_length", l.head_dim_k));
  l.kq_scale = 1.0f / std::sqrt(static_cast<float>(l.head_dim_k));
  l.rope.style = style;
  l.rope.n_dims = static_cast<int>(r.opt_int("rope.dimension_count", l.head_dim_k));
  l.rope.freq_base = r.opt_float("rope.freq_base", 10000.0f);
  read_rope_scaling(r, l.rope, cfg.n_ctx_train);
}

GatingFunc read_gating(const MetaReader& r, GatingFunc def) {
  if (!r.has("expert_gating_func")) return def;
  const int64_t g = r.req_int("expert_gating_func");
  switch (g) {
    case 1: return GatingFunc::Softmax;
    case 2: return GatingFunc::Sigmoid;
    case 3: return GatingFunc::SoftmaxWeight;
    case 4: return GatingFunc::SqrtSoftplus;
    default: fail("{}: unknown {}expert_gating_func {} (known: 1 softmax, 2 sigmoid, 3 softmax_weight, 4 sqrt_softplus)", r.m.path(), r.prefix, g);
  }
}

void bind_moe(const WeightBinder& b, const ModelConfig& cfg, int l, LayerWeights& lw) {
  const LayerConfig& lc = cfg.layers[l];
  STRATA_CHECK(lc.n_expert > 0 && lc.n_expert_used > 0 && lc.n_expert_used <= lc.n_expert,
               "layer {}: invalid expert counts ({} experts, {} used)", l, lc.n_expert, lc.n_expert_used);
  STRATA_CHECK(lc.n_expert <= 1024 && lc.n_expert_used <= 64, "layer {}: {} experts, {} used (at most 1024 and 64 supported)", l, lc.n_expert, lc.n_expert_used);
  lw.router = b.mat(blk(l, "ffn_gate_inp.weight"), lc.n_expert, cfg.n_embd);
  lw.gate_exps = b.experts(blk(l, "ffn_gate_exps.weight"), lc.n_expert, lc.n_ff_exp, cfg.n_embd);
  lw.up_exps = b.experts(blk(l, "ffn_up_exps.weight"), lc.n_expert, lc.n_ff_exp, cfg.n_embd);
  lw.down_exps = b.experts(blk(l, "ffn_down_exps.weight"), lc.n_expert, cfg.n_embd, lc.n_ff_exp);
}

}  // namespace strata::arch
