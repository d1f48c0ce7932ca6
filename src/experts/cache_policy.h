#pragma once
// Cache policy: the decisions of the expert cache, apart from its I/O.
//
// The expert cache keeps routed experts, keyed by (layer, expert), in RAM under a hard byte
// budget. ExpertCacheState (cache_state.h) does the bookkeeping every policy shares — which
// experts are resident, bytes used (globally or per layer), pins, the set the current token
// needs — and asks a CachePolicy only the questions that differ between policies:
//
//   hit:   on_access(k, now)
//   miss:  on_miss(k, now), then, only when k does not fit in free space (and evicting
//          candidates can make it fit), should_admit(k, candidates, now) (false: k is read into
//          a transient buffer for this use and not kept), then choose_victim(candidates, now) /
//          on_evict(victim) until k fits, then on_insert(k, now)
//
// Victim candidates are always resident, unpinned and not needed by the current token, so a
// policy cannot break "an expert being computed on is never evicted". `now` is the token clock
// (tokens since the cache was created); events within one token are ordered by call order.
// Policies are single-threaded, as is the cache that calls them (the engine thread).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct ExpertKey {
  int32_t layer = 0;
  int32_t expert = 0;
  friend bool operator==(const ExpertKey&, const ExpertKey&) = default;
};

// Dimensions of the expert grid and each layer's expert size in bytes.
struct CacheShape {
  int n_layer = 0;
  int n_expert = 0;                   // experts per layer (the widest layer)
  std::vector<uint64_t> expert_bytes;  // [n_layer]; 0 = layer has no routed experts

  // Every expert costs 1 "byte": capacities are then slot counts.
  static CacheShape unit(int n_layer, int n_expert);
  static CacheShape uniform(int n_layer, int n_expert, uint64_t bytes);
  uint64_t layer_bytes(int layer) const { return expert_bytes[layer] * static_cast<uint64_t>(n_expert); }
  size_t index(ExpertKey k) const { return static_cast<size_t>(k.layer) * n_expert + k.expert; }
  size_t size() const { return static_cast<size_t>(n_layer) * n_expert; }
  uint64_t bytes(ExpertKey k) const { return expert_bytes[k.layer]; }
  uint64_t total_bytes() const;
};

struct CacheBudget {
  uint64_t bytes = 0;      // total bytes for routed experts
  bool per_layer = false;  // split into per-layer pools in proportion to each layer's expert bytes
  // Size classes (layers whose experts need different slot sizes): layer l draws from class
  // class_of[l], which owns class_bytes[c] of the total (its own slots). Empty: one class.
  std::vector<int> class_of;          // [n_layer]
  std::vector<uint64_t> class_bytes;  // [n_class]

  // The pool `layer` draws from: its own when per-layer, else its size class (0 without).
  int pool(int layer) const { return per_layer ? layer : class_of.empty() ? 0 : class_of[layer]; }
  int n_pools(const CacheShape& s) const { return per_layer ? s.n_layer : class_bytes.empty() ? 1 : static_cast<int>(class_bytes.size()); }
  // The capacity of that pool (per-layer pools split their class in proportion to layer bytes).
  uint64_t pool_bytes(const CacheShape& s, int layer) const;
};

class CachePolicy {
 public:
  virtual ~CachePolicy() = default;
  virtual std::string name() const = 0;
  // Sizes the tables and forgets everything (also what was learned).
  virtual void reset(const CacheShape& shape, const CacheBudget& budget) = 0;
  // Empties the cache but keeps learned statistics (a new prompt on a running engine).
  // Default: same as reset.
  virtual void clear_resident(const CacheShape& shape, const CacheBudget& budget) { reset(shape, budget); }
  // The cache grew (ExpertCacheState::grow): the pools' larger capacities; what was learned and
  // what is resident stay. Default: nothing.
  virtual void set_budget(const CacheBudget& budget) { (void)budget; }

  virtual void on_token(uint64_t now) { (void)now; }
  virtual void on_access(ExpertKey k, uint64_t now) = 0;
  virtual void on_miss(ExpertKey k, uint64_t now) { (void)k, (void)now; }
  // `candidates`: what admitting k would evict from (a policy may compare k with its victim).
  virtual bool should_admit(ExpertKey k, std::span<const ExpertKey> candidates, uint64_t now) {
    return (void)k, (void)candidates, (void)now, true;
  }
  virtual void on_insert(ExpertKey k, uint64_t now) = 0;
  virtual void on_evict(ExpertKey k) = 0;
  // One of `candidates` (never empty).
  virtual ExpertKey choose_victim(std::span<const ExpertKey> candidates, uint64_t now) = 0;

