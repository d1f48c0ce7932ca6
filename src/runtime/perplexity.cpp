#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "runtime/engine.h"

namespace strata {

void log_softmax(const float* logits, int n, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n));
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(double(logits[i]) - lse);
}

double token_nll(const float* logits, int n, int32_t target) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  return mx + std::log(sum) - double(logits[target]);
}

KlPoint kl_divergence(const float* ref_logp, const float* logits, int n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  KlPoint k;
  int top_ref = 0, top = 0;
  for (int i = 0; i < n; ++i) {
    const double lp_ref = ref_logp[i];
    k.kl += std::exp(lp_ref) * (lp_ref - (double(logits[i]) - lse));
    if (ref_logp[i] > ref_logp[top_ref]) top_ref = i;
    if (logits[i] > logits[top]) top = i;
  }
  k.kl = std::max(0.0, k.kl);
  k.same_top1 = top_ref == top;
  return k;
}

static double log_sum_exp(const float* logits, int n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  return mx + std::log(sum);
}

KlPoint kl_divergence_logits(const float* ref_logits, const float* logits, int n) {
  const double lse_ref = log_sum_exp(ref_logits, n), lse = log_sum_exp(logits, n);
  KlPoint k;
  int top_ref = 0, top = 0;
  for (int i = 0; i < n; ++i) {
    const double lp_ref = double(ref_logits[i]) - lse_ref;
    k.kl += std::exp(lp_ref) * (lp_ref - (double(logits[i]) - lse));
    if (ref_logits[i] > ref_logits[top_ref]) top_ref = i;
    if (logits[i] > logits[top]) top = i;
  }
  k.kl = std::max(0.0, k.kl);
  k.same_top1 = top_ref == top;
  return k;
}

double percentile(const std::vector<float>& sorted, double fraction) {
  const size_t n = sorted.size();
  if (fraction <= 0 || n == 1) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double at = fraction * double(n - 1);
  const size_t lo = static_cast<size_t>(at);
  const double t = at - double(lo);
  return (1 - t) * double(sorted[lo]) + t * double(sorted[std::min(lo + 1, n - 1)]);
}

void KlStats::add(double nll, double base_nll, const KlPoint& k) {
  nll_ += nll;
  base_nll_ += base_nll;
  dnll2_ += (nll - base_nll) * (nll - base_nll);
  kl_ += k.kl;
  kl2_ += k.kl * k.kl;
  same_ += k.same_top1;
  kls_.push_back(static_cast<float>(k.kl));
}

KlSummary KlStats::summary() const {
  KlSummary s;
  s.count = count();
  if (s.count == 0) return s;
  const double n = double(s.count);
  // Standard error of a mean from the sums of x and x^2 (population variance / n).
  const auto stderr_of = [n](double sum, double sum2) {
    const double m = sum / n;
    return std::sqrt(std::max(0.0, sum2 / n - m * m) / n);
  };
  s.mean = kl_ / n;
  s.err = stderr_of(kl_, kl2_);
  std::vector<float> sorted = kls_;
  std::sort(sorted.begin(), sorted.end());
  s.median = percentile(sorted, 0.5);
  s.p95 = percentile(sorted, 0.95);
  s.p99 = percentile(sorted, 0.99);
  s.max = sorted.back();
  s.top1 = double(same_) / n;
  s.top1_err = s.count > 1 ? std::sqrt(s.top1 * (1 - s.top1) / (n - 1)) : 0.0;
  s.ppl = std::exp(nll_ / n);
  s.base_ppl = std::exp(base_nll_ / n);
  s.delta_ppl = s.ppl - s.base_ppl;
  s.delta_ppl_err = s.ppl * stderr_of(nll_ - base_nll_, dnll2_);
  return s;
}

PplWindows ppl_windows(int64_t n_tokens, int n_ctx, int max_chunks) {
  PplWindows w;
  w.n_ctx = n_ctx;
  w.first = n_ctx / 2;
  w.n_chunk = static_cast<int>(n_tokens / n_ctx);
  if (max_chunks > 0) w.n_chunk = std::min(w.n_chunk, max_chunks);
  return w;
}

void score_windows(Engine& eng, const std::vector<int32_t>& tokens, const PplWindows& w, int32_t bos, const ScoredRowFn& scored,
                   const std::function<void(int window)>& window_done, const ContextFn& context) {
  const int n_ctx = w.n_ctx;
  std::vector<int32_t> win(static_cast<size_t>(n_ctx));
  for (int c = 0; c < w.n_chunk; ++c) {
    const auto src = tokens.begin() + static_cast<int64_t>(c) * n_ctx;
    std::copy(src, src + n_ctx, win.begin());
    if (bos >= 0) win[0] = bos;
    int from = 0;  // the first token of the scored pass(es)
    if (context && w.first > 0) {
      context(true);
      eng.eval_rows(0, win.data(), w.first, 0, w.first - 1, [](int, const float*) {});
      context(false);
      from = w.first;
    }
    eng.eval_rows(0, win.data() + from, n_ctx - from, from, w.first - from, [&](int at, const float* row) {
      const int i = at + from;
      if (i < n_ctx - 1) scored(row, win[static_cast<size_t>(i) + 1]);
    });
    if (window_done) window_done(c);
  }
}

}  // namespace strata
