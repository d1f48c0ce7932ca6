// runtime/perplexity.h on inputs whose answers are checked by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/perplexity.h"

using namespace strata;

TEST(Perplexity, TokenNllOfKnownDistribution) {
  // softmax(log 1, log 2, log 5) = (0.125, 0.25, 0.625)
  const float logits[3] = {0.0f, std::log(2.0f), std::log(5.0f)};
  EXPECT_NEAR(token_nll(logits, 3, 0), std::log(8.0), 1e-6);
  EXPECT_NEAR(token_nll(logits, 3, 2), std::log(8.0 / 5.0), 1e-6);
  // A uniform row over 4096 tokens: perplexity 4096 whatever the target.
  std::vector<float> flat(4096, 3.5f);
  EXPECT_NEAR(std::exp(token_nll(flat.data(), 4096, 17)), 4096.0, 1e-6 * 4096);
  // Shifting every logit changes nothing.
  const float shifted[3] = {100.0f, 100.0f + std::log(2.0f), 100.0f + std::log(5.0f)};
  EXPECT_NEAR(token_nll(shifted, 3, 1), std::log(4.0), 1e-5);
}

TEST(Perplexity, LogSoftmaxSumsToOne) {
  const float logits[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  std::vector<float> lp;
  log_softmax(logits, 4, lp);
  double s = 0;
  for (float v : lp) s += std::exp(double(v));
  EXPECT_NEAR(s, 1.0, 1e-6);
  EXPECT_NEAR(lp[3] - lp[0], 2.0, 1e-6);
}

TEST(Perplexity, KlDivergenceByHand) {
  // p = (0.5, 0.5), q = softmax(0, log 3) = (0.25, 0.75):
  // KL(p||q) = 0.5 log(0.5/0.25) + 0.5 log(0.5/0.75) = 0.5 log 2 + 0.5 log(2/3) = 0.5 log(4/3)
  const float ref_logp[2] = {std::log(0.5f), std::log(0.5f)};
  const float q_logits[2] = {0.0f, std::log(3.0f)};
  const KlPoint k = kl_divergence(ref_logp, q_logits, 2);
  EXPECT_NEAR(k.kl, 0.5 * std::log(4.0 / 3.0), 1e-6);
  EXPECT_FALSE(k.same_top1);  // the reference tie goes to the lowest id (0), the argmax of q is 1
}

TEST(Perplexity, KlDivergenceIdenticalIsZeroAndTop1) {
  const float logits[3] = {0.2f, 1.7f, -0.4f};
  std::vector<float> lp;
  log_softmax(logits, 3, lp);
  const KlPoint k = kl_divergence(lp.data(), logits, 3);
  EXPECT_NEAR(k.kl, 0.0, 1e-7);
  EXPECT_TRUE(k.same_top1);
  // A row whose argmax moved to id 2: KL > 0, top-1 differs.
  const float other[3] = {0.2f, 1.7f, 2.4f};
  const KlPoint k2 = kl_divergence(lp.data(), other, 3);
  EXPECT_GT(k2.kl, 0.1);
  EXPECT_FALSE(k2.same_top1);
}

TEST(Perplexity, WindowsAsLlamaPerplexity) {
  const PplWindows w = ppl_windows(1000, 256, 0);
  EXPECT_EQ(w.n_chunk, 3);  // 1000 / 256
  EXPECT_EQ(w.first, 128);
  EXPECT_EQ(w.scored_per_chunk(), 127);  // positions 128..254 predict tokens 129..255
  EXPECT_EQ(ppl_windows(1000, 256, 2).n_chunk, 2);
  EXPECT_EQ(ppl_windows(100, 256, 0).n_chunk, 0);
}

TEST(Perplexity, PercentileInterpolatesBetweenRanks) {
  const std::vector<float> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 2.5);   // between ranks 1 and 2
  EXPECT_DOUBLE_EQ(percentile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0.95), 3.85);  // 0.95 * 3 = 2.85: 3 + 0.85
  EXPECT_DOUBLE_EQ(percentile({7.0f}, 0.99), 7.0);
  std::vector<float> hundred(101);
  for (int i = 0; i <= 100; ++i) hundred[static_cast<size_t>(i)] = static_cast<float>(i);
  EXPECT_DOUBLE_EQ(percentile(hundred, 0.99), 99.0);
  EXPECT_DOUBLE_EQ(percentile(hundred, 0.5), 50.0);
}

// Ten positions whose figures are known: KL 0.1 .. 1.0, eight of ten with the same top-1, this
// run's NLL 0.1 above the base's at every position but the last (0.3 above).
TEST(Perplexity, KlStatsOfKnownPositions) {
  KlStats s;
  for (int i = 1; i <= 10; ++i) {
    KlPoint k;
    k.kl = 0.1 * i;
    k.same_top1 = i <= 8;
    s.add(2.0 + (i == 10 ? 0.3 : 0.1), 2.0, k);
  }
  const KlSummary r = s.summary();
  EXPECT_EQ(r.count, 10);
  EXPECT_NEAR(r.mean, 0.55, 1e-12);
  // Population variance of 0.1..1.0 is 0.0825; the mean's standard error sqrt(0.0825 / 10).
  EXPECT_NEAR(r.err, std::sqrt(0.0825 / 10), 1e-9);
  EXPECT_NEAR(r.median, 0.55, 1e-6);          // between 0.5 and 0.6
  EXPECT_NEAR(r.p95, 0.1 * (1 + 0.95 * 9), 1e-6);  // 0.9555
  EXPECT_NEAR(r.p99, 0.1 * (1 + 0.99 * 9), 1e-6);  // 0.9911
  EXPECT_NEAR(r.max, 1.0, 1e-6);
  EXPECT_DOUBLE_EQ(r.top1, 0.8);
  EXPECT_NEAR(r.top1_err, std::sqrt(0.8 * 0.2 / 9), 1e-12);
  EXPECT_NEAR(r.base_ppl, std::exp(2.0), 1e-9);
  const double dm = 0.12;  // mean NLL difference: (9 * 0.1 + 0.3) / 10
  EXPECT_NEAR(r.ppl, std::exp(2.0 + dm), 1e-9);
  EXPECT_NEAR(r.delta_ppl, std::exp(2.0 + dm) - std::exp(2.0), 1e-9);
  // The differences' population variance: 0.9 * 0.02^2 + 0.1 * 0.18^2 = 0.0036.
  EXPECT_NEAR(r.delta_ppl_err, r.ppl * std::sqrt(0.0036 / 10), 1e-9);
}

TEST(Perplexity, KlStatsOfIdenticalRowsAreZero) {
  KlStats s;
  for (int i = 0; i < 5; ++i) s.add(3.0, 3.0, KlPoint{0.0, true});
  const KlSummary r = s.summary();
  EXPECT_EQ(r.mean, 0.0);
  EXPECT_EQ(r.max, 0.0);
  EXPECT_EQ(r.top1, 1.0);
  EXPECT_EQ(r.top1_err, 0.0);
  EXPECT_EQ(r.delta_ppl, 0.0);
  EXPECT_EQ(r.delta_ppl_err, 0.0);
}
