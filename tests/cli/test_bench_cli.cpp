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

// --pass-rows: one figure per row count 1..N, passes built as the server's decoding slots build them.
TEST(BenchCli, PassRowsTimesEveryRowCount) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (bench CLI test)");
  auto r = run_cmd("bench -m " + bench_model() + " -t 2 -c 64 --pass-rows 6 --pass-slots 3 --pass-reps 2 --pass-pos 8 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(last_line(r.out));
  ASSERT_EQ(j["pass_rows"].size(), 6u) << r.out;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(j["pass_rows"][i]["rows"].get<int>(), static_cast<int>(i) + 1);
    EXPECT_GT(j["pass_rows"][i]["median_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(j["pass_rows"][1]["rows_per_slot"], "1+1");
  EXPECT_EQ(j["pass_rows"][4]["rows_per_slot"], "2+2+1");  // 3 slots, 2 drafts dealt out in turn
}

TEST(BenchCli, PassRowsBeyondTheContextIsAnError) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (bench CLI test)");
  auto r = run_cmd("bench -m " + bench_model() + " -c 64 --pass-rows 8 --pass-pos 60");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--pass-pos 60"), std::string::npos) << r.err;
}
