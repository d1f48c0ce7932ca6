// Expert parallelism under mpirun on loopback (runtime/expert_parallel.h): every pass's logits
// bit-identical to one process, a rank that exits or stalls ends the job with a clear error, and
// ranks holding different files are refused. Built where CMake finds MPI (STRATA_MPIEXEC).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../model/golden_util.h"
#include "cli_util.h"

#ifdef STRATA_MPIEXEC
using namespace strata::test;

namespace {

std::string ep_model(const std::string& set) { return fixtures_dir() + "/" + set + "/model.gguf"; }
std::string ep_tmp(const std::string& name) { return "/tmp/strata_ep_" + std::to_string(::getpid()) + "_" + name; }

// `strata ARGS` under `mpirun -n ranks` (0: without mpirun); a hang ends at the outer timeout and fails.
CmdResult ep_cmd(const std::string& env, int ranks, const std::string& args) {
  std::string line = "timeout -k 5 120 env " + env + " ";
  if (ranks > 0) line += std::string(STRATA_MPIEXEC) + " --allow-run-as-root --oversubscribe -n " + std::to_string(ranks) + " ";
  return run_shell(line + STRATA_BINARY + " " + args);
}


const char* kEpPrompt = "\"The quick brown fox jumps over the lazy dog. Numbers: 3.14159\"";

// Logits of the prompt's passes and of every decoded token, with `ranks` ranks (0: one process).
std::string ep_logits(const std::string& set, int ranks, const std::string& extra, nlohmann::json* j = nullptr) {
  const std::string dir = ep_tmp(set + "_" + std::to_string(ranks));
  std::filesystem::remove_all(dir);
  const std::string ep = ranks > 0 ? " --expert-parallel --ep-timeout 60 -t 1" : " -t 2";
  const CmdResult r = ep_cmd("", ranks,
                             "run -m " + ep_model(set) + " -p " + kEpPrompt + " -n 6 --ignore-eos --temp 0 --json --no-warm-start -b 8" + ep + extra +
                                 " --dump-tensors " + dir + " --dump-filter 'result_output.*'");
  EXPECT_EQ(r.code, 0) << r.err;
  if (j && r.code == 0) *j = nlohmann::json::parse(last_line(r.out));
  std::string all = dumped_tensors(dir);
  std::filesystem::remove_all(dir);
  return all;
}

void expect_identical(const std::string& set, const std::string& extra) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert parallelism)");
  const std::string one = ep_logits(set, 0, extra);
  ASSERT_FALSE(one.empty());
  for (int ranks : {2, 3}) {
    nlohmann::json j;
    EXPECT_TRUE(ep_logits(set, ranks, extra, &j) == one) << set << ": " << ranks << " ranks gave other logits than one process";
    ASSERT_TRUE(j.contains("expert_parallel")) << j.dump();
    const auto& ep = j["expert_parallel"];
    EXPECT_EQ(ep["ranks"], ranks);
    ASSERT_EQ(ep["per_rank"].size(), static_cast<size_t>(ranks));
    for (int r = 1; r < ranks; ++r) EXPECT_GT(ep["per_rank"][r]["jobs"].get<int>(), 0) << "rank " << r << " computed nothing";
    EXPECT_GT(ep["decode_tokens"].get<int>(), 0);
    EXPECT_GT(ep["net_bytes"].get<double>(), 0);
  }
}

}  // namespace

TEST(ExpertParallelCli, Qwen3MoeLogitsMatchOneProcess) { expect_identical("qwen3moe-q4_k_m", ""); }
TEST(ExpertParallelCli, Deepseek2LogitsMatchOneProcess) { expect_identical("deepseek2-q4_k_m", ""); }
// Streaming tiers on every rank (a cache of 3 experts): the same bits.
TEST(ExpertParallelCli, MixtralStreamingLogitsMatchOneProcess) { expect_identical("mixtral-q4_k_m", " --cache-experts 3"); }

