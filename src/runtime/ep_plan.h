#pragma once
// Expert parallelism's shard plan (runtime/expert_parallel.h): which rank computes each routed
// expert of each MoE layer. Deterministic: every rank computes the same plan from the same file
// (and the same usage statistics), and `strata inspect --ep R` prints it without MPI.
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_store.h"

namespace strata {

struct WarmStats;
class Model;

struct EpPlan {
  int ranks = 1;
  int n_layer = 0;   // trunk layers (NextN blocks stay on rank 0)
  int n_expert = 0;  // the most routed experts of a layer
  bool by_traffic = false;  // usage statistics weighted the plan (else every expert counts the same)
  std::vector<int16_t> owner;  // [n_layer * n_expert] rank that computes it; -1: no such expert
  std::vector<uint8_t> replica;  // [n_layer * n_expert] 1: on every rank (--ep-replicate), computed by rank 0
  std::vector<uint64_t> bytes;   // [ranks] expert bytes each rank holds (replicas on every rank)
  std::vector<double> traffic;   // [ranks] share of routed (token, expert) pairs expected on each rank (0..1)
  std::vector<int> experts;      // [ranks] experts each rank owns (replicas counted on rank 0)
  std::vector<double> share;     // [n_layer * n_expert] each expert's share of its layer's routed choices (the statistics'; 1/n without)

  double share_of(int layer, int e) const { return share[static_cast<size_t>(layer) * n_expert + e]; }

  int owner_of(int layer, int e) const { return owner[static_cast<size_t>(layer) * n_expert + e]; }
  bool is_replica(int layer, int e) const { return replica[static_cast<size_t>(layer) * n_expert + e] != 0; }
  // One line per rank and a summary, for the start-up report and inspect --ep.
  std::string describe() const;
  // How an owner other than 0 (an MPI rank, a NUMA node) claims layer's chosen experts: each one
  // it owns is marked away (ExpertOffload::kAway) and its grouped (token, slot) pairs q go to
  // pair(owner, q). counts/starts: ExpertGroups' per-expert runs (model/forward.h).
  template <typename Pair>
  void claim_remote(int layer, int n_expert_layer, const int* counts, const int* starts, uint8_t* away, uint8_t away_mark, Pair&& pair) const {
    for (int e = 0; e < n_expert_layer; ++e) {
      if (!counts[e]) continue;
      const int o = owner_of(layer, e);
      if (o <= 0) continue;
      away[e] = away_mark;
      for (int q = starts[e]; q < starts[e] + counts[e]; ++q) pair(o, q);
    }
  }
};

// Per MoE layer: the hottest ceil(replicate * n_expert) experts (by `stats`, else none) replicated
// and computed by rank 0; the others, heaviest first (weight = the statistics' traffic, else 1; ties:
// lower expert id), each to the rank with the least traffic so far in this layer (ties: fewer bytes
// over all layers so far, then lower rank). layout: the model's expert layout (model/expert_layout.h);
// stats: nullptr or warm-start statistics of the same model ([layout.layers.size() * n_expert]).
EpPlan plan_expert_parallel(const ExpertLayout& layout, int n_trunk_layers, int ranks, double replicate, const WarmStats* stats);
// The plan of a loaded model, with the warm-start statistics in stats_dir ("": the default
// directory) when there are some for it.
EpPlan plan_for_model(const Model& m, int ranks, double replicate, const std::string& stats_dir);

}  // namespace strata
