// The memory plan of ExpertTier (--ram-budget): dense weights, KV cache and scratch come first;
// what is left of the budget becomes expert slots (whole slots of each size class plus the
// transient buffers), so dense + KV + scratch + expert cache never exceeds the budget and falls
// short of it by less than one slot per size class. A budget that holds every expert keeps
// them resident; one that cannot hold the fixed part, or no slot next to the transient buffers,
// fails with an error that says so.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "../fixture_sets.h"
#include "../model/golden_util.h"
#include "model/model.h"
#include "runtime/expert_tier.h"

using namespace strata;
using namespace strata::test;

namespace {

constexpr uint64_t kKv = 3ull << 20;  // any KV size: the plan takes it as given
constexpr int kBatch = 64;

std::string plan_fixture(const char* set) { return fixtures_dir() + "/" + set + "/model.gguf"; }

#define NEED_FIXTURE(set) \
  if (!std::filesystem::exists(plan_fixture(set))) STRATA_MISSING_FIXTURE(plan_fixture(set))

// A freshly loaded model and its tier (a tier changes the model's mapping and provider).
struct Planned {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<ExpertTier> tier;
  const MemoryPlan& plan() const { return tier->plan(); }
};

Planned plan_for(const char* set, uint64_t budget, int64_t cache_experts = 0, int n_batch = kBatch) {
  Planned p;
  p.model = Model::load(plan_fixture(set));
  TierOptions o;
  o.ram_budget = budget;
  o.cache_experts = cache_experts;
  // The scratch as the engine plans it: what the model holds once prepared for n_batch tokens.
  KvCacheOptions ko;
  ko.n_ctx = 64;
  p.kv = std::make_unique<KvCache>(p.model->config(), ko);
  p.model->prepare(*p.kv, n_batch, 1);
  p.tier = std::make_unique<ExpertTier>(*p.model, kKv, p.model->scratch_bytes(), o);
  return p;
}

uint64_t fixed_part(const MemoryPlan& p) { return p.dense + p.kv + p.scratch; }

// Streaming geometry of a single-size-class model: slot bytes and transient buffers (in slots).
struct Geometry {
  uint64_t fixed = 0, slot = 0;
  int64_t transients = 0, experts = 0;
};

Geometry geometry(const char* set) {
  Geometry g;
  const Planned resident = plan_for(set, 0);
  g.fixed = fixed_part(resident.plan());
  g.experts = resident.plan().experts;
  // The experts' own bytes: less than their slots plus the transient buffers, so this streams.
  const Planned s = plan_for(set, g.fixed + resident.plan().experts_total);
  if (!s.plan().streaming || !s.tier->cache()) {
    ADD_FAILURE() << set << ": a budget of the experts' bytes should stream";
    g.slot = 1;
    return g;
  }
  EXPECT_EQ(s.tier->cache()->n_size_classes(), 1) << set;
  g.slot = s.tier->cache()->slot_bytes();
  EXPECT_EQ(s.plan().expert_cache % g.slot, 0u);
  g.transients = static_cast<int64_t>(s.plan().expert_cache / g.slot) - s.plan().cache_slots;
  EXPECT_GE(g.transients, 1);
  return g;
}

}  // namespace

TEST(MemoryPlan, WithoutBudgetEverythingIsResident) {
  NEED_FIXTURE("qwen3moe-q8_0");
  const Planned p = plan_for("qwen3moe-q8_0", 0);
  // Dense and routed bytes, counted here from the tensor table.
  uint64_t dense = 0, routed = 0;
  for (const auto& t : p.model->gguf().tensors()) (t.name.find("_exps") != std::string::npos ? routed : dense) += t.nbytes;
  int64_t experts = 0;
  for (const auto& l : p.model->config().layers) experts += l.n_expert;
  EXPECT_EQ(experts, 16);  // 2 layers of 8 (README)
  const MemoryPlan& m = p.plan();
  EXPECT_EQ(m.budget, 0u);
  EXPECT_EQ(m.dense, dense);
  EXPECT_EQ(m.experts_total, routed);
  EXPECT_EQ(m.experts, experts);
  EXPECT_EQ(m.kv, kKv);
  EXPECT_GT(m.scratch, 0u);
  EXPECT_FALSE(m.streaming);
  EXPECT_EQ(m.expert_cache, 0u);
  EXPECT_EQ(m.cache_slots, 0);
  EXPECT_EQ(p.tier->cache(), nullptr);
}