TEST(ExpertParallelCli, PerplexityMatchesOneProcess) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert parallelism)");
  const std::string text = ep_tmp("ppl.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 12; ++i) f << "The quick brown fox jumps over the lazy dog " << i << ". Numbers: 3.14159, 2026-01-31.\n";
  }
  const std::string args = "perplexity -m " + ep_model("deepseek2-q4_k_m") + " -f " + text + " -c 64 -t 1 --json";
  const CmdResult one = ep_cmd("", 0, args), two = ep_cmd("", 2, args + " --expert-parallel");
  std::remove(text.c_str());
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(two.code, 0) << two.err;
  const auto a = nlohmann::json::parse(last_line(one.out)), b = nlohmann::json::parse(last_line(two.out));
  EXPECT_EQ(a["ppl"], b["ppl"]) << a.dump() << "\n" << b.dump();
  EXPECT_EQ(b["expert_parallel"]["ranks"], 2);
}

TEST(ExpertParallelCli, StalledRankEndsTheJobWithAnError) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert parallelism)");
  const CmdResult r = ep_cmd("STRATA_EP_FAULT=stall:1:3", 2,
                             "run -m " + ep_model("qwen3moe-q4_k_m") + " -p hello -n 4 --ignore-eos --temp 0 -t 1 --expert-parallel --ep-timeout 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "the job hung until the test's own timeout";
  EXPECT_NE(r.err.find("rank 1 did not answer MoE layer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--ep-timeout"), std::string::npos) << r.err;
}

TEST(ExpertParallelCli, ExitedRankEndsTheJob) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert parallelism)");
  const CmdResult r = ep_cmd("STRATA_EP_FAULT=exit:2:2", 3,
                             "run -m " + ep_model("qwen3moe-q4_k_m") + " -p hello -n 4 --ignore-eos --temp 0 -t 1 --expert-parallel --ep-timeout 10");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "the job hung until the test's own timeout";
  EXPECT_NE(r.err.find("rank 2: injected fault"), std::string::npos) << r.err;
  // mpirun names the rank that exited (or rank 0 does when it notices first).
  EXPECT_TRUE(r.err.find("exited") != std::string::npos || r.err.find("rank 2") != std::string::npos) << r.err;
}

