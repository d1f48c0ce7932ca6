// The online policies. Each keeps dense per-expert arrays indexed by CacheShape::index and picks
// a victim by scanning the candidates the cache hands it: O(resident) per eviction, which is
// nothing next to the SSD read of several MiB that every eviction implies.
#include "experts/cache_policy.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "experts/expert_stats.h"

namespace strata {

CacheShape CacheShape::unit(int n_layer, int n_expert) { return uniform(n_layer, n_expert, 1); }

CacheShape CacheShape::uniform(int n_layer, int n_expert, uint64_t bytes) {
  CacheShape s;
  s.n_layer = n_layer;
  s.n_expert = n_expert;
  s.expert_bytes.assign(n_layer, bytes);
  return s;
}

uint64_t CacheShape::total_bytes() const {
  uint64_t t = 0;
  for (int l = 0; l < n_layer; ++l) t += layer_bytes(l);
  return t;
}

uint64_t CacheBudget::pool_bytes(const CacheShape& s, int layer) const {
  const int c = class_of.empty() ? -1 : class_of[layer];
  const uint64_t cls = c < 0 ? bytes : class_bytes[c];
  if (!per_layer) return cls;
  // Each layer gets the same fraction of its own experts' bytes (within its class).
  unsigned __int128 total = 0;
  for (int l = 0; l < s.n_layer; ++l)
    if (c < 0 || class_of[l] == c) total += s.layer_bytes(l);
  return total ? static_cast<uint64_t>(static_cast<unsigned __int128>(s.layer_bytes(layer)) * cls / total) : 0;
}

namespace {

// Shared recency clock: a strictly increasing stamp per event, so LRU order has no ties.
class RecencyBase : public CachePolicy {
 public:
  void reset(const CacheShape& shape, const CacheBudget& budget) override {
    shape_ = shape;
    budget_ = budget;
    last_.assign(shape.size(), 0);
    tick_ = 0;
  }
  void clear_resident(const CacheShape& shape, const CacheBudget& budget) override { shape_ = shape, budget_ = budget; }
  void set_budget(const CacheBudget& budget) override { budget_ = budget; }
  void on_access(ExpertKey k, uint64_t) override { last_[shape_.index(k)] = ++tick_; }
  void on_insert(ExpertKey k, uint64_t) override { last_[shape_.index(k)] = ++tick_; }
  void on_evict(ExpertKey) override {}

 protected:
  CacheShape shape_;
  CacheBudget budget_;
  std::vector<uint64_t> last_;  // [n_layer * n_expert] recency stamp of the last use
  uint64_t tick_ = 0;
};

class Lru : public RecencyBase {
 public:
  std::string name() const override { return "lru"; }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    return min_score(c, [&](ExpertKey k) { return last_[shape_.index(k)]; });
  }
};

class Lfu : public RecencyBase {
 public:
  std::string name() const override { return "lfu"; }
  void reset(const CacheShape& shape, const CacheBudget& budget) override {
    RecencyBase::reset(shape, budget);
    count_.assign(shape.size(), 0);
  }
  void on_access(ExpertKey k, uint64_t now) override {
    RecencyBase::on_access(k, now);
    ++count_[shape_.index(k)];
  }
  void on_miss(ExpertKey k, uint64_t) override { ++count_[shape_.index(k)]; }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    return min_score(c, [&](ExpertKey k) { return std::pair(count_[shape_.index(k)], last_[shape_.index(k)]); });
  }

 private:
  std::vector<uint64_t> count_;  // uses since reset, resident or not
};

// Exponentially decayed use counts, stored as (value, as-of token) and decayed on read.
class DecayedCounts {
 public:
  void reset(size_t n, double half_life) {
    value_.assign(n, 0.0);
    when_.assign(n, 0);
    half_life_ = half_life;
  }
  double at(size_t i, uint64_t now) const {
    if (half_life_ <= 0 || now <= when_[i]) return value_[i];
    return value_[i] * std::exp2(-double(now - when_[i]) / half_life_);
  }
  void add(size_t i, uint64_t now, double v = 1.0) {
    value_[i] = at(i, now) + v;
    when_[i] = now;
  }

 private:
  std::vector<double> value_;
  std::vector<uint64_t> when_;
  double half_life_ = 0;
};

class LfuDecay : public RecencyBase {
 public:
  explicit LfuDecay(double half_life) : half_life_(half_life) {}
  std::string name() const override { return fmt::format("lfu-decay:{:g}", half_life_); }
  void reset(const CacheShape& shape, const CacheBudget& budget) override {
    RecencyBase::reset(shape, budget);
    heat_.reset(shape.size(), half_life_);
  }
  void on_access(ExpertKey k, uint64_t now) override {
    RecencyBase::on_access(k, now);
    heat_.add(shape_.index(k), now);
  }
  void on_miss(ExpertKey k, uint64_t now) override { heat_.add(shape_.index(k), now); }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t now) override {
    return min_score(c, [&](ExpertKey k) { return std::pair(heat_.at(shape_.index(k), now), last_[shape_.index(k)]); });
  }

 private:
  double half_life_;
  DecayedCounts heat_;
};

