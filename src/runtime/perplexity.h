#pragma once
// Scoring a model's logits against text (strata perplexity): negative log-likelihoods, and the
// KL divergence / top-1 agreement of one set of logits against reference log-probabilities (the
// way quantizations and lossy engine settings are judged). All sums in double.
#include <cstdint>
#include <vector>

namespace strata {

// log softmax of n logits.
void log_softmax(const float* logits, int n, std::vector<float>& out);
// -log softmax(logits)[target].
double token_nll(const float* logits, int n, int32_t target);

struct KlPoint {
  double kl = 0;          // sum_i p_ref(i) * (log p_ref(i) - log p(i))
  bool same_top1 = false;  // argmax of the reference == argmax of logits (ties: lowest id)
};
// ref_logp: reference log-probabilities (log_softmax of the reference logits); logits: the row to judge.
KlPoint kl_divergence(const float* ref_logp, const float* logits, int n);

// llama-perplexity's windows: the text's tokens cut into n_tokens / n_ctx windows of n_ctx; in
// each, positions n_ctx/2 .. n_ctx-2 are scored (each predicts the next token).
struct PplWindows {
  int n_ctx = 0, n_chunk = 0, first = 0;
  int scored_per_chunk() const { return n_ctx - 1 - first; }
};
PplWindows ppl_windows(int64_t n_tokens, int n_ctx, int max_chunks);

}  // namespace strata
