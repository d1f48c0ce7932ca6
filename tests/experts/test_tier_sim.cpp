// The two-level replay VRAM <- RAM <- SSD (experts/tier_sim.h, strata cachesim --vram).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../cli/cli_util.h"
#include "core/error.h"
#include "experts/tier_sim.h"

namespace strata {
namespace {

constexpr TierMode kModes[] = {TierMode::exclusive, TierMode::exclusive_demote, TierMode::inclusive};

RoutingTrace random_trace(uint64_t seed) {
  SyntheticOptions s;
  s.n_layer = 3;
  s.n_expert = 6;
  s.top_k = 2;
  s.tokens = 120;
  s.runs = 2;
  s.zipf = 0.8;
  s.reuse = 0.4;
  s.seed = seed;
  return make_synthetic(s);
}

// Invariants checked after every event, and the count of needed experts left in neither level.
struct Checker {
  TierSimOptions* o = nullptr;
  uint64_t absent = 0, events = 0;
  void operator()(int layer, std::span<const int32_t> ex, const ExpertCacheState& vram, const ExpertCacheState& ram) {
    ++events;
    ASSERT_LE(vram.used_bytes(), o->vram_bytes);
    ASSERT_LE(ram.used_bytes(), o->ram_bytes);
    const CacheShape& s = vram.shape();
    for (int l = 0; l < s.n_layer; ++l)
      for (int e = 0; e < s.n_expert; ++e) {
        const ExpertKey k{l, e};
        if (o->mode == TierMode::inclusive)
          ASSERT_TRUE(!vram.resident(k) || ram.resident(k)) << "inclusive: VRAM holds (" << l << "," << e << ") that RAM lacks";
        else
          ASSERT_FALSE(vram.resident(k) && ram.resident(k)) << "exclusive: (" << l << "," << e << ") in both levels";
      }
    for (int32_t e : ex) absent += !vram.resident({layer, e}) && !ram.resident({layer, e});
  }
};

// Random routing, budgets of 0..4 slots per level: budgets hold, exclusive levels are disjoint,
// inclusive VRAM is a subset of RAM, a needed expert is in a level after its step unless it was
// read transiently (and never when the levels have room for a step), the counts add up, and the
// Belady bounds hold for every policy.
TEST(TierSim, InvariantsUnderRandomRouting) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const RoutingTrace t = random_trace(seed);
    const CacheShape shape = trace_shape(t);
    for (const char* policy : {"lru", "lfu", "predict", "admit-2", "pinned"})
      for (TierMode m : kModes)
        for (uint64_t v : {0, 1, 2, 4})
          for (uint64_t r : {1, 2, 4}) {
            TierSimOptions o;
            o.vram_bytes = v;
            o.ram_bytes = r;
            o.mode = m;
            Checker c{&o};
            o.after_event = std::ref(c);
            const TierResult res = simulate_tiers(t, shape, o, policy);
            SCOPED_TRACE(::testing::Message() << policy << " " << tier_mode_name(m) << " V=" << v << " R=" << r << " seed " << seed);
            ASSERT_FALSE(::testing::Test::HasFatalFailure());
            EXPECT_EQ(res.vram_hits + res.ram_hits + res.ssd_reads, res.accesses);
            EXPECT_EQ(c.absent, res.transient);
            if (std::string(policy) == "lru" && r >= uint64_t(t.top_k)) EXPECT_EQ(res.transient, 0u);
            const TierBounds b = tier_bounds(t, shape, o);
            EXPECT_GE(res.ssd_reads, b.min_ssd_reads);
            EXPECT_LE(res.vram_hits, b.max_vram_hits);
            if (m == TierMode::inclusive) {  // RAM sees every access: a RAM-only cache's misses
              SimOptions so;
              so.budget.bytes = r;
              const SimResult one = simulate(t, shape, so, policy);
              EXPECT_EQ(res.ssd_reads, one.accesses - one.hits);
            }
          }
  }
}

// One layer, one expert per step, every expert used twice in a row: "a a b b c c a a ...".
RoutingTrace pairs_trace(int n_expert, int cycles) {
  RoutingTrace t;
  t.n_layer = 1;
  t.n_expert = n_expert;
  t.top_k = 1;
  RoutingRun& r = t.runs.emplace_back();
  r.name = "pairs";
  uint32_t tok = 0;
  for (int c = 0; c < cycles; ++c)
    for (int32_t e = 0; e < n_expert; ++e)
      for (int rep = 0; rep < 2; ++rep) r.add(tok++, 0, Phase::decode, std::span<const int32_t>(&e, 1));
  return t;
}

TierResult run_pairs(const RoutingTrace& t, TierMode m, uint64_t v, uint64_t r) {
  TierSimOptions o;
  o.vram_bytes = v;
  o.ram_bytes = r;
  o.mode = m;
  return simulate_tiers(t, trace_shape(t), o, "lru");
}

