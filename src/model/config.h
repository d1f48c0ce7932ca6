#pragma once
// Model configuration as data: one ModelConfig with one LayerConfig per layer, read from
// GGUF metadata by the architecture's file (model/arch/*.cpp). Unknown values fail loudly.
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class GgufModel;

// Mla: absorbed latent attention (the cache holds the latent); MlaSparse: Mla over the keys a
// lightning indexer selects per query (DeepSeek-V3.2's DSA); MlaKvB: the older DeepSeek layout with
// one attn_kv_b up-projection, computed as plain multi-head attention over per-head K/V rows;
// SharedKv: one vector per token is both K and V (DeepSeek-V4); MlaSparse: MLA over the positions
// the lightning indexer picks (DeepSeek-V3.2); DeltaNet: Gated DeltaNet linear attention (Qwen3.5),
// no KV rows: a causal convolution and a per-head recurrent state per sequence.
enum class AttnKind { Gqa, Mla, MlaSparse, MlaKvB, SharedKv, DeltaNet };
enum class RopeStyle { Norm, Neox };      // Norm: pairs (2i, 2i+1); Neox: pairs (i, i + n/2)
enum class FfnKind { Dense, Moe };
enum class GatingFunc { Softmax, Sigmoid, SoftmaxWeight, SqrtSoftplus };
enum class GluAct { Silu, SwigluOai, SwigluClamp };  // SwigluOai: gpt-oss clamped variant;
                                                    // SwigluClamp: silu(min(g, L)) * clamp(u, -L, L) (DeepSeek-V4)

struct RopeConfig {
  RopeStyle style = RopeStyle::Norm;
  int n_dims = 0;              // rotated dims per head
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // 1 / scaling factor
  // YaRN (ext_factor = 0 disables the ramp)
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;
};

struct LayerConfig {
  // Attention
  AttnKind attn = AttnKind::Gqa;
  int n_head = 0, n_head_kv = 0;
  int head_dim_k = 0, head_dim_v = 0;  // per head, as stored in the KV cache
  bool qk_norm = false;                // per-head RMSNorm of q and k (Qwen3, GLM-4.5)
  bool qk_norm_full = false;           // RMSNorm of q and k over all heads at once (MiniMax-M2)
  bool attn_bias = false;              // biases on q/k/v/o (gpt-oss)
  bool sinks = false;                  // per-head attention sink logits (gpt-oss)
  bool out_gate = false;               // attn_q also yields a per-head gate: out_h *= sigmoid(gate_h) (Qwen3.5)
  int sliding_window = 0;              // 0: full attention
  float kq_scale = 1.0f;
  RopeConfig rope;
  // MLA (DeepSeek-V2/V3): cache holds [kv_lora_rank + qk_rope_dim] per token
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  // DeepSeek-V4 (SharedKv): grouped low-rank output, KV compression and the lightning indexer
  int n_out_group = 0, o_lora_rank = 0;  // attn_output_a: n_out_group matrices of o_lora_rank rows
  int compress_ratio = 0;              // 0: window only, 4: indexer-selected blocks (CSA), 128: all blocks (HCA)
  // Lightning indexer (DeepSeek-V4's ratio-4 layers, every DeepSeek-V3.2 layer): heads x dims, keys kept per query
  int idx_n_head = 0, idx_head_dim = 0, idx_top_k = 0;
  // Gated DeltaNet (AttnKind::DeltaNet): conv over C = 2*ssm_k_heads*ssm_state + ssm_v_heads*ssm_state
  // channels; value head h reads query/key head h % ssm_k_heads.
  int ssm_conv = 0;                    // K: taps of the causal depthwise convolution
  int ssm_state = 0;                   // S: key and value head size (the state is S x S per value head)
  int ssm_k_heads = 0, ssm_v_heads = 0;
  int ssm_channels() const { return (2 * ssm_k_heads + ssm_v_heads) * ssm_state; }

  // Feed-forward
  FfnKind ffn = FfnKind::Dense;
  int n_ff = 0;                        // dense FFN width
  GluAct act = GluAct::Silu;
  // MoE
  int n_expert = 0, n_expert_used = 0, n_expert_shared = 0;
  int n_ff_exp = 0, n_ff_shexp = 0;
  GatingFunc gating = GatingFunc::Softmax;
  bool router_bias = false;            // bias on the router logits (gpt-oss)
  bool exp_probs_bias = false;         // selection-only bias (DeepSeek-V3 exp_probs_b)
  int n_group = 0, n_group_used = 0;   // group-limited top-k (0: off)
  bool norm_w = false;                 // renormalize the selected weights
  float w_scale = 1.0f;                // routed scaling factor
  bool expert_bias = false;            // biases on expert gate/up/down (gpt-oss)
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // gpt-oss SwigluOai; SwigluClamp: routed experts
  float swiglu_limit_shexp = 0.0f;     // SwigluClamp limit of the shared expert
  bool shexp_gate = false;             // shared expert output *= sigmoid(ffn_gate_inp_shexp . x) per token (Qwen3.5)
  bool hash_routing = false;           // experts = ffn_gate_tid2eid[token id] (DeepSeek-V4 hash layers)
};

struct ModelConfig {
  std::string arch;
  std::string name;
  int n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-6f;
  // Hyper-connections (DeepSeek-V4 mHC): n_hc parallel residual streams (0: plain residual)
  int n_hc = 0;
  int hc_sinkhorn_iters = 0;
  float hc_eps = 0.0f;
  std::vector<LayerConfig> layers;     // the trunk: the blocks the forward pass runs
  // NextN / multi-token-prediction blocks (GLM-4.5): blocks n_layer .. n_layer + size - 1 of the
  // file, bound and checked but not run (llama.cpp's normal forward skips them; no KV cache).
  std::vector<LayerConfig> nextn;

};

// Required/optional metadata readers with clear errors ("<file>: missing <key>").
struct MetaReader {
  const GgufModel& m;
  std::string prefix;  // "<arch>."
  int64_t req_int(const char* key) const;
  int64_t opt_int(const char* key, int64_t def) const;
  float req_float(const char* key) const;
  float opt_float(const char* key, float def) const;
  bool opt_bool(const char* key, bool def) const;
  bool has(const char* key) const;
  std::string opt_string(const char* key, const std::string& def) const;
};

// Checks the configuration against the sizes the forward pass supports (core/limits.h); the
// error names the metadata key and the limit.
void check_limits(const std::string& path, const ModelConfig& cfg);

// Reads the common rope scaling keys (none/linear/yarn) into `rope`; throws on unknown types.
void read_rope_scaling(const MetaReader& r, RopeConfig& rope, int n_ctx_train);

}  // namespace strata
