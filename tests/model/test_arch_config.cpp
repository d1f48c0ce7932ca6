// Issue 15 architectures: unsupported or inconsistent metadata fails at load naming the key, and
// glm4moe's NextN blocks are bound (shape-checked) but kept out of the trunk the forward runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "load_error.h"
#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "golden_util.h"
#include "model/model.h"

using namespace strata;
using namespace strata::test;

namespace {

// Metadata only (no tensors): a bad value must be reported before any tensor is bound.
std::string write_meta(const std::string& name, const std::string& arch, const std::function<void(GgufWriter&, const std::string&)>& extra) {
  GgufWriter w;
  const std::string a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_u32(a + "vocab_size", 64);
  w.set_u32(a + "embedding_length", 64);
  w.set_u32(a + "block_count", 2);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32(a + "attention.head_count", 2);
  w.set_u32(a + "expert_count", 4);
  w.set_u32(a + "expert_used_count", 2);
  w.set_u32(a + "expert_feed_forward_length", 64);
  w.set_u32(a + "feed_forward_length", 64);
  w.set_u32(a + "rope.dimension_count", 16);
  extra(w, a);
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  w.write(path);
  return path;
}

using strata::test::load_error;

}  // namespace

TEST(ArchConfig, Deepseek2NeedsBothMlaKeysOrNone) {
  const std::string err = load_error(write_meta("strata_ds2_mla.gguf", "deepseek2", [](GgufWriter& w, const std::string& a) {
    w.set_u32(a + "attention.kv_lora_rank", 32);
    w.set_u32(a + "attention.key_length_mla", 48);
  }));
  EXPECT_NE(err.find("deepseek2.attention.value_length_mla"), std::string::npos) << err;
}

TEST(ArchConfig, Deepseek2KvbLayoutNeedsOneKvHeadPerHead) {
  const std::string err = load_error(write_meta("strata_ds2_kvb.gguf", "deepseek2", [](GgufWriter& w, const std::string& a) {
    w.set_u32(a + "attention.kv_lora_rank", 32);
    w.set_u32(a + "attention.key_length", 48);
    w.set_u32(a + "attention.value_length", 32);
    w.set_u32(a + "attention.head_count_kv", 1);
  }));
  EXPECT_NE(err.find("deepseek2.attention.head_count_kv"), std::string::npos) << err;
}

TEST(ArchConfig, Glm4MoeRejectsMRopeAndTooManyNextnLayers) {
  std::string err = load_error(write_meta("strata_glm_mrope.gguf", "glm4moe", [](GgufWriter& w, const std::string& a) {
    w.set_array_i32(a + "rope.dimension_sections", {8, 8, 0, 0});
  }));
  EXPECT_NE(err.find("glm4moe.rope.dimension_sections"), std::string::npos) << err;
  err = load_error(write_meta("strata_glm_nextn.gguf", "glm4moe", [](GgufWriter& w, const std::string& a) { w.set_u32(a + "nextn_predict_layers", 2); }));
  EXPECT_NE(err.find("glm4moe.nextn_predict_layers"), std::string::npos) << err;
}

TEST(ArchConfig, MinimaxM2NeedsSigmoidGatingAndOneExpertWidth) {
  std::string err = load_error(write_meta("strata_mm2_nogate.gguf", "minimax-m2", [](GgufWriter&, const std::string&) {}));
  EXPECT_NE(err.find("minimax-m2.expert_gating_func"), std::string::npos) << err;
  err = load_error(write_meta("strata_mm2_softmax.gguf", "minimax-m2", [](GgufWriter& w, const std::string& a) { w.set_u32(a + "expert_gating_func", 1); }));
  EXPECT_NE(err.find("minimax-m2.expert_gating_func"), std::string::npos) << err;
  err = load_error(write_meta("strata_mm2_ff.gguf", "minimax-m2", [](GgufWriter& w, const std::string& a) {
    w.set_u32(a + "expert_gating_func", 2);
    w.set_u32(a + "feed_forward_length", 128);
  }));
  EXPECT_NE(err.find("minimax-m2.feed_forward_length"), std::string::npos) << err;
}

