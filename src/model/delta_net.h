#pragma once
// Gated DeltaNet (Qwen3.5's linear-attention layers): the per-sequence state that replaces their
// KV rows, kept beside the KV cache in KvCache::ext(). The block itself is delta_net() (forward.h).
//
// A layer's state for one sequence is the last K-1 projected inputs of its causal convolution and
// one S x S matrix per value head: fixed in size, whatever the position. It summarizes every
// token seen so far and cannot be cut back to an earlier position, so an architecture with these
// layers is not rewindable (ArchDef::rewindable = false): a sequence either continues where its
// state ends or starts again at position 0, which clears the state.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"

namespace strata {

struct DeltaNetState : KvCacheExt {
  struct Layer {
    size_t conv_width = 0;     // (K-1) * C values per sequence
    size_t ssm_width = 0;      // Hv * S * S values per sequence
    std::vector<float> conv;   // [n_seq, K-1, C] previous projected inputs, oldest first
    std::vector<float> ssm;    // [n_seq, Hv, S, S] per value head m[j*S + i] = M[i][j] (j: value dim)
    std::vector<int32_t> pos;  // [n_seq] positions the state has consumed (the next position to come)
    float* conv_of(int seq) { return conv.data() + static_cast<size_t>(seq) * conv_width; }
    float* ssm_of(int seq) { return ssm.data() + static_cast<size_t>(seq) * ssm_width; }
  };
  std::vector<int> slot;        // [n_layer] index into layers, -1 for a layer without this state
  std::vector<Layer> layers;
  std::vector<uint8_t> seen;    // [n_seq] scratch: sequence already met in the current pass

  uint64_t bytes() const override;
  // Slot files: per DeltaNet layer, the sequence's convolution inputs, its matrices and its position.
  const char* slot_kind() const override { return "deltanet"; }
  void seq_regions(int seq, int n, std::vector<std::span<uint8_t>>& out) override;
  // Bytes of one sequence's state over all layers (independent of its length).
  uint64_t seq_bytes() const;
};

// ArchDef::make_state for architectures with DeltaNet layers: zeroed state for every sequence slot.
std::unique_ptr<KvCacheExt> delta_net_make_state(const ModelConfig& cfg, const KvCache& kv, int n_batch, int n_threads);

}  // namespace strata
