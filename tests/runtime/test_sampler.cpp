// The sampler against distributions computed by hand: a 5-token vocabulary whose logits are
// logs of simple weights, so every filter leaves a distribution that can be written down
// exactly. Each case draws N tokens with a fixed seed and checks every token's frequency within
// 5 standard deviations of its binomial expectation (a correct sampler fails one check with
// probability < 6e-7; the seeds are fixed, so the test is deterministic anyway), and tokens the
// filters remove must never appear. Greedy decoding and penalties are also checked exactly.
//
// Order of operations (runtime/sampler.cpp): penalties on the logits, top-k, softmax at the
// temperature, min-p, then top-p on the tempered probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"

using namespace strata;

namespace {

constexpr int kN = 100000;  // draws per distribution

// Logits ln(w) for weights w: at temperature 1 the probabilities are w / sum(w).
std::vector<float> log_weights(const std::vector<double>& w) {
  std::vector<float> l;
  for (double x : w) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// Normalizes weights (0 = excluded).
std::vector<double> normalized(std::vector<double> w) {
  double s = 0;
  for (double x : w) s += x;
  for (double& x : w) x /= s;
  return w;
}

SamplerParams plain(float temp = 1.0f) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

// Draws kN tokens and compares the frequencies with `want` (probabilities summing to 1).
void expect_distribution(const SamplerParams& p, const std::vector<float>& logits, const std::vector<double>& want,
                         const std::vector<int32_t>& history = {}) {
  ASSERT_EQ(logits.size(), want.size());
  Sampler s(p, static_cast<int>(logits.size()));
  std::vector<int> count(logits.size(), 0);
  for (int i = 0; i < kN; ++i) {
    const int32_t t = s.sample(logits.data(), history);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, static_cast<int32_t>(logits.size()));
    count[t]++;
  }
  for (size_t t = 0; t < want.size(); ++t) {
    if (want[t] == 0) {
      EXPECT_EQ(count[t], 0) << "token " << t << " is filtered out but was drawn";
      continue;
    }
    const double f = double(count[t]) / kN, sigma = std::sqrt(want[t] * (1 - want[t]) / kN);
    EXPECT_NEAR(f, want[t], 5 * sigma) << "token " << t << ": expected p = " << want[t];
  }
}

const std::vector<double> kW = {4, 3, 2, 1, 0.5};  // sum 10.5

}  // namespace

TEST(Sampler, TemperatureOneIsTheSoftmax) {
  expect_distribution(plain(), log_weights(kW), normalized(kW));
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  // T = 0.5: p ~ w^2; T = 2: p ~ sqrt(w).
  expect_distribution(plain(0.5f), log_weights(kW), normalized({16, 9, 4, 1, 0.25}));
  expect_distribution(plain(2.0f), log_weights(kW), normalized({2, std::sqrt(3.0), std::sqrt(2.0), 1, std::sqrt(0.5)}));
}

TEST(Sampler, TopK) {
  auto p = plain();
  p.top_k = 2;
  expect_distribution(p, log_weights(kW), normalized({4, 3, 0, 0, 0}));
  p.top_k = 1;
  expect_distribution(p, log_weights(kW), {1, 0, 0, 0, 0});
  p.top_k = 5;  // the whole vocabulary; so is anything larger
  expect_distribution(p, log_weights(kW), normalized(kW));
  p.top_k = 50;
  expect_distribution(p, log_weights(kW), normalized(kW));
}

TEST(Sampler, TopKOrderDoesNotDependOnTokenOrder) {
  // The same weights in another order: top-2 keeps the two largest wherever they are.
  auto p = plain();
  p.top_k = 2;
  expect_distribution(p, log_weights({1, 0.5, 4, 2, 3}), normalized({0, 0, 4, 0, 3}));
}

TEST(Sampler, TopP) {
  // Probabilities 4/10.5 = .381, .286, .190, .095, .048; cumulative .381 .667 .857 .952 1.
  auto p = plain();
  p.top_p = 0.6f;  // .381 < .6 <= .667: two tokens
  expect_distribution(p, log_weights(kW), normalized({4, 3, 0, 0, 0}));
  p.top_p = 0.7f;  // three tokens
  expect_distribution(p, log_weights(kW), normalized({4, 3, 2, 0, 0}));
  p.top_p = 0.3f;  // the first token alone already covers it
  expect_distribution(p, log_weights(kW), {1, 0, 0, 0, 0});
  p.top_p = 0.99f;  // everything
  expect_distribution(p, log_weights(kW), normalized(kW));
}

