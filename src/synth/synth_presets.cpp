// Named model shapes for `strata synth` and the spec's validation.
#include <algorithm>

#include "core/error.h"
#include "synth/synth.h"
#include "synth/synth_blocks.h"

namespace strata {

const char* synth_arch_name(SynthArch a) {
  switch (a) {
    case SynthArch::Qwen3Moe: return "qwen3moe";
    case SynthArch::Deepseek2: return "deepseek2";
    case SynthArch::Glm4Moe: return "glm4moe";
    case SynthArch::MinimaxM2: return "minimax-m2";
    case SynthArch::Qwen35Moe: return "qwen35moe";
    case SynthArch::Deepseek32: return "deepseek32";
  }
  return "?";
}

namespace {

SynthSpec qwen3moe_base() {
  SynthSpec s;
  s.arch = SynthArch::Qwen3Moe;
  s.rope_base = 1000000.0f;
  s.rms_eps = 1e-6f;
  s.expert_type = GgmlType::Q4_K;
  s.shexp_type = GgmlType::Q4_K;
  s.attn_type = GgmlType::Q4_K;
  s.embd_type = GgmlType::Q4_K;
  s.output_type = GgmlType::Q6_K;
  return s;
}

// Qwen3-30B-A3B: 48 layers, 128 experts top-8, ~17 GB at Q4_K.
SynthSpec qwen3_30b_a3b() {
  SynthSpec s = qwen3moe_base();
  s.name = "synth-qwen3-30b-a3b";
  s.n_layer = 48;
  s.n_embd = 2048;
  s.n_head = 32;
  s.n_head_kv = 4;
  s.head_dim = 128;
  s.n_expert = 128;
  s.n_expert_used = 8;
  s.n_ff_exp = 768;
  s.n_ff = 6144;
  s.n_vocab = 151936;
  s.n_ctx = 40960;
  return s;
}

// DeepSeek-V2-Lite: MLA without q LoRA, 1 dense layer, 64 routed + 2 shared experts, YaRN x40.
SynthSpec deepseek_v2_lite() {
  SynthSpec s;
  s.arch = SynthArch::Deepseek2;
  s.name = "synth-deepseek-v2-lite";
  s.n_layer = 27;
  s.n_embd = 2048;
  s.n_head = 16;
  s.q_lora = 0;
  s.kv_lora = 512;
  s.qk_nope = 128;
  s.qk_rope = 64;
  s.v_head = 128;
  s.n_expert = 64;
  s.n_expert_used = 6;
  s.n_shared = 2;
  s.n_ff_exp = 1408;
  s.n_ff = 10944;
  s.n_dense_lead = 1;
  s.routed_scale = 1.0f;
  s.n_vocab = 102400;
  s.n_ctx = 163840;
  s.rope_base = 10000.0f;
  s.yarn_factor = 40.0f;
  s.yarn_orig_ctx = 4096;
  s.yarn_log_mul = 0.0707f;
  s.rms_eps = 1e-6f;
  s.expert_type = GgmlType::Q4_K;
  s.shexp_type = GgmlType::Q4_K;
  s.attn_type = GgmlType::Q4_K;
  s.embd_type = GgmlType::Q4_K;
  s.output_type = GgmlType::Q6_K;
  return s;
}

// DeepSeek-V3 / R1 (and Kimi K2's layout with other counts): MLA with q LoRA, 3 dense layers,
// 256 routed experts top-8 in 8 groups (4 used) with a sigmoid router, 1 shared expert.
SynthSpec deepseek_v3() {
  SynthSpec s = deepseek_v2_lite();
  s.name = "synth-deepseek-v3";
  s.n_layer = 61;
  s.n_embd = 7168;
  s.n_head = 128;
  s.q_lora = 1536;
  s.kv_lora = 512;
  s.n_expert = 256;
  s.n_expert_used = 8;
  s.n_shared = 1;
  s.n_ff_exp = 2048;
  s.n_ff = 18432;
  s.n_dense_lead = 3;
  s.routed_scale = 2.5f;
  s.sigmoid_gating = true;
  s.n_group = 8;
  s.n_group_used = 4;
  s.n_vocab = 129280;
  s.n_ctx = 163840;
  s.yarn_factor = 40.0f;
  s.yarn_orig_ctx = 4096;
  s.yarn_log_mul = 0.1f;
  return s;
}

// DeepSeek-V3.2: DeepSeek-V3's shape plus the DSA lightning indexer (64 heads x 128, top-2048).
SynthSpec deepseek_v32() {
  SynthSpec s = deepseek_v3();
  s.arch = SynthArch::Deepseek32;
  s.name = "synth-deepseek-v3.2";
  s.idx_heads = 64;
  s.idx_dim = 128;
  s.idx_topk = 2048;
  return s;
}

// GLM-4.5-Air (106B-A12B): 46 layers + 1 NextN block, the first dense, 128 routed experts top-8
// and one shared, sigmoid routing with a selection bias, QKV biases, no QK-norm, half-rotated heads.
SynthSpec glm45_air() {
  SynthSpec s = qwen3moe_base();
  s.arch = SynthArch::Glm4Moe;
  s.name = "synth-glm-4.5-air";
  s.n_layer = 46;
  s.n_nextn = 1;
  s.n_embd = 4096;
  s.n_head = 96;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.rope_dims = 64;
  s.attn_bias = true;
  s.qk_norm = SynthQkNorm::None;
  s.n_expert = 128;
  s.n_expert_used = 8;
  s.n_shared = 1;
  s.n_ff_exp = 1408;
  s.n_ff = 10944;
  s.n_dense_lead = 1;
  s.sigmoid_gating = true;
  s.routed_scale = 1.0f;
  s.n_vocab = 151552;
  s.n_ctx = 131072;
  s.rms_eps = 1e-5f;
  s.shexp_type = GgmlType::Q6_K;
  return s;
}

// MiniMax-M2 (230B-A10B): 62 layers, 256 routed experts top-8, no shared expert, sigmoid routing
// with a bias, QK-norm over the whole q/k width, half-rotated heads.
SynthSpec minimax_m2() {
  SynthSpec s = qwen3moe_base();
  s.arch = SynthArch::MinimaxM2;
  s.name = "synth-minimax-m2";
  s.n_layer = 62;
  s.n_embd = 3072;
  s.n_head = 48;
  s.n_head_kv = 8;
  s.head_dim = 128;
  s.rope_dims = 64;
  s.qk_norm = SynthQkNorm::Full;
  s.n_expert = 256;
  s.n_expert_used = 8;
  s.n_ff_exp = 1536;
  s.n_ff = 1536;
  s.sigmoid_gating = true;
  s.n_vocab = 200064;
  s.n_ctx = 196608;
  s.rope_base = 5000000.0f;
  return s;
}

// Small versions of the two, for tests.
SynthSpec tiny_glm4moe() {
  SynthSpec s = glm45_air();
  s.name = "synth-tiny-glm4moe";
  s.n_layer = 3;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.rope_dims = 32;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_ff_exp = 256;
  s.n_ff = 512;
  s.n_vocab = 512;
  s.n_ctx = 4096;
  s.attn_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  return s;
}
SynthSpec tiny_minimax_m2() {
  SynthSpec s = minimax_m2();
  s.name = "synth-tiny-minimax-m2";
  s.n_layer = 2;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.rope_dims = 32;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_ff_exp = 256;
  s.n_ff = 256;
  s.n_vocab = 512;
  s.n_ctx = 4096;
  s.attn_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  return s;
}

// The README's default model: small enough to generate in seconds, big enough that a RAM budget
// below its size forces expert streaming.
SynthSpec demo() {
  SynthSpec s = qwen3moe_base();
  s.name = "synth-demo";
  s.n_layer = 8;
  s.n_embd = 512;
  s.n_head = 8;
  s.n_head_kv = 4;
  s.head_dim = 64;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff_exp = 512;
  s.n_ff = 1536;
  s.n_vocab = 4096;
  s.n_ctx = 4096;
  s.attn_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  s.output_type = GgmlType::Q8_0;
  return s;
}

// A few MB, for tests.
SynthSpec tiny() {
  SynthSpec s = qwen3moe_base();
  s.name = "synth-tiny";
  s.n_layer = 2;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff_exp = 256;
  s.n_ff = 512;
  s.n_vocab = 512;
  s.n_ctx = 512;
  s.attn_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  return s;
}

SynthSpec tiny_deepseek2() {
  SynthSpec s = deepseek_v2_lite();
  s.name = "synth-tiny-deepseek2";
  s.n_layer = 3;
  s.n_embd = 256;
  s.n_head = 4;
  s.kv_lora = 256;
  s.qk_nope = 64;
  s.qk_rope = 32;
  s.v_head = 64;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_shared = 1;
  s.n_ff_exp = 256;
  s.n_ff = 512;
  s.n_dense_lead = 1;
  s.n_vocab = 512;
  s.n_ctx = 4096;
  s.yarn_factor = 8.0f;
  s.yarn_orig_ctx = 512;
  s.attn_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  return s;
}

// Qwen3.5-35B-A3B: 40 blocks (Gated DeltaNet, every 4th gated full attention), 256 experts top-8
// plus one gated shared expert of the same width; linear attention with 16 key heads and 32 value
// heads of 128, a 4-tap convolution; full attention 16 q / 2 kv heads of 256, a quarter of them
// rotated (M-RoPE sections 11/11/10); ~20 GB at Q4_K. The MTP block of the release is not written.
SynthSpec qwen35_35b_a3b() {
  SynthSpec s = qwen3moe_base();
  s.arch = SynthArch::Qwen35Moe;
  s.name = "synth-qwen3.5-35b-a3b";
  s.n_layer = 40;
  s.n_embd = 2048;
  s.n_head = 16;
  s.n_head_kv = 2;
  s.head_dim = 256;
  s.rope_dims = 64;
  s.n_expert = 256;
  s.n_expert_used = 8;
  s.n_ff_exp = 512;
  s.n_shared = 1;
  s.full_attn_every = 4;
  s.ssm_conv = 4;
  s.ssm_state = 128;
  s.ssm_k_heads = 16;
  s.ssm_v_heads = 32;
  s.n_vocab = 248320;
  s.n_ctx = 262144;
  s.rope_base = 10000000.0f;
  return s;
}

// The golden fixtures' shape (a few MB), for tests.
SynthSpec tiny_qwen35moe() {
  SynthSpec s = qwen35_35b_a3b();
  s.name = "synth-tiny-qwen35moe";
  s.n_layer = 4;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.rope_dims = 16;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.ssm_state = 64;
  s.ssm_k_heads = 2;
  s.ssm_v_heads = 4;
  s.n_vocab = 768;
  s.n_ctx = 4096;
  s.attn_type = GgmlType::Q8_0;
  s.embd_type = GgmlType::Q8_0;
  return s;
}

// A few MB of DeepSeek-V3.2's structure (q latent, sigmoid router in groups); top-k 32, so prompts
// of more than 32 tokens exercise the selection.
SynthSpec tiny_deepseek32() {
  SynthSpec s = tiny_deepseek2();
  s.arch = SynthArch::Deepseek32;
  s.name = "synth-tiny-deepseek32";
  s.q_lora = 256;
  s.sigmoid_gating = true;
  s.n_group = 4;
  s.n_group_used = 2;
  s.routed_scale = 2.5f;
  s.idx_heads = 8;
  s.idx_dim = 64;
  s.idx_topk = 32;
  return s;
}

struct Preset {
  const char* name;
  SynthSpec (*make)();
};
constexpr Preset kPresets[] = {
    {"qwen3-30b-a3b", qwen3_30b_a3b}, {"deepseek-v3", deepseek_v3}, {"deepseek-v3.2", deepseek_v32}, {"deepseek-v2-lite", deepseek_v2_lite},
    {"glm-4.5-air", glm45_air}, {"minimax-m2", minimax_m2}, {"qwen3.5-35b-a3b", qwen35_35b_a3b}, {"tiny-glm4moe", tiny_glm4moe},
    {"tiny-minimax-m2", tiny_minimax_m2}, {"demo", demo}, {"tiny", tiny}, {"tiny-deepseek2", tiny_deepseek2}, {"tiny-deepseek32", tiny_deepseek32},
    {"tiny-qwen35moe", tiny_qwen35moe},
};

}  // namespace

// Type mixes. The "ud-" ones follow what the popular dynamic low-bit files do: the routed
// experts (the bulk of the bytes) at 1-2 bits with their down projections one step up, the first
// MoE layers one step up again, attention at 4 bits, shared experts and dense FFNs at 6 bits.
struct Recipe {
  const char* name;
  GgmlType gate_up, down, hi;  // routed experts: most layers, their down projections, the first MoE layers
  int n_hi;
  GgmlType attn, shexp;
  uint32_t file_type;  // llama.cpp's LLAMA_FTYPE_MOSTLY_* id
};
constexpr Recipe kRecipes[] = {
    {"ud-iq1_s", GgmlType::IQ1_S, GgmlType::IQ2_XXS, GgmlType::IQ2_XXS, 2, GgmlType::Q4_K, GgmlType::Q6_K, 24},
    {"ud-iq1_m", GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, 2, GgmlType::Q4_K, GgmlType::Q6_K, 31},
    {"ud-iq2_xxs", GgmlType::IQ2_XXS, GgmlType::IQ3_XXS, GgmlType::IQ3_XXS, 2, GgmlType::Q4_K, GgmlType::Q6_K, 19},
    // Plain llama.cpp-style IQ2_XXS: every routed expert IQ2_XXS, attention in the 3-bit i-quant.
    {"iq2_xxs", GgmlType::IQ2_XXS, GgmlType::IQ2_XXS, GgmlType::IQ2_XXS, 0, GgmlType::IQ3_S, GgmlType::Q6_K, 19},
};

SynthSpec synth_preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p.make();
  std::string known;
  for (const auto& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  fail("synth: unknown preset '{}' (known: {})", name, known);
}

void synth_apply_recipe(SynthSpec& s, const std::string& name) {
  for (const auto& r : kRecipes) {
    if (name != r.name) continue;
    s.expert_type = r.gate_up;
    s.expert_down_type = r.down;
    s.expert_hi_type = r.hi;
    s.n_hi_layers = r.n_hi;
    s.attn_type = r.attn;
    s.shexp_type = r.shexp;
    s.embd_type = GgmlType::Q4_K;
    s.output_type = GgmlType::Q6_K;
    s.file_type = r.file_type;
    return;
  }
  std::string known;
  for (const auto& r : kRecipes) known += (known.empty() ? "" : ", ") + std::string(r.name);
  fail("synth: unknown recipe '{}' (known: {})", name, known);
}

std::vector<std::string> synth_recipe_names() {
  std::vector<std::string> v;
  for (const auto& r : kRecipes) v.emplace_back(r.name);
  return v;
}

std::vector<std::string> synth_preset_names() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  return v;
}