// Where exclusive must read less: every expert is reused at once (so promoted), and the working
// set fits VRAM (dropping victims costs nothing) or VRAM + RAM (demoting them keeps them), but not
// RAM, which bounds inclusive. Exclusive then reads each expert once; inclusive once per use pair.
TEST(TierSim, ExclusiveReadsLessWhereItMust) {
  const RoutingTrace t = pairs_trace(3, 20);
  const uint64_t cold = 3, per_cycle = 3;
  EXPECT_EQ(run_pairs(t, TierMode::inclusive, 3, 1).ssd_reads, 20 * per_cycle);
  EXPECT_EQ(run_pairs(t, TierMode::exclusive, 3, 1).ssd_reads, cold);
  EXPECT_EQ(run_pairs(t, TierMode::exclusive_demote, 2, 1).ssd_reads, cold);
  EXPECT_EQ(run_pairs(t, TierMode::inclusive, 2, 1).ssd_reads, 20 * per_cycle);
  // Dropping VRAM's victims when the set does not fit VRAM: no better than inclusive here.
  EXPECT_EQ(run_pairs(t, TierMode::exclusive, 2, 1).ssd_reads, 20 * per_cycle);
  for (TierMode m : kModes) {
    const TierResult r = run_pairs(t, m, 2, 1);
    TierSimOptions o;
    o.vram_bytes = 2, o.ram_bytes = 1, o.mode = m;
    EXPECT_GE(r.ssd_reads, tier_bounds(t, trace_shape(t), o).min_ssd_reads) << tier_mode_name(m);
  }
}

TEST(TierSim, RefusesOneLevelPolicies) {
  const RoutingTrace t = pairs_trace(3, 2);
  TierSimOptions o;
  o.vram_bytes = o.ram_bytes = 1;
  EXPECT_THROW(simulate_tiers(t, trace_shape(t), o, "belady"), Error);
  EXPECT_THROW(simulate_tiers(t, trace_shape(t), o, "predict-pf"), Error);
  EXPECT_THROW(parse_tier_mode("both"), Error);
}

std::string cachesim(const std::string& args, int* rc) {
  const test::CmdResult r = test::run_cmd("cachesim " + args);
  *rc = r.code;
  return r.out + r.err;
}

// `strata cachesim --vram` end to end: the text table and the JSON, whose counts add up and
// respect the bounds it prints.
TEST(CachesimCli, VramTiers) {
  const std::string syn = "--synthetic layers=2,experts=16,k=2,tokens=200,runs=1 ";
  int rc = 0;
  std::string out = cachesim(syn + "--budget 25% --vram 25% --policy lru,predict", &rc);
  ASSERT_EQ(rc, 0) << out;
  for (const char* s : {"VRAM 25% (8 experts) + RAM 25% (8 experts)", "exclusive", "inclusive", "bound (belady)", "fewer SSD bytes per token"})
    EXPECT_NE(out.find(s), std::string::npos) << s << "\n" << out;
  out = cachesim(syn + "--budget 4M,8M --vram 4M --expert-bytes 1M --tiers exclusive,exclusive-demote,inclusive --json", &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["pairs"].size(), 2u);
  EXPECT_EQ(j["pairs"][0]["vram_bytes"], 4u << 20);
  EXPECT_EQ(j["pairs"][1]["ram_bytes"], 8u << 20);
  for (const auto& p : j["pairs"]) {
    ASSERT_EQ(p["rows"].size(), 3u);
    ASSERT_EQ(p["bounds"].size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      const auto& r = p["rows"][i];
      EXPECT_EQ(r["tiers"], p["bounds"][i]["tiers"]);
      EXPECT_EQ(r["vram_hits"].get<uint64_t>() + r["ram_hits"].get<uint64_t>() + r["ssd_reads"].get<uint64_t>(), r["accesses"].get<uint64_t>());
      EXPECT_GE(r["ssd_reads"].get<uint64_t>(), p["bounds"][i]["min_ssd_reads"].get<uint64_t>());
      EXPECT_DOUBLE_EQ(r["ssd_bytes_per_token"].get<double>(), r["ssd_reads_per_token"].get<double>() * (1 << 20));
    }
  }
}

TEST(CachesimCli, VramBadInput) {
  int rc = 0;
  std::string out = cachesim("--synthetic tokens=20 --budget 25%,50% --vram 1,2,3", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--vram budgets"), std::string::npos) << out;
  out = cachesim("--synthetic tokens=20 --vram 10% --policy belady", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("one-level reference"), std::string::npos) << out;
  out = cachesim("--synthetic tokens=20 --json", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--vram"), std::string::npos) << out;
  // A truncated trace and a file that is not a trace: an error naming the file, no table.
  const std::string dir = ::testing::TempDir();
  const std::string cut = dir + "/tiers_cut.csv", foreign = dir + "/tiers_foreign.csv";
  std::ofstream(cut) << "# strata expert trace v1\nrun,phase,token,layer,experts\np0,decode,0,0,5 2\np0,deco";
  std::ofstream(foreign) << "\x7f" "ELF\x02\x01\x01 not a trace at all\n";
  for (const std::string& f : {cut, foreign}) {
    out = cachesim(f + " --vram 25%", &rc);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find(f), std::string::npos) << out;
    EXPECT_EQ(out.find("SSD reads"), std::string::npos) << out;
  }
  std::remove(cut.c_str());
  std::remove(foreign.c_str());
}

}  // namespace
}  // namespace strata
