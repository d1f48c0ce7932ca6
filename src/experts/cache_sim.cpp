#include "experts/cache_sim.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "experts/cache_state.h"
#include "experts/trace_replay.h"

namespace strata {

CacheShape trace_shape(const RoutingTrace& t, uint64_t expert_bytes) {
  return CacheShape::uniform(t.n_layer, t.n_expert, expert_bytes ? expert_bytes : 1);
}

TraceSteps count_steps(const RoutingTrace& t, PhaseFilter f) {
  TraceSteps s;
  replay_trace(
      t, f, [] {}, [&](uint64_t) { ++s.steps; },
      [&](int, std::span<const int32_t> ex, bool predicted) {
        if (!predicted) s.accesses += ex.size();
      });
  return s;
}

namespace {

class Belady : public CachePolicy {
 public:
  Belady(FutureUses f, int horizon, bool bypass) : future_(std::move(f)), horizon_(horizon), bypass_(bypass) {}
  std::string name() const override {
    const char* base = bypass_ ? "belady-bypass" : "belady";
    return horizon_ > 0 ? fmt::format("{}:{}", base, horizon_) : base;
  }
  void reset(const CacheShape& shape, const CacheBudget&) override {
    shape_ = shape;
    next_.assign(shape.size(), kNever);
    last_.assign(shape.size(), 0);
  }
  void on_access(ExpertKey k, uint64_t) override { advance(k); }
  void on_miss(ExpertKey k, uint64_t) override { advance(k); }
  void on_insert(ExpertKey, uint64_t) override {}
  void on_evict(ExpertKey) override {}
  // With bypass, a missed expert whose next use is not sooner than every candidate's is served
  // without being kept (the predictive policy bypasses too).
  bool should_admit(ExpertKey k, std::span<const ExpertKey> c, uint64_t now) override {
    if (!bypass_) return true;
    const ExpertKey v = choose_victim(c, now);
    return next_use(shape_.index(k)) < next_use(shape_.index(v));
  }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    // Farthest next use (seen within the horizon) first, then least recent.
    return min_score(c, [&](ExpertKey k) {
      const size_t i = shape_.index(k);
      return std::pair(~next_use(i), last_[i]);
    });
  }

 private:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  uint64_t next_use(size_t i) const {
    const uint64_t n = next_[i];
    return horizon_ > 0 && n != kNever && future_.token[n] - now_token_ > uint64_t(horizon_) ? kNever : n;
  }
  void advance(ExpertKey k) {
    STRATA_CHECK(cursor_ < future_.next.size(), "belady: more accesses than the trace it was built for");
    const size_t i = shape_.index(k);
    now_token_ = future_.token[cursor_];
    next_[i] = future_.next[cursor_++];
    last_[i] = cursor_;
  }
  FutureUses future_;
  int horizon_;
  bool bypass_;
  size_t cursor_ = 0;
  uint64_t now_token_ = 0;
  CacheShape shape_;
  std::vector<uint64_t> next_;  // [n_layer * n_expert] position of the next use
  std::vector<uint64_t> last_;  // [n_layer * n_expert] position of the last use
};

}  // namespace

std::unique_ptr<CachePolicy> make_belady(FutureUses future, int horizon_tokens, bool bypass) {
  return std::make_unique<Belady>(std::move(future), horizon_tokens, bypass);
}

