// The speculative cost model chooses k from the figures it is given: hand-computed cases (compute
// per row, bytes per row against the read bandwidth, acceptance by position), k = 0 when drafts
// are never accepted (then only rare probes), and its warm-up order.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/spec_cost.h"

using namespace strata;

namespace {

SpecPass pass(int k, int accepted, double compute_s, uint64_t bytes = 0, double wait_s = 0) {
  SpecPass p;
  p.k = k;
  p.accepted = accepted;
  p.compute_s = compute_s;
  p.bytes_read = bytes;
  p.io_wait_s = wait_s;
  return p;
}

}  // namespace

// Warm-up verifies one draft at a time: a costly draft source or costly rows are not paid for
// k_max drafts before anything is known.
TEST(SpecCost, WarmUpAlternatesPlainPassesAndPassesWithOneDraft) {
  SpecCostModel m(4);
  EXPECT_EQ(m.choose(0), 0);  // nothing drafted
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(m.fitted());
    EXPECT_EQ(m.choose(3), 0);
    m.observe(pass(0, 0, 1.0));
    EXPECT_EQ(m.choose(3), 1);
    m.observe(pass(1, 1, 1.1));
  }
  EXPECT_TRUE(m.fitted());
  EXPECT_NEAR(m.pass_seconds(0), 1.0, 1e-9);
  EXPECT_NEAR(m.pass_seconds(2), 1.2, 1e-9);  // 0.1 s per draft row
  EXPECT_THROW(m.observe(pass(5, 0, 1.0)), Error);
}

// Rows cost 0.1 of a plain pass and every draft lands: verify all of them.
TEST(SpecCost, CheapRowsAndGoodDraftsTakeEveryDraft) {
  SpecCostModel m(4);
  m.observe(pass(0, 0, 1.0));
  m.observe(pass(0, 0, 1.0));
  for (int i = 0; i < 20; ++i) m.observe(pass(4, 4, 1.4));
  EXPECT_GT(m.acceptance(3), 0.9);
  EXPECT_EQ(m.choose(4), 4);
  EXPECT_EQ(m.choose(2), 2);  // never more than the drafts at hand
}

// Rows cost half a plain pass, the first draft always lands and the second never:
// k=1 gives 2 tokens in 1.5 s (1.33/s), k=2 about 2 in 2 s, plain 1/s.
TEST(SpecCost, ChoosesTheKWithTheBestRate) {
  SpecCostModel m(4);
  m.observe(pass(0, 0, 1.0));
  m.observe(pass(0, 0, 1.0));
  for (int i = 0; i < 30; ++i) m.observe(pass(2, 1, 2.0));
  EXPECT_GT(m.acceptance(0), 0.95);
  EXPECT_LT(m.acceptance(1), 0.1);
  EXPECT_EQ(m.choose(4), 1);
}

// A draft row's cost is measured against the plain pass of its time: plain passes that then grow
// slower (a longer context) do not make rows look cheaper. Rows cost 0.9 of a 1 s plain pass: after
// plain passes slow to 2 s, a row still costs 0.9 s (fitted against the mean plain pass, it would
// cost nothing but the floor).
TEST(SpecCost, RowsCostWhatTheyCostBesidePlainPassesOfTheirTime) {
  SpecCostModel m(4);
  for (int i = 0; i < 4; ++i) m.observe(pass(i % 2, i % 2, 1.0 + 0.9 * (i % 2)));
  EXPECT_NEAR(m.pass_seconds(1) - m.pass_seconds(0), 0.9, 1e-9);
  for (int i = 0; i < 200; ++i) m.observe(pass(0, 0, 2.0));
  EXPECT_NEAR(m.pass_seconds(0), 2.0, 1e-6);
  EXPECT_NEAR(m.pass_seconds(1) - m.pass_seconds(0), 0.9, 1e-9);
}

