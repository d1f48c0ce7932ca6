// `strata synth --recipe`: the low-bit type mixes people download ("dynamic" quants) at small
// shapes. Random blocks of every i-quant have the requested spread; recipes put the right type
// on each tensor and layer, with llama.cpp's fallbacks; such a file runs, streams bit-identical
// to resident with one size class per expert size, and inspect splits its types.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "kernels/quants.h"
#include "model/model.h"
#include "model/model_summary.h"
#include "experts/expert_cache.h"
#include "runtime/engine.h"
#include "synth/synth.h"
#include "synth/synth_blocks.h"

using namespace strata;

namespace {

std::string scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("strata-recipe-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}
struct RecipeScratchCleanup : ::testing::Environment {
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("strata-recipe-test-" + std::to_string(::getpid())), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kCleanup = ::testing::AddGlobalTestEnvironment(new RecipeScratchCleanup);

// DeepSeek-V3's layout (q LoRA, sigmoid router in groups, shared expert, leading dense layer),
// small: MoE layers 1..4, the first two of them "hi".
SynthSpec small_v3() {
  SynthSpec s = synth_preset("deepseek-v3");
  s.n_layer = 5;
  s.n_embd = 256;
  s.n_head = 4;
  s.q_lora = 256;
  s.kv_lora = 256;
  s.qk_nope = 64;
  s.qk_rope = 32;
  s.v_head = 64;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_group = 4;
  s.n_group_used = 2;
  s.n_ff_exp = 256;
  s.n_ff = 512;
  s.n_dense_lead = 1;
  s.n_vocab = 512;
  s.n_ctx = 4096;
  s.yarn_orig_ctx = 512;
  return s;
}

std::map<std::string, GgmlType> types_of(const SynthSpec& s) {
  std::map<std::string, GgmlType> m;
  for (const auto& t : synth_plan(s)) m[t.name] = t.type;
  return m;
}

}  // namespace

TEST(SynthRecipes, RandomBlocksOfEveryLowBitTypeHaveTheRequestedSpread) {
  const GgmlType types[] = {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                            GgmlType::IQ3_S, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::Q2_K,
                            GgmlType::Q3_K,  GgmlType::Q5_0,   GgmlType::Q5_1,    GgmlType::Q4_1};
  for (GgmlType t : types) {
    ASSERT_TRUE(synth_random_supported(t)) << ggml_type_name(t);
    ASSERT_TRUE(has_dequantize(t)) << ggml_type_name(t);
    const auto& info = ggml_info(t);
    const size_t nb = 2048;
    std::vector<uint8_t> buf(static_cast<size_t>(info.type_size) * nb);
    const float sigma = 1.0f / std::sqrt(2048.0f);
    synth_fill_random(t, buf.data(), buf.size(), sigma, 11, nullptr);
    std::vector<float> y(nb * static_cast<size_t>(info.block_size));
    dequantize_row(t, buf.data(), y.data(), static_cast<int64_t>(y.size()));
    double sum = 0, sq = 0;
    for (float v : y) {
      ASSERT_TRUE(std::isfinite(v)) << info.name;
      sum += v;
      sq += static_cast<double>(v) * v;
    }
    const double mean = sum / static_cast<double>(y.size()), sd = std::sqrt(sq / static_cast<double>(y.size()) - mean * mean);
    EXPECT_NEAR(sd, sigma, 0.2 * sigma) << info.name;
    EXPECT_LT(std::fabs(mean), 0.05 * sigma) << info.name;
  }
}

TEST(SynthRecipes, TypesPerTensorAndPerLayer) {
  SynthSpec s = small_v3();
  synth_apply_recipe(s, "ud-iq1_s");
  const auto ty = types_of(s);
  // The first two MoE layers (1, 2) keep all routed experts in IQ2_XXS; later ones IQ1_S with down IQ2_XXS.
  for (int l : {1, 2}) {
    EXPECT_EQ(ty.at(fmt::format("blk.{}.ffn_gate_exps.weight", l)), GgmlType::IQ2_XXS) << l;
    EXPECT_EQ(ty.at(fmt::format("blk.{}.ffn_down_exps.weight", l)), GgmlType::IQ2_XXS) << l;
  }
  for (int l : {3, 4}) {
    EXPECT_EQ(ty.at(fmt::format("blk.{}.ffn_gate_exps.weight", l)), GgmlType::IQ1_S) << l;
    EXPECT_EQ(ty.at(fmt::format("blk.{}.ffn_up_exps.weight", l)), GgmlType::IQ1_S) << l;
    EXPECT_EQ(ty.at(fmt::format("blk.{}.ffn_down_exps.weight", l)), GgmlType::IQ2_XXS) << l;
    EXPECT_EQ(ty.at(fmt::format("blk.{}.ffn_gate_shexp.weight", l)), GgmlType::Q6_K) << l;
    EXPECT_EQ(ty.at(fmt::format("blk.{}.exp_probs_b.bias", l)), GgmlType::F32) << l;
  }
  EXPECT_EQ(ty.at("blk.0.ffn_gate.weight"), GgmlType::Q6_K);
  EXPECT_EQ(ty.at("blk.0.attn_q_a.weight"), GgmlType::Q4_K);
  EXPECT_EQ(ty.at("blk.0.attn_k_b.weight"), GgmlType::Q5_0) << "64-wide rows: Q4_K falls back to Q5_0 as in llama.cpp";
  EXPECT_EQ(ty.at("output.weight"), GgmlType::Q6_K);

  SynthSpec q = synth_preset("tiny");
  synth_apply_recipe(q, "iq2_xxs");
  q.n_head = 2;  // attn_output rows of 128: IQ3_S falls back to IQ4_NL
  q.head_dim = 64;
  q.n_head_kv = 1;
  const auto tq = types_of(q);
  EXPECT_EQ(tq.at("blk.0.ffn_down_exps.weight"), GgmlType::IQ2_XXS);
  EXPECT_EQ(tq.at("blk.0.attn_q.weight"), GgmlType::IQ3_S);
  EXPECT_EQ(tq.at("blk.0.attn_output.weight"), GgmlType::IQ4_NL);
  EXPECT_THROW(synth_apply_recipe(q, "no-such-recipe"), Error);
}

// A dynamic mix runs, and streaming it through a one-expert cache gives the resident logits bit
// for bit, with one cache size class per expert size (IQ2_XXS layers vs IQ1_S + IQ2_XXS-down layers).
TEST(SynthRecipes, DynamicMixRunsAndStreamsBitIdentical) {
  SynthSpec s = small_v3();
  synth_apply_recipe(s, "ud-iq1_s");
  const std::string path = scratch("ud-iq1_s.gguf");
  synth_write(s, path, 2);
  auto run = [&](const TierOptions& tier, std::vector<float>& out) {
    EngineOptions eo;
    eo.n_ctx = 64;
    eo.n_threads = 2;
    eo.n_batch = 32;
    eo.tier = tier;
    Engine eng(Model::load(path), eo);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back(260 + 13 * i);
    std::vector<float> lg;
    eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, lg);
    out = lg;
    for (int step = 0; step < 3; ++step) {
      int32_t t = 300 + step;
      eng.eval(0, &t, 1, static_cast<int>(prompt.size()) + step, false, lg);
      out.insert(out.end(), lg.begin(), lg.begin() + s.n_vocab);
    }
    if (const ExpertCache* c = eng.tier().cache()) {
      EXPECT_EQ(c->n_size_classes(), 2) << "IQ2_XXS experts and IQ1_S experts differ in size";
      EXPECT_GT(c->counters().misses, 0u);
    }
  };
  std::vector<float> resident, streamed;
  run(TierOptions{}, resident);
  TierOptions t;
  t.cache_experts = 2;
  run(t, streamed);
  for (float v : resident) ASSERT_TRUE(std::isfinite(v));
  ASSERT_EQ(resident.size(), streamed.size());
  EXPECT_EQ(std::memcmp(resident.data(), streamed.data(), resident.size() * sizeof(float)), 0);
}

TEST(SynthRecipes, InspectSplitsTypesBetweenDenseAndExperts) {
  SynthSpec s = small_v3();
  synth_apply_recipe(s, "ud-iq1_s");
  const std::string path = scratch("inspect.gguf");
  synth_write(s, path, 2);
  auto m = GgufModel::open(path);
  const ModelSummary sum = ModelSummary::of(*m);
  const TypeUse& iq1 = sum.types.at("iq1_s");
  EXPECT_EQ(iq1.routed_tensors, 4);  // gate and up of MoE layers 3, 4
  EXPECT_EQ(iq1.routed_bytes, iq1.bytes) << "no dense tensor is IQ1_S";
  const TypeUse& q6 = sum.types.at("q6_K");
  EXPECT_EQ(q6.routed_tensors, 0);
  EXPECT_GT(q6.bytes, 0u);
  uint64_t routed = 0;
  for (const auto& [name, tu] : sum.types) routed += tu.routed_bytes;
  EXPECT_EQ(routed, sum.routed_bytes);
  EXPECT_NEAR(8.0 * static_cast<double>(iq1.bytes) / static_cast<double>(iq1.values), 1.5625, 1e-9) << "IQ1_S is 50 bytes per 256 weights";
  EXPECT_EQ(sum.touched_dense + sum.touched_routed, sum.touched_per_token);
  // Per token: top-4 of each MoE layer's experts.
  uint64_t want = 0;
  for (const auto& lb : sum.layers) want += lb.n_expert ? 4 * lb.expert_bytes : 0;
  EXPECT_EQ(sum.touched_routed, want);
}
