#pragma once
// Helpers shared by the architecture files.
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace strata::arch {

// Reads n_vocab / n_embd / n_layer / context / rms eps and sizes cfg.layers.
void read_common(const GgufModel& m, const MetaReader& r, ModelConfig& cfg);
// token_embd, output_norm, output (tied to token_embd when absent).
void bind_common(const WeightBinder& b, const ModelConfig& cfg, ModelWeights& w);
// Grouped-query attention settings shared by the Llama-like architectures: head counts and
// dims (validated), kq scale 1/sqrt(head_dim_k), RoPE of `style` with base and scaling.
void read_gqa(const MetaReader& r, const ModelConfig& cfg, RopeStyle style, LayerConfig& l);
// Gating function from "<arch>.expert_gating_func" (llama.cpp numbering), `def` when absent.
GatingFunc read_gating(const MetaReader& r, GatingFunc def);
// Routed experts + router of a MoE layer (gate/up/down_exps, ffn_gate_inp).
void bind_moe(const WeightBinder& b, const ModelConfig& cfg, int l, LayerWeights& lw);
// The same for block `il` of the file with configuration `lc` (a block outside cfg.layers: NextN).
void bind_moe(const WeightBinder& b, const ModelConfig& cfg, const LayerConfig& lc, int il, LayerWeights& lw);

}  // namespace strata::arch
