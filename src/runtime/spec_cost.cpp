#include "runtime/spec_cost.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata {

namespace {
// The mean of the first observations, then an exponentially weighted one.
void ewma(double& v, double x, int64_t n_before, double alpha) { v += std::max(alpha, 1.0 / static_cast<double>(n_before + 1)) * (x - v); }

// A pass the machine stalled (another process took the core) tells nothing of what the next one
// costs, yet one 10x pass would move a mean weighted 1/8 by more than 100%, and the plain pass is
// not measured again for up to 16 passes while every pass drafts: rows and drafts then look cheap
// against it. Once a figure has two observations, one counts at most kSpike times the estimate
// (a lasting slowdown still moves it, by up to (kSpike - 1) x the weight per pass).
constexpr double kSpike = 2.0;
double clip(double x, double estimate, int64_t n_before) { return n_before >= 2 && estimate > 0 ? std::min(x, kSpike * estimate) : x; }
}  // namespace

SpecCostModel::SpecCostModel(int k_max, double margin) : k_max_(k_max), margin_(margin) {
  STRATA_CHECK(k_max >= 0, "speculative cost model: k_max {} < 0", k_max);
  acc_.assign(static_cast<size_t>(k_max), 0.0);
  seen_.assign(static_cast<size_t>(k_max), 0.0);
}

// Decayed counts with half a pseudo-observation of 1/2 at the first position, of the previous
// position's estimate at the others (a position rarely verified takes the one before it).
double SpecCostModel::acceptance(int i) const {
  constexpr double kPrior = 0.5;  // weight of the pseudo-observation
  return (acc_[i] + kPrior * (i == 0 ? 0.5 : acceptance(i - 1))) / (seen_[i] + kPrior);
}

double SpecCostModel::expected_tokens(int k) const {
  double e = 1, run = 1;
  for (int i = 0; i < k; ++i) e += run *= acceptance(i);
  return e;
}

// A draft row is never free: it costs at least 1/kMinRowShare of a plain pass (its attention, norms
// and dense products). Without the floor a per-row fit that noise puts near 0 (a slow plain pass)
// makes even a draft accepted 1% of the time look worth verifying, forever.
double SpecCostModel::pass_seconds(int k) const { return pass_seconds(k, {}); }

double SpecCostModel::calibration() const {
  return n_pred_ > 0 && pred_ > 0 ? std::clamp(actual_ / pred_, kMinCalibration, kMaxCalibration) : n_pred_ > 0 && actual_ > 0 ? kMaxCalibration : 1.0;
}

// A draft row's bytes: its prediction (calibrated) where there is one, else the fitted figure.
double SpecCostModel::pass_seconds(int k, std::span<const double> row_bytes) const {
  constexpr double kMinRowShare = 16;
  const double s_per_byte = bytes_ > 0 ? wait_ / bytes_ : 0.0;
  const double plain = c0_ + b0_ * s_per_byte;
  const double row_compute = std::max(0.0, row_c_), fitted_bytes = std::max(0.0, row_b_), cal = calibration();
  double s = k * draft_tok_s_ + plain;
  for (int i = 0; i < k; ++i) {
    const double pred = static_cast<size_t>(i) < row_bytes.size() ? row_bytes[static_cast<size_t>(i)] : kUnknownRow;
    const double bytes = pred >= 0 ? cal * pred : fitted_bytes;
    s += std::max(row_compute + bytes * s_per_byte, plain / kMinRowShare);
  }
  return s;
}