// Plain passes come now and then while drafts pay, so the plain pass the rows are measured against
// follows the machine: drafts pay (rows of 0.3 of a 1 s pass, all accepted), then every pass gets
// twice as fast but rows do not (0.3 s, as much as a plain pass) and 60% of drafts land: with only
// passes with drafts, the model would keep its 1 s plain pass and its cheap rows; with the refresh
// it stops drafting.
TEST(SpecCost, PlainPassesNowAndThenFollowAPlainPassThatMoves) {
  SpecCostModel m(4);
  uint32_t rng = 1;
  auto land = [&](double p) { return ((rng = rng * 1664525u + 1013904223u) >> 8) % 1000 < p * 1000; };
  int late_drafts = 0, plain_seen = 0;
  for (int i = 0; i < 600; ++i) {
    const bool fast = i >= 100;
    const int k = m.choose(4);
    int acc = 0;
    while (acc < k && land(fast ? 0.6 : 1.0)) ++acc;
    if (i >= 20 && i < 100) plain_seen += k == 0;
    if (i >= 400) late_drafts += k > 0;
    m.observe(pass(k, acc, fast ? 0.3 + 0.3 * k : 1.0 + 0.3 * k));
  }
  EXPECT_GT(plain_seen, 0) << "a plain pass now and then while drafts pay";
  EXPECT_LT(plain_seen, 10);
  EXPECT_LT(late_drafts, 20) << "drafts that no longer pay stop";
}

// Drafts that resume after plain passes first catch up on the tokens those passes chose: they
// resume only if a pass with drafts saves at least that catch-up per token. Warm-up: rows cost 1.9
// of a 2 s plain pass (drafts cannot pay), every draft accepted; then plain passes slow to 10 s
// (rows do not), so a pass of 4 drafts would save 5 x 10 - (10 + 4 x 1.9) = 32 s: worth a catch-up
// of 2 s per token, not of 40 s.
TEST(SpecCost, DraftsResumeOnlyIfTheySaveTheirCatchUp) {
  for (const double catch_up : {2.0, 40.0}) {
    SpecCostModel m(4);
    for (int i = 0; i < 4; ++i) {
      SpecPass p = pass(i % 2, i % 2, 2.0 + 1.9 * (i % 2));
      p.deferred_rows = i == 1 ? 20 : i % 2;
      p.deferred_s = catch_up * p.deferred_rows;
      m.observe(p);
    }
    int drafts = 0;
    for (int i = 0; i < 50; ++i) {
      const int k = m.choose(4);
      drafts += k > 0;
      m.observe(pass(k, k, i < 10 ? 2.0 + 1.9 * k : 10.0 + 1.9 * k));
    }
    if (catch_up < 10) EXPECT_GT(drafts, 20);
    else EXPECT_EQ(drafts, 0);
  }
}

// The cost model gives up on a draft source (its memory may go) only when no probe fits the budget
// and 16 passes in a row were plain (4 while the memory would serve a streaming expert cache): with
// a catch-up of 2% of a plain pass per token, after the warm-up and that many plain passes; with
// one of 0.2%, never (probes go on).
TEST(SpecCost, GivesUpOnlyOnDraftsNoProbeCanPayFor) {
  for (const bool memory_waits : {false, true})
    for (const double catch_up : {0.02, 0.002}) {
      SpecCostModel m(4);
      int given_up_at = -1;
      for (int i = 0; i < 400 && given_up_at < 0; ++i) {
        const int k = m.choose(4);
        SpecPass p = pass(k, 0, 1.0 + 0.5 * k);
        if (k > 0) p.deferred_rows = 10, p.deferred_s = 10 * catch_up;
        m.observe(p);
        if (m.given_up(memory_waits)) given_up_at = i;
      }
      if (catch_up > 0.01) EXPECT_EQ(given_up_at, 4 + (memory_waits ? 4 : 16) - 1) << memory_waits;
      else EXPECT_EQ(given_up_at, -1) << memory_waits;
    }
}

// One stalled plain pass (10x: another process took the core) must not make drafts look cheap.
// Plain passes 2 ms, draft rows 2.5 ms, acceptance 0.9: plain wins (1.9 tokens per 4.5 ms vs 1 per
// 2 ms). Taken at face value, the 20 ms pass would put a plain pass at 4.25 ms and drafts would
// win (1.9 per 6.75 ms vs 1 per 4.25 ms) until the next plain pass, which drafting puts off.
TEST(SpecCost, AStalledPassDoesNotMakeDraftsLookCheap) {
  SpecCostModel m(4);
  for (int i = 0; i < 2; ++i) {
    m.observe(pass(0, 0, 0.002));
    m.observe(pass(1, 1, 0.0045));
  }
  ASSERT_TRUE(m.fitted());
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(m.choose(4), 0);
    m.observe(pass(0, 0, 0.002));
  }
  EXPECT_EQ(m.choose(4), 0);
  m.observe(pass(0, 0, 0.020));
  EXPECT_LT(m.pass_seconds(0), 0.0025);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m.choose(4), 0) << i;
    m.observe(pass(0, 0, 0.002));
  }
}

