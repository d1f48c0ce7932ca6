#pragma once
// What a user with a big model and a small machine wants to know first: hyperparameters,
// quant types, dense (always resident) vs routed-expert (streamable) bytes, bytes touched
// per token, and how much of the experts fit in a RAM budget.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gguf/gguf_file.h"

namespace strata {

// Typed hyperparameters of the MoE architectures, read from "<arch>.*" metadata.
// Absent keys stay nullopt (inspect works on any GGUF).
struct MoeHParams {
  std::string arch;
  std::string name;
  std::optional<int64_t> n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim_k, head_dim_v;
  std::optional<int64_t> n_ff, n_ff_exp, n_ff_shexp, n_expert, n_expert_used, n_expert_shared, n_leading_dense;
  std::optional<int64_t> n_expert_groups, n_expert_groups_used, q_lora_rank, kv_lora_rank, rope_dim, sliding_window;
  std::optional<int64_t> expert_gating_func, hash_layer_count, hyper_connection_count;
  std::optional<int64_t> nextn_predict_layers;  // NextN / MTP blocks at the end of block_count (GLM-4.5)
  std::optional<int64_t> indexer_heads, indexer_dim, indexer_top_k;  // lightning indexer (DeepSeek-V3.2 / V4)
  std::optional<double> rope_freq_base, rope_scaling_factor, expert_weights_scale, rms_eps;
  std::optional<int64_t> rope_scaling_orig_ctx;
  std::optional<std::string> rope_scaling_type;
  std::optional<bool> expert_weights_norm;
  std::vector<int64_t> compress_ratios;  // deepseek4, per layer

  static MoeHParams read(const GgufModel& m);
};

// One weight type's share of a model: all of it, and its routed-expert part (the rest is dense).
struct TypeUse {
  int64_t tensors = 0;
  uint64_t bytes = 0;
  uint64_t values = 0;
  int64_t routed_tensors = 0;
  uint64_t routed_bytes = 0;
  uint64_t routed_values = 0;
};

struct LayerBytes {
  int layer = 0;
  int64_t n_expert = 0;        // 0: dense layer
  uint64_t dense_bytes = 0;    // attention, norms, router, shared experts...
  uint64_t routed_bytes = 0;   // all routed experts of the layer
  uint64_t expert_bytes = 0;   // one routed expert (gate + up + down [+ biases])
};

struct ModelSummary {
  std::string path;
  uint64_t file_bytes = 0;
  int64_t n_tensors = 0;
  MoeHParams hp;
  std::map<std::string, TypeUse> types;  // by ggml type name
  uint64_t dense_bytes = 0;
  uint64_t routed_bytes = 0;
  int64_t n_routed_experts = 0;          // over all layers
  std::vector<LayerBytes> layers;
  uint64_t touched_per_token = 0;        // dense (one embedding row) + top-k experts per MoE layer
  uint64_t touched_dense = 0;            // its dense part (always resident)
  uint64_t touched_routed = 0;           // its routed part: what a token reads when no expert is cached

  static ModelSummary of(const GgufModel& m);
  nlohmann::json to_json() const;
};

// True for tensors that hold routed experts ([.., n_expert] outermost), e.g. blk.3.ffn_up_exps.weight.
bool is_routed_expert_tensor(std::string_view name);
// Layer index of a "blk.N." tensor, or -1.
int tensor_layer(std::string_view name);

struct BudgetFit {
  uint64_t budget = 0;
  uint64_t dense_bytes = 0;
  uint64_t expert_cache_bytes = 0;   // budget left for experts (0 if dense alone exceeds it)
  int64_t experts_fit = 0;           // how many experts (of the average size) fit
  int64_t experts_total = 0;
  double routed_fraction = 0;        // fraction of routed bytes that fit
  bool dense_fits = false;
  bool all_fits = false;

  static BudgetFit plan(const ModelSummary& s, uint64_t budget);
  nlohmann::json to_json() const;
};

}  // namespace strata