TEST(MemoryPlan, ScratchGrowsWithTheBatch) {
  NEED_FIXTURE("qwen3moe-q8_0");
  const uint64_t one = plan_for("qwen3moe-q8_0", 0, 0, 1).plan().scratch, many = plan_for("qwen3moe-q8_0", 0, 0, 256).plan().scratch;
  EXPECT_GT(many, one);
  // Per token: at least the residual stream and the normalized input of a sub-block, in f32.
  const Planned p = plan_for("qwen3moe-q8_0", 0);
  const auto& cfg = p.model->config();
  EXPECT_GE(many - one, 255ull * 4 * 2 * static_cast<uint64_t>(cfg.n_embd));
  EXPECT_EQ(p.plan().scratch - p.model->scratch_bytes(), one - plan_for("qwen3moe-q8_0", 0, 0, 1).model->scratch_bytes())
      << "the plan adds the same fixed part (allowance, policy tables, logits) to what the model holds";
}

TEST(MemoryPlan, BudgetIsSpentInWholeSlots) {
  NEED_FIXTURE("qwen3moe-q8_0");
  const Geometry g = geometry("qwen3moe-q8_0");
  for (int64_t k : {g.transients + 1, g.transients + 2, g.transients + 5, g.transients + g.experts - 1}) {
    for (uint64_t extra : {uint64_t{0}, g.slot / 2, g.slot - 1}) {
      const uint64_t budget = g.fixed + static_cast<uint64_t>(k) * g.slot + extra;
      const Planned p = plan_for("qwen3moe-q8_0", budget);
      const MemoryPlan& m = p.plan();
      const std::string where = "budget " + std::to_string(budget) + " (" + std::to_string(k) + " slots + " + std::to_string(extra) + ")";
      ASSERT_TRUE(m.streaming) << where;
      EXPECT_EQ(m.budget, budget) << where;
      EXPECT_EQ(fixed_part(m), g.fixed) << where;
      const uint64_t used = m.dense + m.kv + m.scratch + m.expert_cache;
      EXPECT_LE(used, budget) << where;
      EXPECT_EQ(budget - used, extra) << where << ": only the part of a slot is left over";
      EXPECT_EQ(m.cache_slots, k - g.transients) << where;
      EXPECT_EQ(m.expert_cache, static_cast<uint64_t>(m.cache_slots + g.transients) * g.slot) << where;
      EXPECT_EQ(m.size_classes, 1) << where;
      EXPECT_EQ(p.tier->cache()->n_slots(), m.cache_slots) << where;
      EXPECT_NE(m.describe().find("expert cache"), std::string::npos) << m.describe();
    }
  }
}

TEST(MemoryPlan, EveryExpertFitsMeansResident) {
  NEED_FIXTURE("qwen3moe-q8_0");
  const Geometry g = geometry("qwen3moe-q8_0");
  const uint64_t all = g.fixed + static_cast<uint64_t>(g.experts + g.transients) * g.slot;
  {
    const Planned p = plan_for("qwen3moe-q8_0", all);
    EXPECT_FALSE(p.plan().streaming);
    EXPECT_EQ(p.plan().expert_cache, 0u);
    EXPECT_EQ(p.tier->cache(), nullptr);
    EXPECT_NE(p.plan().describe().find("fits the budget"), std::string::npos) << p.plan().describe();
  }
  {
    const Planned p = plan_for("qwen3moe-q8_0", all - 1);  // one byte short: one expert streams
    EXPECT_TRUE(p.plan().streaming);
    EXPECT_EQ(p.plan().cache_slots, g.experts - 1);
  }
  EXPECT_FALSE(plan_for("qwen3moe-q8_0", 1ull << 40).plan().streaming);
}