// Streaming: compute is cheap (1 ms per row) but each draft row reads 4 MB more at 10 MB/s;
// half the first drafts land. Plain: 1 token per 0.11 s; k=1: 1.5 tokens per 0.51 s -> plain.
// When the cache holds what the drafts need (no extra bytes), the same acceptance pays.
TEST(SpecCost, BytesToReadTurnSpeculationOff) {
  for (const bool cached : {false, true}) {
    SpecCostModel m(4);
    m.observe(pass(0, 0, 0.010, 1000000, 0.1));
    m.observe(pass(0, 0, 0.010, 1000000, 0.1));
    for (int i = 0; i < 40; ++i) {
      const uint64_t bytes = cached ? 1000000 : 5000000;
      m.observe(pass(1, i % 2, 0.011, bytes, bytes / 1e7));
    }
    EXPECT_NEAR(m.acceptance(0), 0.5, 0.1);
    if (cached)
      EXPECT_EQ(m.choose(1), 1);
    else
      EXPECT_EQ(m.choose(1), 0);
  }
}

// Drafts that are never accepted: after the warm-up every pass is plain except probes after
// 8, 16, 32, ... plain passes.
TEST(SpecCost, NeverAcceptedDraftsGivePlainPasses) {
  SpecCostModel m(4);
  int with_drafts = 0, late = 0;
  for (int i = 0; i < 1000; ++i) {
    const int k = m.choose(4);
    with_drafts += k > 0;
    late += k > 0 && i >= 100;
    m.observe(pass(k, 0, 1.0 + 0.3 * k));
  }
  EXPECT_LE(with_drafts, 10);  // 2 in the warm-up, probes after 8, 16, 32, ... plain passes
  EXPECT_LE(late, 4);         // probes at gaps of 128, 256, 512 (and 1024) plain passes
  EXPECT_LT(m.acceptance(0), 0.1);
}

// A probe that lands brings speculation back.
TEST(SpecCost, ProbesNoticeWhenDraftsStartToLand) {
  SpecCostModel m(4);
  int i = 0;
  for (; i < 200; ++i) {
    const int k = m.choose(4);
    m.observe(pass(k, 0, 1.0 + 0.3 * k));
  }
  int with_drafts = 0;
  for (int j = 0; j < 300; ++j) {
    const int k = m.choose(4);
    with_drafts += k > 0;
    m.observe(pass(k, k, 1.0 + 0.3 * k));
  }
  EXPECT_GT(with_drafts, 100);  // of 300 (the first probes after the change are few: they cost)
}

// Probes verify one draft; a new sequence keeps the cost fits (no second warm-up) and the last
// text's acceptance as a prior worth one pass.
TEST(SpecCost, ProbesVerifyOneDraftAndANewSequenceKeepsTheFits) {
  SpecCostModel m(4);
  int probes = 0;
  for (int i = 0; i < 200; ++i) {
    const int k = m.choose(4);
    if (i >= 4 && k > 0) {
      EXPECT_EQ(k, 1);
      ++probes;
    }
    m.observe(pass(k, 0, 1.0 + 0.3 * k));
  }
  EXPECT_GT(probes, 0);
  const double plain = m.pass_seconds(0), row = m.pass_seconds(1) - plain, a0 = m.acceptance(0);
  EXPECT_LT(a0, 0.3);
  m.new_sequence();
  EXPECT_TRUE(m.fitted());
  EXPECT_DOUBLE_EQ(m.pass_seconds(0), plain);
  EXPECT_DOUBLE_EQ(m.pass_seconds(1) - plain, row);
  EXPECT_DOUBLE_EQ(m.acceptance(0), (a0 + 0.5 * 0.5) / 1.5);  // one pass of the last estimate beside the prior
  // Drafts that cost 0.3 of a pass at acceptance 1/2 are not worth it; with cheap rows they are.
  SpecCostModel cheap(4);
  for (int i = 0; i < 4; ++i) {
    const int k = cheap.choose(4);
    cheap.observe(pass(k, k, 1.0 + 0.01 * k));
  }
  cheap.new_sequence();
  EXPECT_GT(cheap.choose(4), 0);  // no warm-up plain pass first
}

