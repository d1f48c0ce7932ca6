// Expert parallelism without MPI: the shard plan, the protocol's traffic formula and the one
// polled wait (runtime/ep_plan.h, runtime/expert_parallel.h).
#include <gtest/gtest.h>

#include "experts/warm_stats.h"
#include "runtime/ep_plan.h"
#include "runtime/expert_parallel.h"

using namespace strata;

namespace {

// n_layer layers of n_expert experts of `bytes` each; layer 0 dense.
ExpertLayout ep_layout(int n_layer, int n_expert, uint64_t bytes) {
  ExpertLayout l;
  l.layers.resize(static_cast<size_t>(n_layer));
  for (int i = 1; i < n_layer; ++i) l.layers[i].n_expert = n_expert, l.layers[i].expert_bytes = bytes;
  return l;
}

}  // namespace

TEST(EpPlan, EveryExpertOnceAndBalanced) {
  const ExpertLayout lay = ep_layout(4, 10, 1000);
  for (int ranks : {1, 2, 3, 4}) {
    const EpPlan p = plan_expert_parallel(lay, 4, ranks, 0.0, nullptr);
    EXPECT_EQ(p.owner_of(0, 0), -1);  // a dense layer
    std::vector<int> total(static_cast<size_t>(ranks), 0);
    for (int l = 1; l < 4; ++l) {
      std::vector<int> per(static_cast<size_t>(ranks), 0);
      for (int e = 0; e < 10; ++e) {
        const int o = p.owner_of(l, e);
        ASSERT_TRUE(o >= 0 && o < ranks) << l << " " << e;
        EXPECT_FALSE(p.is_replica(l, e));
        per[o]++, total[o]++;
      }
      EXPECT_LE(*std::max_element(per.begin(), per.end()) - *std::min_element(per.begin(), per.end()), 1);
    }
    uint64_t bytes = 0;
    for (uint64_t b : p.bytes) bytes += b;
    EXPECT_EQ(bytes, 30u * 1000u);  // every expert held once
    // Across layers the remainders go to the ranks with fewer bytes: 30 experts over 4 ranks is 8/8/7/7.
    EXPECT_LE(*std::max_element(total.begin(), total.end()) - *std::min_element(total.begin(), total.end()), 1);
  }
}

TEST(EpPlan, TrafficBalancesAndHottestAreReplicated) {
  const ExpertLayout lay = ep_layout(2, 8, 100);
  WarmStats ws;
  ws.n_layer = 2, ws.n_expert = 8;
  ws.weight.assign(16, 1.0);
  ws.weight[8 + 3] = 10.0;  // layer 1's expert 3 takes half the traffic
  ws.weight[8 + 5] = 3.0;
  const EpPlan p = plan_expert_parallel(lay, 2, 2, 0.0, &ws);
  EXPECT_TRUE(p.by_traffic);
  const int hot = p.owner_of(1, 3);
  int others_with_hot = 0;
  for (int e = 0; e < 8; ++e) others_with_hot += e != 3 && p.owner_of(1, e) == hot;
  EXPECT_EQ(others_with_hot, 0) << "the rank with the hottest expert (10 of 20) needs nothing else";
  EXPECT_NEAR(p.traffic[0] + p.traffic[1], 1.0, 1e-9);
  // --ep-replicate 0.25: the two hottest (3, 5) on every rank, computed by rank 0.
  const EpPlan r = plan_expert_parallel(lay, 2, 3, 0.25, &ws);
  EXPECT_TRUE(r.is_replica(1, 3) && r.is_replica(1, 5));
  EXPECT_EQ(r.owner_of(1, 3), 0);
  int reps = 0;
  for (int e = 0; e < 8; ++e) reps += r.is_replica(1, e);
  EXPECT_EQ(reps, 2);
  EXPECT_EQ(r.bytes[1], 2u * 100u + (r.experts[1]) * 100u);  // replicas count on every rank
  EXPECT_THROW(plan_expert_parallel(lay, 2, 2, 1.5, &ws), std::exception);
}

TEST(EpFormula, OneRemoteRankHalfTheExperts) {
  const ExpertLayout lay = ep_layout(2, 4, 100);
  const EpPlan p = plan_expert_parallel(lay, 2, 2, 0.0, nullptr);  // rank 1: 2 of 4 experts
  const EpFormula f = ep_formula(p, {0, 2}, 8);
  // k = 2 of 4: P(no pick on rank 1) = C(2,2)/C(4,2) = 1/6; E[pairs] = 1.
  const double p1 = 1.0 - 1.0 / 6.0;
  EXPECT_NEAR(f.round_trips, p1, 1e-12);
  EXPECT_NEAR(f.bytes, p1 * (24 + 48 + 4 + 32) + 1.0 * (16 + 32), 1e-9);  // header, the answer's counters, the row out; quads and rows
}