int SpecCostModel::best_k(int k_avail, std::span<const double> row_bytes) const {
  int best = 0;
  double best_rate = expected_tokens(0) / std::max(1e-12, pass_seconds(0));
  const double bar = best_rate * (1 + margin_);
  for (int k = k_min_; k <= k_avail; ++k) {
    const double rate = expected_tokens(k) / std::max(1e-12, pass_seconds(k, row_bytes));
    if (rate > bar && rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

// Seconds a pass of k drafts is expected to save against plain passes that bring its tokens.
double SpecCostModel::saved(int k, std::span<const double> row_bytes) const {
  return expected_tokens(k) * pass_seconds(0) - pass_seconds(k, row_bytes);
}

// Whether some k would beat a plain pass if every draft were accepted: if not, at today's costs no
// acceptance can make drafts pay, and a probe can only tell that the costs moved.
bool SpecCostModel::could_pay() const {
  const double plain = 1.0 / std::max(1e-12, pass_seconds(0));
  for (int k = 1; k <= k_max_; ++k)
    if ((k + 1) / std::max(1e-12, pass_seconds(k)) > plain * (1 + margin_)) return true;
  return false;
}

// A probe's expected loss against the plain pass it replaces: its pass with k_min draft rows, less
// the tokens its drafts bring when accepted, plus the draft's catch-up on the tokens since its last
// drafts (one per plain pass). Probes g plain passes apart cost (fixed + g x catch-up per row) per
// g plain passes; they are spaced so that stays within kProbeBudget of the time (rows that cost
// nearly a pass: probes come rarely), and a catch-up of more than kProbeBudget of a plain pass per
// token allows no gap at all (kNoProbe).
int SpecCostModel::cost_gap() const {
  const double plain = pass_seconds(0);
  if (!(plain > 0)) return 0;
  const double fixed = pass_seconds(k_min_) - expected_tokens(k_min_) * plain, allowed = kProbeBudget * plain - catch_up_row_s_;
  if (allowed <= 0) return kNoProbe;
  if (fixed <= 0) return 0;
  return static_cast<int>(std::min<double>(kMaxProbeGap, std::ceil(fixed / allowed)));
}

int SpecCostModel::choose(int k_avail) { return choose(k_avail, {}); }

int SpecCostModel::choose(int k_avail, std::span<const double> row_bytes) {
  k_avail = std::clamp(k_avail, 0, k_max_);
  if (k_avail < k_min_) return 0;
  if (!fitted()) return n_plain_ <= n_multi_ ? 0 : k_min_;  // warm-up: plain, one draft (k_min), plain, one draft
  const int best = best_k(k_avail, row_bytes);
  if (best > 0 && (plain_streak_ == 0 || saved(best, row_bytes) * std::min<double>(plain_streak_, kHorizon) >= catch_up_row_s_ * plain_streak_)) {
    plain_streak_ = 0;
    if (++draft_streak_ <= kRefreshGap) return best;
    draft_streak_ = 0;  // a plain pass now and then: the cost of a plain pass moves too (context, load)
    refreshing_ = true;
    return 0;
  }
  draft_streak_ = 0;
  if (++plain_streak_ < std::max(probe_gap_, cost_gap())) return 0;
  plain_streak_ = 0;
  probing_ = true;
  return k_min_;  // one draft (k_min) tells whether drafts land again, at the cost of one row
}

int SpecCostModel::trim(int k, std::span<const double> row_bytes) const {
  if (!fitted() || probing_ || k <= 0) return k;
  return best_k(std::min(k, k_max_), row_bytes);
}

// The last text's acceptance stays as a prior worth one pass (a slot's requests tend to be alike;
// a text that differs outweighs it within a pass or two), and so does the probe gap, capped.
void SpecCostModel::new_sequence() {
  std::vector<double> a(static_cast<size_t>(k_max_));
  for (int i = 0; i < k_max_; ++i) a[static_cast<size_t>(i)] = acceptance(i);
  acc_ = a;
  std::fill(seen_.begin(), seen_.end(), 1.0);
  plain_streak_ = draft_streak_ = 0;
  probe_gap_ = std::min(probe_gap_, kNewSequenceProbeGap);
  probing_ = refreshing_ = false;
}

void SpecCostModel::observe(const SpecPass& p) {
  STRATA_CHECK(p.k >= 0 && p.k <= k_max_ && p.accepted >= 0 && p.accepted <= p.k, "speculative cost model: pass of {} drafts, {} accepted (k_max {})",
               p.k, p.accepted, k_max_);
  for (int i = 0; i < p.k && i <= p.accepted; ++i) {
    acc_[i] = acc_[i] * kDecay + (i < p.accepted ? 1.0 : 0.0);
    seen_[i] = seen_[i] * kDecay + 1.0;
  }
  const bool probed = probing_ && p.k > 0;
  probing_ = false;
  const bool refresh = refreshing_ && p.k == 0;
  refreshing_ = false;
  if (p.k == 0) {
    const double alpha = refresh ? kRefreshAlpha : kAlpha;
    ewma(c0_, clip(p.compute_s, c0_, n_plain_), n_plain_, alpha);
    ewma(b0_, static_cast<double>(p.bytes_read), n_plain_, alpha);
    ++n_plain_;
  } else {
    const double compute = clip(p.compute_s, c0_ + p.k * std::max(0.0, row_c_), n_multi_);
    ewma(row_c_, (compute - c0_) / p.k, n_multi_, kAlpha);
    ewma(row_b_, (static_cast<double>(p.bytes_read) - b0_) / p.k, n_multi_, kAlpha);
    ++n_multi_;
  }
  if (p.k > 0) {
    ewma(draft_tok_s_, clip(p.draft_s / p.k, draft_tok_s_, n_draft_), n_draft_, kAlpha);
    ++n_draft_;
  }
  if (p.k > 0 && p.predicted_extra >= 0) {
    ewma(pred_, p.predicted_extra, n_pred_, kAlpha);
    ewma(actual_, static_cast<double>(p.extra_read), n_pred_, kAlpha);
    ++n_pred_;
  }
  if (p.deferred_rows > 0) ewma(catch_up_row_s_, p.deferred_s / p.deferred_rows, n_catch_up_++, kAlpha);
  if (p.bytes_read > 0) {
    ewma(wait_, p.io_wait_s, n_io_, kAlpha);
    ewma(bytes_, static_cast<double>(p.bytes_read), n_io_, kAlpha);
    ++n_io_;
  }
  // A rejected probe doubles the gap to the next, and so does one after which drafts could not pay
  // even if all were accepted while no pass reads experts (compute costs alone, which stay as they
  // are: rows or drafting cost too much; with reads the costs move as the cache fills); an accepted
  // one brings it back to the start when drafts now pay, else halves it (a probe accepted now and
  // then at an acceptance that does not pay would otherwise keep probing every kProbeGap passes).
  if (probed) {
    const bool back_off = p.accepted == 0 || (n_io_ == 0 && !could_pay());
    probe_gap_ = back_off ? std::min(probe_gap_ * 2, kMaxProbeGap) : best_k(k_max_) > 0 ? kProbeGap : std::max(kProbeGap, probe_gap_ / 2);
  }
}

}  // namespace strata
