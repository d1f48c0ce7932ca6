// --numa shard inside one process (runtime/numa_shards.h) on a faked two-node layout: the plan
// binds each shard's expert cache to its node and the dense weights to node 0 (the policy the
// kernel records), and passes with the shards give the logits of the engine alone, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../model/golden_util.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/ep_plan.h"
#include "runtime/expert_tier.h"
#include "runtime/numa_shards.h"

using namespace strata;

TEST(NumaMode, ParsesAndRefusesNamingTheOption) {
  EXPECT_EQ(parse_numa_mode("off"), NumaMode::Off);
  EXPECT_EQ(parse_numa_mode("shard"), NumaMode::Shard);
  EXPECT_EQ(parse_numa_mode("interleave"), NumaMode::Interleave);
  try {
    parse_numa_mode("both");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--numa 'both'"), std::string::npos) << e.what();
  }
}

#ifdef STRATA_HAVE_NUMA
namespace {

std::string numa_fixture() { return strata::test::fixtures_dir() + "/qwen3moe-q4_k_m/model.gguf"; }

// An engine on the fixture; with `topo`, node 0's share of the expert cache (and the plan for it).
std::unique_ptr<Engine> numa_engine(int cache_experts, const EpPlan* plan) {
  EngineOptions eo;
  eo.n_ctx = 64;
  eo.n_threads = 1;
  eo.n_batch = 16;
  eo.type_k = eo.type_v = GgmlType::F32;
  eo.tier.cache_experts = cache_experts;
  eo.tier.load = LoadMode::Wait;
  if (plan) eo.tier.cache_share = share_of_node(*plan, 0);
  return std::make_unique<Engine>(Model::load(numa_fixture()), eo);
}

// The prompt's logits (every row) then three decoded tokens' (greedy), concatenated.
std::vector<float> numa_logits(Engine& eng) {
  std::vector<int32_t> toks;
  for (int i = 0; i < 12; ++i) toks.push_back(100 + (i * 37) % 400);
  std::vector<float> all, lg;
  eng.eval(0, toks.data(), static_cast<int>(toks.size()), 0, true, lg);
  all = lg;
  const int nv = eng.config().n_vocab;
  int pos = static_cast<int>(toks.size());
  for (int s = 0; s < 3; ++s) {
    const float* last = lg.data() + lg.size() - nv;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + nv) - last);
    eng.eval(0, &next, 1, pos++, false, lg);
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

// Restores the calling thread's CPUs (NumaShards pins it to node 0's).
struct NumaKeepCpus {
  std::vector<int> cpus = numa_thread_cpus();
  ~NumaKeepCpus() { numa_pin_thread(cpus); }
};

void numa_check_identical(int cache_experts) {
  if (!std::filesystem::exists(numa_fixture())) STRATA_MISSING_FIXTURE(numa_fixture());
  NumaKeepCpus keep;
  auto plain = numa_engine(cache_experts, nullptr);
  const std::vector<float> want = numa_logits(*plain);
  plain.reset();
  const NumaTopology topo = resolve_numa_topology("0:0;1:1");
  auto model_for_plan = Model::load(numa_fixture());
  const EpPlan plan = plan_for_model(*model_for_plan, 2, 0, testing::TempDir() + "numa-no-stats");
  ASSERT_GT(plan.experts[1], 0);
  auto eng = numa_engine(cache_experts, &plan);
  numa_place_dense(eng->model(), topo, NumaMode::Shard);
  NumaShards shards(*eng, topo, plan);
  const std::vector<float> got = numa_logits(*eng);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "the shards changed the logits";
  const std::vector<NumaNodeStats> st = shards.stats();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_GT(st[1].jobs, 0u) << "node 1 computed nothing";
  EXPECT_GT(st[1].pairs, 0u);
  if (cache_experts > 0) {
    EXPECT_GT(st[1].misses, 0u) << "node 1's experts did not stream through its own cache";
    EXPECT_GT(st[1].bytes_read, 0u);
  }
}

}  // namespace

TEST(NumaShards, ResidentLogitsMatchTheEngineAlone) { numa_check_identical(0); }
TEST(NumaShards, StreamingLogitsMatchTheEngineAlone) { numa_check_identical(3); }

TEST(NumaShards, PlanBindsEachShardToItsNode) {
  if (!std::filesystem::exists(numa_fixture())) STRATA_MISSING_FIXTURE(numa_fixture());
  NumaKeepCpus keep;
  const NumaTopology topo = resolve_numa_topology("0:0;1:1");
  auto model_for_plan = Model::load(numa_fixture());
  const EpPlan plan = plan_for_model(*model_for_plan, 2, 0, testing::TempDir() + "numa-no-stats");
  auto eng = numa_engine(3, &plan);
  ASSERT_TRUE(eng->tier().plan().streaming);
  // Node 0's cache is its share of the expert budget; node 1's the rest.
  EXPECT_LT(eng->tier().plan().expert_cache, eng->tier().plan().experts_budget);
  const uint64_t dense = numa_place_dense(eng->model(), topo, NumaMode::Shard);
  EXPECT_GT(dense, 0u);
  NumaShards shards(*eng, topo, plan);
  EXPECT_EQ(shards.arena(0), nullptr);  // node 0's cache is the engine's tier
  const uint8_t* a = shards.arena(1);
  ASSERT_NE(a, nullptr);
  const uint64_t n = shards.arena_bytes(1);
  ASSERT_GT(n, 0u);
  for (const uint8_t* p : {a, a + n / 2, a + n - 1}) {
    const NumaPolicy pol = numa_policy_at(p);
    EXPECT_EQ(pol.mode, numa_mode_bind());
    EXPECT_EQ(pol.nodes, std::vector<int>{topo.nodes[1].mem_node}) << "node 1's cache is not bound to its memory node";
  }
  const auto ranges = dense_ranges(eng->model());
  ASSERT_FALSE(ranges[0].empty());
  const NumaPolicy d = numa_policy_at(eng->model().gguf().parts()[0]->base + ranges[0][0].first);
  EXPECT_EQ(d.mode, numa_mode_bind());
  EXPECT_EQ(d.nodes, std::vector<int>{topo.nodes[0].mem_node}) << "dense weights are not bound to node 0";
  EXPECT_EQ(numa_thread_cpus(), topo.nodes[0].pin_cpus) << "the engine's thread is not on node 0's CPUs";
  const std::string desc = shards.describe();
  EXPECT_NE(desc.find("node 1:"), std::string::npos) << desc;
  EXPECT_NE(desc.find("bound to memory node"), std::string::npos) << desc;
}

TEST(NumaShards, InterleaveRecordsThePolicyOnTheDenseWeights) {
  if (!std::filesystem::exists(numa_fixture())) STRATA_MISSING_FIXTURE(numa_fixture());
  const NumaTopology topo = resolve_numa_topology("0:0;1:1");
  auto eng = numa_engine(3, nullptr);
  numa_place_dense(eng->model(), topo, NumaMode::Interleave);
  const auto ranges = dense_ranges(eng->model());
  const NumaPolicy d = numa_policy_at(eng->model().gguf().parts()[0]->base + ranges[0][0].first);
  EXPECT_EQ(d.mode, numa_mode_interleave());
  std::vector<int> want{topo.nodes[0].mem_node};
  if (topo.nodes[1].mem_node != want[0]) want.push_back(topo.nodes[1].mem_node);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(d.nodes, want);
}
#endif