// Drafts accepted now and then at a rate that does not pay (rows cost 0.3 of a pass, 1 in 4
// accepted): an accepted probe no longer restarts probing every 8 passes; the gaps grow.
TEST(SpecCost, ProbesAcceptedAtALosingRateBackOff) {
  SpecCostModel m(4);
  int probes = 0, late = 0, n = 0;
  for (int i = 0; i < 2000; ++i) {
    const int k = m.choose(4);
    if (k > 0) {
      ++probes;
      late += i >= 1000;
      if (i >= 4) {  // after the warm-up
        EXPECT_EQ(k, 1) << "pass " << i << ": drafts that do not pay were chosen";
      }
    }
    m.observe(pass(k, k > 0 && (n++ % 4 == 3) ? 1 : 0, 1.0 + 0.3 * k));
  }
  EXPECT_LE(late, 12) << probes << " probes in all";
}

// A slot's next request starts from its last acceptance: after a text whose drafts always landed
// it drafts at once; when the new text's drafts never land, a few passes turn them off again.
TEST(SpecCost, NewSequenceStartsFromTheLastAcceptance) {
  SpecCostModel m(4);
  for (int i = 0; i < 40; ++i) {
    const int k = m.choose(4);
    m.observe(pass(k, k, 1.0 + 0.1 * k));
  }
  ASSERT_EQ(m.choose(4), 4);
  m.new_sequence();
  EXPECT_GT(m.choose(4), 0);
  int with_drafts = 0;
  for (int i = 0; i < 100; ++i) {
    const int k = m.choose(4);
    with_drafts += k > 0;
    m.observe(pass(k, 0, 1.0 + 0.1 * k));
  }
  EXPECT_LE(with_drafts, 12);
  EXPECT_LT(m.acceptance(0), 0.2);
}

// A draft row costs more than a plain pass (a small model in RAM, where each row computes its own
// experts): even drafts that are always accepted cannot pay, so probes back off although 3 in 4
// of them land. While passes read experts the costs move as the cache fills, so accepted probes
// keep coming and notice when rows become cheap.
TEST(SpecCost, ProbesBackOffWhenNoAcceptanceCouldPay) {
  SpecCostModel m(4);
  int probes = 0, n = 0;
  for (int i = 0; i < 1000; ++i) {
    const int k = m.choose(4);
    if (i >= 4 && k > 0) {
      EXPECT_EQ(k, 1);
      ++probes;
    }
    m.observe(pass(k, k > 0 && (n++ % 4 != 3) ? 1 : 0, 1.0 + 1.2 * k));
  }
  EXPECT_LE(probes, 8);  // gaps of 8, 16, ..., 1024 plain passes
}

TEST(SpecCost, WithReadsAcceptedProbesKeepComingUntilDraftsPay) {
  SpecCostModel m(4);
  for (int i = 0; i < 200; ++i) {  // rows cost more than a plain pass: no k pays
    const int k = m.choose(4);
    m.observe(pass(k, k, 1.0 + 1.2 * k, /*bytes=*/1));
  }
  int with_drafts = 0;
  for (int i = 0; i < 300; ++i) {  // the cache has filled: rows are cheap
    const int k = m.choose(4);
    with_drafts += k > 0;
    m.observe(pass(k, k, 1.0 + 0.1 * k, /*bytes=*/1));
  }
  EXPECT_GT(with_drafts, 150);
}