class AdmitN : public RecencyBase {
 public:
  AdmitN(int n, double window) : n_(n), window_(window) { STRATA_CHECK(n >= 1, "admit-N: N must be >= 1, got {}", n); }
  std::string name() const override { return fmt::format("admit-{}:{:g}", n_, window_); }
  void reset(const CacheShape& shape, const CacheBudget& budget) override {
    RecencyBase::reset(shape, budget);
    uses_.assign(shape.size() * n_, kNever);
    head_.assign(shape.size(), 0);
  }
  void on_access(ExpertKey k, uint64_t now) override {
    RecencyBase::on_access(k, now);
    remember(shape_.index(k), now);
  }
  void on_miss(ExpertKey k, uint64_t now) override { remember(shape_.index(k), now); }
  bool should_admit(ExpertKey k, std::span<const ExpertKey>, uint64_t now) override {
    // The oldest of the last n uses (this one included) lies within the window.
    const size_t i = shape_.index(k);
    const uint64_t oldest = uses_[i * n_ + head_[i]];
    return oldest != kNever && double(now - oldest) < window_;
  }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    return min_score(c, [&](ExpertKey k) { return last_[shape_.index(k)]; });
  }

 private:
  static constexpr uint64_t kNever = ~uint64_t{0};
  void remember(size_t i, uint64_t now) {
    uses_[i * n_ + head_[i]] = now;
    head_[i] = (head_[i] + 1) % n_;
  }
  int n_;
  double window_;
  std::vector<uint64_t> uses_;  // [n_layer * n_expert, n] ring of use tokens
  std::vector<int> head_;       // [n_layer * n_expert] next ring slot (= oldest)
};

class Pinned : public RecencyBase {
 public:
  Pinned(double fraction, int period, double half_life) : fraction_(fraction), period_(std::max(1, period)), half_life_(half_life) {}
  std::string name() const override { return fmt::format("pinned:{:g}", fraction_); }
  void reset(const CacheShape& shape, const CacheBudget& budget) override {
    RecencyBase::reset(shape, budget);
    stats_ = ExpertStats(shape, half_life_);
    hot_.assign(shape.size(), 0);
    since_ = 0;
  }
  void on_token(uint64_t now) override {
    stats_.decay_to(now);
    if (++since_ >= period_) since_ = 0, recompute();
  }
  void on_access(ExpertKey k, uint64_t now) override {
    RecencyBase::on_access(k, now);
    stats_.record(k, true, 0);
  }
  void on_miss(ExpertKey k, uint64_t) override { stats_.record(k, false, 0); }
  ExpertKey choose_victim(std::span<const ExpertKey> c, uint64_t) override {
    return min_score(c, [&](ExpertKey k) { return std::pair(hot_[shape_.index(k)], last_[shape_.index(k)]); });
  }

 private:
  // Hottest first, each pool takes experts until `fraction` of its capacity is spoken for.
  void recompute() {
    std::fill(hot_.begin(), hot_.end(), 0);
    std::vector<uint64_t> taken(static_cast<size_t>(budget_.n_pools(shape_)), 0);
    for (ExpertKey k : stats_.hottest(shape_.size())) {
      if (stats_.cell(k).heat <= 0) break;
      const int pool = budget_.pool(k.layer);
      const double cap = fraction_ * double(budget_.pool_bytes(shape_, k.layer));
      if (double(taken[pool] + shape_.bytes(k)) > cap) continue;
      taken[pool] += shape_.bytes(k);
      hot_[shape_.index(k)] = 1;
    }
  }
  double fraction_;
  int period_;
  double half_life_;
  int since_ = 0;
  ExpertStats stats_;
  std::vector<uint8_t> hot_;  // [n_layer * n_expert]
};

}  // namespace

std::unique_ptr<CachePolicy> make_lru() { return std::make_unique<Lru>(); }
std::unique_ptr<CachePolicy> make_lfu() { return std::make_unique<Lfu>(); }
std::unique_ptr<CachePolicy> make_lfu_decay(double half_life_tokens) { return std::make_unique<LfuDecay>(half_life_tokens); }
std::unique_ptr<CachePolicy> make_admit_n(int n, double window_tokens) { return std::make_unique<AdmitN>(n, window_tokens); }
std::unique_ptr<CachePolicy> make_pinned(double fraction, int period_tokens, double half_life_tokens) {
  return std::make_unique<Pinned>(fraction, period_tokens, half_life_tokens);
}

namespace {

double parse_number(std::string_view spec, std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  STRATA_CHECK(ec == std::errc() && p == s.data() + s.size(), "policy '{}': '{}' is not a number", spec, s);
  return v;
}

}  // namespace

std::unique_ptr<CachePolicy> make_policy(std::string_view spec) {
  std::string_view name = spec, arg;
  if (auto c = spec.find(':'); c != std::string_view::npos) name = spec.substr(0, c), arg = spec.substr(c + 1);
  auto num = [&](double dflt) { return arg.empty() ? dflt : parse_number(spec, arg); };
  if (name == "default") return make_policy(kDefaultPolicy);
  if (name == "lru" && arg.empty()) return make_lru();
  if (name == "lfu" && arg.empty()) return make_lfu();
  if (name == "lfu-decay") return make_lfu_decay(num(8));
  if (name == "pinned") return make_pinned(num(0.5), 16, 64);
  if (name == "predict") {
    PredictiveOptions o;
    o.half_life = num(o.half_life);
    return make_predictive(o);
  }
  if (name == "predict-pf") {
    PredictiveOptions o;
    o.prefetch_margin = num(0.3);
    STRATA_CHECK(o.prefetch_margin >= 0, "policy '{}': the prefetch margin must be >= 0", spec);
    return make_predictive(o);
  }
  if (name.starts_with("admit-")) {
    const int n = static_cast<int>(parse_number(spec, name.substr(6)));
    return make_admit_n(n, num(16));
  }
  fail("unknown cache policy '{}' (known: lru, lfu, lfu-decay[:HALF_LIFE], admit-N[:WINDOW], pinned[:FRACTION], predict[:HALF_LIFE], predict-pf[:MARGIN], "
       "default)",
       spec);
}

std::vector<std::string> all_policy_names() { return {"lru", "lfu", "lfu-decay", "admit-2", "pinned", "predict", "predict-pf"}; }

}  // namespace strata
