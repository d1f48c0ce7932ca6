#include "experts/cache_sim.h"

#include <limits>

#include "core/error.h"
#include "experts/cache_state.h"

namespace strata {

CacheShape trace_shape(const RoutingTrace& t, uint64_t expert_bytes) {
  return CacheShape::uniform(t.n_layer, t.n_expert, expert_bytes ? expert_bytes : 1);
}

namespace {

// Calls on_token(clock) at every token change and on_event(layer, experts) per selected event.
template <typename OnRun, typename OnToken, typename OnEvent>
void replay(const RoutingTrace& t, PhaseFilter f, OnRun&& on_run, OnToken&& on_token, OnEvent&& on_event) {
  uint64_t clock = 0;
  for (const auto& r : t.runs) {
    on_run();
    bool first = true;
    uint32_t tok = 0;
    Phase ph = Phase::decode;
    for (const auto& e : r.events) {
      if (!phase_selected(e.phase, f)) continue;
      if (first || e.token != tok || e.phase != ph) {
        first = false;
        tok = e.token;
        ph = e.phase;
        on_token(++clock);
      }
      on_event(e.layer, r.experts_of(e));
    }
  }
}

class Belady : public CachePolicy {
 public:
  explicit Belady(std::vector<uint64_t> next_use) : future_(std::move(next_use)) {}
  std::string name() const override { return "belady"; }
  void reset(const CacheShape& shape, const CacheBudget&) override {
    shape_ = shape;
    next_.assign(shape.size(), kNever);
  }
  void clear_resident(const CacheShape&, const CacheBudget&) override {}  // the cursor runs on
  void on_access(ExpertKey k, uint64_t) override { advance(k); }
  void on_miss(ExpertKey k, uint64_t) override { advance(k); }
  void on_insert(ExpertKey, uint64_t) override {}
  void on_evict(ExpertKey) override {}
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    // Farthest next use = smallest negated position.
    return min_score(c, [&](ExpertKey k) { return ~next_[shape_.index(k)]; });
  }

 private:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  void advance(ExpertKey k) {
    STRATA_CHECK(cursor_ < future_.size(), "belady: more accesses than the trace it was built for");
    next_[shape_.index(k)] = future_[cursor_++];
  }
  std::vector<uint64_t> future_;
  size_t cursor_ = 0;
  CacheShape shape_;
  std::vector<uint64_t> next_;  // [n_layer * n_expert] position of the next use
};

}  // namespace

std::unique_ptr<CachePolicy> make_belady(std::vector<uint64_t> next_use) { return std::make_unique<Belady>(std::move(next_use)); }

std::vector<uint64_t> next_uses(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o) {
  std::vector<size_t> keys;  // flat key index per access
  std::vector<size_t> run_end;
  replay(
      t, o.phase, [&] { run_end.push_back(keys.size()); }, [](uint64_t) {},
      [&](int layer, std::span<const int32_t> ex) {
        for (int32_t e : ex) keys.push_back(shape.index({layer, e}));
      });
  run_end.push_back(keys.size());
  std::vector<uint64_t> next(keys.size(), std::numeric_limits<uint64_t>::max());
  std::vector<uint64_t> seen(shape.size());
  // Walk each run backwards, remembering the latest position of every key.
  for (size_t r = run_end.size() - 1; r-- > 0;) {
    std::fill(seen.begin(), seen.end(), std::numeric_limits<uint64_t>::max());
    for (size_t i = run_end[r + 1]; i-- > run_end[r];) {
      next[i] = seen[keys[i]];
      seen[keys[i]] = i;
    }
  }
  return next;
}

SimResult simulate(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o, std::unique_ptr<CachePolicy> policy) {
  STRATA_CHECK(t.n_layer <= shape.n_layer && t.n_expert <= shape.n_expert, "trace needs {}x{} experts, cache shape is {}x{}", t.n_layer,
               t.n_expert, shape.n_layer, shape.n_expert);
  SimResult res;
  res.policy = policy->name();
  res.layer_accesses.assign(shape.n_layer, 0);
  res.layer_hits.assign(shape.n_layer, 0);
  ExpertCacheState cache(shape, o.budget, std::move(policy));
  bool first_run = true;
  replay(
      t, o.phase,
      [&] {
        if (!first_run) cache.clear(o.keep_learned);
        first_run = false;
      },
      [&](uint64_t clock) { cache.begin_token(clock); },
      [&](int layer, std::span<const int32_t> ex) {
        cache.set_needed(layer, ex);
        for (int32_t e : ex) {
          const ExpertKey k{layer, e};
          const bool hit = cache.access(k);
          ++res.accesses;
          ++res.layer_accesses[layer];
          res.bytes_accessed += shape.bytes(k);
          if (hit) {
            ++res.hits;
            ++res.layer_hits[layer];
          } else {
            res.bytes_fetched += shape.bytes(k);
          }
        }
        cache.clear_needed();
      });
  return res;
}

SimResult simulate(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o, std::string_view policy_spec) {
  return simulate(t, shape, o, make_policy(policy_spec));
}

SimResult simulate_belady(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o) {
  return simulate(t, shape, o, make_belady(next_uses(t, shape, o)));
}

}  // namespace strata
