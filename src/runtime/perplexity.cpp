#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

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

PplWindows ppl_windows(int64_t n_tokens, int n_ctx, int max_chunks) {
  PplWindows w;
  w.n_ctx = n_ctx;
  w.first = n_ctx / 2;
  w.n_chunk = static_cast<int>(n_tokens / n_ctx);
  if (max_chunks > 0) w.n_chunk = std::min(w.n_chunk, max_chunks);
  return w;
}

}  // namespace strata
