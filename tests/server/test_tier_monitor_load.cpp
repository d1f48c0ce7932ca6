// The live tier figures across a background load that ends while the server runs: the engine
// drops its expert cache between passes (resident from then on) and the monitor, fed after every
// pass, must follow (it used to read the dropped cache: a crash on the first pass after the load).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../model/golden_util.h"
#include "../wait_until.h"
#include "runtime/engine.h"
#include "server/tier_monitor.h"

namespace strata::test {
namespace {

std::unique_ptr<Engine> held_load_engine(std::atomic<bool>& release) {
  EngineOptions eo;
  eo.n_ctx = 128;
  eo.n_threads = 1;
  eo.n_batch = 32;
  eo.tier.load = LoadMode::AlwaysBackground;
  eo.tier.load_hooks.before_chunk = [&release](uint64_t) {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // held until the test lets go
  };
  return std::make_unique<Engine>(Model::load(fixtures_dir() + "/qwen3moe-q4_k_m/model.gguf"), eo);
}

TEST(TierMonitorLoad, FollowsTheSwitchToResidentAndKeepsWhatStreamed) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (tier monitor across a background load)");
  std::atomic<bool> release{false};
  auto eng = held_load_engine(release);
  ASSERT_NE(eng->tier().cache(), nullptr);
  server::TierMonitor mon(*eng, server::TierMonitorOptions{});
  std::vector<float> lg;
  const int32_t prompt[4] = {100, 200, 300, 400};
  eng->eval(0, prompt, 4, 0, false, lg);  // streams: the load is held
  mon.on_step(4, 1, 0.0, 0.01);
  const nlohmann::json before = mon.snapshot(0.02);
  EXPECT_EQ(before["mode"], "streaming");
  const uint64_t misses = before["totals"]["misses"].get<uint64_t>();
  EXPECT_GT(misses, 0u);
  release = true;
  // The load ends; polled as the engine does before a pass, the tier switches to resident.
  ASSERT_TRUE(wait_until([&] {
    eng->tier().poll_load();
    return !eng->tier().plan().loading;
  }));
  EXPECT_EQ(eng->tier().cache(), nullptr);
  const int32_t t = 500;
  eng->eval(0, &t, 1, 4, false, lg);
  mon.on_step(1, 1, 0.02, 0.03);
  const nlohmann::json after = mon.snapshot(0.04);
  EXPECT_EQ(after["mode"], "resident");
  // What streamed before the switch stays in the totals; nothing was read after it.
  EXPECT_EQ(after["totals"]["misses"].get<uint64_t>(), misses);
  EXPECT_EQ(after["totals"]["steps"], 2);
  EXPECT_EQ(eng->tier().counters().misses, misses);
}

}  // namespace
}  // namespace strata::test
