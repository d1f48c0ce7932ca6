#pragma once
// Weights bound by name with dtype and shape checks (expected vs actual in every error).
// Dense weights are views into the mapped GGUF; routed experts are described by formula
// (tensor offset + expert * stride) and served by an ExpertProvider (experts/).
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_names.h"
#include "kernels/matmul.h"
#include "model/config.h"

namespace strata {

struct VecF32 {
  const float* data = nullptr;  // [n]
  int64_t n = 0;
  bool empty() const { return data == nullptr; }
};

// One [n_expert, rows, cols] tensor of routed experts (ne = {cols, rows, n_expert}).
struct ExpertTensor {
  const GgufTensor* t = nullptr;
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0, n_expert = 0;
  uint64_t expert_bytes = 0;   // bytes of one expert's matrix
  uint64_t row_bytes = 0;
  bool empty() const { return t == nullptr; }
  // The expert's matrix inside the mapping (resident path).
  QMatrix mapped(int e) const {
    return QMatrix{type, rows, cols, t->data + static_cast<uint64_t>(e) * expert_bytes, row_bytes};
  }
};

// Per-expert f32 biases [n_expert, n] (gpt-oss).
struct ExpertBias {
  const float* data = nullptr;
  int64_t n = 0;
  bool empty() const { return data == nullptr; }
  const float* of(int e) const { return data + static_cast<int64_t>(e) * n; }
};

// Hyper-connection mixer (DeepSeek-V4): mix = fn . rmsnorm(concat(streams)).
struct HcWeights {
  QMatrix fn;                  // [n_mix, n_hc * n_embd] (n_mix = 2*n_hc + n_hc^2 around a block, n_hc for the read-out)
  VecF32 base;                 // [n_mix]
  VecF32 scale;                // [3] pre, post, comb (read-out: [1])
  bool empty() const { return fn.empty(); }
};

// KV compressor (DeepSeek-V4): per token kv = W_kv a, score = W_gate a + ape[t mod ratio].
struct CompressorWeights {
  QMatrix kv, gate;            // [width, n_embd]; width = 2*head (ratio 4, overlapping) or head (ratio 128)
  std::vector<float> ape;      // [ratio, width] (dequantized at load)
  VecF32 norm;                 // [head]
  bool empty() const { return kv.empty(); }
};

struct LayerWeights {
  VecF32 attn_norm, ffn_norm;  // ffn_norm: "ffn_norm" or gpt-oss "post_attention_norm"
  // GQA
  QMatrix wq, wk, wv, wo;      // [n_head*hd, n_embd] ...
  VecF32 bq, bk, bv, bo;
  VecF32 q_norm, k_norm;       // [head_dim]
  VecF32 sinks;                // [n_head]
  // MLA
  QMatrix wq_a, wq_b;          // [q_lora, n_embd], [n_head*(nope+rope), q_lora]
  VecF32 q_a_norm, kv_a_norm;  // [q_lora], [kv_lora]
  QMatrix wkv_a;               // [kv_lora + rope, n_embd]
  const GgufTensor* wk_b = nullptr;  // ne {nope, kv_lora, n_head}: per head [kv_lora, nope]
  const GgufTensor* wv_b = nullptr;  // ne {kv_lora, v_dim, n_head}: per head [v_dim, kv_lora]
  QMatrix wkv_b;               // [n_head*(nope+v_dim), kv_lora] older layout (MlaKvB): per head nope key rows, then v_dim value rows
  // Dense FFN
  QMatrix ffn_gate, ffn_up, ffn_down;
  // MoE
  QMatrix router;              // [n_expert, n_embd]
  VecF32 router_b;             // [n_expert]
  VecF32 exp_probs_b;          // [n_expert]
  ExpertTensor gate_exps, up_exps, down_exps;
  ExpertBias gate_exps_b, up_exps_b, down_exps_b;
  QMatrix shexp_gate, shexp_up, shexp_down;
  QMatrix shexp_gate_inp;      // [1, n_embd] f32: the shared expert's per-token gate logit
  const int32_t* tid2eid = nullptr;  // [n_vocab, n_expert_used] hash routing table
  // Gated DeltaNet (Qwen3.5)
  QMatrix wqkv;                // [C, n_embd]: q (Hk*S) | k (Hk*S) | v (Hv*S)
  QMatrix wz;                  // [Hv*S, n_embd] output gate (attn_gate)
  QMatrix ssm_beta, ssm_alpha; // [Hv, n_embd]
  VecF32 ssm_conv1d;           // [C, K] one filter per channel (tap K-1 multiplies the current token)
  VecF32 ssm_dt, ssm_a;        // [Hv] decay bias and -exp(A_log)
  VecF32 ssm_norm;             // [S] shared by the value heads
  QMatrix ssm_out;             // [n_embd, Hv*S]
  // DeepSeek-V4
  QMatrix wkv;                 // [head_dim, n_embd] shared key/value
  QMatrix wo_a;                // [n_out_group * o_lora, n_head * head_dim / n_out_group]
  QMatrix wo_b;                // [n_embd, n_out_group * o_lora]
  HcWeights hc_attn, hc_ffn;
  CompressorWeights comp;      // attention compressor (ratio 4 / 128)
  CompressorWeights idx_comp;  // lightning indexer's compressor (ratio 4)
  QMatrix idx_q_b;             // [idx_n_head * idx_head_dim, q_lora]   (also DeepSeek-V3.2)
  QMatrix idx_proj;            // [idx_n_head, n_embd]                 (also DeepSeek-V3.2)
  // DeepSeek-V3.2's lightning indexer keys: LayerNorm(idx_k . a) with weight and bias
  QMatrix idx_k;               // [idx_head_dim, n_embd]
  VecF32 idx_k_norm, idx_k_norm_b;  // [idx_head_dim]
};

// A NextN / MTP block (GLM-4.5): a decoder block plus its input projection and draft head.
// Bound and shape-checked; the forward pass does not run it.
struct NextnWeights {
  LayerWeights block;
  QMatrix eh_proj;             // [n_embd, 2*n_embd]
  VecF32 enorm, hnorm;         // [n_embd]
  QMatrix embed_tokens;        // [n_vocab, n_embd] (optional)
  QMatrix shared_head_head;    // [n_vocab, n_embd] (optional)
  VecF32 shared_head_norm;     // [n_embd] (optional)
};

struct ModelWeights {
  QMatrix tok_embd;            // [n_vocab, n_embd]
  VecF32 output_norm;
  QMatrix output;              // [n_vocab, n_embd] (tied: same as tok_embd)
  HcWeights output_hc;         // hyper-connection read-out (DeepSeek-V4)
  VecF32 rope_freqs;           // [rope n_dims / 2] RoPE frequency factors (Llama 3.1; empty: none)
  std::vector<LayerWeights> layers;
  std::vector<NextnWeights> nextn;  // [cfg.nextn.size()]
};

// Checked lookup of tensors by name.
class WeightBinder {
 public:
  explicit WeightBinder(const GgufModel& m) : m_(m) {}
  const GgufModel& gguf() const { return m_; }
  const GgufTensor* find(const std::string& name) const { return m_.tensor(name); }
  const GgufTensor& get(const std::string& name) const;
  // 2-D matrix [rows, cols] (ne = {cols, rows}); any weight type with a kernel.
  QMatrix mat(const std::string& name, int64_t rows, int64_t cols) const;
  // F32 vector [n] (a 1-D tensor, or any shape with n elements).
  VecF32 vec(const std::string& name, int64_t n) const;
  ExpertTensor experts(const std::string& name, int64_t n_expert, int64_t rows, int64_t cols) const;
  ExpertBias opt_expert_bias(const std::string& name, int64_t n_expert, int64_t n) const;
  // I32 table [rows, cols] (ne = {cols, rows}).
  const int32_t* i32_table(const std::string& name, int64_t rows, int64_t cols) const;
  // Any-type matrix [rows, cols] dequantized to f32 (small tables such as position embeddings).
  std::vector<float> dequantized(const std::string& name, int64_t rows, int64_t cols) const;
  // 3-D tensor with exact ne.
  const GgufTensor* tensor3(const std::string& name, int64_t ne0, int64_t ne1, int64_t ne2) const;
  // Checks that every tensor of the file was bound (unknown tensors mean an unknown variant).
  void check_all_used(const std::vector<std::string>& extra_ok = {}) const;

 private:
  void mark(const GgufTensor& t) const { used_.push_back(std::string(t.name)); }
  const GgufModel& m_;
  mutable std::vector<std::string> used_;
};

using tn::blk;  // "blk.<layer>.<name>"

}  // namespace strata