TEST(MemoryPlan, TooSmallBudgetFails) {
  NEED_FIXTURE("qwen3moe-q8_0");
  const Geometry g = geometry("qwen3moe-q8_0");
  for (uint64_t budget : {uint64_t{1}, g.fixed - 1, g.fixed}) {
    try {
      plan_for("qwen3moe-q8_0", budget);
      ADD_FAILURE() << "budget " << budget << " accepted; the fixed part alone is " << g.fixed;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--ram-budget"), std::string::npos) << m;
      EXPECT_NE(m.find("too small"), std::string::npos) << m;
      EXPECT_NE(m.find("KV cache"), std::string::npos) << m;
    }
  }
  // Room for the transient buffers but not one slot.
  for (uint64_t budget : {g.fixed + 1, g.fixed + static_cast<uint64_t>(g.transients + 1) * g.slot - 1}) {
    try {
      plan_for("qwen3moe-q8_0", budget);
      ADD_FAILURE() << "budget " << budget << " accepted without room for one expert slot";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("hold no expert slot"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(plan_for("qwen3moe-q8_0", g.fixed + static_cast<uint64_t>(g.transients + 1) * g.slot).plan().cache_slots, 1);
}

TEST(MemoryPlan, CacheExpertsCapsTheSlots) {
  NEED_FIXTURE("qwen3moe-q8_0");
  const Geometry g = geometry("qwen3moe-q8_0");
  const Planned p = plan_for("qwen3moe-q8_0", 0, 3);
  EXPECT_TRUE(p.plan().streaming);
  EXPECT_EQ(p.plan().cache_slots, 3);
  EXPECT_EQ(p.plan().expert_cache, static_cast<uint64_t>(3 + g.transients) * g.slot);
  // With a budget too: the smaller of the two.
  EXPECT_EQ(plan_for("qwen3moe-q8_0", g.fixed + static_cast<uint64_t>(g.transients + 10) * g.slot, 3).plan().cache_slots, 3);
  EXPECT_EQ(plan_for("qwen3moe-q8_0", g.fixed + static_cast<uint64_t>(g.transients + 2) * g.slot, 3).plan().cache_slots, 2);
}

TEST(MemoryPlan, SizeClassesShareTheBudget) {
  // Q4_K_M mixes expert types across layers: each size class gets whole slots of its size.
  NEED_FIXTURE("qwen3moe-q4_k_m");
  const Planned resident = plan_for("qwen3moe-q4_k_m", 0);
  const uint64_t fixed = fixed_part(resident.plan());
  for (uint64_t quarters : {4u, 5u}) {
    const uint64_t budget = fixed + resident.plan().experts_total * quarters / 4;
    const Planned p = plan_for("qwen3moe-q4_k_m", budget);
    const MemoryPlan& m = p.plan();
    ASSERT_TRUE(m.streaming);
    const ExpertCache& c = *p.tier->cache();
    ASSERT_GE(c.n_size_classes(), 2);
    EXPECT_EQ(m.size_classes, c.n_size_classes());
    uint64_t slots_bytes = 0, one_of_each = 0;
    int64_t slots = 0;
    for (int k = 0; k < c.n_size_classes(); ++k) {
      EXPECT_GT(c.class_slots(k), 0) << "class " << k;
      slots += c.class_slots(k);
      slots_bytes += static_cast<uint64_t>(c.class_slots(k)) * c.class_slot_bytes(k);
      one_of_each += c.class_slot_bytes(k);
    }
    EXPECT_EQ(m.cache_slots, slots);
    const uint64_t transient = m.expert_cache - slots_bytes;
    EXPECT_EQ(transient % c.slot_bytes(), 0u) << "transient buffers have the largest slot size";
    const uint64_t used = fixed + m.expert_cache;
    EXPECT_LE(used, budget);
    EXPECT_LT(budget - used, one_of_each) << "less than one slot per class is left over";
  }
}
