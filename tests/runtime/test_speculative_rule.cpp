// The speculative-sampling rule against distributions written down by hand: drafts drawn from a
// draft distribution q (or a point mass, as lookup drafts are) and passed through spec_accept
// must come out distributed as the target's p. Each case runs kRuleTrials trials with fixed seeds and
// checks every token's frequency within 5 standard deviations of p (a correct rule fails one
// check with probability < 6e-7; the seeds are fixed, so the test is deterministic).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/speculative.h"

using namespace strata;

namespace {

constexpr int kRuleTrials = 200000;

SamplerParams rule_params() {
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// Runs the rule kRuleTrials times; q == nullptr: the draft is always `fixed` (a point mass).
void expect_target(const std::vector<float>& p, const std::vector<float>* q, int32_t fixed, double want_accept) {
  const int nv = static_cast<int>(p.size());
  Sampler s(rule_params(), nv);
  std::mt19937_64 draft_rng(99);
  std::discrete_distribution<int32_t> qd(q ? q->begin() : p.begin(), q ? q->end() : p.end());
  std::vector<float> residual(p.size());
  std::vector<int> count(p.size(), 0);
  int accepted_n = 0;
  for (int i = 0; i < kRuleTrials; ++i) {
    const int32_t x = q ? qd(draft_rng) : fixed;
    bool accepted = false;
    const int32_t t = spec_accept(s, p.data(), q ? q->data() : nullptr, x, residual.data(), accepted);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, nv);
    if (accepted) {
      ASSERT_EQ(t, x);
      accepted_n++;
    }
    count[t]++;
  }
  for (int t = 0; t < nv; ++t) {
    if (p[t] == 0) {
      EXPECT_EQ(count[t], 0) << "token " << t << " has p = 0 but came out";
      continue;
    }
    const double f = double(count[t]) / kRuleTrials, sigma = std::sqrt(p[t] * (1 - p[t]) / kRuleTrials);
    EXPECT_NEAR(f, p[t], 5 * sigma) << "token " << t << ": target p = " << p[t];
  }
  // Acceptance probability: sum over x of min(p(x), q(x)).
  const double a = double(accepted_n) / kRuleTrials, sa = std::sqrt(want_accept * (1 - want_accept) / kRuleTrials);
  EXPECT_NEAR(a, want_accept, 5 * sa + 1e-9);
}

}  // namespace

TEST(SpecSampling, DraftModelDistributionGivesTheTarget) {
  const std::vector<float> p = {0.4f, 0.3f, 0.2f, 0.1f, 0.0f};
  const std::vector<float> q = {0.1f, 0.2f, 0.3f, 0.2f, 0.2f};  // drafts tokens the target never picks (4)
  expect_target(p, &q, -1, 0.1 + 0.2 + 0.2 + 0.1 + 0.0);
}

TEST(SpecSampling, IdenticalDistributionsAlwaysAccept) {
  const std::vector<float> p = {0.5f, 0.25f, 0.125f, 0.125f};
  expect_target(p, &p, -1, 1.0);
}

TEST(SpecSampling, LookupPointMassGivesTheTarget) {
  const std::vector<float> p = {0.1f, 0.6f, 0.2f, 0.1f};
  expect_target(p, nullptr, 1, 0.6);  // accepted with p(1)
  expect_target(p, nullptr, 3, 0.1);
}

TEST(SpecSampling, DraftOutsideTheTargetSupportIsNeverKept) {
  const std::vector<float> p = {0.0f, 0.7f, 0.3f};
  expect_target(p, nullptr, 0, 0.0);
}

// Sampler::probs is the distribution sample() draws from: top-k and temperature by hand.
TEST(SpecSampling, SamplerProbsIsWhatSampleDraws) {
  SamplerParams sp = rule_params();
  sp.top_k = 2;
  sp.temp = 0.5f;
  const std::vector<float> logits = {std::log(1.0f), std::log(3.0f), std::log(2.0f), std::log(0.5f)};
  Sampler s(sp, 4);
  std::vector<float> p(4);
  s.probs(logits.data(), {}, p.data());
  // T = 0.5 squares the weights of the top 2 (3 and 2): 9/13, 4/13.
  EXPECT_NEAR(p[1], 9.0f / 13, 1e-6);
  EXPECT_NEAR(p[2], 4.0f / 13, 1e-6);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[3], 0.0f);
  std::vector<int> count(4, 0);
  for (int i = 0; i < kRuleTrials; ++i) count[s.sample(logits.data(), {})]++;
  for (int t = 0; t < 4; ++t) {
    const double sigma = std::sqrt(p[t] * (1 - p[t]) / kRuleTrials);
    EXPECT_NEAR(double(count[t]) / kRuleTrials, p[t], 5 * sigma + 1e-9) << t;
  }
  SamplerParams g = rule_params();
  g.temp = 0;
  Sampler gs(g, 4);
  gs.probs(logits.data(), {}, p.data());
  EXPECT_EQ(p, (std::vector<float>{0, 1, 0, 0}));
}

// A point-mass draft through spec_choose takes exactly plain sampling's draw: with the same seed,
// the tokens are Sampler::sample's, and the draft is accepted iff it is that token.
TEST(SpecSampling, PointMassDraftsTakePlainSamplingsDraw) {
  SamplerParams sp = rule_params();
  sp.temp = 0.8f;
  const std::vector<float> logits = {0.1f, 1.0f, 0.7f, -0.5f, 0.3f};
  Sampler plain(sp, 5), spec(sp, 5);
  std::vector<float> p(5), r(5);
  int accepted_n = 0;
  for (int i = 0; i < 2000; ++i) {
    const int32_t x = i % 5;
    bool accepted = false;
    const int32_t t = spec_choose(spec, logits.data(), {}, x, nullptr, p.data(), r.data(), accepted);
    ASSERT_EQ(t, plain.sample(logits.data(), {})) << "draw " << i;
    EXPECT_EQ(accepted, t == x);
    accepted_n += accepted ? 1 : 0;
  }
  EXPECT_GT(accepted_n, 0);
}
