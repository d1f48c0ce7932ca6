#pragma once
// Token sampling: greedy (temp <= 0, ties to the lowest id) or temperature with top-k,
// top-p, min-p, and repetition / presence / frequency penalties; deterministic for a seed.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace strata {

struct SamplerParams {
  float temp = 0.8f;
  int top_k = 40;          // <= 0: off
  float top_p = 0.95f;     // >= 1: off
  float min_p = 0.05f;     // <= 0: off
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0xC0FFEE;
  // Added to a token's logit before penalties and sampling (and after a grammar's mask); -100 (or
  // less) bans the token (its logit becomes -inf). OpenAI's logit_bias.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
 public:
  Sampler(const SamplerParams& p, int n_vocab);
  // Picks the next token from logits[n_vocab]; `history` is the sequence so far (for penalties).
  int32_t sample(const float* logits, const std::vector<int32_t>& history);
  const SamplerParams& params() const { return p_; }
  bool greedy() const { return p_.temp <= 0.0f; }
  int n_vocab() const { return n_vocab_; }

  // The distribution sample() draws from, dense: p[n_vocab], summing to 1 (greedy: 1 at the argmax
  // of the penalized logits). Speculative sampling compares drafts against it.
  void probs(const float* logits, const std::vector<int32_t>& history, float* p);
  // A number uniform in [0, 1) from this sampler's generator.
  double uniform();
  // A token drawn in proportion to w[n_vocab] (non-negative, not all zero), from this sampler's generator.
  int32_t draw(const float* w);

  static int32_t argmax(const float* logits, int n);

 private:
  void penalize(const float* logits, const std::vector<int32_t>& history);  // work_ = penalized logits
  int candidates();  // from work_: the survivors cand_[0..n) with their (unnormalized) probabilities

  SamplerParams p_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::vector<float> work_;           // [n_vocab] penalized logits
  std::vector<std::pair<float, int32_t>> cand_;  // [n_vocab] candidates
  std::vector<int32_t> counts_;       // [n_vocab] occurrences in the penalty window
};

}  // namespace strata