TEST(Sampler, MinP) {
  // Kept: p >= min_p * p_max, i.e. w >= 4 * min_p.
  auto p = plain();
  p.min_p = 0.3f;  // w >= 1.2
  expect_distribution(p, log_weights(kW), normalized({4, 3, 2, 0, 0}));
  p.min_p = 0.2f;  // w >= 0.8
  expect_distribution(p, log_weights(kW), normalized({4, 3, 2, 1, 0}));
  p.min_p = 1.0f;  // only the maximum
  expect_distribution(p, log_weights(kW), {1, 0, 0, 0, 0});
}

TEST(Sampler, FiltersActOnTheTemperedDistribution) {
  // T = 0.5: p ~ {16, 9, 4, 1, .25} / 30.25 = .529 .298 .132 .033 .008.
  auto p = plain(0.5f);
  p.top_p = 0.8f;  // cumulative .529 .826: two tokens (at T = 1 it would take three)
  expect_distribution(p, log_weights(kW), normalized({16, 9, 0, 0, 0}));
  p = plain(0.5f);
  p.min_p = 0.2f;  // w^2 >= 3.2: three tokens (at T = 1, w >= 0.8 would keep four)
  expect_distribution(p, log_weights(kW), normalized({16, 9, 4, 0, 0}));
}

TEST(Sampler, FiltersCombine) {
  // top-k 4 -> {4,3,2,1}; min-p 0.2 on 4/10: keeps w >= 0.8 (all four); top-p 0.8 on
  // .4 .3 .2 .1: cumulative .4 .7 .9 -> three tokens.
  auto p = plain();
  p.top_k = 4;
  p.min_p = 0.2f;
  p.top_p = 0.8f;
  expect_distribution(p, log_weights(kW), normalized({4, 3, 2, 0, 0}));
}

TEST(Sampler, DefaultParamsFilter) {
  // Defaults: T 0.8, top-k 40, top-p 0.95, min-p 0.05. p ~ w^1.25 = 5.657 3.948 2.378 1 .420
  // (sum 13.403). min-p keeps .420 (> .05 * 5.657); cumulative .422 .717 .894 .969: top-p
  // keeps four.
  SamplerParams p;
  std::vector<double> w;
  for (double x : kW) w.push_back(std::pow(x, 1.25));
  w.back() = 0;
  expect_distribution(p, log_weights(kW), normalized(w));
}

TEST(Sampler, PenaltiesChangeTheDistribution) {
  // Logits ln(w): every penalty below is ln 2 or a factor 2, so weights halve or square-root.
  const auto l = log_weights({4, 3, 2, 1, 0.5});
  auto p = plain();
  p.presence_penalty = static_cast<float>(std::log(2.0));  // once per distinct token in the window
  expect_distribution(p, l, normalized({2, 3, 1, 1, 0.5}), {0, 2, 0, 0});
  p = plain();
  p.frequency_penalty = static_cast<float>(std::log(2.0));  // per occurrence: token 0 three times -> / 8
  expect_distribution(p, l, normalized({0.5, 3, 1, 1, 0.5}), {0, 0, 2, 0});
  p = plain();
  p.repeat_penalty = 2.0f;  // positive logit ln 4 -> ln 4 / 2 = ln 2 (once, not per occurrence)
  expect_distribution(p, l, normalized({2, 3, 2, 1, 0.5}), {0, 0, 0});
  // negative logit ln .5 -> 2 ln .5 = ln .25
  expect_distribution(p, l, normalized({4, 3, 2, 1, 0.25}), {4});
}

