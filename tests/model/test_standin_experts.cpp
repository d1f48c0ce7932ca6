// --miss-model's provider (model/standin_experts.h) on the committed trained model and a Q4_0
// stand-in of it written by requantize_experts: with nothing in memory and no protected choice,
// every routed expert comes from the stand-in and the logits are the stand-in model's own, bit for
// bit (its dense tensors are the same bytes); a token's first J = k choices protected, none does
// and the logits are the full model's; J = 1 mixes them. A file of other shapes is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "golden_util.h"
#include "model/model.h"
#include "model/requantize.h"
#include "model/standin_experts.h"
#include "runtime/engine.h"

using namespace strata;
using namespace strata::test;

namespace {
const std::string kStandinFull = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";

// The model's resident experts, reported as not in memory (every expert is a miss).
class NothingInMemory final : public ExpertProvider {
 public:
  explicit NothingInMemory(ExpertProvider& p) : p_(p) {}
  void request(int l, const int32_t* e, int n) override { p_.request(l, e, n); }
  ExpertMats acquire(int l, int e) override { return p_.acquire(l, e); }
  void release(int l, int e) override { p_.release(l, e); }
  bool in_memory(int, int) const override { return false; }

 private:
  ExpertProvider& p_;
};

std::unique_ptr<Engine> standin_engine(const std::string& path) {
  EngineOptions eo;
  eo.n_ctx = 64;
  eo.n_threads = 2;
  eo.n_batch = 32;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(path), eo);
}

// A 20-token prompt's logits at every position, then one decode step's.
std::vector<float> standin_logits(Engine& eng) {
  std::vector<int32_t> toks(20);
  for (int i = 0; i < 20; ++i) toks[static_cast<size_t>(i)] = (i * 389 + 17) % 4096;
  std::vector<float> all, step;
  eng.eval(0, toks.data(), 20, 0, true, all);
  const int32_t next = 1234;
  eng.eval(0, &next, 1, 20, false, step);
  all.insert(all.end(), step.begin(), step.end());
  return all;
}

bool standin_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// StandInCounters' values (its atomics do not copy).
struct StandInCounts {
  uint64_t experts = 0, bytes = 0;
};

// The full model with a stand-in for its misses, keep = J.
std::vector<float> with_standin(const Model& standin, int keep, StandInCounts* counts) {
  auto eng = standin_engine(kStandinFull);
  Model& m = eng->model();
  NothingInMemory misses(*m.expert_provider());
  StandInExperts si(misses, standin, keep);
  m.set_expert_provider(&si);
  m.add_routing_observer(&si);
  std::vector<float> out = standin_logits(*eng);
  m.remove_routing_observer(&si);
  m.set_expert_provider(nullptr);
  *counts = {si.counters().experts.load(), si.counters().bytes.load()};
  return out;
}
}  // namespace

TEST(StandInExperts, MissesComputedFromTheStandInsBytes) {
  const std::string q4 = "/tmp/strata_standin_q4_" + std::to_string(::getpid()) + ".gguf";
  requantize_experts(kStandinFull, q4, GgmlType::Q4_0, nullptr);
  const auto standin = Model::load(q4);
  EXPECT_NO_THROW(check_standin_matches(*Model::load(kStandinFull), *standin));
  const std::vector<float> full = standin_logits(*standin_engine(kStandinFull)), low = standin_logits(*standin_engine(q4));
  ASSERT_FALSE(standin_same_bits(full, low));  // the stand-in's experts do differ

  StandInCounts c;
  EXPECT_TRUE(standin_same_bits(with_standin(*standin, 0, &c), low)) << "every expert from the stand-in: the stand-in model's logits";
  // 8 layers x (the prompt's distinct experts + the step's 4): at least 4 per layer and pass.
  EXPECT_GE(c.experts, 2u * 8 * 4);
  EXPECT_EQ(c.bytes % c.experts, 0u);  // every expert of the stand-in is the same size
  EXPECT_EQ(c.bytes / c.experts, 3 * ggml_row_size(GgmlType::Q4_0, 256) * 256);

  EXPECT_TRUE(standin_same_bits(with_standin(*standin, 4, &c), full)) << "J = k protects every choice";
  EXPECT_EQ(c.experts, 0u);

  const std::vector<float> mixed = with_standin(*standin, 1, &c);
  EXPECT_GT(c.experts, 0u);
  EXPECT_FALSE(standin_same_bits(mixed, full));
  EXPECT_FALSE(standin_same_bits(mixed, low));
  std::remove(q4.c_str());
}

