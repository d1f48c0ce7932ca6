#pragma once
// Scoring a model's logits against text (strata perplexity): negative log-likelihoods, and the
// KL divergence / top-1 agreement of one set of logits against reference log-probabilities (the
// way quantizations and lossy engine settings are judged). All sums in double.
#include <cstdint>
#include <functional>
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
// The same from the reference's logits (both log-softmaxes in double): logits equal to the
// reference's, bit for bit, give exactly 0.
KlPoint kl_divergence_logits(const float* ref_logits, const float* logits, int n);

// Linear interpolation between the closest ranks of sorted values (llama-perplexity's and numpy's
// default): fraction 0 the smallest, 1 the largest, 0.5 the median. `sorted` must not be empty.
double percentile(const std::vector<float>& sorted, double fraction);

// What a KL-divergence run reports (llama-perplexity's fields): the KL's mean (with its standard
// error), median, p95, p99 and max; top-1 agreement with its standard error; both perplexities and
// their difference with its standard error (from the per-token NLL differences d: PPL = base PPL x
// e^mean(d), so the error is PPL x stderr(d)).
struct KlSummary {
  int64_t count = 0;
  double mean = 0, err = 0, median = 0, p95 = 0, p99 = 0, max = 0;
  double top1 = 0, top1_err = 0;
  double ppl = 0, base_ppl = 0, delta_ppl = 0, delta_ppl_err = 0;
};

// Accumulates scored positions: this run's NLL of the target, the base's, and the KL point.
class KlStats {
 public:
  void add(double nll, double base_nll, const KlPoint& k);
  int64_t count() const { return static_cast<int64_t>(kls_.size()); }
  KlSummary summary() const;  // needs at least one position

 private:
  double nll_ = 0, base_nll_ = 0, kl_ = 0, kl2_ = 0, dnll2_ = 0;
  int64_t same_ = 0;
  std::vector<float> kls_;
};

// llama-perplexity's windows: the text's tokens cut into n_tokens / n_ctx windows of n_ctx; in
// each, positions n_ctx/2 .. n_ctx-2 are scored (each predicts the next token).
struct PplWindows {
  int n_ctx = 0, n_chunk = 0, first = 0;
  int scored_per_chunk() const { return n_ctx - 1 - first; }
};
PplWindows ppl_windows(int64_t n_tokens, int n_ctx, int max_chunks);

class Engine;
// Evaluates the windows of `tokens` in sequence 0, each from an empty cache (bos >= 0 replaces each
// window's first token), and hands every scored position's logits row [n_vocab] (a view valid
// during the call) and the token it predicts to `scored`, in order; `window_done(c)` after window c.
// strata perplexity and strata calibrate score text through it.
// context: given, each window's unscored first half is evaluated alone between context(true) and
// context(false) (--pp-model's prompt), then the scored rest; null: the window in one go.
using ScoredRowFn = std::function<void(const float* row, int32_t target)>;
using ContextFn = std::function<void(bool begin)>;
void score_windows(Engine& eng, const std::vector<int32_t>& tokens, const PplWindows& w, int32_t bos, const ScoredRowFn& scored,
                   const std::function<void(int window)>& window_done = {}, const ContextFn& context = {});

}  // namespace strata
