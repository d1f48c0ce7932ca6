// DeepSeek-V4 (`deepseek4`): configuration and weight binding. The forward pass lives in
// deepseek4_forward.cpp (hyper-connections), deepseek4_hc.cpp and deepseek4_attn.cpp.
#include <cmath>

#include "model/arch/common.h"
#include "model/arch/deepseek4.h"

namespace strata::arch {
namespace {

// One value per layer from a metadata array ("<arch>.<key>").
std::vector<double> per_layer_array(const GgufModel& m, const MetaReader& r, const char* key, int n_layer) {
  const GgufValue* v = m.find(r.prefix + key);
  STRATA_CHECK(v != nullptr, "{}: missing required metadata '{}{}'", m.path(), r.prefix, key);
  STRATA_CHECK(v->is_array() && v->raw != nullptr && v->count == static_cast<uint64_t>(n_layer),
               "{}: metadata '{}{}' must be an array of {} numbers (one per layer)", m.path(), r.prefix, key, n_layer);
  std::vector<double> out(static_cast<size_t>(n_layer));
  for (int i = 0; i < n_layer; ++i) out[static_cast<size_t>(i)] = v->array_float(static_cast<uint64_t>(i));
  return out;
}

void deepseek4_config(const GgufModel& m, ModelConfig& cfg) {
  MetaReader r{m, "deepseek4."};
  read_common(m, r, cfg);
  const int n_head = static_cast<int>(r.req_int(key::kAttnHeadCount));
  const int n_head_kv = static_cast<int>(r.opt_int(key::kAttnHeadCountKv, 1));
  const int d = static_cast<int>(r.req_int(key::kAttnKeyLength));
  const int dv = static_cast<int>(r.opt_int(key::kAttnValueLength, d));
  const int rope_dim = static_cast<int>(r.req_int(key::kRopeDimensionCount));
  STRATA_CHECK(n_head_kv == 1, "{}: deepseek4 shares one key/value vector per token (head_count_kv {} must be 1)", m.path(), n_head_kv);
  STRATA_CHECK(dv == d, "{}: deepseek4 needs value_length == key_length ({} vs {})", m.path(), dv, d);
  STRATA_CHECK(n_head > 0 && d > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= d, "{}: invalid heads ({} x {}, rope dims {})", m.path(),
               n_head, d, rope_dim);
  const int q_lora = static_cast<int>(r.req_int(key::kAttnQLoraRank));
  const int n_group = static_cast<int>(r.req_int(key::kAttnOutputGroupCount));
  const int o_lora = static_cast<int>(r.req_int(key::kAttnOutputLoraRank));
  STRATA_CHECK(n_group > 0 && n_head % n_group == 0 && o_lora > 0, "{}: output_group_count {} must divide head_count {} (output_lora_rank {})",
               m.path(), n_group, n_head, o_lora);
  const int window = static_cast<int>(r.req_int(key::kAttnSlidingWindow));
  STRATA_CHECK(window > 0, "{}: deepseek4 needs attention.sliding_window > 0 (got {})", m.path(), window);

  // Hyper-connections.
  cfg.n_hc = static_cast<int>(r.req_int(key::kHcCount));
  cfg.hc_sinkhorn_iters = static_cast<int>(r.req_int(key::kHcSinkhornIterations));
  cfg.hc_eps = r.req_float(key::kHcEpsilon);
  STRATA_CHECK(cfg.n_hc >= 1 && cfg.n_hc <= kDsv4MaxHc && cfg.hc_sinkhorn_iters >= 1, "{}: hyper_connection.count {} (1..{}) / sinkhorn_iterations {}",
               m.path(), cfg.n_hc, kDsv4MaxHc, cfg.hc_sinkhorn_iters);

  // Rope: plain for window-only layers; the compress base with YaRN (no magnitude change) for compressed ones.
  RopeConfig rope_plain;
  rope_plain.style = RopeStyle::Norm;
  rope_plain.n_dims = rope_dim;
  rope_plain.freq_base = r.opt_float(key::kRopeFreqBase, 10000.0f);
  RopeConfig rope_comp = rope_plain;
  rope_comp.freq_base = r.opt_float(key::kAttnCompressRopeFreqBase, rope_plain.freq_base);
  read_rope_scaling(r, rope_comp, cfg.n_ctx_train);
  if (rope_comp.ext_factor != 0.0f) rope_comp.attn_factor = 1.0f / std::fma(0.1f, std::log(1.0f / rope_comp.freq_scale), 1.0f);

  const auto ratios = per_layer_array(m, r, key::kAttnCompressRatios, cfg.n_layer);
  const auto clamp_exp = per_layer_array(m, r, key::kSwigluClampExp, cfg.n_layer);
  const auto clamp_shexp = per_layer_array(m, r, key::kSwigluClampShexp, cfg.n_layer);
  const int n_hash = static_cast<int>(r.opt_int(key::kHashLayerCount, 0));
  STRATA_CHECK(r.opt_int(key::kLeadingDenseBlockCount, 0) == 0, "{}: deepseek4 with leading dense blocks is not supported", m.path());
  const int n_expert = static_cast<int>(r.req_int(key::kExpertCount));
  const int n_shared = static_cast<int>(r.opt_int(key::kExpertSharedCount, 0));
  const int n_ff_exp = static_cast<int>(r.req_int(key::kExpertFeedForwardLength));
  const GatingFunc gating = read_gating(r, GatingFunc::SqrtSoftplus);

  for (int il = 0; il < cfg.n_layer; ++il) {
    LayerConfig& l = cfg.layers[il];
    l.attn = AttnKind::SharedKv;
    l.n_head = n_head;
    l.n_head_kv = 1;
    l.head_dim_k = d;
    l.head_dim_v = d;
    l.qk_rope_dim = rope_dim;
    l.q_lora_rank = q_lora;
    l.sinks = true;
    l.sliding_window = window;
    l.kq_scale = 1.0f / std::sqrt(static_cast<float>(d));
    l.n_out_group = n_group;
    l.o_lora_rank = o_lora;
    const double ratio = ratios[static_cast<size_t>(il)];
    if (ratio == 0) {
      l.compress_ratio = 0;
    } else if (ratio == 4) {
      l.compress_ratio = 4;
    } else if (ratio == 128) {
      l.compress_ratio = 128;
    } else {
      fail("{}: layer {} has attention.compress_ratios value {} (supported: 0, 4, 128)", m.path(), il, ratio);
    }
    l.rope = l.compress_ratio == 0 ? rope_plain : rope_comp;
    if (l.compress_ratio == 4) {
      l.idx_n_head = static_cast<int>(r.req_int(key::kAttnIndexerHeadCount));
      l.idx_head_dim = static_cast<int>(r.req_int(key::kAttnIndexerKeyLength));
      l.idx_top_k = static_cast<int>(r.req_int(key::kAttnIndexerTopK));
      STRATA_CHECK(l.idx_n_head > 0 && l.idx_head_dim >= rope_dim && l.idx_top_k > 0, "{}: invalid indexer ({} heads x {}, top-k {}, rope dims {})",
                   m.path(), l.idx_n_head, l.idx_head_dim, l.idx_top_k, rope_dim);
    }
    l.ffn = FfnKind::Moe;
    l.n_expert = n_expert;
    l.n_expert_used = static_cast<int>(r.req_int(key::kExpertUsedCount));
    l.n_expert_shared = n_shared;
    l.n_ff_exp = n_ff_exp;
    l.n_ff_shexp = n_ff_exp * n_shared;
    l.gating = gating;
    l.hash_routing = il < n_hash;
    l.exp_probs_bias = !l.hash_routing && m.tensor(blk(il, tn::kExpProbsBias)) != nullptr;
    l.norm_w = r.opt_bool(key::kExpertWeightsNorm, false);
    l.w_scale = r.opt_float(key::kExpertWeightsScale, 1.0f);
    l.act = GluAct::SwigluClamp;
    l.swiglu_limit = static_cast<float>(clamp_exp[static_cast<size_t>(il)]);
    l.swiglu_limit_shexp = static_cast<float>(clamp_shexp[static_cast<size_t>(il)]);
  }
}

HcWeights bind_hc(const WeightBinder& b, const std::string& prefix, int n_mix, int n_scale, const ModelConfig& cfg) {
  HcWeights h;
  h.fn = b.mat(prefix + tn::kHcFn, n_mix, static_cast<int64_t>(cfg.n_hc) * cfg.n_embd);
  h.base = b.vec(prefix + tn::kHcBase, n_mix);
  h.scale = b.vec(prefix + tn::kHcScale, n_scale);
  return h;
}

CompressorWeights bind_compressor(const WeightBinder& b, const std::string& prefix, int ratio, int head, const ModelConfig& cfg) {
  const int width = ratio == 4 ? 2 * head : head;  // ratio 4: overlapping halves
  CompressorWeights c;
  c.kv = b.mat(prefix + tn::kCompressorKv, width, cfg.n_embd);
  c.gate = b.mat(prefix + tn::kCompressorGate, width, cfg.n_embd);
  c.ape = b.dequantized(prefix + tn::kCompressorApe, ratio, width);
  c.norm = b.vec(prefix + tn::kCompressorNorm, head);
  return c;
}

void deepseek4_bind(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w) {
  bind_common(b, cfg, w);
  const int n_hc = cfg.n_hc;
  w.output_hc = bind_hc(b, tn::kOutputHc, n_hc, 1, cfg);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const LayerConfig& lc = cfg.layers[l];
    LayerWeights& lw = w.layers[l];
    const int d = lc.head_dim_k, hd = lc.n_head * d;
    lw.attn_norm = b.vec(blk(l, tn::kAttnNorm), cfg.n_embd);
    lw.sinks = b.vec(blk(l, tn::kAttnSinks), lc.n_head);
    lw.wq_a = b.mat(blk(l, tn::kAttnQA), lc.q_lora_rank, cfg.n_embd);
    lw.q_a_norm = b.vec(blk(l, tn::kAttnQANorm), lc.q_lora_rank);
    lw.wq_b = b.mat(blk(l, tn::kAttnQB), hd, lc.q_lora_rank);
    lw.wkv = b.mat(blk(l, tn::kAttnKv), d, cfg.n_embd);
    lw.kv_a_norm = b.vec(blk(l, tn::kAttnKvANorm), d);
    lw.wo_a = b.mat(blk(l, tn::kAttnOutputA), static_cast<int64_t>(lc.n_out_group) * lc.o_lora_rank, hd / lc.n_out_group);
    lw.wo_b = b.mat(blk(l, tn::kAttnOutputB), cfg.n_embd, static_cast<int64_t>(lc.n_out_group) * lc.o_lora_rank);
    const int n_mix = 2 * n_hc + n_hc * n_hc;
    lw.hc_attn = bind_hc(b, blk(l, tn::kHcAttn), n_mix, 3, cfg);
    lw.hc_ffn = bind_hc(b, blk(l, tn::kHcFfn), n_mix, 3, cfg);
    if (lc.compress_ratio > 0) lw.comp = bind_compressor(b, blk(l, tn::kAttnCompressor), lc.compress_ratio, d, cfg);
    if (lc.compress_ratio == 4) {
      lw.idx_proj = b.mat(blk(l, tn::kIndexerProj), lc.idx_n_head, cfg.n_embd);
      lw.idx_q_b = b.mat(blk(l, tn::kIndexerQB), static_cast<int64_t>(lc.idx_n_head) * lc.idx_head_dim, lc.q_lora_rank);
      lw.idx_comp = bind_compressor(b, blk(l, tn::kIndexerCompressor), 4, lc.idx_head_dim, cfg);
    }
    lw.ffn_norm = b.vec(blk(l, tn::kFfnNorm), cfg.n_embd);
    bind_moe(b, cfg, l, lw);
    if (lc.exp_probs_bias) lw.exp_probs_b = b.vec(blk(l, tn::kExpProbsBias), lc.n_expert);
    if (lc.hash_routing) lw.tid2eid = b.i32_table(blk(l, tn::kFfnGateTid2eid), cfg.n_vocab, lc.n_expert_used);
    if (lc.n_expert_shared > 0) {
      lw.shexp_gate = b.mat(blk(l, tn::kFfnGateShexp), lc.n_ff_shexp, cfg.n_embd);
      lw.shexp_up = b.mat(blk(l, tn::kFfnUpShexp), lc.n_ff_shexp, cfg.n_embd);
      lw.shexp_down = b.mat(blk(l, tn::kFfnDownShexp), cfg.n_embd, lc.n_ff_shexp);
    }
  }
  b.check_all_used();
}

}  // namespace
}  // namespace strata::arch

namespace strata {
extern const ArchDef kArchDeepseek4{"deepseek4", arch::deepseek4_config, arch::deepseek4_bind, arch::deepseek4_run_layers,
                                  /*rewindable=*/false, arch::deepseek4_make_state};
}
