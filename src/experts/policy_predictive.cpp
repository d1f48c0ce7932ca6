// The predictive policy: evict the resident expert least likely to be needed the next time its
// layer runs.
//
// Every MoE layer runs exactly once per token, in layer order, and the router's choice at a
// layer is correlated with its choice for the previous token (on Mixtral 37.6 % of a token's
// experts were also used by the previous token, against 25 % at random) and skewed towards
// popular experts. So for each layer we learn, with exponential decay (half-life in tokens):
//   pop[j]     how often expert j is chosen,
//   T[i][j]    how often j is chosen right after a token that chose i (first-order Markov),
// and score a candidate j of layer l, whose last router choice was S, by
//   p(j) = 1/|S| * sum_{i in S} (T[i][j] + prior * q(j)) / (rows[i] + prior),  q(j) = pop[j] / tokens
// the estimated probability that the next visit of layer l needs j (popularity is the prior of
// each transition row, so rows seen rarely fall back to popularity). Ties (and the cold start)
// go to LRU. With one global pool the candidates span layers; for a layer the current token has
// not reached yet S is the previous token's choice, which is what its next visit depends on, and
// the score is divided by the layer steps until that visit (hit probability per step of slot
// held): a just-used layer's experts wait a whole token for their chance, a layer about to run
// gets it at once. On a miss, a newcomer clearly less likely to be needed next than its victim
// is served transiently instead of kept (bypass).
// Memory: n_layer * n_expert^2 floats (DeepSeek-V3: 58 * 256^2 * 4 B = 15 MiB).
//
// predict-pf adds cross-layer prefetch. It also learns, with the same decay,
//   X[i][j]    how often layer l chose j in a token whose layer l-1 chose i,
// and for a layer l the current token has not reached yet, while layer l-1 already routed
// (choice C), multiplies the same-layer estimate by the cross-layer likelihood ratio (naive
// Bayes: the two histories are treated as independent evidence about the choice)
//   p'(j) = p(j) * x(j) / q(j),  x(j) = 1/|C| * sum_{i in C} (X[i][j] + prior * q(j)) / (xrows[i] + prior).
// After layer l routes, the absent expert of layer l+1 with the largest p' is read ahead in
// place of the least valuable resident when p' exceeds that resident's value by more than
// prefetch_margin. Every such read is I/O that demand paging would not do before the need; on
// the Mixtral trace about 60 % of them are used (cachesim reports reads per access).
// Memory: twice the above.
#include <cmath>
#include <optional>

#include "core/error.h"
#include "experts/cache_policy.h"

namespace strata {
namespace {

class Predictive : public CachePolicy {
 public:
  explicit Predictive(const PredictiveOptions& o) : o_(o) {}
  std::string name() const override {
    return cross() ? fmt::format("predict-pf:{:g}", o_.prefetch_margin) : fmt::format("predict:{:g}", o_.half_life);
  }

