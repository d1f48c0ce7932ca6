// Cache policies on the real Mixtral-8x7B routing trace in shared/traces, and on synthetic traces.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "../fixture_sets.h"
#include "experts/cache_sim.h"

using namespace strata;

namespace {

std::string mixtral_trace() { return std::string(STRATA_FIXTURES_DIR) + "/../traces/mixtral8x7b_speculative_moe/trace.csv"; }

const RoutingTrace* mixtral() {
  static const RoutingTrace t = std::filesystem::exists(mixtral_trace()) ? read_trace(mixtral_trace()) : RoutingTrace{};
  return t.runs.empty() ? nullptr : &t;
}

#define NEED_MIXTRAL() \
  if (!mixtral()) STRATA_MISSING_FIXTURE(mixtral_trace() + " (Mixtral trace cache tests)")

double rate(const RoutingTrace& t, uint64_t experts, bool per_layer, std::string_view policy) {
  SimOptions o;
  o.budget = {experts, per_layer};
  return simulate(t, trace_shape(t), o, policy).hit_rate();
}

}  // namespace

TEST(MixtralTrace, Reads) {
  NEED_MIXTRAL();
  const RoutingTrace& t = *mixtral();
  EXPECT_EQ(t.n_layer, 32);
  EXPECT_EQ(t.n_expert, 8);
  EXPECT_EQ(t.top_k, 2);
  ASSERT_EQ(t.runs.size(), 4u);
  EXPECT_EQ(t.n_events(), 22866u);
  size_t decode = 0;
  for (const auto& r : t.runs)
    for (const auto& e : r.events) decode += e.phase == Phase::decode;
  EXPECT_EQ(decode, 18668u);
}

// The README's per-layer table: 3/8, 4/8, 6/8 of each layer's experts, decode only, cold cache
// per run, the experts a token needs never evicted.
TEST(MixtralTrace, ReproducesReadmeTable) {
  NEED_MIXTRAL();
  const RoutingTrace& t = *mixtral();
  struct Row {
    uint64_t per_layer_slots;
    double lru, lfu, belady;
  };
  for (const Row& r : {Row{3, 0.495, 0.512, 0.604}, Row{4, 0.611, 0.628, 0.739}, Row{6, 0.809, 0.825, 0.894}}) {
    const uint64_t total = r.per_layer_slots * 32;
    EXPECT_NEAR(rate(t, total, true, "lru"), r.lru, 0.01) << r.per_layer_slots << "/8";
    EXPECT_NEAR(rate(t, total, true, "lfu"), r.lfu, 0.01) << r.per_layer_slots << "/8";
    EXPECT_NEAR(rate(t, total, true, "belady"), r.belady, 0.01) << r.per_layer_slots << "/8";
  }
}

// Goal: the default policy at >= 90 % of Belady with half the experts cached. Measured: 86.6 %
// per layer (LRU 82.8 %, LFU 85.0 %). The goal is out of reach of any online eviction order on
// this trace: evicting with exact knowledge of the NEXT token's experts (belady:1) reaches only
// 0.675 (91.4 % of Belady's 0.739), and the same predictor with statistics learned from the whole
// trace first (--pretrain, predict:0: a transition model fitted in-sample, i.e. cheating) reaches
// 0.642 (87.0 %), hardly more than online. Mixtral's routing is nearly memoryless beyond one token. Belady with
// bypass (the optimum for a cache that may serve a miss without keeping it, as the default does)
// is higher still: 0.767. So this checks the level reached and that the default beats LRU and LFU.
TEST(MixtralTrace, DefaultPolicyNearBeladyAtHalf) {
  NEED_MIXTRAL();
  const RoutingTrace& t = *mixtral();
  const double belady = rate(t, 128, true, "belady");
  const double def = rate(t, 128, true, "default");
  std::printf("per-layer 4/8: default %.3f, Belady %.3f, ratio %.3f (goal 0.90)\n", def, belady, def / belady);
  EXPECT_GE(def / belady, 0.86);
  EXPECT_GT(def, rate(t, 128, true, "lru") + 0.02);
  EXPECT_GT(def, rate(t, 128, true, "lfu") + 0.01);
  // The one-token-foresight ceiling quoted above; more foresight converges to Belady.
  EXPECT_NEAR(rate(t, 128, true, "belady:1"), 0.675, 0.002);
  EXPECT_NEAR(rate(t, 128, true, "belady:1000"), belady, 1e-9);
  EXPECT_NEAR(rate(t, 128, true, "belady-bypass"), 0.767, 0.002);
  // In-sample statistics: hardly better than what the default learns online.
  SimOptions o;
  o.budget = {128, true};
  o.pretrain = true;
  const double insample = simulate(t, trace_shape(t), o, "predict:0").hit_rate();
  std::printf("per-layer 4/8: predict:0 pretrained on the whole trace %.3f\n", insample);
  EXPECT_LT(insample, 0.90 * belady);
  EXPECT_LT(insample, def + 0.01);
  // One global pool of 128 experts: Belady is far stronger there (0.809), the default still leads.
  const double def_global = rate(t, 128, false, "default");
  EXPECT_GT(def_global, rate(t, 128, false, "lru") + 0.05);
}

