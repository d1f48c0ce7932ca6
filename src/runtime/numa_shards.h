#pragma once
// --numa shard (issue 38 item 5): expert parallelism between the NUMA nodes of one machine, in one
// process. Node 0 is the engine's: its thread pool is pinned to node 0's CPUs, the dense weights
// are bound to node 0's memory (not replicated per node), and its expert tier computes node 0's
// share of each MoE layer's routed experts. Every other node gets a shard: a thread and a thread
// pool pinned to its CPUs, its own expert cache (its share of the --ram-budget's expert part, the
// arena bound to its memory) read through its own I/O queue (an ExpertStore and backend of its
// own on the same file), or, when the experts are resident, views of the mapped file.
// The plan is expert parallelism's (runtime/ep_plan.h) with one rank per node. Per MoE layer,
// claim() hands each shard the (token, slot) pairs routed to its experts and wakes its thread,
// which computes them with Model::run_routed (the code the MPI ranks run) while node 0 computes
// its own; finish() waits on a condition variable and writes each pair's weighted row into its
// slot. The slots are summed in selection order, so the output is bit for bit one node's.
// --numa interleave: the dense weights' pages interleaved over the nodes (nothing sharded).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/numa_topology.h"
#include "model/forward.h"
#include "runtime/ep_plan.h"

namespace strata {

class Engine;
class Model;

enum class NumaMode : uint8_t { Off, Shard, Interleave };
// "off" | "shard" | "interleave"; throws naming --numa.
NumaMode parse_numa_mode(const std::string& s);

// One node's figures (node 0: the engine's expert tier and passes).
struct NumaNodeStats {
  int node = 0;
  int experts = 0;              // routed experts it owns (all layers)
  uint64_t expert_bytes = 0;    // their bytes
  uint64_t cache_bytes = 0;     // its expert cache's arena (0: resident)
  uint64_t hits = 0, misses = 0, bytes_read = 0;
  uint64_t jobs = 0, pairs = 0; // shards: MoE-layer jobs and (token, slot) rows computed
  double compute_s = 0;         // node 0: the passes less waits for shards; shards: in run_routed
  double io_wait_s = 0;         // waiting for expert reads
  double wait_s = 0;            // node 0: waiting for shards after its own experts were done
};

// The dense weights' ranges of the model's mapping (everything but routed experts), each bound to
// node 0's memory (shard) or interleaved over the nodes' (interleave). Returns the bytes covered.
uint64_t numa_place_dense(const Model& model, const NumaTopology& topo, NumaMode mode);

class NumaShards final : public ExpertOffload {
 public:
  // Starts a shard for each node but 0 (its thread, pool, cache) and routes the engine's MoE layers
  // through them; pins the engine's threads to node 0. plan: plan_for_model(model, topo.size(), ...),
  // the one the engine's tier share was taken from (share_of_node(plan, 0)). Throws when a binding
  // or a shard's start fails.
  NumaShards(Engine& eng, NumaTopology topo, EpPlan plan);
  ~NumaShards() override;
  NumaShards(const NumaShards&) = delete;
  NumaShards& operator=(const NumaShards&) = delete;

  void claim(FwdCtx& c, int layer, const ExpertGroups& g, uint8_t* away) override;
  void finish(FwdCtx& c, int layer, const ExpertGroups& g, const uint8_t* away) override;
  bool holds(int layer, int e) const override;

  const NumaTopology& topology() const { return topo_; }
  const EpPlan& plan() const { return plan_; }
  // Node `node`'s expert cache arena (nullptr: node 0, or its experts are resident), for tests.
  const uint8_t* arena(int node) const;
  uint64_t arena_bytes(int node) const;
  std::vector<NumaNodeStats> stats() const;
  // The start-up lines: the topology, then per node its CPUs, experts and budget.
  std::string describe() const;
  // The end-of-run lines: per node experts, hit rate, bytes read, compute and waits.
  std::string report() const;

  struct Shard;

 private:
  Engine& eng_;
  NumaTopology topo_;
  EpPlan plan_;
  std::vector<std::unique_ptr<Shard>> shards_;  // [nodes - 1]: node r is shards_[r - 1]
  double wait_s_ = 0;
};

// A node's share of the plan's expert bytes (0..1]; 1 with one node.
double share_of_node(const EpPlan& plan, int node);

}  // namespace strata
