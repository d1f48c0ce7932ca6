#include "experts/tier_sim.h"

#include <algorithm>

#include "core/error.h"
#include "experts/trace_replay.h"

namespace strata {

std::string_view tier_mode_name(TierMode m) {
  switch (m) {
    case TierMode::exclusive: return "exclusive";
    case TierMode::exclusive_demote: return "exclusive-demote";
    case TierMode::inclusive: return "inclusive";
  }
  return "?";
}

TierMode parse_tier_mode(std::string_view s) {
  for (TierMode m : {TierMode::exclusive, TierMode::exclusive_demote, TierMode::inclusive})
    if (s == tier_mode_name(m)) return m;
  fail("tiers '{}': expected exclusive, exclusive-demote or inclusive", s);
}

namespace {

CacheBudget level_budget(uint64_t bytes, bool per_layer) {
  CacheBudget b;
  b.bytes = bytes;
  b.per_layer = per_layer;
  return b;
}

// The two levels and the counts of one replay (the access rules are tier_sim.h's).
class TierReplay {
 public:
  TierReplay(const CacheShape& shape, const TierSimOptions& o, std::string_view spec)
      : shape_(shape),
        o_(o),
        vram_(shape, level_budget(o.vram_bytes, o.per_layer), make_policy(spec)),
        ram_(shape, level_budget(o.ram_bytes, o.per_layer), make_policy(spec)) {
    res_.policy = std::string(spec);
    res_.mode = o.mode;
  }
  void begin_run() {
    vram_.clear(false);
    ram_.clear(false);
  }
  void begin_step(uint64_t clock) {
    vram_.begin_token(clock);
    ram_.begin_token(clock);
    ++res_.steps;
  }
  void event(int layer, std::span<const int32_t> experts) {
    vram_.set_needed(layer, experts);
    ram_.set_needed(layer, experts);
    for (int32_t e : experts) {
      const ExpertKey k{layer, e};
      ++res_.accesses;
      if (o_.mode == TierMode::inclusive)
        access_inclusive(k);
      else
        access_exclusive(k);
    }
    if (o_.after_event) o_.after_event(layer, experts, vram_, ram_);
  }
  TierResult finish() {
    vram_.clear_needed();
    ram_.clear_needed();
    return res_;
  }

 private:
  void ssd_read(ExpertKey k, bool kept) {
    ++res_.ssd_reads;
    res_.bytes_ssd += shape_.bytes(k);
    if (!kept) ++res_.transient;
  }
  void upload(ExpertKey k) {
    ++res_.uploads;
    res_.bytes_uploaded += shape_.bytes(k);
  }
  void access_inclusive(ExpertKey k) {
    Admission a;
    const bool ram_hit = ram_.access(k, &a);
    for (ExpertKey v : a.evicted) vram_.drop(v);  // VRAM stays a subset of RAM
    bool vram_hit = false;
    if (ram_.resident(k)) {
      Admission b;
      vram_hit = vram_.access(k, &b);
      if (b.admitted) upload(k);
    }
    if (vram_hit)
      ++res_.vram_hits;
    else if (ram_hit)
      ++res_.ram_hits;
    else
      ssd_read(k, a.admitted);
  }
  void access_exclusive(ExpertKey k) {
    if (vram_.resident(k)) {
      vram_.access(k);
      ++res_.vram_hits;
      return;
    }
    Admission r;
    if (!ram_.access(k, &r)) {  // a miss is read into RAM (computed on the CPU)
      ssd_read(k, r.admitted);
      return;
    }
    ++res_.ram_hits;
    Admission a;
    vram_.access(k, &a);  // reused: VRAM's policy decides the promotion
    if (!a.admitted) return;
    upload(k);
    ram_.drop(k);  // promoted: gives up its RAM slot
    // The victims are dropped, or moved into RAM (evicting RAM's victims, which are dropped).
    if (o_.mode == TierMode::exclusive_demote)
      for (ExpertKey v : a.evicted) ram_.place(v);
  }

  const CacheShape& shape_;
  const TierSimOptions& o_;
  ExpertCacheState vram_, ram_;
  TierResult res_;
};

void check_tier_policy(std::string_view spec) {
  STRATA_CHECK(!spec.starts_with("belady"), "cachesim --vram: policy '{}' is a one-level reference; the tiered table prints its own bounds", spec);
  STRATA_CHECK(!spec.starts_with("predict-pf"), "cachesim --vram: policy '{}' reads ahead, which the tiered replay does not model (use predict)",
               spec);
}

}  // namespace

TierResult simulate_tiers(const RoutingTrace& t, const CacheShape& shape, const TierSimOptions& o, std::string_view policy_spec) {
  STRATA_CHECK(t.n_layer <= shape.n_layer && t.n_expert <= shape.n_expert, "trace needs {}x{} experts, cache shape is {}x{}", t.n_layer,
               t.n_expert, shape.n_layer, shape.n_expert);
  check_tier_policy(policy_spec);
  TierReplay r(shape, o, policy_spec);
  replay_trace(
      t, o.phase, [&] { r.begin_run(); }, [&](uint64_t clock) { r.begin_step(clock); },
      [&](int layer, std::span<const int32_t> ex, bool predicted) {
        if (!predicted) r.event(layer, ex);
      });
  return r.finish();
}

TierBounds tier_bounds(const RoutingTrace& t, const CacheShape& shape, const TierSimOptions& o) {
  SimOptions so;
  so.phase = o.phase;
  so.budget.per_layer = o.per_layer;
  const bool inclusive = o.mode == TierMode::inclusive;
  TierBounds b;
  so.budget.bytes = inclusive ? o.ram_bytes : o.vram_bytes + o.ram_bytes;
  const SimResult outer = simulate(t, shape, so, "belady-bypass");
  b.min_ssd_reads = outer.accesses - outer.hits;
  b.bytes_min_ssd = outer.bytes_fetched;
  so.budget.bytes = inclusive ? std::min(o.vram_bytes, o.ram_bytes) : o.vram_bytes;
  b.max_vram_hits = simulate(t, shape, so, "belady-bypass").hits;
  return b;
}

}  // namespace strata
