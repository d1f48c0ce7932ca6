#pragma once
// The model layer's description of where its routed experts live, for the expert tier
// (experts/ knows files and offsets, not model types).
#include "experts/expert_store.h"

namespace strata {

class GgufModel;
struct ModelConfig;
struct ModelWeights;

// One ExpertLayer per layer (n_expert 0 for dense layers) from the bound gate/up/down tensors: the
// trunk's layers, then one per NextN block (layer n_layer + j).
ExpertLayout expert_layout(const GgufModel& m, const ModelConfig& cfg, const ModelWeights& w);

}  // namespace strata
