// A configuration past the sizes the forward pass supports fails at load, naming the metadata
// key and the limit (core/limits.h).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/limits.h"
#include "model/config.h"

using namespace strata;

namespace {
ModelConfig moe_config(int n_expert, int n_used, int n_group) {
  ModelConfig cfg;
  cfg.arch = "qwen3moe";
  cfg.n_layer = 2;
  cfg.layers.resize(2);
  for (auto& l : cfg.layers) {
    l.ffn = FfnKind::Moe;
    l.n_expert = n_expert;
    l.n_expert_used = n_used;
    l.n_group = n_group;
  }
  return cfg;
}

std::string limit_error(const ModelConfig& cfg) {
  try {
    check_limits("model.gguf", cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ModelLimits, WithinLimitsPasses) {
  EXPECT_EQ(limit_error(moe_config(kMaxExperts, kMaxExpertsUsed, kMaxExpertGroups)), "");
}

TEST(ModelLimits, ErrorNamesKeyAndLimit) {
  const std::string experts = limit_error(moe_config(kMaxExperts + 1, 8, 0));
  EXPECT_NE(experts.find("qwen3moe.expert_count is " + std::to_string(kMaxExperts + 1)), std::string::npos) << experts;
  EXPECT_NE(experts.find("kMaxExperts"), std::string::npos) << experts;
  const std::string used = limit_error(moe_config(128, kMaxExpertsUsed + 1, 0));
  EXPECT_NE(used.find("qwen3moe.expert_used_count"), std::string::npos) << used;
  EXPECT_NE(used.find(std::to_string(kMaxExpertsUsed)), std::string::npos) << used;
  const std::string groups = limit_error(moe_config(1024, 8, kMaxExpertGroups + 1));
  EXPECT_NE(groups.find("qwen3moe.expert_group_count"), std::string::npos) << groups;
  ModelConfig deep = moe_config(8, 2, 0);
  deep.n_layer = kMaxLayers + 1;
  EXPECT_NE(limit_error(deep).find("qwen3moe.block_count"), std::string::npos);
}
