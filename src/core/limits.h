#pragma once
// Sizes the forward pass keeps in fixed arrays on the stack (the router's per-token tables).
// Model::load checks a model's configuration against them and names the metadata key that
// exceeds one; nothing past load checks them again.
namespace strata {

inline constexpr int kMaxLayers = 4096;       // <arch>.block_count
inline constexpr int kMaxExperts = 1024;      // <arch>.expert_count: routed experts per MoE layer
inline constexpr int kMaxExpertsUsed = 64;    // <arch>.expert_used_count: experts chosen per token
inline constexpr int kMaxExpertGroups = 256;  // <arch>.expert_group_count: groups of group-limited routing
inline constexpr int kMaxHeads = 4096;        // <arch>.attention.head_count
inline constexpr int kMaxHeadDim = 4096;      // <arch>.attention.key_length / value_length

}  // namespace strata
