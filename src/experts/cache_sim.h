#pragma once
// Replaying a routing trace through an ExpertCacheState, and Belady's offline optimum.
//
// Replay semantics: every run starts with a cold cache; events in order (token by token, layer
// by layer); each event first marks its experts as needed (they cannot be evicted while the
// event runs), then accesses them in router order, then loads what the policy wants prefetched
// (a prefetched expert that is accessed later counts as a hit; its read counts in prefetches).
// The step clock advances whenever (phase, token) changes in decode; in prefill, when the layer
// goes down: a prompt chunk the engine recorded layer-major is one step, and its rows for one
// layer are one event (the union of their experts, each fetched once for the chunk), while
// token-major prefill rows are one step per token. Events of other phases than `phase` are
// skipped entirely.
//
// Belady (MIN): on each eviction, drop the evictable resident whose next use is farthest in the
// future (never used again first). Every miss is inserted (demand paging, no bypass). With unit
// sizes and one pool this is the optimal hit count for a cache that must hold what it serves.
// "belady-bypass" may also serve a miss without keeping it (when its next use is not sooner than
// the victim's): the optimum for a cache that may bypass, as the predictive policy does, and
// higher than MIN. With different sizes it is only a heuristic (the
// offline problem with sizes is NP-hard): it maximizes neither hits nor bytes saved, because
// evicting one large expert may free what two small ones would. It remains a strong reference,
// computed here with the same rule on bytes: evict farthest-next-use until the new expert fits.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/cache_policy.h"
#include "experts/routing_trace.h"

namespace strata {

struct SimOptions {
  CacheBudget budget;
  PhaseFilter phase = PhaseFilter::decode;
  // Runs start with an empty cache either way; true keeps what the policy learned (a long-lived
  // engine serving several prompts), false resets it too.
  bool keep_learned = false;
  // Policies first learn from one uncounted replay of the whole trace, then the counted replay
  // starts with an empty cache (each run does, keeping the statistics, as with keep_learned):
  // statistics that already know the trace's future, an upper bound
  // on what the same policy can learn online (policy "predict:0", without decay, is then a
  // Markov predictor fitted in-sample). Belady ignores it.
  bool pretrain = false;
  // Replay the trace's lookahead predictions (kind=predict rows) as the engine does: each
  // absent predicted expert is read ahead, evicting the policy's victims. They count in
  // prefetches; Belady ignores them (it stays the demand-only optimum).
  bool replay_predictions = false;
};

struct SimResult {
  std::string policy;
  uint64_t accesses = 0;
  uint64_t hits = 0;
  uint64_t bytes_accessed = 0;
  uint64_t bytes_fetched = 0;     // demand misses
  uint64_t prefetches = 0;        // reads ahead of demand (policies with prefetch_wanted)
  uint64_t prefetches_used = 0;   // ... accessed before being evicted
  uint64_t bytes_prefetched = 0;
  std::vector<uint64_t> layer_accesses, layer_hits;  // [n_layer]
  double hit_rate() const { return accesses ? double(hits) / double(accesses) : 0.0; }
  // All reads (demand misses + prefetches) per access: the I/O a policy costs.
  double reads_per_access() const { return accesses ? double(accesses - hits + prefetches) / double(accesses) : 0.0; }
};

// Steps (decode tokens, prompt chunks) and expert accesses the replay of `t` makes in phase `f`.
struct TraceSteps {
  uint64_t steps = 0, accesses = 0;
};
TraceSteps count_steps(const RoutingTrace& t, PhaseFilter f);

// The shape a trace implies with unit sizes (or `expert_bytes` each when nonzero).
CacheShape trace_shape(const RoutingTrace& t, uint64_t expert_bytes = 0);

SimResult simulate(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o, std::unique_ptr<CachePolicy> policy);
// policy_spec: a make_policy name, or belady[-bypass][:HORIZON_TOKENS] (built from the trace).
SimResult simulate(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o, std::string_view policy_spec);
SimResult simulate_belady(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o);
// Throws strata::Error naming the spec when simulate would not accept it.
void check_policy_spec(std::string_view spec);

// Belady as a CachePolicy, from the future of one replay (next_uses). It must see exactly one
// on_access or on_miss per access, in replay order. horizon_tokens > 0 limits its foresight to
// that many tokens ahead (uses beyond count as never; ties go to LRU): "belady:1" is a perfect
// next-token predictor, the ceiling for any policy that predicts one token ahead.
struct FutureUses {
  std::vector<uint64_t> next;   // [access] position of the next access to the same expert, UINT64_MAX: never
  std::vector<uint64_t> token;  // [access] token clock of the access
};
std::unique_ptr<CachePolicy> make_belady(FutureUses future, int horizon_tokens = 0, bool bypass = false);
// The future of the replay of `t` under `o` (runs are independent: no next use crosses a run).
FutureUses next_uses(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o);

}  // namespace strata