// The usage form with the statistics' shares: uniform shares give the uniform formula exactly.
TEST(EpFormula, UsageEqualsUniformWhenSharesAreUniform) {
  const ExpertLayout lay = ep_layout(3, 8, 100);
  WarmStats ws;
  ws.n_layer = 3, ws.n_expert = 8;
  ws.weight.assign(24, 5.0);
  for (int ranks : {2, 3}) {
    const EpPlan p = plan_expert_parallel(lay, 3, ranks, 0.0, &ws);
    ASSERT_TRUE(p.by_traffic);
    const EpFormula u = ep_formula(p, {0, 2, 3}, 16), s = ep_formula(p, {0, 2, 3}, 16, /*usage=*/true);
    EXPECT_GT(u.bytes, 0);
    EXPECT_NEAR(s.bytes, u.bytes, 1e-9 * u.bytes) << ranks;
    EXPECT_NEAR(s.round_trips, u.round_trips, 1e-12) << ranks;
  }
  // Without statistics every expert has the share 1/n: the same.
  const EpPlan q = plan_expert_parallel(lay, 3, 2, 0.0, nullptr);
  EXPECT_NEAR(ep_formula(q, {0, 2, 3}, 16, true).bytes, ep_formula(q, {0, 2, 3}, 16).bytes, 1e-9);
}

// A remote rank holding the hot expert gets more pairs and round trips than its expert count says;
// one left with cold experts (the hot ones replicated on rank 0) fewer.
TEST(EpFormula, UsageFollowsSkewedShares) {
  EpPlan p;  // one MoE layer of 4 experts; rank 1 owns expert 3, which takes 70% of the choices
  p.ranks = 2, p.n_layer = 1, p.n_expert = 4, p.by_traffic = true;
  p.owner = {0, 0, 0, 1};
  p.replica = {0, 0, 0, 0};
  p.share = {0.1, 0.1, 0.1, 0.7};
  const EpFormula u = ep_formula(p, {2}, 8), s = ep_formula(p, {2}, 8, /*usage=*/true);
  // Uniform: P(rank 1 chosen) = 1 - C(3,2)/C(4,2) = 1/2, E[pairs] = 2 * 1/4.
  EXPECT_NEAR(u.round_trips, 0.5, 1e-12);
  // Usage: P(not chosen) = (1 - 0.7) (1 - 0.7 / (1 - 1/4)), E[pairs] = 2 * 0.7.
  const double p1 = 1.0 - 0.3 * (1.0 - 0.7 / 0.75);
  EXPECT_NEAR(s.round_trips, p1, 1e-12);
  EXPECT_NEAR(s.bytes, p1 * (24 + 48 + 4 + 32) + 1.4 * (16 + 32), 1e-9);
  EXPECT_GT(s.round_trips, u.round_trips);
  EXPECT_GT(s.bytes, u.bytes);

  const ExpertLayout lay = ep_layout(2, 8, 100);
  WarmStats ws;
  ws.n_layer = 2, ws.n_expert = 8;
  ws.weight.assign(16, 1.0);
  ws.weight[8 + 3] = 10.0, ws.weight[8 + 5] = 3.0;
  const EpPlan r = plan_expert_parallel(lay, 2, 2, 0.25, &ws);  // 3 and 5 (13 of 19) replicated on rank 0
  const EpFormula ru = ep_formula(r, {0, 2}, 8), rs = ep_formula(r, {0, 2}, 8, true);
  EXPECT_LT(rs.bytes, ru.bytes);
  EXPECT_LT(rs.round_trips, ru.round_trips);
}

TEST(EpPoll, DeadlineOnAnInjectedClock) {
  double now = 0;
  auto clock = [&] { return now += 1.0; };
  int calls = 0;
  EXPECT_FALSE(poll_until([&] { return ++calls, false; }, 10.0, clock));
  EXPECT_GE(now, 10.0);
  EXPECT_LT(now, 12.0);  // it gave up at the deadline, not later
  now = 0, calls = 0;
  EXPECT_TRUE(poll_until([&] { return ++calls == 3; }, 10.0, clock));
  EXPECT_EQ(calls, 3);
}