// Predicted routing: at the fits of BytesToReadTurnSpeculationOff's streaming case (each draft row
// read 4 MB more at 10 MB/s, half the first drafts land), a draft row predicted to need only
// cached experts is worth verifying, one predicted to read as much as the fit says is not, and a
// row without a prediction keeps the fitted bytes. The calibration scales predictions by the ratio
// of actual to predicted draft bytes, clamped to [1/4, 4].
TEST(SpecCost, PredictedBytesReplaceTheFittedBytesPerRow) {
  SpecCostModel m(4);
  m.observe(pass(0, 0, 0.010, 1000000, 0.1));
  m.observe(pass(0, 0, 0.010, 1000000, 0.1));
  for (int i = 0; i < 40; ++i) m.observe(pass(1, i % 2, 0.011, 5000000, 0.5));
  const double cached[] = {0.0}, dear[] = {4000000.0}, unknown[] = {SpecCostModel::kUnknownRow};
  EXPECT_DOUBLE_EQ(m.calibration(), 1.0);
  EXPECT_NEAR(m.pass_seconds(1, unknown), m.pass_seconds(1), 1e-12);
  EXPECT_NEAR(m.pass_seconds(1, dear), m.pass_seconds(1), 1e-9);  // the prediction is the fit here
  EXPECT_LT(m.pass_seconds(1, cached), m.pass_seconds(1) / 3);
  EXPECT_EQ(m.choose(1, cached), 1);
  EXPECT_EQ(m.choose(1, dear), 0);
  EXPECT_EQ(m.choose(1, unknown), 0);
  EXPECT_EQ(m.choose(1), 0);
  // Rows are priced one by one: the second draft row reading 4 MB makes k = 2 lose to k = 1.
  const double mixed[] = {0.0, 4000000.0};
  EXPECT_LT(m.pass_seconds(1, mixed), m.pass_seconds(2, mixed) - 0.3);

  // Passes read twice the bytes predicted for their drafts: a prediction of 2 MB costs like 4 MB.
  SpecCostModel c(4);
  for (int i = 0; i < 4; ++i) {
    SpecPass p = pass(i % 2, 0, 0.010, 1000000, 0.1);
    if (p.k > 0) {
      p.predicted_extra = 1000000;
      p.extra_read = 2000000;
    }
    c.observe(p);
  }
  EXPECT_NEAR(c.calibration(), 2.0, 1e-9);
  const double two[] = {2000000.0}, four[] = {4000000.0};
  SpecCostModel ref(4);
  for (int i = 0; i < 4; ++i) ref.observe(pass(i % 2, 0, 0.010, 1000000, 0.1));
  EXPECT_NEAR(c.pass_seconds(1, two), ref.pass_seconds(1, four), 1e-9);
  // Far off: clamped.
  for (int i = 0; i < 40; ++i) {
    SpecPass p = pass(1, 0, 0.010, 1000000, 0.1);
    p.predicted_extra = 100000;
    p.extra_read = 5000000;
    c.observe(p);
  }
  EXPECT_DOUBLE_EQ(c.calibration(), 4.0);
}

// A draft model's drafts are asked for before their routing is known: trim() then keeps those
// worth verifying at their predicted bytes. Rows cost 1 ms and every draft lands; the fit says a
// draft row reads nothing (cheap), but the third predicted row reads 4 MB at 10 MB/s: two drafts.
// During a probe, what was drafted is verified.
TEST(SpecCost, TrimKeepsTheDraftsWorthVerifyingAtTheirPredictedBytes) {
  SpecCostModel m(4);
  m.observe(pass(0, 0, 0.010, 1000000, 0.1));
  m.observe(pass(0, 0, 0.010, 1000000, 0.1));
  for (int i = 0; i < 40; ++i) m.observe(pass(4, 4, 0.014, 1000000, 0.1));
  const double rows[] = {0.0, 0.0, 4000000.0, 4000000.0}, cached[] = {0.0, 0.0, 0.0, 0.0};
  EXPECT_EQ(m.choose(4), 4);
  EXPECT_EQ(m.trim(4, rows), 2);
  EXPECT_EQ(m.trim(4, cached), 4);
  EXPECT_EQ(m.trim(3, cached), 3);  // never more than were drafted
  EXPECT_EQ(m.trim(4, {}), 4);      // no prediction: the fit's choice stands

  SpecCostModel never(4);
  never.observe(pass(0, 0, 1.0));
  never.observe(pass(1, 0, 1.9));
  never.observe(pass(0, 0, 1.0));
  never.observe(pass(1, 0, 1.9));
  int k = 0;
  for (int i = 0; i < 2000 && k == 0; ++i) {
    k = never.choose(4);
    if (k == 0) never.observe(pass(0, 0, 1.0));
  }
  ASSERT_EQ(k, 1) << "a probe";
  const double dear[] = {1e12};
  EXPECT_EQ(never.trim(1, dear), 1);
}