// --pp-model's use: inactive, the provider is the inner one (the full model's bits, nothing
// counted); active, the stand-in's; hottest() ranks what the active passes took, then restarts.
TEST(StandInExperts, InactiveIsTheInnerProviderAndHottestRanksUses) {
  const std::string q4 = "/tmp/strata_standin_pp_" + std::to_string(::getpid()) + ".gguf";
  requantize_experts(kStandinFull, q4, GgmlType::Q4_0, nullptr);
  const auto standin = Model::load(q4);
  const std::vector<float> full = standin_logits(*standin_engine(kStandinFull)), low = standin_logits(*standin_engine(q4));
  auto eng = standin_engine(kStandinFull);
  Model& m = eng->model();
  NothingInMemory misses(*m.expert_provider());
  StandInExperts si(misses, *standin, 0);
  m.set_expert_provider(&si);
  m.add_routing_observer(&si);
  si.set_active(false);
  EXPECT_TRUE(standin_same_bits(standin_logits(*eng), full)) << "inactive: the full model's experts";
  EXPECT_EQ(si.counters().experts.load(), 0u);
  EXPECT_TRUE(si.hottest().empty());
  si.set_active(true);
  EXPECT_TRUE(standin_same_bits(standin_logits(*eng), low)) << "active: every miss from the stand-in";
  std::vector<uint32_t> uses;
  const std::vector<ExpertKey> hot = si.hottest(&uses);
  ASSERT_FALSE(hot.empty());
  ASSERT_EQ(uses.size(), hot.size());
  // Two passes (the prompt, the step): each expert listed once, used by one or both, most used
  // first; the uses add up to what the stand-in computed.
  std::vector<bool> seen(8 * 64, false);
  uint64_t total = 0;
  for (size_t i = 0; i < hot.size(); ++i) {
    const ExpertKey k = hot[i];
    ASSERT_TRUE(k.layer >= 0 && k.layer < 8 && k.expert >= 0 && k.expert < 64) << k.layer << "/" << k.expert;
    EXPECT_FALSE(seen[static_cast<size_t>(k.layer) * 64 + k.expert]) << "listed twice";
    seen[static_cast<size_t>(k.layer) * 64 + k.expert] = true;
    EXPECT_TRUE(uses[i] == 1 || uses[i] == 2) << uses[i];
    if (i > 0) EXPECT_LE(uses[i], uses[i - 1]) << "not most used first at " << i;
    total += uses[i];
  }
  EXPECT_EQ(total, si.counters().experts.load());
  EXPECT_EQ(uses.front(), 2u) << "the step's experts were the prompt's too in some layer";
  EXPECT_TRUE(si.hottest().empty()) << "the counts restart";
  m.remove_routing_observer(&si);
  m.set_expert_provider(nullptr);
  std::remove(q4.c_str());
}

// Nothing in memory, and the prefetches asked of it counted.
class CountsPrefetches final : public ExpertProvider {
 public:
  explicit CountsPrefetches(ExpertProvider& p) : p_(p) {}
  void request(int l, const int32_t* e, int n) override { p_.request(l, e, n); }
  void prefetch(int, const int32_t*, int n) override { prefetched += static_cast<uint64_t>(n); }
  ExpertMats acquire(int l, int e) override { return p_.acquire(l, e); }
  void release(int l, int e) override { p_.release(l, e); }
  bool in_memory(int, int) const override { return false; }
  uint64_t prefetched = 0;

 private:
  ExpertProvider& p_;
};

// --miss-admit: every expert computed from the stand-in is asked of the inner provider as a
// prefetch (once per pass and layer, as it is counted) beside the model's own prefetches (the
// same with it off), and the pass's bits stay the stand-in's.
TEST(StandInExperts, AdmitPrefetchesTheFullCopyOfEveryStandIn) {
  const std::string q4 = "/tmp/strata_standin_admit_" + std::to_string(::getpid()) + ".gguf";
  requantize_experts(kStandinFull, q4, GgmlType::Q4_0, nullptr);
  const auto standin = Model::load(q4);
  const std::vector<float> low = standin_logits(*standin_engine(q4));
  uint64_t model_prefetches = 0;
  for (const bool admit : {false, true}) {
    auto eng = standin_engine(kStandinFull);
    Model& m = eng->model();
    CountsPrefetches inner(*m.expert_provider());
    StandInExperts si(inner, *standin, 0);
    si.set_admit(admit);
    m.set_expert_provider(&si);
    m.add_routing_observer(&si);
    EXPECT_TRUE(standin_same_bits(standin_logits(*eng), low)) << "admit " << admit;
    EXPECT_GT(si.counters().experts.load(), 0u);
    if (!admit) model_prefetches = inner.prefetched;
    EXPECT_EQ(inner.prefetched - model_prefetches, admit ? si.counters().experts.load() : 0u) << "admit " << admit;
    EXPECT_EQ(si.counters().admits.load(), inner.prefetched - model_prefetches);
    m.remove_routing_observer(&si);
    m.set_expert_provider(nullptr);
  }
  std::remove(q4.c_str());
}

TEST(StandInExperts, AFileOfOtherShapesIsRefused) {
  const std::string other = fixtures_dir() + "/qwen3moe-f32/model.gguf";
  if (!std::filesystem::exists(other)) STRATA_MISSING_FIXTURE(other);
  const auto full = Model::load(kStandinFull), o = Model::load(other);
  try {
    check_standin_matches(*full, *o);
    ADD_FAILURE() << "a random qwen3moe of other shapes was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--miss-model " + other), std::string::npos) << msg;
    EXPECT_NE(msg.find("the model's"), std::string::npos) << msg;  // names what differs and both values
  }
  EXPECT_NO_THROW(check_standin_matches(*full, *full));
}
