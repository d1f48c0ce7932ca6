#include "runtime/sampler.h"

#include <algorithm>
#include <limits>
#include <cmath>

#include "core/error.h"

namespace strata {

Sampler::Sampler(const SamplerParams& p, int n_vocab) : p_(p), n_vocab_(n_vocab), rng_(p.seed) {
  STRATA_CHECK(n_vocab > 0, "sampler: empty vocabulary");
  STRATA_CHECK(std::isfinite(p.temp), "sampler: temperature must be finite");
  STRATA_CHECK(p.top_p > 0.0f, "sampler: top_p must be > 0 (got {})", p.top_p);
  STRATA_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "sampler: min_p must be in [0, 1] (got {})", p.min_p);
  STRATA_CHECK(p.repeat_penalty > 0.0f, "sampler: repeat_penalty must be > 0 (got {})", p.repeat_penalty);
  work_.resize(static_cast<size_t>(n_vocab));
  cand_.resize(static_cast<size_t>(n_vocab));
  counts_.assign(static_cast<size_t>(n_vocab), 0);
}

int32_t Sampler::argmax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

void Sampler::penalize(const float* logits, const std::vector<int32_t>& history) {
  std::copy(logits, logits + n_vocab_, work_.begin());
  for (const auto& [t, b] : p_.logit_bias)
    if (t >= 0 && t < n_vocab_) work_[t] = b <= -100.0f ? -std::numeric_limits<float>::infinity() : work_[t] + b;
  const bool penalize = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if (!penalize || history.empty()) return;
  const size_t n = history.size(), from = p_.repeat_last_n < 0 ? 0 : n - std::min<size_t>(n, static_cast<size_t>(p_.repeat_last_n));
  for (size_t i = from; i < n; ++i)
    if (history[i] >= 0 && history[i] < n_vocab_) counts_[history[i]]++;
  for (size_t i = from; i < n; ++i) {
    const int32_t t = history[i];
    if (t < 0 || t >= n_vocab_ || counts_[t] == 0) continue;
    float& l = work_[t];
    l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    l -= static_cast<float>(counts_[t]) * p_.frequency_penalty + p_.presence_penalty;
    counts_[t] = 0;  // apply once per distinct token
  }
}

int Sampler::candidates() {
  int n = n_vocab_;
  for (int i = 0; i < n; ++i) cand_[i] = {work_[i], i};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (p_.top_k > 0 && p_.top_k < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.begin() + n, by_logit);
    n = p_.top_k;
  } else {
    std::sort(cand_.begin(), cand_.begin() + n, by_logit);
  }
  // Softmax with temperature over the survivors.
  const float mx = cand_[0].first;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    cand_[i].first = std::exp((cand_[i].first - mx) / p_.temp);
    sum += cand_[i].first;
  }
  for (int i = 0; i < n; ++i) cand_[i].first = static_cast<float>(cand_[i].first / sum);
  if (p_.min_p > 0.0f) {
    const float cut = cand_[0].first * p_.min_p;
    int keep = 1;
    while (keep < n && cand_[keep].first >= cut) ++keep;
    n = keep;
  }
  if (p_.top_p < 1.0f) {
    double acc = 0;
    int keep = 0;
    while (keep < n) {
      acc += cand_[keep].first;
      ++keep;
      if (acc >= p_.top_p) break;
    }
    n = keep;
  }
  return n;
}

int32_t Sampler::sample(const float* logits, const std::vector<int32_t>& history) {
  penalize(logits, history);
  if (greedy()) return argmax(work_.data(), n_vocab_);
  const int n = candidates();
  double total = 0;
  for (int i = 0; i < n; ++i) total += cand_[i].first;
  std::uniform_real_distribution<double> dist(0.0, total);
  double r = dist(rng_), acc = 0;
  for (int i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

void Sampler::probs(const float* logits, const std::vector<int32_t>& history, float* p) {
  penalize(logits, history);
  std::fill(p, p + n_vocab_, 0.0f);
  if (greedy()) {
    p[argmax(work_.data(), n_vocab_)] = 1.0f;
    return;
  }
  const int n = candidates();
  double total = 0;
  for (int i = 0; i < n; ++i) total += cand_[i].first;
  for (int i = 0; i < n; ++i) p[cand_[i].second] = static_cast<float>(cand_[i].first / total);
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::draw(const float* w) {
  double total = 0;
  int32_t last = -1;
  for (int i = 0; i < n_vocab_; ++i)
    if (w[i] > 0) total += w[i], last = i;
  STRATA_CHECK(last >= 0, "sampler: nothing to draw from (all weights are zero)");
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_), acc = 0;
  for (int i = 0; i < n_vocab_; ++i) {
    if (w[i] <= 0) continue;
    acc += w[i];
    if (r < acc) return i;
  }
  return last;
}

}  // namespace strata
