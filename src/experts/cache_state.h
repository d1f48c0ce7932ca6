#pragma once
// ExpertCacheState: the bookkeeping of the expert cache that is the same for every policy.
// Which experts are resident, bytes used against the budget (one pool per size class, or one
// pool per layer), pin counts, and the experts the current token needs. It owns the policy and
// calls it in the order documented in cache_policy.h. The real cache (slots, async reads)
// sits on top: on a miss it calls admit(), frees the slots of the returned victims, and reads
// the expert into a slot if admitted or into a transient buffer otherwise.
#include <cstdint>
#include <memory>
#include <vector>

#include "experts/cache_policy.h"
#include "experts/expert_stats.h"

namespace strata {

struct Admission {
  bool admitted = false;            // false: use a transient buffer, do not keep
  std::vector<ExpertKey> evicted;   // victims, in eviction order (only when admitted)
};

class ExpertCacheState {
 public:
  ExpertCacheState(CacheShape shape, CacheBudget budget, std::unique_ptr<CachePolicy> policy);

  const CacheShape& shape() const { return shape_; }
  CachePolicy& policy() { return *policy_; }
  const ExpertStats& stats() const { return stats_; }
  ExpertStats& stats() { return stats_; }

  bool resident(ExpertKey k) const { return resident_[shape_.index(k)] != 0; }
  uint64_t used_bytes() const { return used_total_; }
  // The pool `k` draws from: its layer's when per-layer, else the global one.
  uint64_t pool_capacity(int layer) const;
  uint64_t pool_used(int layer) const;
  size_t resident_count() const { return n_resident_; }

  // Starts token `now` (token clock, monotone).
  void begin_token(uint64_t now);
  // The router chose `experts` for `layer`: they are protected until the next set_needed or
  // clear_needed, and the policy gets the hint.
  void set_needed(int layer, std::span<const int32_t> experts);
  void clear_needed();
  void pin(ExpertKey k);
  void unpin(ExpertKey k);
  bool pinned(ExpertKey k) const { return pins_[shape_.index(k)] > 0; }

  // One use of `k`: returns true on a hit (policy.on_access), else handles the miss through
  // admit() and returns false; `adm` (optional) receives the admission.
  bool access(ExpertKey k, Admission* adm = nullptr);
  // The miss path alone: on_miss, admission, eviction, insertion.
  // predicted: the expert is read ahead because the next layers' routers chose it on the current
  // hidden state, stronger evidence than the policy's history, so its admission rule is skipped.
  Admission admit(ExpertKey k, bool predicted = false);
  // A read ahead of demand (CachePolicy::prefetch_wanted): loads absent k into free space, or in
  // place of the policy's prefetch_victim choices. Returns whether k was loaded; `adm`
  // (optional) receives the victims. No on_miss/on_access: it is not a use.
  bool prefetch(ExpertKey k, Admission* adm = nullptr);
  // The engine's lookahead read (ExpertCache::prefetch): absent k is admitted as predicted,
  // evicting the policy's victims when its pool is full. Returns whether k was loaded.
  bool prefetch_predicted(ExpertKey k, Admission* adm = nullptr);
  // The lookahead predicted `experts` for a later `layer` of the current token, before they are
  // read ahead with prefetch_predicted (and the policy gets hint_prefetch). Until that layer
  // routes (set_needed) in this token, they are "awaited": evicted only by a demand miss that
  // finds no other room, never by another read ahead. Without this a read ahead was often
  // evicted before its layer ran (on a recorded Qwen3-30B-A3B trace, 16 % of them at a 10 %
  // cache), a wasted read and a miss.
  void hint_predicted(int layer, std::span<const int32_t> experts);
  bool awaited(ExpertKey k) const { return awaited(shape_.index(k)); }

  // Low insertion priority: resident k becomes the first victim of the next eviction from its pool,
  // before whatever the policy would choose, until it is used again (a hit) or evicted.
  // (Speculative decoding: experts read only for drafts that were rejected.)
  void demote(ExpertKey k);
  // Removes resident k without asking the policy for a victim (it gets on_evict): the expert moved
  // to or left with another level (tier_sim.h). No effect when k is absent.
  void drop(ExpertKey k);
  // Moves absent k in from another level (tier_sim.h: a VRAM victim demoted into RAM): as a read
  // ahead of the lookahead (no admission rule, the policy's victims make room) but not a use
  // (no on_miss). Returns whether k is resident afterwards.
  bool place(ExpertKey k, Admission* adm = nullptr);
  bool demoted(ExpertKey k) const { return low_[shape_.index(k)] != 0; }

  // Empties the cache (cold start for a new run). keep_learned: policy keeps its statistics.
  void clear(bool keep_learned);
  // More room: `larger` has the same pools, none smaller. Resident experts and what the policy
  // learned stay.
  void grow(const CacheBudget& larger);
  const CacheBudget& budget() const { return budget_; }

 private:
  bool evictable(size_t idx) const { return resident_[idx] && pins_[idx] == 0 && !needed_[idx]; }
  bool awaited(size_t idx) const {
    return predicted_at_[idx] == now_ + 1 && routed_at_[idx / static_cast<size_t>(shape_.n_expert)] != now_ + 1;
  }
  void evict(ExpertKey k);
  // admit(); `use`: the policy gets on_miss (false: place()).
  Admission admit_impl(ExpertKey k, bool predicted, bool use);
  // Fills candidates_ with the evictable experts of `layer`'s pool (awaited ones only when
  // `with_awaited`); returns their bytes.
  uint64_t collect_candidates(int layer, bool with_awaited = false);

  CacheShape shape_;
  CacheBudget budget_;
  std::unique_ptr<CachePolicy> policy_;
  ExpertStats stats_;
  std::vector<uint64_t> pool_capacity_;  // [n_pools] (see CacheBudget::pool)
  std::vector<uint64_t> pool_used_;      // [n_pools]
  uint64_t used_total_ = 0;
  size_t n_resident_ = 0;
  std::vector<uint8_t> resident_;  // [n_layer * n_expert]
  std::vector<uint8_t> needed_;    // [n_layer * n_expert]
  std::vector<int32_t> pins_;      // [n_layer * n_expert]
  std::vector<uint8_t> low_;       // [n_layer * n_expert] demoted: evicted first
  std::vector<ExpertKey> needed_list_;
  std::vector<uint64_t> predicted_at_;  // [n_layer * n_expert] token + 1 of the latest lookahead prediction (0: never)
  std::vector<uint64_t> routed_at_;     // [n_layer] token + 1 of the layer's latest set_needed (0: never)
  std::vector<ExpertKey> candidates_;  // scratch
  uint64_t now_ = 0;
};

}  // namespace strata
