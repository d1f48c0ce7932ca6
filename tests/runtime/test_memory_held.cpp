// The memory plan counts what is really held: the KV cache (with DeepSeek-V4's compressed blocks,
// DeepSeek-V3.2's indexer keys and Qwen3.5's DeltaNet state) and the forward pass's scratch are
// allocated before the plan and do not grow in any pass; and a process run under a budget barely
// above its plan never holds more than the budget (peak RSS).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "../cli/cli_util.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace strata::test {
namespace {

// One set per architecture the engine runs.
const char* const kSets[] = {"qwen3moe-q8_0", "deepseek2-q8_0", "mixtral-q8_0", "gpt-oss-q8_0", "deepseek4-q8_0", "deepseek32-q8_0", "qwen35moe-q8_0"};

std::string held_fixture(const std::string& set) { return std::string(STRATA_FIXTURES_DIR) + "/" + set + "/model.gguf"; }

class MemoryHeld : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Archs, MemoryHeld, ::testing::ValuesIn(kSets), [](const auto& info) {
  std::string n = info.param;
  for (auto& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

TEST_P(MemoryHeld, PassesAllocateNothingBeyondThePlan) {
  ASSERT_TRUE(std::filesystem::exists(held_fixture(GetParam()))) << held_fixture(GetParam()) << " is absent";
  EngineOptions eo;
  eo.n_ctx = 160;
  eo.n_seq = 2;
  eo.n_threads = 2;
  eo.n_batch = 16;
  eo.tier.cache_experts = 4;  // streaming
  Engine eng(Model::load(held_fixture(GetParam())), eo);
  const MemoryPlan& plan = eng.tier().plan();
  EXPECT_EQ(eng.kv().bytes(), plan.kv);
  const uint64_t scratch0 = eng.model().scratch_bytes();
  EXPECT_GT(scratch0, 0u);
  EXPECT_GE(plan.scratch, scratch0);
  std::vector<int32_t> prompt(150);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(10 + (i * 7) % 300);
  std::vector<float> lg;
  eng.eval(0, prompt.data(), 150, 0, true, lg);  // passes of 16 up to the context's end
  for (int p = 150; p < 156; ++p) eng.eval(0, &prompt[static_cast<size_t>(p - 140)], 1, p, false, lg);
  const SeqInput two[2] = {{0, prompt.data(), 1, Logits::Last}, {1, prompt.data(), 15, Logits::All}};
  eng.forward(two, lg);
  EXPECT_EQ(eng.kv().bytes(), plan.kv) << "the per-sequence state grew outside the plan";
  EXPECT_EQ(eng.model().scratch_bytes(), scratch0) << "a pass grew the scratch outside the plan";
}

nlohmann::json run_json(const std::string& set, const std::string& opts) {
  const CmdResult r = run_cmd("run -m " + held_fixture(set) + " -p 'The quick brown fox jumps over the lazy dog' -n 12 --temp 0 -c 256 -t 2 --json " + opts);
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(last_line(r.out), nullptr, false);
}

TEST_P(MemoryHeld, PeakRssStaysUnderABudgetBarelyAboveThePlan) {
  ASSERT_TRUE(std::filesystem::exists(held_fixture(GetParam()))) << held_fixture(GetParam()) << " is absent";
  // The plan with the smallest cache (one expert slot plus the transient buffers)...
  const nlohmann::json a = run_json(GetParam(), "--cache-experts 1");
  ASSERT_TRUE(a.contains("memory")) << a.dump();
  const auto& m = a["memory"];
  const uint64_t floor = m["dense"].get<uint64_t>() + m["kv"].get<uint64_t>() + m["scratch"].get<uint64_t>() + m["expert_cache"].get<uint64_t>();
  // ... and a budget 1 MiB above it: the process stays within the budget.
  const uint64_t budget = floor + (1u << 20);
  const nlohmann::json b = run_json(GetParam(), "--ram-budget " + std::to_string(budget));
  ASSERT_TRUE(b.contains("memory")) << b.dump();
  EXPECT_TRUE(b["memory"]["streaming"].get<bool>()) << "the budget should force streaming";
  EXPECT_EQ(b["memory"]["budget"].get<uint64_t>(), budget);
  const uint64_t peak = b["memory"]["peak_rss"].get<uint64_t>();
#if defined(__SANITIZE_ADDRESS__)
  // The strata binary of a sanitizer build carries ASan's shadow memory and quarantine: its RSS
  // says nothing about the plan (the release build checks the bound).
  std::printf("[%-16s] (AddressSanitizer build: RSS bound not checked)\n", GetParam());
#else
  EXPECT_LE(peak, budget) << "peak RSS " << peak << " over the budget " << budget;
#endif
  std::printf("[%-16s] budget %.2f MiB, peak RSS %.2f MiB\n", GetParam(), budget / 1048576.0, peak / 1048576.0);
}

}  // namespace
}  // namespace strata::test
