#include "experts/expert_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata {

ExpertStats::ExpertStats(const CacheShape& shape, double half_life_tokens)
    : n_layer_(shape.n_layer), n_expert_(shape.n_expert), half_life_(half_life_tokens), cells_(shape.size()) {}

void ExpertStats::record(ExpertKey k, bool hit, uint64_t bytes_fetched) {
  ExpertCell& c = cells_[k.layer * n_expert_ + k.expert];
  ++c.accesses;
  ++accesses_;
  c.heat += 1.0;
  if (hit) {
    ++c.hits;
    ++hits_;
  } else {
    ++c.misses;
    c.bytes_fetched += bytes_fetched;
    bytes_fetched_ += bytes_fetched;
  }
}

void ExpertStats::decay_to(uint64_t now) {
  if (now <= clock_) return;
  if (half_life_ > 0) {
    const double f = std::exp2(-double(now - clock_) / half_life_);
    for (auto& c : cells_) c.heat *= f;
  }
  clock_ = now;
}

void ExpertStats::clear() {
  std::fill(cells_.begin(), cells_.end(), ExpertCell{});
  accesses_ = hits_ = bytes_fetched_ = 0;
  clock_ = 0;
}

double ExpertStats::layer_hit_rate(int layer) const {
  uint64_t a = 0, h = 0;
  for (int e = 0; e < n_expert_; ++e) {
    a += cells_[layer * n_expert_ + e].accesses;
    h += cells_[layer * n_expert_ + e].hits;
  }
  return a ? double(h) / double(a) : 0.0;
}

std::vector<ExpertKey> ExpertStats::hottest(size_t n) const {
  std::vector<size_t> idx(cells_.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](size_t a, size_t b) {
    if (cells_[a].heat != cells_[b].heat) return cells_[a].heat > cells_[b].heat;
    return a < b;
  });
  std::vector<ExpertKey> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = {int32_t(idx[i] / n_expert_), int32_t(idx[i] % n_expert_)};
  return out;
}

}  // namespace strata
