#pragma once
// DeepSeek-V2/V3 (`deepseek2`) configuration and weights, shared with DeepSeek-V3.2
// (`deepseek32`), whose files carry the same keys under their own prefix and the same tensors
// plus the lightning indexer's.
#include "model/arch/common.h"

namespace strata::arch {

// Reads the deepseek2 configuration under r.prefix: MLA (absorbed attn_k_b/attn_v_b layout, or
// attn_kv_b without the *_mla keys), leading dense blocks, shared experts, router, YaRN.
void deepseek2_read_config(const GgufModel& m, const MetaReader& r, ModelConfig& cfg);
// Binds the embedding, output head and the deepseek2 tensors of every layer (the caller binds
// its own extras, then checks that every tensor was used).
void deepseek2_bind_layers(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w);

}  // namespace strata::arch