  void reset(const CacheShape& shape, const CacheBudget& budget) override {
    shape_ = shape;
    (void)budget;
    const size_t E = shape.n_expert;
    trans_.assign(shape.size() * E, 0.0f);
    rows_.assign(shape.size(), 0.0f);
    pop_.assign(shape.size(), 0.0f);
    tokens_.assign(shape.n_layer, 0.0f);
    xtrans_.assign(cross() ? shape.size() * E : 0, 0.0f);
    xrows_.assign(cross() ? shape.size() : 0, 0.0f);
    last_.assign(shape.size(), 0);
    memo_.assign(shape.size(), 0.0);
    memo_gen_.assign(shape.size(), 0);
    tick_ = 0;
    base_ = 0;
    clear_resident(shape, budget);
  }
  void clear_resident(const CacheShape& shape, const CacheBudget&) override {
    shape_ = shape;
    prev_.assign(shape.n_layer, {});
    routed_.assign(shape.n_layer, 0);
    resident_.assign(shape.size(), 0);
    ++gen_;
  }
  void on_token(uint64_t now) override {
    // Decay by growing the weight of new events; renormalize before it overflows a float.
    if (o_.half_life > 0 && double(now - base_) / o_.half_life > 60) {
      const float f = static_cast<float>(std::exp2(-double(now - base_) / o_.half_life));
      for (auto* v : {&trans_, &rows_, &pop_, &tokens_, &xtrans_, &xrows_})
        for (float& x : *v) x *= f;
      base_ = now;
    }
    w_ = o_.half_life > 0 ? static_cast<float>(std::exp2(double(now - base_) / o_.half_life)) : 1.0f;
    now_ = now;
    ++gen_;
  }
  void hint_needed(int layer, std::span<const int32_t> experts, uint64_t) override {
    const size_t E = shape_.n_expert;
    if (cross() && layer > 0 && routed_this_token(layer - 1))
      for (int32_t i : prev_[layer - 1]) {
        const size_t row = size_t(layer) * E + i;
        xrows_[row] += w_;
        for (int32_t j : experts) xtrans_[row * E + j] += w_;
      }
    routed_[layer] = now_;
    for (int32_t i : prev_[layer]) {
      const size_t row = size_t(layer) * E + i;
      rows_[row] += w_;
      for (int32_t j : experts) trans_[row * E + j] += w_;
    }
    for (int32_t j : experts) pop_[size_t(layer) * E + j] += w_;
    tokens_[layer] += w_;
    prev_[layer].assign(experts.begin(), experts.end());
    cur_layer_ = layer;
    ++gen_;
  }
  // The prior counts as one half-life of tokens (64 without decay): q(j) = k * weight_j / total.
  void seed_popularity(int layer, std::span<const double> weight, int k) override {
    double total = 0;
    for (double w : weight) total += w > 0 ? w : 0;
    if (layer < 0 || layer >= shape_.n_layer || total <= 0 || k <= 0) return;
    const double t = o_.half_life > 0 ? o_.half_life : 64.0;
    const size_t E = shape_.n_expert;
    tokens_[layer] += static_cast<float>(w_ * t);
    for (size_t j = 0; j < std::min(E, weight.size()); ++j)
      if (weight[j] > 0) pop_[size_t(layer) * E + j] += static_cast<float>(w_ * t * k * weight[j] / total);
    ++gen_;
  }
  // Keep the newcomer only if it is at least as likely to be needed next as its victim would be
  // (it is needed now, so this is about the next visit). Worth ~0.5 % hit rate on Mixtral.
  bool should_admit(ExpertKey k, std::span<const ExpertKey> c, uint64_t now) override {
    if (!o_.bypass) return true;
    const ExpertKey v = choose_victim(c, now);
    return next_visit_probability(k) + o_.bypass_margin >= next_visit_probability(v);
  }
  void on_access(ExpertKey k, uint64_t) override { last_[shape_.index(k)] = ++tick_; }
  void on_insert(ExpertKey k, uint64_t) override {
    last_[shape_.index(k)] = ++tick_;
    resident_[shape_.index(k)] = 1;
  }
  void on_evict(ExpertKey k) override { resident_[shape_.index(k)] = 0; }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    return min_score(c, [&](ExpertKey k) { return std::pair(value(k), last_[shape_.index(k)]); });
  }

  void prefetch_wanted(int layer, std::vector<ExpertKey>& out, uint64_t) override {
    const int next = layer + 1;
    if (!cross() || next >= shape_.n_layer) return;
    double best = 0;
    int pick = -1;
    for (int j = 0; j < shape_.n_expert; ++j) {
      const ExpertKey k{next, j};
      if (resident_[shape_.index(k)]) continue;
      const double p = with_cross_layer(k);
      if (pick < 0 || p > best) best = p, pick = j;
    }
    // Free space counts as a victim of value 0: no guesses into an empty pool without evidence.
    if (pick >= 0 && best > o_.prefetch_margin) out.push_back({next, pick});
  }
  std::optional<ExpertKey> prefetch_victim(ExpertKey k, std::span<const ExpertKey> c, uint64_t now) override {
    const ExpertKey v = choose_victim(c, now);
    if (value(k) > value(v) + o_.prefetch_margin) return v;
    return std::nullopt;
  }