TEST(ArchConfig, Glm4MoeNextnBlockBoundButNotInTheTrunk) {
  const std::string path = fixtures_dir() + "/glm4moe-q8_0/model.gguf";
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  auto m = Model::load(path);
  const ModelConfig& cfg = m->config();
  EXPECT_EQ(cfg.n_layer, 3);  // block_count 4 = 3 trunk blocks + 1 NextN block
  ASSERT_EQ(cfg.layers.size(), 3u);
  ASSERT_EQ(cfg.nextn.size(), 1u);
  ASSERT_EQ(m->weights().nextn.size(), 1u);
  const NextnWeights& nw = m->weights().nextn[0];
  EXPECT_EQ(nw.eh_proj.rows, cfg.n_embd);
  EXPECT_EQ(nw.eh_proj.cols, 2 * cfg.n_embd);
  EXPECT_FALSE(nw.enorm.empty());
  EXPECT_FALSE(nw.block.gate_exps.empty());
  EXPECT_FALSE(nw.shared_head_head.empty());
  EXPECT_EQ(cfg.layers[0].ffn, FfnKind::Dense);
  EXPECT_EQ(cfg.layers[2].ffn, FfnKind::Moe);
}

// Qwen3.5 MoE: the DeltaNet sizes are required and checked against each other, the M-RoPE
// sections are required (as llama.cpp requires them), and the recurrent-layer list must cover
// every block.
TEST(ArchConfig, Qwen35MoeChecksDeltaNetKeys) {
  auto base = [](GgufWriter& w, const std::string& a) {
    w.set_u32(a + "attention.head_count_kv", 1);
    w.set_u32(a + "attention.key_length", 32);
    w.set_u32(a + "attention.value_length", 32);
    w.set_u32(a + "ssm.conv_kernel", 4);
    w.set_u32(a + "ssm.state_size", 16);
    w.set_u32(a + "ssm.group_count", 2);
    w.set_u32(a + "ssm.time_step_rank", 4);
  };
  const std::string no_inner = load_error(write_meta("strata_q35_inner.gguf", "qwen35moe", [&](GgufWriter& w, const std::string& a) {
    base(w, a);
    w.set_array_i32(a + "rope.dimension_sections", {3, 3, 2, 0});
  }));
  EXPECT_NE(no_inner.find("qwen35moe.ssm.inner_size"), std::string::npos) << no_inner;
  const std::string bad_inner = load_error(write_meta("strata_q35_inner2.gguf", "qwen35moe", [&](GgufWriter& w, const std::string& a) {
    base(w, a);
    w.set_u32(a + "ssm.inner_size", 48);
    w.set_array_i32(a + "rope.dimension_sections", {3, 3, 2, 0});
  }));
  EXPECT_NE(bad_inner.find("qwen35moe.ssm.inner_size is 48"), std::string::npos) << bad_inner;
  const std::string no_sections = load_error(write_meta("strata_q35_sect.gguf", "qwen35moe", [&](GgufWriter& w, const std::string& a) {
    base(w, a);
    w.set_u32(a + "ssm.inner_size", 64);
  }));
  EXPECT_NE(no_sections.find("qwen35moe.rope.dimension_sections"), std::string::npos) << no_sections;
  const std::string bad_layers = load_error(write_meta("strata_q35_layers.gguf", "qwen35moe", [&](GgufWriter& w, const std::string& a) {
    base(w, a);
    w.set_u32(a + "ssm.inner_size", 64);
    w.set_array_i32(a + "rope.dimension_sections", {3, 3, 2, 0});
    w.set_array_bool(a + "attention.recurrent_layers", {true, false, true});  // 2 blocks
  }));
  EXPECT_NE(bad_layers.find("qwen35moe.attention.recurrent_layers"), std::string::npos) << bad_layers;
}

// Issue 33: rope writes rope.dimension_count values into each head; more than the head size is
// an error at load for every GQA architecture (it wrote past the buffer before).
TEST(ArchConfig, RopeDimsAboveTheHeadSizeFailAtLoad) {
  for (const char* arch : {"qwen3moe", "llama", "gpt-oss", "qwen3"}) {
    const std::string err = load_error(write_meta(std::string("strata_rope_") + arch + ".gguf", arch, [](GgufWriter& w, const std::string& a) {
      w.set_u32(a + "attention.key_length", 8);
      w.set_u32(a + "attention.value_length", 8);
    }));
    EXPECT_NE(err.find(std::string(arch) + ".rope.dimension_count 16 must be even and at most the head size 8"), std::string::npos) << arch << ": " << err;
  }
}