TEST(ExpertParallelCli, DifferentFilesAreRefusedNamingTheTensor) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert parallelism)");
  const std::string tail = " run -p hello -n 2 -t 1 --expert-parallel --ep-timeout 30";
  const CmdResult r = run_shell("timeout -k 5 120 " + std::string(STRATA_MPIEXEC) + " --allow-run-as-root --oversubscribe -n 1 " + STRATA_BINARY +
                                tail + " -m " + ep_model("qwen3moe-q4_k_m") + " : -n 1 " + STRATA_BINARY + tail + " -m " + ep_model("qwen3moe-q8_0"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank 1 holds another model than rank 0: tensor '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; rank 1: "), std::string::npos) << r.err;  // both sides of the difference shown
}

// A rank other than 0 builds only what its shard needs: its memory plan holds no dense weights and
// no KV cache, so under the same --ram-budget its expert cache is larger than rank 0's (the demo
// model: 4.2 MiB dense, 102 MiB of experts; both ranks stream under 60 MiB).
TEST(ExpertParallelCli, ShardRanksPlanNoDenseWeightsNorKvCache) {
  const std::string model = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  const CmdResult r = ep_cmd("", 2,
                             "run -m " + model + " -p hello -n 4 --ignore-eos --temp 0 -t 1 -c 256 --json --no-warm-start --ram-budget 60M --stats-dir " + ep_tmp("nostats") +
                             " --expert-parallel --ep-timeout 60");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(last_line(r.out));
  const auto& ranks = j["expert_parallel"]["per_rank"];
  ASSERT_EQ(ranks.size(), 2u) << j.dump();
  const auto &m0 = ranks[0]["memory"], &m1 = ranks[1]["memory"];
  EXPECT_EQ(m0["budget"], 60u << 20);
  EXPECT_EQ(m1["budget"], 60u << 20);
  EXPECT_GT(m0["dense"].get<uint64_t>(), 4u << 20) << m0.dump();
  EXPECT_GT(m0["kv"].get<uint64_t>(), 0u) << m0.dump();
  EXPECT_EQ(m1["dense"].get<uint64_t>(), 0u) << m1.dump();
  EXPECT_EQ(m1["kv"].get<uint64_t>(), 0u) << m1.dump();
  EXPECT_GT(m0["expert_cache"].get<uint64_t>(), 0u) << m0.dump();
  EXPECT_GT(m1["expert_cache"].get<uint64_t>(), m0["expert_cache"].get<uint64_t>()) << m0.dump() << "\n" << m1.dump();
  EXPECT_GT(m1["peak_rss"].get<uint64_t>(), 0u);
  EXPECT_GT(ranks[1]["jobs"].get<int>(), 0);
  EXPECT_NE(r.err.find("rank 1: memory plan (expert shard: no dense weights, no KV cache)"), std::string::npos) << r.err;
}

// A plan made from recorded usage statistics reports the formula from them beside the uniform one.
TEST(ExpertParallelCli, UsageFormulaFromRecordedStatistics) {
  const std::string model = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";
  ASSERT_TRUE(std::filesystem::exists(model)) << model;
  const std::string stats = ep_tmp("stats");
  std::filesystem::remove_all(stats);
  const CmdResult rec = ep_cmd("", 0, "run -m " + model + " -p hello -n 8 --ignore-eos --temp 0 -t 1 -c 256 --ram-budget 60M --stats-dir " + stats);
  ASSERT_EQ(rec.code, 0) << rec.err;
  const CmdResult r = ep_cmd("", 2, "run -m " + model + " -p hello -n 4 --ignore-eos --temp 0 -t 1 -c 256 --json --no-warm-start --stats-dir " + stats +
                                        " --expert-parallel --ep-timeout 60");
  std::filesystem::remove_all(stats);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("plan by bytes and usage statistics"), std::string::npos) << r.err;
  const auto ep = nlohmann::json::parse(last_line(r.out))["expert_parallel"];
  ASSERT_TRUE(ep["usage_formula_bytes_per_token"].is_number()) << ep.dump();
  EXPECT_GT(ep["usage_formula_bytes_per_token"].get<double>(), 0);
  EXPECT_GT(ep["usage_formula_round_trips_per_token"].get<double>(), 0);
  EXPECT_NE(r.err.find("from the usage statistics:"), std::string::npos) << r.err;
  // Without statistics there is no usage form.
  const CmdResult u = ep_cmd("", 2, "run -m " + model + " -p hello -n 2 --ignore-eos --temp 0 -t 1 -c 256 --json --no-warm-start --stats-dir " +
                                        ep_tmp("nostats") + " --expert-parallel --ep-timeout 60");
  ASSERT_EQ(u.code, 0) << u.err;
  EXPECT_TRUE(nlohmann::json::parse(last_line(u.out))["expert_parallel"]["usage_formula_bytes_per_token"].is_null());
}

TEST(ExpertParallelCli, InspectShowsAPlanWithEveryExpertOnce) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (expert parallelism)");
  const CmdResult r = ep_cmd("", 0, "inspect " + ep_model("deepseek2-q4_k_m") + " --ep 3 --json --stats-dir " + ep_tmp("nostats"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["layers"].empty());
  for (const auto& l : j["layers"]) {
    std::vector<int> per(3, 0);
    for (int o : l["owner"]) {
      ASSERT_TRUE(o >= 0 && o < 3);
      per[o]++;
    }
    EXPECT_LE(*std::max_element(per.begin(), per.end()) - *std::min_element(per.begin(), per.end()), 1) << l.dump();
  }
  const CmdResult t = ep_cmd("", 0, "inspect " + ep_model("deepseek2-q4_k_m") + " --ep 2 --stats-dir " + ep_tmp("nostats"));
  EXPECT_NE(t.out.find("rank 1:"), std::string::npos) << t.out;
}
#endif