FutureUses next_uses(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o) {
  FutureUses f;
  std::vector<size_t> keys;  // flat key index per access
  std::vector<size_t> run_end;
  uint64_t clock = 0;
  replay_trace(
      t, o.phase, [&] { run_end.push_back(keys.size()); }, [&](uint64_t c) { clock = c; },
      [&](int layer, std::span<const int32_t> ex, bool predicted) {
        if (predicted) return;
        for (int32_t e : ex) {
          keys.push_back(shape.index({layer, e}));
          f.token.push_back(clock);
        }
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
  f.next = std::move(next);
  return f;
}

SimResult simulate(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o, std::unique_ptr<CachePolicy> policy) {
  STRATA_CHECK(t.n_layer <= shape.n_layer && t.n_expert <= shape.n_expert, "trace needs {}x{} experts, cache shape is {}x{}", t.n_layer,
               t.n_expert, shape.n_layer, shape.n_expert);
  SimResult res;
  res.policy = policy->name();
  res.layer_accesses.assign(shape.n_layer, 0);
  res.layer_hits.assign(shape.n_layer, 0);
  ExpertCacheState cache(shape, o.budget, std::move(policy));
  std::vector<uint8_t> prefetched(shape.size(), 0);  // loaded ahead of demand, not used yet
  std::vector<ExpertKey> wanted;
  Admission adm;
  uint64_t clock = 0, clock_base = 0;
  bool first_run = true;
  if (o.pretrain) {
    // A learning pass over the whole trace; its hits are not counted.
    replay_trace(
        t, o.phase, [&] {}, [&](uint64_t c) { cache.begin_token(clock = c); },
        [&](int layer, std::span<const int32_t> ex, bool predicted) {
          if (predicted) return;
          cache.set_needed(layer, ex);
          for (int32_t e : ex) cache.access({layer, e}, nullptr);
          cache.clear_needed();
        });
    cache.clear(true);
    clock_base = clock;
  }
  replay_trace(
      t, o.phase,
      [&] {
        if (!first_run) cache.clear(o.keep_learned || o.pretrain);  // pretrained statistics span the runs
        first_run = false;
        std::fill(prefetched.begin(), prefetched.end(), 0);
      },
      [&](uint64_t c) {
        clock = clock_base + c;
        cache.begin_token(clock);
      },
      [&](int layer, std::span<const int32_t> ex, bool predicted) {
        if (predicted) {
          // The engine's lookahead: each predicted expert not resident is read ahead, in place of
          // the policy's victim when its pool is full (the layer that predicted stays protected).
          if (!o.replay_predictions) return;
          cache.hint_predicted(layer, ex);
          for (int32_t e : ex) {
            const ExpertKey k{layer, e};
            if (!cache.prefetch_predicted(k, &adm)) continue;
            for (ExpertKey v : adm.evicted) prefetched[shape.index(v)] = 0;
            prefetched[shape.index(k)] = 1;
            ++res.prefetches;
            res.bytes_prefetched += shape.bytes(k);
          }
          return;
        }
        cache.set_needed(layer, ex);
        for (int32_t e : ex) {
          const ExpertKey k{layer, e};
          const bool hit = cache.access(k, &adm);
          ++res.accesses;
          ++res.layer_accesses[layer];
          res.bytes_accessed += shape.bytes(k);
          if (hit) {
            ++res.hits;
            ++res.layer_hits[layer];
            if (prefetched[shape.index(k)]) ++res.prefetches_used, prefetched[shape.index(k)] = 0;
          } else {
            res.bytes_fetched += shape.bytes(k);
            for (ExpertKey v : adm.evicted) prefetched[shape.index(v)] = 0;
          }
        }
        wanted.clear();
        cache.policy().prefetch_wanted(layer, wanted, clock);
        for (ExpertKey k : wanted) {
          if (!cache.prefetch(k, &adm)) continue;
          for (ExpertKey v : adm.evicted) prefetched[shape.index(v)] = 0;
          prefetched[shape.index(k)] = 1;
          ++res.prefetches;
          res.bytes_prefetched += shape.bytes(k);
        }
        // The layer's experts stay needed through its predictions (the engine computes on
        // them while the lookahead reads arrive); the next route event replaces them.
      });
  cache.clear_needed();
  return res;
}

bool parse_belady_spec(std::string_view spec, int* horizon, bool* bypass) {
  std::string_view base = spec, arg;
  if (auto c = spec.find(':'); c != std::string_view::npos) base = spec.substr(0, c), arg = spec.substr(c + 1);
  if (base != "belady" && base != "belady-bypass") return false;
  *bypass = base == "belady-bypass";
  *horizon = 0;
  if (arg.empty()) return true;
  const std::string h(arg);
  size_t used = 0;
  try {
    *horizon = std::stoi(h, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  STRATA_CHECK(used == h.size() && *horizon > 0, "policy '{}': the horizon must be a positive token count", spec);
  return true;
}

void check_policy_spec(std::string_view spec) {
  int horizon = 0;
  bool bypass = false;
  if (!parse_belady_spec(spec, &horizon, &bypass)) (void)make_policy(spec);
}

SimResult simulate(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o, std::string_view policy_spec) {
  int horizon = 0;
  bool bypass = false;
  if (!parse_belady_spec(policy_spec, &horizon, &bypass)) return simulate(t, shape, o, make_policy(policy_spec));
  SimOptions ob = o;
  ob.pretrain = false;  // the future is known; there is nothing to learn
  ob.replay_predictions = false;
  return simulate(t, shape, ob, make_belady(next_uses(t, shape, ob), horizon, bypass));
}

SimResult simulate_belady(const RoutingTrace& t, const CacheShape& shape, const SimOptions& o) { return simulate(t, shape, o, "belady"); }

}  // namespace strata