// predict-pf: predict plus cross-layer prefetch learned online (layer L's choice -> layer L+1's
// for the same token). Its hits include prefetched experts, so it is compared with demand-only
// Belady at the price of extra reads: per layer 0.675 (91.3 %) with 0.425 reads per access
// against predict's 0.360 (about 0.10 prefetches per access, 66 % of them used).
TEST(MixtralTrace, PrefetchPolicyPassesNinetyPercentPerLayer) {
  NEED_MIXTRAL();
  const RoutingTrace& t = *mixtral();
  SimOptions o;
  o.budget.bytes = 128;
  o.budget.per_layer = true;
  const SimResult belady = simulate_belady(t, trace_shape(t), o);
  const SimResult demand = simulate(t, trace_shape(t), o, "predict");
  const SimResult pf = simulate(t, trace_shape(t), o, "predict-pf");
  std::printf("per-layer 4/8: predict-pf %.3f (%.3f reads/access), predict %.3f (%.3f), Belady %.3f\n", pf.hit_rate(), pf.reads_per_access(),
              demand.hit_rate(), demand.reads_per_access(), belady.hit_rate());
  EXPECT_GE(pf.hit_rate() / belady.hit_rate(), 0.90);
  EXPECT_LE(pf.reads_per_access(), 1.25 * demand.reads_per_access());
  EXPECT_GT(double(pf.prefetches_used) / double(pf.prefetches), 0.6);
}

// On a skewed synthetic trace with temporal locality the default clears 90 % of Belady at half
// the experts, with one pool and per layer.
TEST(SyntheticTrace, DefaultPolicyAtNinetyPercentOfBelady) {
  const RoutingTrace t = make_synthetic(parse_synthetic("layers=8,experts=64,k=6,tokens=600,runs=2,zipf=1.0,reuse=0.3,seed=1"));
  const uint64_t half = uint64_t(t.n_layer) * t.n_expert / 2;
  for (bool per_layer : {true, false}) {
    const double belady = rate(t, half, per_layer, "belady");
    const double def = rate(t, half, per_layer, "default");
    std::printf("synthetic %s 50%%: default %.3f, Belady %.3f, ratio %.3f\n", per_layer ? "per-layer" : "global", def, belady, def / belady);
    EXPECT_GE(def / belady, 0.90) << (per_layer ? "per-layer" : "global");
    EXPECT_GT(def, rate(t, half, per_layer, "lru"));
  }
}