TEST(Sampler, PenaltyWindowIsTheLastNTokens) {
  const auto l = log_weights({4, 3, 2, 1, 0.5});
  auto p = plain();
  p.presence_penalty = static_cast<float>(std::log(2.0));
  p.repeat_last_n = 2;  // only {1, 3} count; token 0 is older
  expect_distribution(p, l, normalized({4, 1.5, 2, 0.5, 0.5}), {0, 0, 1, 3});
  p.repeat_last_n = 0;  // off
  expect_distribution(p, l, normalized(kW), {0, 0, 1, 3});
  p.repeat_last_n = -1;  // the whole history
  expect_distribution(p, l, normalized({2, 1.5, 2, 0.5, 0.5}), {0, 0, 1, 3});
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(Sampler::argmax(l.data(), 5), 1);
  Sampler s(plain(0.0f), 5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l.data(), {}), 1);
  Sampler neg(plain(-1.0f), 5);  // temp <= 0 is greedy
  EXPECT_EQ(neg.sample(l.data(), {}), 1);
  const std::vector<float> all_neg = {-3.0f, -2.0f, -2.5f};
  EXPECT_EQ(Sampler::argmax(all_neg.data(), 3), 1);
}

TEST(Sampler, GreedyPenaltiesExact) {
  // Repetition penalty divides a positive logit and multiplies a negative one.
  auto p = plain(0.0f);
  p.repeat_penalty = 1.25f;
  const std::vector<float> pos = {1.0f, 0.85f, 0.0f};  // 1.0 / 1.25 = 0.8 < 0.85
  EXPECT_EQ(Sampler(p, 3).sample(pos.data(), {}), 0);
  EXPECT_EQ(Sampler(p, 3).sample(pos.data(), {0}), 1);
  const std::vector<float> neg = {-1.0f, -1.2f, -5.0f};  // -1.0 * 1.25 = -1.25 < -1.2
  EXPECT_EQ(Sampler(p, 3).sample(neg.data(), {0, 0, 0}), 1);
  // Frequency counts occurrences: two of token 0 at 0.3 each outweigh a gap of 0.5.
  p = plain(0.0f);
  p.frequency_penalty = 0.3f;
  const std::vector<float> gap = {1.0f, 0.5f, 0.0f};
  EXPECT_EQ(Sampler(p, 3).sample(gap.data(), {0}), 0);     // 0.7 > 0.5
  EXPECT_EQ(Sampler(p, 3).sample(gap.data(), {0, 0}), 1);  // 0.4 < 0.5
  // Presence counts once however often the token occurs.
  p = plain(0.0f);
  p.presence_penalty = 0.4f;
  EXPECT_EQ(Sampler(p, 3).sample(gap.data(), {0, 0, 0, 0}), 0);  // 0.6 > 0.5
  // Out-of-vocabulary ids in the history are ignored.
  p.presence_penalty = 10.0f;
  EXPECT_EQ(Sampler(p, 3).sample(gap.data(), {-1, 7, 3}), 0);
  // Penalties do not leak from one call to the next.
  Sampler s(p, 3);
  EXPECT_EQ(s.sample(gap.data(), {0}), 1);
  EXPECT_EQ(s.sample(gap.data(), {}), 0);
}

TEST(Sampler, SameSeedSameSequenceOtherSeedOtherSequence) {
  const auto l = log_weights(kW);
  auto draw = [&](uint64_t seed) {
    auto p = plain();
    p.seed = seed;
    Sampler s(p, 5);
    std::vector<int32_t> v;
    for (int i = 0; i < 1000; ++i) v.push_back(s.sample(l.data(), v));
    return v;
  };
  const auto a = draw(42), b = draw(42), c = draw(43);
  EXPECT_EQ(a, b);
  // Two independent 1000-draw sequences from this distribution agree with probability ~1e-300.
  EXPECT_NE(a, c);
  EXPECT_EQ(Sampler(plain(), 5).params().seed, SamplerParams{}.seed);
}

TEST(Sampler, RejectsBadParameters) {
  auto bad = [](auto edit, int n_vocab = 5) {
    SamplerParams p;
    edit(p);
    EXPECT_THROW({ Sampler s(p, n_vocab); }, Error);
  };
  bad([](SamplerParams&) {}, 0);
  bad([](SamplerParams& p) { p.temp = std::nanf(""); });
  bad([](SamplerParams& p) { p.temp = INFINITY; });
  bad([](SamplerParams& p) { p.top_p = 0.0f; });
  bad([](SamplerParams& p) { p.min_p = -0.1f; });
  bad([](SamplerParams& p) { p.min_p = 1.5f; });
  bad([](SamplerParams& p) { p.repeat_penalty = 0.0f; });
}