// Probing costs at most about 1% of the time: a probe whose row costs 0.9 of a plain pass loses
// 0.1 of a pass at acceptance 0.8, and its draft first catches up on every token since its last
// drafts at 0.5% of a pass each, so probes come about 0.1 / (1% - 0.5%) = 20 plain passes apart,
// not every 8 as accepted probes would otherwise have them (drafts always accepted would pay: 5
// tokens in 4.6 passes' time).
TEST(SpecCost, ProbesCostAtMostTheirBudget) {
  SpecCostModel m(4);
  int n = 0, since = 0, probes = 0;
  double lost = 0, plain = 0;
  for (int i = 0; i < 2000; ++i) {
    const int k = m.choose(4);
    SpecPass p = pass(k, k > 0 && (n++ % 5 != 4) ? 1 : 0, 1.0 + 0.9 * k);
    ++since;
    if (k > 0) {
      p.deferred_rows = since;
      p.deferred_s = 0.005 * since;
      since = 0;
    }
    if (i >= 4 && k > 0) {
      EXPECT_EQ(k, 1);
      lost += p.compute_s + p.deferred_s - (1 + p.accepted);
      ++probes;
    }
    plain += k == 0 ? 1.0 : 0.0;
    m.observe(p);
  }
  EXPECT_LT(lost, 0.015 * plain) << "probes lost " << lost << " plain passes' time in " << plain;
  EXPECT_GT(probes, 2000 / 40) << "probes that keep within the budget still come";
}

// A draft whose catch-up costs 2% of a plain pass per token is never probed once its drafts stop
// paying while passes are compute alone: every token it skips it would have to evaluate again
// before the next drafts, more than the 1% probes may cost. When plain passes grow slower (reads),
// the same catch-up fits the budget and probes resume.
TEST(SpecCost, NoProbesWhileCatchingUpCostsMoreThanTheBudget) {
  SpecCostModel m(4);
  int since = 0, probes = 0;
  auto run = [&](int n, double plain_s, uint64_t bytes, double wait_s) {
    for (int i = 0; i < n; ++i) {
      const int k = m.choose(4);
      SpecPass p = pass(k, 0, (k == 0 ? 1.0 : 1.9) * plain_s - wait_s, bytes, wait_s);
      ++since;
      if (k > 0) {
        p.deferred_rows = since + 40;  // the first: a 40-token prompt too
        p.deferred_s = 0.02 * p.deferred_rows;
        since = 0;
        ++probes;
      }
      m.observe(p);
    }
  };
  run(4, 1.0, 0, 0);  // warm-up
  EXPECT_EQ(probes, 2);
  run(3000, 1.0, 0, 0);
  EXPECT_EQ(probes, 2);
  run(500, 10.0, 1000000, 9.0);  // reads: a plain pass of 10, a catch-up of 0.2% of it per token
  EXPECT_GT(probes, 2);
}

// --draft-min 2: warm-up and probes verify two drafts, no pass is given one (it would be thrown
// away, and the warm-up would never end), and fewer drafts at hand than two make a plain pass.
TEST(SpecCost, DraftMinSetsTheFewestDraftsOfAnyPass) {
  SpecCostModel m(4);
  m.set_k_min(2);
  EXPECT_EQ(m.choose(1), 0);
  EXPECT_EQ(m.choose(4), 0);  // warm-up: plain first
  m.observe(pass(0, 0, 1.0));
  EXPECT_EQ(m.choose(1), 0);
  EXPECT_EQ(m.choose(4), 2);
  m.observe(pass(2, 1, 1.6));
  int probes = 0;
  for (int i = 0; i < 300; ++i) {
    const int k = m.choose(4);
    EXPECT_NE(k, 1);
    probes += k > 0;
    m.observe(pass(k, 0, 1.0 + 0.3 * k));
  }
  EXPECT_TRUE(m.fitted());
  EXPECT_GT(probes, 1);  // warm-up ended, then probes of two drafts
}