  // Expected hits per layer step of holding k until its layer's next visit. Within one layer's
  // pool the distance is the same for every candidate, so this ranks by probability alone.
  // Memoized until the statistics change (a router choice or a new token): a prompt chunk evicts
  // hundreds of experts per layer, each choice scanning every resident candidate.
  double value(ExpertKey k) const {
    const size_t i = shape_.index(k);
    if (memo_gen_[i] == gen_) return memo_[i];
    memo_gen_[i] = gen_;
    return memo_[i] = value_uncached(k);
  }
  double value_uncached(ExpertKey k) const {
    const int L = shape_.n_layer;
    const int steps = k.layer > cur_layer_ ? k.layer - cur_layer_ : k.layer - cur_layer_ + L;
    return with_cross_layer(k) / double(steps);
  }

  // next_visit_probability, sharpened by the current token's choice at the layer before k's
  // when that is known and k's layer has not run yet (predict-pf only).
  double with_cross_layer(ExpertKey k) const {
    const double p = next_visit_probability(k);
    const size_t E = shape_.n_expert;
    const size_t l = k.layer, j = k.expert;
    if (!cross() || l == 0 || routed_this_token(int(l)) || !routed_this_token(int(l) - 1) || tokens_[l] <= 0) return p;
    const double q = pop_[l * E + j] / tokens_[l];
    if (q <= 0) return p;
    double x = 0;
    const auto& C = prev_[l - 1];
    for (int32_t i : C) {
      const size_t row = l * E + i;
      x += (xtrans_[row * E + j] + o_.prior * q) / (xrows_[row] + o_.prior);
    }
    return p * (x / double(C.size())) / q;
  }

  double next_visit_probability(ExpertKey k) const {
    const size_t E = shape_.n_expert;
    const size_t l = k.layer, j = k.expert;
    const auto& S = prev_[l];
    const double q = tokens_[l] > 0 ? pop_[l * E + j] / tokens_[l] : 0.0;
    if (S.empty()) return q;
    double p = 0;
    for (int32_t i : S) {
      const size_t row = l * E + i;
      p += (trans_[row * E + j] + o_.prior * q) / (rows_[row] + o_.prior);
    }
    return p / double(S.size());
  }

 private:
  bool cross() const { return o_.prefetch_margin >= 0; }
  bool routed_this_token(int layer) const { return routed_[layer] == now_ && now_ != 0; }

  PredictiveOptions o_;
  CacheShape shape_;
  std::vector<float> trans_;   // [n_layer, n_expert, n_expert] decayed transition counts T[i][j]
  std::vector<float> rows_;    // [n_layer, n_expert] decayed count of tokens that followed a token choosing i
  std::vector<float> pop_;     // [n_layer, n_expert] decayed choice counts
  std::vector<float> tokens_;  // [n_layer] decayed token count
  std::vector<float> xtrans_;  // [n_layer, n_expert, n_expert] X[i][j], i at layer l-1 (predict-pf only)
  std::vector<float> xrows_;   // [n_layer, n_expert] decayed count of tokens whose layer l-1 chose i
  std::vector<std::vector<int32_t>> prev_;  // [n_layer] the layer's last router choice
  std::vector<uint64_t> routed_;            // [n_layer] token of that choice
  std::vector<uint8_t> resident_;           // [n_layer * n_expert]
  std::vector<uint64_t> last_;              // [n_layer * n_expert] recency stamp
  mutable std::vector<double> memo_;         // [n_layer * n_expert] value() of generation memo_gen_
  mutable std::vector<uint64_t> memo_gen_;
  uint64_t gen_ = 1;   // bumped whenever value() may change
  uint64_t tick_ = 0;
  uint64_t base_ = 0;  // token the stored counts are scaled to
  float w_ = 1.0f;     // weight of an event at the current token
  int cur_layer_ = 0;  // layer of the latest router choice
  uint64_t now_ = 0;   // current token
};

}  // namespace

std::unique_ptr<CachePolicy> make_predictive(const PredictiveOptions& o) { return std::make_unique<Predictive>(o); }

}  // namespace strata
