#include "model/model_summary.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "gguf/gguf_names.h"

namespace strata {

bool is_routed_expert_tensor(std::string_view name) { return name.find(tn::kRoutedExpertsMark) != std::string_view::npos; }

int tensor_layer(std::string_view name) {
  if (!name.starts_with(tn::kBlockPrefix)) return -1;
  int v = -1;
  auto r = std::from_chars(name.data() + tn::kBlockPrefix.size(), name.data() + name.size(), v);
  if (r.ec != std::errc() || r.ptr == name.data() + name.size() || *r.ptr != '.') return -1;
  return v;
}

MoeHParams MoeHParams::read(const GgufModel& m) {
  MoeHParams h;
  h.arch = m.architecture();
  h.name = m.get_string(key::kName).value_or("");
  const std::string a = h.arch + ".";
  auto i = [&](const char* k) { return m.get_int(a + k); };
  auto f = [&](const char* k) { return m.get_float(a + k); };
  h.n_vocab = i(key::kVocabSize);
  if (!h.n_vocab) {
    if (const GgufValue* t = m.find(key::kTokTokens); t && t->is_array()) h.n_vocab = static_cast<int64_t>(t->count);
  }
  h.n_ctx_train = i(key::kContextLength);
  h.n_embd = i(key::kEmbeddingLength);
  h.n_layer = i(key::kBlockCount);
  h.n_head = i(key::kAttnHeadCount);
  h.n_head_kv = i(key::kAttnHeadCountKv);
  h.head_dim_k = i(key::kAttnKeyLength);
  h.head_dim_v = i(key::kAttnValueLength);
  h.n_ff = i(key::kFeedForwardLength);
  h.n_ff_exp = i(key::kExpertFeedForwardLength);
  h.n_ff_shexp = i(key::kExpertSharedFeedForwardLength);
  h.n_expert = i(key::kExpertCount);
  h.n_expert_used = i(key::kExpertUsedCount);
  h.n_expert_shared = i(key::kExpertSharedCount);
  h.n_leading_dense = i(key::kLeadingDenseBlockCount);
  h.n_expert_groups = i(key::kExpertGroupCount);
  h.n_expert_groups_used = i(key::kExpertGroupUsedCount);
  h.q_lora_rank = i(key::kAttnQLoraRank);
  h.kv_lora_rank = i(key::kAttnKvLoraRank);
  h.rope_dim = i(key::kRopeDimensionCount);
  h.sliding_window = i(key::kAttnSlidingWindow);
  h.expert_gating_func = i(key::kExpertGatingFunc);
  h.hash_layer_count = i(key::kHashLayerCount);
  h.hyper_connection_count = i(key::kHcCount);
  h.nextn_predict_layers = i(key::kNextnPredictLayers);
  h.indexer_heads = i(key::kAttnIndexerHeadCount);
  h.indexer_dim = i(key::kAttnIndexerKeyLength);
  h.indexer_top_k = i(key::kAttnIndexerTopK);
  h.rope_freq_base = f(key::kRopeFreqBase);
  h.rope_scaling_factor = f(key::kRopeScalingFactor);
  h.rope_scaling_orig_ctx = i(key::kRopeScalingOrigCtx);
  h.rope_scaling_type = m.get_string(a + key::kRopeScalingType);
  h.expert_weights_scale = f(key::kExpertWeightsScale);
  h.expert_weights_norm = m.get_bool(a + key::kExpertWeightsNorm);
  h.rms_eps = f(key::kAttnRmsEps);
  if (const GgufValue* cr = m.find(a + key::kAttnCompressRatios); cr && cr->is_array() && cr->raw)
    for (uint64_t k = 0; k < cr->count; ++k) h.compress_ratios.push_back(cr->array_int(k));
  return h;
}

ModelSummary ModelSummary::of(const GgufModel& m) {
  ModelSummary s;
  s.path = m.path();
  s.file_bytes = m.file_bytes();
  s.hp = MoeHParams::read(m);
  s.n_tensors = static_cast<int64_t>(m.tensors().size());
  int max_layer = -1;
  const int64_t n_layer = s.hp.n_layer.value_or(-1);
  for (const auto& t : m.tensors()) {
    const int l = tensor_layer(t.name);
    // Layer numbers must lie inside block_count (or a sane bound when it is absent).
    if (l >= 0 && (n_layer >= 0 ? l >= n_layer : l >= 65536))
      fail("{}: tensor '{}' names layer {} but the model has {} layers", m.path(), t.name, l, n_layer >= 0 ? std::to_string(n_layer) : "at most 65536");
    max_layer = std::max(max_layer, l);
  }
  s.layers.resize(static_cast<size_t>(max_layer + 1));
  for (int l = 0; l <= max_layer; ++l) s.layers[l].layer = l;

  uint64_t embd_bytes = 0, embd_row = 0;
  bool has_output = false;
  for (const auto& t : m.tensors()) {
    auto& tu = s.types[ggml_type_name(t.type)];
    uint64_t values = 1;
    for (int d = 0; d < t.n_dims; ++d) values *= t.ne[d];
    tu.tensors++;
    tu.bytes += t.nbytes;
    tu.values += values;
    const int l = tensor_layer(t.name);
    if (is_routed_expert_tensor(t.name)) {
      tu.routed_tensors++;
      tu.routed_bytes += t.nbytes;
      tu.routed_values += values;
      STRATA_CHECK(l >= 0, "{}: routed expert tensor '{}' is not in a blk.N layer", m.path(), t.name);
      const int64_t ne = static_cast<int64_t>(t.ne[t.n_dims - 1]);
      auto& lb = s.layers[l];
      if (lb.n_expert == 0) lb.n_expert = ne;
      STRATA_CHECK(lb.n_expert == ne, "{}: tensor '{}' has {} experts but other expert tensors of layer {} have {}", m.path(), t.name, ne, l,
                   lb.n_expert);
      if (s.hp.n_expert)
        STRATA_CHECK(ne == *s.hp.n_expert, "{}: tensor '{}' has {} experts but {}.expert_count is {}", m.path(), t.name, ne, s.hp.arch,
                     *s.hp.n_expert);
      lb.routed_bytes += t.nbytes;
      lb.expert_bytes += t.nbytes / static_cast<uint64_t>(ne);
      s.routed_bytes += t.nbytes;
    } else {
      s.dense_bytes += t.nbytes;
      if (l >= 0) s.layers[l].dense_bytes += t.nbytes;
      if (t.name == tn::kTokenEmbd) {
        embd_bytes = t.nbytes;
        embd_row = t.row_bytes();
      }
      if (t.name == tn::kOutput) has_output = true;
    }
  }
  const int64_t top_k = s.hp.n_expert_used.value_or(0);
  s.touched_per_token = s.dense_bytes;
  // Only one embedding row is read per token, unless the output head is tied to it.
  if (has_output && embd_bytes) s.touched_per_token -= embd_bytes - embd_row;
  s.touched_dense = s.touched_per_token;
  for (const auto& lb : s.layers) {
    s.n_routed_experts += lb.n_expert;
    s.touched_routed += static_cast<uint64_t>(std::min<int64_t>(top_k, lb.n_expert)) * lb.expert_bytes;
  }
  s.touched_per_token += s.touched_routed;
  return s;
}

BudgetFit BudgetFit::plan(const ModelSummary& s, uint64_t budget) {
  BudgetFit b;
  b.budget = budget;
  b.dense_bytes = s.dense_bytes;
  b.experts_total = s.n_routed_experts;
  b.dense_fits = budget >= s.dense_bytes;
  b.expert_cache_bytes = b.dense_fits ? budget - s.dense_bytes : 0;
  b.all_fits = b.dense_fits && b.expert_cache_bytes >= s.routed_bytes;
  if (s.routed_bytes == 0) {
    b.routed_fraction = 1.0;
    return b;
  }
  if (b.all_fits) {
    b.experts_fit = b.experts_total;
    b.routed_fraction = 1.0;
  } else {
    const uint64_t avg = s.routed_bytes / static_cast<uint64_t>(std::max<int64_t>(1, s.n_routed_experts));
    b.experts_fit = avg ? static_cast<int64_t>(b.expert_cache_bytes / avg) : 0;
    b.routed_fraction = static_cast<double>(b.expert_cache_bytes) / static_cast<double>(s.routed_bytes);
  }
  return b;
}

template <typename T>
static void put_opt(nlohmann::json& j, const char* k, const std::optional<T>& v) {
  if (v) j[k] = *v;
}

nlohmann::json ModelSummary::to_json() const {
  using nlohmann::json;
  json h;
  h["architecture"] = hp.arch;
  h["name"] = hp.name;
  put_opt(h, "vocab_size", hp.n_vocab);
  put_opt(h, "context_length", hp.n_ctx_train);
  put_opt(h, "embedding_length", hp.n_embd);
  put_opt(h, "block_count", hp.n_layer);
  put_opt(h, "head_count", hp.n_head);
  put_opt(h, "head_count_kv", hp.n_head_kv);
  put_opt(h, "key_length", hp.head_dim_k);
  put_opt(h, "value_length", hp.head_dim_v);
  put_opt(h, "feed_forward_length", hp.n_ff);
  put_opt(h, "expert_feed_forward_length", hp.n_ff_exp);
  put_opt(h, "expert_shared_feed_forward_length", hp.n_ff_shexp);
  put_opt(h, "expert_count", hp.n_expert);
  put_opt(h, "expert_used_count", hp.n_expert_used);
  put_opt(h, "expert_shared_count", hp.n_expert_shared);
  put_opt(h, "leading_dense_block_count", hp.n_leading_dense);
  put_opt(h, "expert_group_count", hp.n_expert_groups);
  put_opt(h, "expert_group_used_count", hp.n_expert_groups_used);
  put_opt(h, "expert_gating_func", hp.expert_gating_func);
  put_opt(h, "expert_weights_scale", hp.expert_weights_scale);
  put_opt(h, "expert_weights_norm", hp.expert_weights_norm);
  put_opt(h, "q_lora_rank", hp.q_lora_rank);
  put_opt(h, "kv_lora_rank", hp.kv_lora_rank);
  put_opt(h, "rope_dimension_count", hp.rope_dim);
  put_opt(h, "rope_freq_base", hp.rope_freq_base);
  put_opt(h, "rope_scaling_type", hp.rope_scaling_type);
  put_opt(h, "rope_scaling_factor", hp.rope_scaling_factor);
  put_opt(h, "rope_scaling_original_context_length", hp.rope_scaling_orig_ctx);
  put_opt(h, "sliding_window", hp.sliding_window);
  put_opt(h, "hash_layer_count", hp.hash_layer_count);
  put_opt(h, "hyper_connection_count", hp.hyper_connection_count);
  put_opt(h, "nextn_predict_layers", hp.nextn_predict_layers);
  put_opt(h, "indexer_head_count", hp.indexer_heads);
  put_opt(h, "indexer_key_length", hp.indexer_dim);
  put_opt(h, "indexer_top_k", hp.indexer_top_k);
  if (!hp.compress_ratios.empty()) h["compress_ratios"] = hp.compress_ratios;

  json j;
  j["path"] = path;
  j["file_bytes"] = file_bytes;
  j["hparams"] = h;
  j["tensor_count"] = n_tensors;
  json types_j = json::object();
  for (const auto& [name, tu] : types)
    types_j[name] = {{"tensors", tu.tensors},
                     {"bytes", tu.bytes},
                     {"values", tu.values},
                     {"dense_tensors", tu.tensors - tu.routed_tensors},
                     {"dense_bytes", tu.bytes - tu.routed_bytes},
                     {"routed_tensors", tu.routed_tensors},
                     {"routed_bytes", tu.routed_bytes},
                     {"bits_per_weight", tu.values ? 8.0 * static_cast<double>(tu.bytes) / static_cast<double>(tu.values) : 0.0}};
  j["types"] = types_j;
  j["dense_bytes"] = dense_bytes;
  j["routed_expert_bytes"] = routed_bytes;
  j["routed_expert_count"] = n_routed_experts;
  j["bytes_touched_per_token"] = touched_per_token;
  j["bytes_touched_per_token_dense"] = touched_dense;
  j["bytes_touched_per_token_routed"] = touched_routed;
  json layers_j = json::array();
  for (const auto& lb : layers)
    layers_j.push_back({{"layer", lb.layer}, {"n_expert", lb.n_expert}, {"dense_bytes", lb.dense_bytes}, {"routed_bytes", lb.routed_bytes},
                        {"expert_bytes", lb.expert_bytes}});
  j["layers"] = layers_j;
  return j;
}

nlohmann::json BudgetFit::to_json() const {
  return {{"budget_bytes", budget},           {"dense_bytes", dense_bytes}, {"expert_cache_bytes", expert_cache_bytes},
          {"experts_fit", experts_fit},       {"experts_total", experts_total}, {"routed_fraction", routed_fraction},
          {"dense_fits", dense_fits},         {"all_fits", all_fits}};
}

}  // namespace strata
