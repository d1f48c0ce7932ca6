#pragma once
// ExpertStats: the heat matrix of the expert tier, one cell per (layer, expert): accesses,
// hits, misses, bytes fetched, and an exponentially decayed access count ("heat") that the
// pinned-hot-set policy and reports rank by.
#include <cstdint>
#include <vector>

#include "experts/cache_policy.h"

namespace strata {

struct ExpertCell {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_fetched = 0;  // bytes read on misses (admitted or transient)
  double heat = 0;             // decayed access count, as of the last decay_to()
};

class ExpertStats {
 public:
  ExpertStats() = default;
  // half_life_tokens <= 0: heat never decays.
  explicit ExpertStats(const CacheShape& shape, double half_life_tokens = 0);

  void record(ExpertKey k, bool hit, uint64_t bytes_fetched);
  // Advances the heat clock to token `now`: every heat is multiplied by 2^-(dt/half_life).
  void decay_to(uint64_t now);
  void clear();

  const ExpertCell& cell(ExpertKey k) const { return cells_[k.layer * n_expert_ + k.expert]; }
  int n_layer() const { return n_layer_; }
  int n_expert() const { return n_expert_; }
  uint64_t accesses() const { return accesses_; }
  uint64_t hits() const { return hits_; }
  uint64_t bytes_fetched() const { return bytes_fetched_; }
  double hit_rate() const { return accesses_ ? double(hits_) / double(accesses_) : 0.0; }
  double layer_hit_rate(int layer) const;
  // The `n` hottest experts, hottest first (ties by lower layer, then expert).
  std::vector<ExpertKey> hottest(size_t n) const;

 private:
  int n_layer_ = 0, n_expert_ = 0;
  double half_life_ = 0;
  uint64_t clock_ = 0;
  std::vector<ExpertCell> cells_;  // [n_layer * n_expert]
  uint64_t accesses_ = 0, hits_ = 0, bytes_fetched_ = 0;
};

}  // namespace strata
