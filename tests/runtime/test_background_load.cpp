// No load wait: a resident model decodes at once through the expert cache while a thread reads
// the file, then switches to resident. The output is bit for bit the same whether tokens ran
// during the load or after it; the load ends in the resident state; a read error during the
// load is reported and streaming goes on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "../model/golden_util.h"
#include "../wait_until.h"
#include "runtime/engine.h"

using namespace strata;
using namespace strata::test;

namespace {

const std::string kLoadSet = "qwen3moe-q4_k_m";

std::unique_ptr<Engine> load_engine(const TierOptions& tier) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 64;
  eo.type_k = eo.type_v = GgmlType::F32;
  eo.tier = tier;
  return std::make_unique<Engine>(Model::load(fixtures_dir() + "/" + kLoadSet + "/model.gguf"), eo);
}

// Prompt logits (all rows), then 6 greedy steps' logits; between_steps(s) runs before step s.
template <typename F>
std::vector<float> decode(Engine& eng, F&& between_steps) {
  const auto prompt = read_json(fixtures_dir() + "/" + kLoadSet + "/golden/p2.json")["prompt_tokens"].get<std::vector<int32_t>>();
  std::vector<float> all, lg;
  eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, lg);
  all = lg;
  const int nv = eng.config().n_vocab;
  for (int s = 0, pos = static_cast<int>(prompt.size()); s < 6; ++s, ++pos) {
    between_steps(s);
    const float* last = all.data() + all.size() - nv;
    const int32_t t = static_cast<int32_t>(std::max_element(last, last + nv) - last);
    eng.eval(0, &t, 1, pos, false, lg);
    all.insert(all.end(), lg.begin(), lg.begin() + nv);
  }
  return all;
}

// Polls the tier (as the engine does before each pass) until the background load has ended.
bool load_ended(Engine& eng) {
  return wait_until([&] {
    eng.tier().poll_load();
    return !eng.tier().plan().loading;
  });
}

}  // namespace

TEST(BackgroundLoad, TokensDuringAndAfterTheLoadMatchAWaitedLoad) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (background load test)");
  const auto ref = decode(*load_engine(TierOptions{}), [](int) {});
  std::atomic<bool> release{false};
  TierOptions t;
  t.load = LoadMode::AlwaysBackground;
  t.load_hooks.before_chunk = [&](uint64_t) {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // held until the test lets go
  };
  auto eng = load_engine(t);
  ASSERT_TRUE(eng->tier().plan().loading);
  ASSERT_NE(eng->tier().cache(), nullptr);
  const auto got = decode(*eng, [&](int s) {
    if (s != 3) return;
    // The prompt and three tokens ran while the load was held: they streamed their experts.
    EXPECT_TRUE(eng->tier().plan().loading);
    EXPECT_TRUE(eng->tier().plan().streaming);
    EXPECT_GT(eng->tier().cache()->counters().misses, 0u);
    release = true;
    ASSERT_TRUE(load_ended(*eng));
    EXPECT_TRUE(eng->tier().plan().loaded_in_background);
    EXPECT_FALSE(eng->tier().plan().streaming);
    EXPECT_EQ(eng->tier().cache(), nullptr);  // resident: no per-expert overhead
    EXPECT_TRUE(eng->tier().plan().load_error.empty()) << eng->tier().plan().load_error;
  });
  EXPECT_TRUE(eng->tier().plan().loaded_in_background);
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
}

TEST(BackgroundLoad, ReadErrorIsReportedAndExpertsKeepStreaming) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (background load test)");
  const auto ref = decode(*load_engine(TierOptions{}), [](int) {});
  TierOptions t;
  t.load = LoadMode::AlwaysBackground;
  t.load_hooks.fail_chunk = 0;
  auto eng = load_engine(t);
  ASSERT_TRUE(load_ended(*eng));
  const MemoryPlan& plan = eng->tier().plan();
  EXPECT_NE(plan.load_error.find("failed"), std::string::npos) << plan.load_error;
  EXPECT_NE(plan.load_error.find("model.gguf"), std::string::npos) << plan.load_error;
  EXPECT_FALSE(plan.loaded_in_background);
  EXPECT_TRUE(plan.streaming);
  ASSERT_NE(eng->tier().cache(), nullptr);
  const auto got = decode(*eng, [](int) {});
  ASSERT_EQ(got.size(), ref.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)), 0);
  EXPECT_NE(plan.describe().find("background load failed"), std::string::npos);
}