void SynthSpec::validate() const {
  auto pos = [](int v, const char* what) { STRATA_CHECK(v > 0, "synth: {} must be > 0 (got {})", what, v); };
  pos(n_layer, "layers");
  pos(n_embd, "n_embd");
  pos(n_head, "heads");
  pos(n_expert, "experts");
  pos(n_expert_used, "experts used");
  pos(n_ff_exp, "expert ffn");
  pos(n_vocab, "vocab");
  pos(n_ctx, "context");
  STRATA_CHECK(n_expert_used <= n_expert, "synth: {} experts used but only {} experts", n_expert_used, n_expert);
  STRATA_CHECK(n_expert <= 1024 && n_expert_used <= 64, "synth: at most 1024 experts and 64 used (got {} / {})", n_expert, n_expert_used);
  STRATA_CHECK(n_layer <= 4096, "synth: {} layers is implausible", n_layer);
  STRATA_CHECK(n_embd % 256 == 0, "synth: n_embd {} must be a multiple of 256 (K-quant rows)", n_embd);
  STRATA_CHECK(skew >= 0, "synth: skew must be >= 0 (got {})", skew);
  STRATA_CHECK(n_nextn >= 0 && (n_nextn == 0 || arch == SynthArch::Glm4Moe), "synth: NextN blocks are a glm4moe feature (got {})", n_nextn);
  if (!synth_is_mla(arch)) {
    pos(n_head_kv, "kv heads");
    pos(head_dim, "head dim");
    STRATA_CHECK(n_head % n_head_kv == 0, "synth: {} heads is not a multiple of {} kv heads", n_head, n_head_kv);
    STRATA_CHECK(head_dim % 2 == 0, "synth: head dim {} must be even (rope)", head_dim);
    STRATA_CHECK(rope_dims >= 0 && rope_dims <= head_dim && rope_dims % 2 == 0, "synth: rope dims {} must be even and <= head dim {}", rope_dims,
                 head_dim);
    STRATA_CHECK(n_dense_lead >= 0 && n_dense_lead < n_layer, "synth: {} leading dense layers leave no MoE layer of {}", n_dense_lead, n_layer);
    if (n_dense_lead > 0) pos(n_ff, "dense ffn");
  }
  if (arch == SynthArch::Qwen35Moe) {
    pos(full_attn_every, "full attention interval");
    pos(ssm_conv, "conv kernel");
    pos(ssm_state, "state size");
    pos(ssm_k_heads, "linear key heads");
    pos(ssm_v_heads, "linear value heads");
    pos(n_shared, "shared experts");
    STRATA_CHECK(ssm_v_heads % ssm_k_heads == 0, "synth: {} linear value heads is not a multiple of {} key heads", ssm_v_heads, ssm_k_heads);
    STRATA_CHECK(rope_dims >= 6, "synth: qwen35moe rope dims {} must be at least 6 (three M-RoPE sections)", rope_dims);
  } else if (synth_is_mla(arch)) {
    pos(kv_lora, "kv_lora");
    pos(qk_nope, "qk_nope");
    pos(qk_rope, "qk_rope");
    pos(v_head, "v_head");
    STRATA_CHECK(q_lora >= 0 && n_shared >= 0 && n_dense_lead >= 0, "synth: q_lora, shared experts and dense layers must be >= 0");
    STRATA_CHECK(n_dense_lead < n_layer, "synth: {} leading dense layers leave no MoE layer of {}", n_dense_lead, n_layer);
    if (n_dense_lead > 0) pos(n_ff, "dense ffn");
    STRATA_CHECK(qk_rope % 2 == 0, "synth: qk_rope {} must be even", qk_rope);
  }
  if (arch == SynthArch::Deepseek32) {
    pos(q_lora, "q_lora (the indexer reads the q latent)");
    pos(idx_heads, "indexer heads");
    pos(idx_topk, "indexer top-k");
    STRATA_CHECK(idx_dim >= qk_rope && idx_dim % 32 == 0, "synth: indexer dim {} must be a multiple of 32 and at least qk_rope {}", idx_dim, qk_rope);
  }
  STRATA_CHECK(n_vocab >= 256 + 8, "synth: vocab {} is too small (256 byte tokens + specials)", n_vocab);
  STRATA_CHECK(n_hi_layers >= 0, "synth: n_hi_layers must be >= 0");
  if (n_group > 0)
    STRATA_CHECK(n_expert % n_group == 0 && n_group_used >= 1 && n_group_used <= n_group, "synth: {} experts do not split into {} groups ({} used)",
                 n_expert, n_group, n_group_used);
  for (GgmlType t : {expert_type, expert_down_type.value_or(expert_type), expert_hi_type, shexp_type, attn_type, output_type})
    STRATA_CHECK(synth_random_supported(t), "synth: weight type {} is not supported (f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, the K-quants, the i-quants, tq1_0, tq2_0)",
                 ggml_type_name(t));
  STRATA_CHECK(synth_quantize_supported(embd_type), "synth: embedding type {} is not supported (f32, f16, q4_0, q8_0, q4_K, q6_K)",
               ggml_type_name(embd_type));
}

}  // namespace strata
