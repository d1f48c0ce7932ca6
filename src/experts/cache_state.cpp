#include "experts/cache_state.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

ExpertCacheState::ExpertCacheState(CacheShape shape, CacheBudget budget, std::unique_ptr<CachePolicy> policy)
    : shape_(std::move(shape)), budget_(budget), policy_(std::move(policy)), stats_(shape_) {
  STRATA_CHECK(shape_.n_layer > 0 && shape_.n_expert > 0, "expert cache: empty shape {}x{}", shape_.n_layer, shape_.n_expert);
  STRATA_CHECK(int(shape_.expert_bytes.size()) == shape_.n_layer, "expert cache: {} expert sizes for {} layers", shape_.expert_bytes.size(),
               shape_.n_layer);
  STRATA_CHECK(policy_ != nullptr, "expert cache: no policy");
  STRATA_CHECK(budget_.class_of.empty() || int(budget_.class_of.size()) == shape_.n_layer, "expert cache: {} size classes for {} layers",
               budget_.class_of.size(), shape_.n_layer);
  pool_used_.assign(static_cast<size_t>(budget_.n_pools(shape_)), 0);
  pool_capacity_.assign(pool_used_.size(), 0);
  for (int l = 0; l < shape_.n_layer; ++l) pool_capacity_[budget_.pool(l)] = budget_.pool_bytes(shape_, l);
  resident_.assign(shape_.size(), 0);
  needed_.assign(shape_.size(), 0);
  pins_.assign(shape_.size(), 0);
  low_.assign(shape_.size(), 0);
  predicted_at_.assign(shape_.size(), 0);
  routed_at_.assign(static_cast<size_t>(shape_.n_layer), 0);
  policy_->reset(shape_, budget_);
}

void ExpertCacheState::grow(const CacheBudget& larger) {
  STRATA_CHECK(larger.per_layer == budget_.per_layer && larger.class_of == budget_.class_of && larger.n_pools(shape_) == budget_.n_pools(shape_),
               "expert cache: a larger budget must keep the pools");
  std::vector<uint64_t> cap(pool_capacity_.size(), 0);
  for (int l = 0; l < shape_.n_layer; ++l) cap[larger.pool(l)] = larger.pool_bytes(shape_, l);
  for (size_t i = 0; i < cap.size(); ++i)
    STRATA_CHECK(cap[i] >= pool_capacity_[i], "expert cache: pool {} would shrink from {} to {} bytes", i, pool_capacity_[i], cap[i]);
  pool_capacity_ = std::move(cap);
  budget_ = larger;
  policy_->set_budget(budget_);
}

uint64_t ExpertCacheState::pool_capacity(int layer) const { return pool_capacity_[budget_.pool(layer)]; }
uint64_t ExpertCacheState::pool_used(int layer) const { return pool_used_[budget_.pool(layer)]; }

void ExpertCacheState::begin_token(uint64_t now) {
  now_ = now;
  policy_->on_token(now);
}

void ExpertCacheState::set_needed(int layer, std::span<const int32_t> experts) {
  clear_needed();
  for (int32_t e : experts) {
    STRATA_CHECK(layer >= 0 && layer < shape_.n_layer && e >= 0 && e < shape_.n_expert, "expert cache: key ({}, {}) outside {}x{}", layer, e,
                 shape_.n_layer, shape_.n_expert);
    ExpertKey k{layer, e};
    needed_[shape_.index(k)] = 1;
    needed_list_.push_back(k);
  }
  routed_at_[static_cast<size_t>(layer)] = now_ + 1;
  policy_->hint_needed(layer, experts, now_);
}

void ExpertCacheState::hint_predicted(int layer, std::span<const int32_t> experts) {
  for (int32_t e : experts) {
    STRATA_CHECK(layer >= 0 && layer < shape_.n_layer && e >= 0 && e < shape_.n_expert, "expert cache: predicted key ({}, {}) outside {}x{}", layer,
                 e, shape_.n_layer, shape_.n_expert);
    predicted_at_[shape_.index({layer, e})] = now_ + 1;
  }
  policy_->hint_prefetch(layer, experts, now_);
}

void ExpertCacheState::clear_needed() {
  for (ExpertKey k : needed_list_) needed_[shape_.index(k)] = 0;
  needed_list_.clear();
}

void ExpertCacheState::pin(ExpertKey k) { ++pins_[shape_.index(k)]; }
void ExpertCacheState::unpin(ExpertKey k) {
  int32_t& p = pins_[shape_.index(k)];
  STRATA_CHECK(p > 0, "expert cache: unpin of unpinned expert ({}, {})", k.layer, k.expert);
  --p;
}

bool ExpertCacheState::access(ExpertKey k, Admission* adm) {
  if (resident(k)) {
    low_[shape_.index(k)] = 0;
    policy_->on_access(k, now_);
    stats_.record(k, true, 0);
    if (adm) *adm = {};
    return true;
  }
  Admission a = admit(k);
  stats_.record(k, false, shape_.bytes(k));
  if (adm) *adm = std::move(a);
  return false;
}

