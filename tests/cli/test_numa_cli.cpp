// strata run|perplexity --numa shard|interleave on a faked two-node layout
// (STRATA_NUMA_TOPOLOGY=0:0;1:1; runtime/numa_shards.h): the prompt's and every decoded token's
// logits bit-identical to one node, resident and streaming; bad values refused naming the option.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../model/golden_util.h"
#include "cli_util.h"

using namespace strata::test;

namespace {

const char* kNumaEnv = "STRATA_NUMA_TOPOLOGY='0:0;1:1'";
std::string numa_model() { return fixtures_dir() + "/qwen3moe-q4_k_m/model.gguf"; }
std::string numa_tmp(const std::string& name) { return "/tmp/strata_numa_" + std::to_string(::getpid()) + "_" + name; }


// Logits of the prompt's passes (chunks of 8) and of every decoded token.
std::string numa_run_logits(const std::string& env, const std::string& extra, nlohmann::json* j) {
  const std::string dir = numa_tmp("dump");
  std::filesystem::remove_all(dir);
  const CmdResult r = run_cmd_env("timeout -k 5 120 env " + env,
                                  "run -m " + numa_model() +
                                      " -p \"The quick brown fox jumps over the lazy dog. Numbers: 3.14159\" -n 6 --ignore-eos --temp 0 --json "
                                      "--no-warm-start -b 8 -t 1" +
                                      extra + " --dump-tensors " + dir + " --dump-filter 'result_output.*'");
  EXPECT_EQ(r.code, 0) << r.err;
  if (r.code == 0) *j = nlohmann::json::parse(last_line(r.out));
  if (r.code == 0) j->operator[]("stderr") = r.err;
  std::string all = dumped_tensors(dir);
  std::filesystem::remove_all(dir);
  return all;
}

void numa_expect_identical(const std::string& budget) {
  if (!std::filesystem::exists(numa_model())) STRATA_MISSING_FIXTURE(numa_model());
  nlohmann::json one, two;
  const std::string a = numa_run_logits("", budget, &one);
  ASSERT_FALSE(a.empty());
  const std::string b = numa_run_logits(kNumaEnv, budget + " --numa shard", &two);
  EXPECT_TRUE(a == b) << "--numa shard on two faked nodes gave other logits than one node";
  ASSERT_TRUE(two.contains("numa")) << two.dump();
  const auto& nodes = two["numa"]["nodes"];
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_GT(nodes[1]["jobs"].get<int>(), 0) << "node 1 computed nothing";
  EXPECT_GT(nodes[0]["experts"].get<int>(), 0);
  EXPECT_GT(nodes[1]["experts"].get<int>(), 0);
  const std::string err = two["stderr"];
  EXPECT_NE(err.find("numa shard: 2 NUMA nodes (STRATA_NUMA_TOPOLOGY)"), std::string::npos) << err;
  EXPECT_NE(err.find("  node 1: 1 threads"), std::string::npos) << err;
  if (!budget.empty()) {
    EXPECT_TRUE(one["memory"]["streaming"].get<bool>()) << one["memory"].dump();
    EXPECT_TRUE(two["memory"]["streaming"].get<bool>()) << two["memory"].dump();
    EXPECT_GT(nodes[1]["misses"].get<int>(), 0) << "node 1's experts did not stream through its own cache";
    EXPECT_GT(nodes[1]["cache_bytes"].get<uint64_t>(), 0u);
    EXPECT_NE(err.find("bound to memory node"), std::string::npos) << err;
  }
}

}  // namespace

#ifdef STRATA_HAVE_NUMA
TEST(NumaCli, ShardLogitsMatchOneNode) { numa_expect_identical(""); }
// A budget that streams the experts (dense, KV and scratch take 25.4 MiB of it): each node's cache is
// its half of the rest and reads through its own queue.
TEST(NumaCli, StreamingShardLogitsMatchOneNode) { numa_expect_identical(" -c 64 --ram-budget 28M"); }
// A cache of 4 experts (2 per node).
TEST(NumaCli, CappedCacheShardLogitsMatchOneNode) { numa_expect_identical(" --cache-experts 4"); }

TEST(NumaCli, InterleaveGivesTheSameLogits) {
  if (!std::filesystem::exists(numa_model())) STRATA_MISSING_FIXTURE(numa_model());
  nlohmann::json one, two;
  const std::string a = numa_run_logits("", "", &one);
  const std::string b = numa_run_logits(kNumaEnv, " --numa interleave", &two);
  EXPECT_TRUE(a == b);
  const std::string err = two["stderr"];
  EXPECT_NE(err.find("interleaved over the nodes' memory"), std::string::npos) << err;
}

TEST(NumaCli, PerplexityMatchesOneNode) {
  if (!std::filesystem::exists(numa_model())) STRATA_MISSING_FIXTURE(numa_model());
  const std::string text = numa_tmp("ppl.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 8; ++i) f << "The quick brown fox jumps over the lazy dog " << i << ". Numbers: 3.14159.\n";
  }
  const std::string args = "perplexity -m " + numa_model() + " -f " + text + " -c 64 -t 1 --json";
  const CmdResult one = run_cmd(args), two = run_cmd_env(kNumaEnv, args + " --numa shard");
  std::remove(text.c_str());
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(two.code, 0) << two.err;
  const auto a = nlohmann::json::parse(last_line(one.out)), b = nlohmann::json::parse(last_line(two.out));
  EXPECT_EQ(a["ppl"], b["ppl"]) << a.dump() << "\n" << b.dump();
  EXPECT_EQ(b["numa"]["nodes"].size(), 2u);
}
#else
TEST(NumaCli, WithoutLibnumaShardIsRefused) {
  if (!std::filesystem::exists(numa_model())) STRATA_MISSING_FIXTURE(numa_model());
  const CmdResult r = run_cmd("run -m " + numa_model() + " -p hi -n 1 --numa shard");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("built without libnuma"), std::string::npos) << r.err;
}
#endif

TEST(NumaCli, BadValuesAreRefusedNamingTheOption) {
  if (!std::filesystem::exists(numa_model())) STRATA_MISSING_FIXTURE(numa_model());
  const std::string run = "run -m " + numa_model() + " -p hi -n 1 -t 1";
  CmdResult r = run_cmd(run + " --numa sideways");
  EXPECT_NE(r.code, 0);
  EXPECT_NE((r.err + r.out).find("--numa"), std::string::npos) << r.err;
  r = run_cmd(run + " --numa-topology '0:0;1:1'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--numa-topology needs --numa shard"), std::string::npos) << r.err;
#ifdef STRATA_HAVE_NUMA
  r = run_cmd(run + " --numa shard --numa-topology '1:0'");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--numa-topology '1:0': node 1 where node 0 was expected"), std::string::npos) << r.err;
  r = run_cmd_env("STRATA_NUMA_TOPOLOGY='0:0;1:zz'", run + " --numa shard");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("STRATA_NUMA_TOPOLOGY '0:0;1:zz'"), std::string::npos) << r.err;
#endif
}
