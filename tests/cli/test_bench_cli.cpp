// strata bench: its JSON line carries the figures the benchmark scripts read, streaming shows up
// in them when the cache is capped, and bad options are refused.
#include <gtest/gtest.h>

#include "../model/golden_util.h"
#include "cli_util.h"

using namespace strata::test;

namespace {
std::string bench_model() { return fixtures_dir() + "/qwen3moe-q4_k_m/model.gguf"; }
}  // namespace

TEST(BenchCli, JsonFiguresWithStreaming) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (bench CLI test)");
  for (const char* input : {"random", "greedy"}) {
    SCOPED_TRACE(input);
    auto r = run_cmd("bench -m " + bench_model() + " -t 2 -c 64 -p 16 -n 8 --cache-experts 6 --disk-probe 4194304 --json --tg-input " +
                     std::string(input));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(last_line(r.out));
    EXPECT_EQ(j["tg_input"], input);
    for (const char* phase : {"pp16", "tg8"}) {
      ASSERT_TRUE(j.contains(phase)) << phase;
      const auto& p = j[phase];
      EXPECT_GT(p["tokens_per_s"].get<double>(), 0.0) << phase;
      const double hit = p["hit_rate"].get<double>();
      EXPECT_GE(hit, 0.0) << phase;
      EXPECT_LT(hit, 1.0) << phase << ": 6 cached experts cannot serve every access";
      EXPECT_GT(p["bytes_per_token"].get<double>(), 0.0) << phase << ": a capped cache must read experts";
    }
    EXPECT_GT(j["disk_bw"].get<double>(), 0.0);
    EXPECT_GT(j["peak_rss"].get<double>(), 0.0);
  }
}

TEST(BenchCli, RejectsUnknownTgInput) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (bench CLI test)");
  auto r = run_cmd("bench -m " + bench_model() + " -p 4 -n 2 --tg-input sampled");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("tg-input"), std::string::npos) << r.err;
}