uint64_t ExpertCacheState::collect_candidates(int layer, bool with_awaited) {
  candidates_.clear();
  uint64_t freeable = 0;
  const int pool = budget_.pool(layer);
  for (int l = 0; l < shape_.n_layer; ++l) {
    if (budget_.pool(l) != pool) continue;
    for (int e = 0; e < shape_.n_expert; ++e) {
      const ExpertKey c{l, e};
      if (!evictable(shape_.index(c)) || (!with_awaited && awaited(shape_.index(c)))) continue;
      candidates_.push_back(c);
      freeable += shape_.bytes(c);
    }
  }
  return freeable;
}

Admission ExpertCacheState::admit(ExpertKey k, bool predicted) { return admit_impl(k, predicted, true); }

bool ExpertCacheState::place(ExpertKey k, Admission* adm) {
  if (adm) *adm = {};
  if (resident(k)) return true;
  Admission a = admit_impl(k, /*predicted=*/true, /*use=*/false);
  const bool placed = a.admitted;
  if (adm) *adm = std::move(a);
  return placed;
}

Admission ExpertCacheState::admit_impl(ExpertKey k, bool predicted, bool use) {
  Admission out;
  if (use) policy_->on_miss(k, now_);
  const uint64_t need = shape_.bytes(k);
  const uint64_t cap = pool_capacity(k.layer);
  const uint64_t used = pool_used(k.layer);
  if (need > cap) return out;
  if (used + need > cap) {
    uint64_t freeable = collect_candidates(k.layer);
    // A demand miss may take an awaited read ahead when nothing else makes room.
    if (!predicted && cap - used + freeable < need) freeable = collect_candidates(k.layer, true);
    // Everything needed now or pinned stays: if that leaves too little room, read transiently.
    if (cap - used + freeable < need) return out;
    if (!predicted && !policy_->should_admit(k, candidates_, now_)) return out;
    while (pool_used(k.layer) + need > cap) {
      auto low = std::find_if(candidates_.begin(), candidates_.end(), [&](ExpertKey c) { return low_[shape_.index(c)] != 0; });
      const ExpertKey v = low != candidates_.end() ? *low : policy_->choose_victim(candidates_, now_);
      auto it = std::find(candidates_.begin(), candidates_.end(), v);
      STRATA_CHECK(it != candidates_.end(), "policy {} chose ({}, {}), not a candidate", policy_->name(), v.layer, v.expert);
      candidates_.erase(it);
      evict(v);
      out.evicted.push_back(v);
    }
  }
  const size_t i = shape_.index(k);
  resident_[i] = 1;
  ++n_resident_;
  used_total_ += need;
  pool_used_[budget_.pool(k.layer)] += need;
  policy_->on_insert(k, now_);
  out.admitted = true;
  return out;
}

bool ExpertCacheState::prefetch(ExpertKey k, Admission* adm) {
  if (adm) *adm = {};
  const size_t i = shape_.index(k);
  if (resident_[i]) return false;
  const uint64_t need = shape_.bytes(k);
  const uint64_t cap = pool_capacity(k.layer);
  if (need > cap) return false;
  while (pool_used(k.layer) + need > cap) {
    if (collect_candidates(k.layer) == 0) return false;
    const std::optional<ExpertKey> v = policy_->prefetch_victim(k, candidates_, now_);
    if (!v) return false;
    STRATA_CHECK(std::find(candidates_.begin(), candidates_.end(), *v) != candidates_.end(), "policy {} chose ({}, {}) for a prefetch, not a candidate",
                 policy_->name(), v->layer, v->expert);
    evict(*v);
    if (adm) adm->evicted.push_back(*v);
  }
  resident_[i] = 1;
  ++n_resident_;
  used_total_ += need;
  pool_used_[budget_.pool(k.layer)] += need;
  policy_->on_insert(k, now_);
  if (adm) adm->admitted = true;
  return true;
}

bool ExpertCacheState::prefetch_predicted(ExpertKey k, Admission* adm) {
  if (adm) *adm = {};
  if (resident_[shape_.index(k)]) return false;
  Admission a = admit(k, /*predicted=*/true);
  const bool loaded = a.admitted;
  if (adm) *adm = std::move(a);
  return loaded;
}

void ExpertCacheState::demote(ExpertKey k) {
  if (resident(k)) low_[shape_.index(k)] = 1;
}

void ExpertCacheState::drop(ExpertKey k) {
  if (resident(k)) evict(k);
}

void ExpertCacheState::evict(ExpertKey k) {
  const size_t i = shape_.index(k);
  resident_[i] = 0;
  low_[i] = 0;
  --n_resident_;
  used_total_ -= shape_.bytes(k);
  pool_used_[budget_.pool(k.layer)] -= shape_.bytes(k);
  policy_->on_evict(k);
}

void ExpertCacheState::clear(bool keep_learned) {
  std::fill(resident_.begin(), resident_.end(), 0);
  std::fill(pins_.begin(), pins_.end(), 0);
  std::fill(low_.begin(), low_.end(), 0);
  std::fill(pool_used_.begin(), pool_used_.end(), 0);
  std::fill(predicted_at_.begin(), predicted_at_.end(), 0);
  std::fill(routed_at_.begin(), routed_at_.end(), 0);
  clear_needed();
  used_total_ = 0;
  n_resident_ = 0;
  if (keep_learned)
    policy_->clear_resident(shape_, budget_);
  else
    policy_->reset(shape_, budget_);
}

}  // namespace strata