  // Hints. The router's choice for `layer` (before its accesses); the cache protects these
  // itself, policies may learn from them.
  virtual void hint_needed(int layer, std::span<const int32_t> experts, uint64_t now) { (void)layer, (void)experts, (void)now; }
  // Experts predicted for a later layer or token.
  virtual void hint_prefetch(int layer, std::span<const int32_t> experts, uint64_t now) { (void)layer, (void)experts, (void)now; }

  // Warm start: what earlier runs routed to at `layer` (decayed counts per expert, n_expert of
  // them; `experts_per_token` chosen per token) as prior popularity, so a policy that ranks by
  // popularity keeps the warm-filled experts by their history instead of treating them as never
  // used (the first victims). It decays as any observation. Default: ignored.
  virtual void seed_popularity(int layer, std::span<const double> weight, int experts_per_token) {
    (void)layer, (void)weight, (void)experts_per_token;
  }

  // History-based prefetch (cachesim; an engine without a router lookahead could do the same):
  // after `layer`'s experts were accessed, the experts the policy wants read ahead of demand,
  // best first, appended to `out`. ExpertCacheState::prefetch loads each absent one into free
  // space or, when its pool is full, in place of prefetch_victim's choice. Default: none.
  virtual void prefetch_wanted(int layer, std::vector<ExpertKey>& out, uint64_t now) { (void)layer, (void)out, (void)now; }
  // The resident to replace by the prefetch of k, or nullopt to skip it (only asked when k
  // does not fit; `candidates` as for choose_victim).
  virtual std::optional<ExpertKey> prefetch_victim(ExpertKey k, std::span<const ExpertKey> candidates, uint64_t now) {
    return (void)k, (void)candidates, (void)now, std::nullopt;
  }
};

// Index of the candidate with the smallest score; ties go to the first.
template <typename ScoreFn>
ExpertKey min_score(std::span<const ExpertKey> c, ScoreFn&& score) {
  size_t best = 0;
  auto bs = score(c[0]);
  for (size_t i = 1; i < c.size(); ++i) {
    auto s = score(c[i]);
    if (s < bs) bs = s, best = i;
  }
  return c[best];
}

// ---- policies -------------------------------------------------------------------------------

// Least recently used.
std::unique_ptr<CachePolicy> make_lru();
// Least frequently used: all uses since reset, kept across evictions ("perfect" LFU), ties by
// LRU. In-cache LFU (counts dropped on eviction) measured worse on every trace.
std::unique_ptr<CachePolicy> make_lfu();
// LFU with exponential decay: each access adds 1, the count halves every `half_life` tokens;
// counts survive eviction (the history is the heat, not the residency). Ties by LRU.
std::unique_ptr<CachePolicy> make_lfu_decay(double half_life_tokens);
// Admission after N uses: a missed expert is kept only once it was used `n` times within the
// last `window` tokens (a per-expert history, so ghosts are remembered); eviction is LRU.
// Free space is always filled (the policy is asked only when admitting would evict).
std::unique_ptr<CachePolicy> make_admit_n(int n, double window_tokens);
// Pinned hot set: every `period` tokens the top `fraction` of experts by decayed heat
// (half-life `half_life` tokens) becomes the hot set; resident hot experts are evicted only when
// no other candidate is left. The rest is LRU.
std::unique_ptr<CachePolicy> make_pinned(double fraction, int period_tokens, double half_life_tokens);
// Layer-aware next-token predictor (Strata's default): each layer is used once per token, so
// rank residents by the estimated probability that the next token at the same layer needs
// them, from a decayed first-order (Markov) model of expert-to-expert transitions plus decayed
// popularity, with recency as the tie-breaker. See cache_policy.cpp.
struct PredictiveOptions {
  double half_life = 64;        // tokens, for both transition counts and popularity
  double prior = 1.0;           // pseudo-count weight of popularity in the transition estimate
  bool bypass = true;           // do not keep a missed expert less likely to be needed than its victim
  double bypass_margin = 0.1;   // ... by more than this
  // Cross-layer prefetch (predict-pf): also learn layer L-1 -> layer L transitions of the same
  // token, and after layer L routes, read layer L+1's most likely absent expert in place of the
  // least valuable resident when its value exceeds the victim's by more than this. < 0: off.
  double prefetch_margin = -1;
};
std::unique_ptr<CachePolicy> make_predictive(const PredictiveOptions& o = {});

// Names accepted by make_policy: lru, lfu, lfu-decay[:H], admit-N[:W], pinned[:F], predict[:H],
// predict-pf[:M] (predict plus cross-layer prefetch with margin M, default 0.3), default (= the
// measured best demand-only policy). Throws strata::Error on an unknown name.
std::unique_ptr<CachePolicy> make_policy(std::string_view spec);
// The online policies `all` expands to, in report order.
std::vector<std::string> all_policy_names();
inline constexpr std::string_view kDefaultPolicy = "predict";

}  // namespace strata