// `strata cachesim` end to end on a synthetic trace: one row per policy plus Belady's.
TEST(CachesimCli, SyntheticTable) {
  const std::string cmd = std::string(STRATA_BINARY) +
                          " cachesim --synthetic layers=2,experts=8,k=2,tokens=50,runs=1 --budget 50%,8 --policy lru,default --per-layer 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  for (const char* s : {"per-layer pools", "50% (8 experts)", "\nlru ", "\ndefault ", "\nbelady ", "(100.0%)"})
    EXPECT_NE(out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << out;
}

// --replay-predictions on a trace without prediction rows is a clear error, not a silent no-op;
// --pretrain and belady-bypass rows are labelled.
TEST(CachesimCli, ReplayPredictionsNeedsPredictionsAndPretrainIsLabelled) {
  auto run = [](const std::string& args, int* rc) {
    const std::string cmd = std::string(STRATA_BINARY) + " cachesim --synthetic layers=2,experts=8,k=2,tokens=50,runs=1 --budget 50% " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    *rc = pclose(p);
    return out;
  };
  int rc = 0;
  std::string out = run("--replay-predictions", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("no prediction rows"), std::string::npos) << out;
  out = run("--pretrain --policy predict:0,belady-bypass", &rc);
  EXPECT_EQ(rc, 0) << out;
  for (const char* s : {"pretrained on the whole trace", "\npredict:0 ", "\nbelady-bypass ", "\nbelady "})
    EXPECT_NE(out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << out;
  out = run("--policy belady-bypass:zero", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("horizon"), std::string::npos) << out;
}

// The trained model's routing on held-out text (models/strata-moe-tiny/traces, issue 18): the
// figures of that folder's README, and the orderings a trained router should keep.
TEST(TrainedModelTrace, ReproducesReadmeTable) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/traces/heldout-exodus.csv";
  ASSERT_TRUE(std::filesystem::exists(path)) << "committed with the model: " << path;
  const RoutingTrace t = read_trace(path);
  EXPECT_EQ(t.n_layer, 8);
  EXPECT_EQ(t.n_expert, 64);
  EXPECT_EQ(t.top_k, 4);
  // 25% and 50% of the 512 experts, one global pool, decode steps.
  EXPECT_NEAR(rate(t, 128, false, "lru"), 0.429, 0.001);
  EXPECT_NEAR(rate(t, 128, false, "lfu"), 0.575, 0.001);
  EXPECT_NEAR(rate(t, 128, false, "predict"), 0.660, 0.001);
  const double belady25 = rate(t, 128, false, "belady"), belady50 = rate(t, 256, false, "belady");
  EXPECT_NEAR(belady25, 0.761, 0.001);
  EXPECT_NEAR(belady50, 0.883, 0.001);
  for (const char* p : {"lru", "lfu", "lfu-decay", "predict", "pinned"}) {
    EXPECT_LE(rate(t, 128, false, p), belady25 + 1e-9) << p;
    EXPECT_LE(rate(t, 256, false, p), belady50 + 1e-9) << p;
  }
  // A trained router reuses experts from token to token: the frequency-aware default beats LRU.
  EXPECT_GT(rate(t, 128, false, "predict"), rate(t, 128, false, "lru") + 0.1);
}

// Six held-out chapters, 128 sampled tokens each (models/strata-moe-tiny/README.md, "Routing traces"):
// the README's table, and what the figures say about a trained router.
TEST(TrainedModelTrace, SixDocumentsReproduceReadmeTable) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/traces/heldout-6docs.csv";
  ASSERT_TRUE(std::filesystem::exists(path)) << "committed with the model: " << path;
  const RoutingTrace t = read_trace(path);
  ASSERT_EQ(t.runs.size(), 6u);
  const struct { const char* policy; double r25, r50; } rows[] = {
      {"lru", 0.390, 0.794}, {"lfu", 0.557, 0.828}, {"predict", 0.552, 0.828}, {"predict-pf", 0.636, 0.847}, {"belady", 0.716, 0.880}};
  for (const auto& r : rows) {
    EXPECT_NEAR(rate(t, 128, false, r.policy), r.r25, 0.001) << r.policy;
    EXPECT_NEAR(rate(t, 256, false, r.policy), r.r50, 0.001) << r.policy;
  }
  // Frequency beats recency by far at a quarter of the experts; the lookahead's prefetches close half
  // of what is left to Belady (who reads on demand only).
  EXPECT_GT(rate(t, 128, false, "lfu"), rate(t, 128, false, "lru") + 0.1);
  EXPECT_GT(rate(t, 128, false, "predict-pf"), rate(t, 128, false, "predict") + 0.05);
}
