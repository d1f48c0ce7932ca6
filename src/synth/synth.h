#pragma once
// `strata synth`: writes a GGUF with the exact tensor layout and metadata of a real MoE model,
// filled with valid random quantized blocks (finite scales, sane magnitudes), loadable by Strata
// and by llama.cpp. Routing popularity can be skewed (Zipf-like) so expert caches see a realistic
// hot set: every token embedding carries a shared component along a fixed direction u, and router
// row e carries alpha_e * u with alpha_e decreasing with a random per-layer popularity rank.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"

namespace strata {

// Qwen3Moe, Glm4Moe and MinimaxM2 share grouped-query attention (their differences are the
// fields below); Deepseek2 has MLA, Deepseek32 MLA plus DeepSeek-V3.2's lightning indexer;
// Qwen35Moe mixes Gated DeltaNet and gated full attention.
enum class SynthArch { Qwen3Moe, Deepseek2, Glm4Moe, MinimaxM2, Deepseek32, Qwen35Moe };
inline bool synth_is_mla(SynthArch a) { return a == SynthArch::Deepseek2 || a == SynthArch::Deepseek32; }
enum class SynthQkNorm { None, PerHead, Full };  // q/k RMSNorm over each head, or over the whole q/k width
const char* synth_arch_name(SynthArch a);

struct SynthSpec {
  SynthArch arch = SynthArch::Qwen3Moe;
  std::string name;               // general.name
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;              // GQA only
  int head_dim = 0;               // GQA only
  int rope_dims = 0;              // rotated dims per head (0: all; GLM, MiniMax and Qwen3.5 rotate part)
  bool attn_bias = false;         // GQA: q/k/v biases (GLM)
  SynthQkNorm qk_norm = SynthQkNorm::PerHead;  // GQA
  int n_nextn = 0;                // GLM: NextN (multi-token prediction) blocks after the n_layer ones
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;               // one routed expert's hidden size
  int n_ff = 0;                   // dense FFN hidden size (deepseek2 leading layers; metadata for qwen)
  int n_shared = 0;               // shared experts (deepseek2, glm4moe; qwen35moe: its one gated shared expert)
  // Gated DeltaNet (qwen35moe): every full_attn_every-th block is full attention, the rest DeltaNet
  int full_attn_every = 0;
  int ssm_conv = 0, ssm_state = 0, ssm_k_heads = 0, ssm_v_heads = 0;
  int n_dense_lead = 0;           // leading dense layers (deepseek2, glm4moe)
  // MLA (deepseek2)
  int q_lora = 0;                 // 0: plain attn_q
  int kv_lora = 0;
  int qk_nope = 0;
  int qk_rope = 0;
  int v_head = 0;
  // Lightning indexer (deepseek32): heads x dims, positions kept per query
  int idx_heads = 0, idx_dim = 0, idx_topk = 0;
  float routed_scale = 1.0f;      // expert_weights_scale
  // DeepSeek-V3-style routing (deepseek2; always on for glm4moe and minimax-m2): sigmoid scores with a selection bias (exp_probs_b),
  // group-limited top-k, normalized weights. false: DeepSeek-V2's softmax.
  bool sigmoid_gating = false;
  int n_group = 0;
  int n_group_used = 0;
  int n_vocab = 0;                // rows of token_embd/output (tokens are padded to it)
  bool chat_template = true;      // false: no tokenizer.chat_template (a model chat and serve meet in ChatML)
  int n_ctx = 0;                  // context_length
  float rope_base = 10000.0f;
  float yarn_factor = 0.0f;       // > 0: YaRN rope scaling (deepseek2)
  int yarn_orig_ctx = 0;
  float yarn_log_mul = 0.0f;
  float rms_eps = 1e-6f;
  // Weight types per tensor role.
  GgmlType expert_type = GgmlType::Q4_K;  // routed experts
  GgmlType shexp_type = GgmlType::Q4_K;   // shared experts and dense FFN
  GgmlType attn_type = GgmlType::Q4_K;    // attention projections
  GgmlType embd_type = GgmlType::Q4_K;    // token_embd
  GgmlType output_type = GgmlType::Q6_K;  // output
  std::optional<GgmlType> expert_down_type;  // routed ffn_down_exps (default: expert_type)
  int n_hi_layers = 0;                    // the first n MoE layers keep their routed experts in...
  GgmlType expert_hi_type = GgmlType::Q4_K;  // ...this type (per-layer mixes of "dynamic" quants)
  uint32_t file_type = 0;                 // general.file_type (0: derived from expert_type)
  // Router rows and norms are always F32.
  double skew = 1.0;              // 0: uniform routing; 1: Zipf-like popularity
  uint64_t seed = 1;

  void validate() const;  // throws strata::Error naming the bad field
};

// Named shapes: qwen3-30b-a3b, deepseek-v3, deepseek-v3.2, deepseek-v2-lite, glm-4.5-air, minimax-m2,
// qwen3.5-35b-a3b, demo, tiny, tiny-deepseek2, tiny-deepseek32, tiny-glm4moe, tiny-minimax-m2, tiny-qwen35moe.
SynthSpec synth_preset(const std::string& name);
std::vector<std::string> synth_preset_names();

// Named per-tensor type mixes over a shape, like the low-bit files people download (e.g.
// ud-iq1_s: routed gate/up IQ1_S, down IQ2_XXS, the first MoE layers higher, attention Q4_K,
// shared experts Q6_K). Rows that do not split into a type's blocks fall back as llama.cpp does.
void synth_apply_recipe(SynthSpec& s, const std::string& name);
std::vector<std::string> synth_recipe_names();

// One tensor of the planned file.
// Decay: negative values (qwen35moe's ssm_a = -exp(A_log)).
enum class SynthRole { Norm, Bias, Router, Embedding, Weight, Decay };
struct SynthTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;   // ggml order, innermost first
  SynthRole role = SynthRole::Weight;
  float sigma = 0;            // target std of dequantized values (Weight)
  int layer = -1;
  uint64_t nbytes() const;
};

// The tensors of the model in file order (types already fall back where a row does not fit
// the requested type's block, as llama.cpp's quantizer does).
std::vector<SynthTensor> synth_plan(const SynthSpec& s);

struct SynthResult {
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;
  int64_t n_tensors = 0;
  double seconds = 0;
};

// Writes the model to `path` atomically (temporary name, then rename). Tensors are generated one
// at a time, so memory stays at about one tensor. threads <= 0: hardware concurrency.
SynthResult synth_write(const SynthSpec& s, const std::string& path, int threads = 0);

}  // namespace strata
