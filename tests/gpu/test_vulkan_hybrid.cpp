// Layers whose blocks the device does not run (MLA, Gated DeltaNet; model/vram_plan.h
// vulkan_blocks): those blocks run on the CPU with the CPU path's code and the hidden rows cross
// the bus around them; the device runs the rest of the layer (the FFN's router and shared experts,
// a gated attention output, a sigmoid-gated shared expert). Golden sets of the MLA and DeltaNet
// architectures within the K-quant tolerances, four sequences in one pass equal to each alone, the
// plan naming the CPU's blocks, and the executor's figures (bus bytes, device and CPU time per layer).
#include "core/error.h"
#include "vulkan_golden.h"

namespace strata::testing {
namespace {

class VulkanHybrid : public ::testing::TestWithParam<const char*> {};

TEST_P(VulkanHybrid, GoldenSetWithinTheKQuantTolerances) { vk_check_golden_set(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Sets, VulkanHybrid,
                         ::testing::Values("deepseek2-q8_0", "deepseek2-q4_k_m", "deepseek2-kvb-q8_0", "deepseek2-f32", "deepseek32-q8_0",
                                           "deepseek32-q4_k_m", "kimi-k2-q8_0", "qwen35moe-q8_0", "qwen35moe-q4_k_m"),
                         [](const auto& i) { return vk_set_name(i.param); });

std::string fixture(const std::string& set) { return test::fixtures_dir() + "/" + set + "/model.gguf"; }
#define REQUIRE_SET(set)                                                              \
  if (!std::filesystem::exists(fixture(set))) STRATA_MISSING_FIXTURE(fixture(set));

// The plan says which blocks stay on the CPU and why; the device holds no KV cache for a layer
// whose attention the CPU runs, and holds the rest of the layer.
TEST(VulkanHybridPlan, CpuBlocksAreNamedAndHoldNoDeviceKv) {
  REQUIRE_SET("deepseek2-q8_0");
  REQUIRE_SET("qwen35moe-q8_0");
  auto ds = vk_engine(fixture("deepseek2-q8_0"), false, 16);
  VramShape s = vk_shape(*ds);
  VramPlan p = plan_vram(ds->config(), ds->model().weights(), s);
  EXPECT_NE(p.cpu_blocks.find("attention of layers 0-"), std::string::npos) << p.cpu_blocks;
  EXPECT_NE(p.cpu_blocks.find("(MLA attention)"), std::string::npos) << p.cpu_blocks;
  EXPECT_EQ(p.cpu_blocks.find("FFN"), std::string::npos) << p.cpu_blocks;
  EXPECT_EQ(p.kv, 0u);
  EXPECT_GT(p.weights, 0u);
  EXPECT_NE(p.describe().find("on the CPU: attention"), std::string::npos) << p.describe();

  auto qw = vk_engine(fixture("qwen35moe-q8_0"), false, 16);
  p = plan_vram(qw->config(), qw->model().weights(), vk_shape(*qw));
  EXPECT_NE(p.cpu_blocks.find("(Gated DeltaNet attention)"), std::string::npos) << p.cpu_blocks;
  EXPECT_EQ(p.cpu_blocks.find("FFN"), std::string::npos) << p.cpu_blocks;
  const auto blocks = vulkan_blocks(qw->config(), qw->model().weights());
  int gated = 0;
  for (int l = 0; l < qw->config().n_layer; ++l) {
    const LayerConfig& lc = qw->config().layers[l];
    EXPECT_EQ(blocks[l].attn, lc.attn == AttnKind::Gqa) << "layer " << l << ": " << blocks[l].attn_why;
    EXPECT_TRUE(blocks[l].ffn) << "layer " << l << ": " << blocks[l].ffn_why;
    gated += blocks[l].attn && lc.out_gate;
    EXPECT_EQ(p.layer_kv[l] > 0, blocks[l].attn) << "layer " << l;
  }
  EXPECT_GT(gated, 0) << "a gated attention output on the device";
}

// As the server's slots run: four sequences in one pass give each one's logits of a run alone,
// bit for bit, through CPU blocks (their per-sequence state: MLA's cache, DeltaNet's recurrent
// state) and the device's blocks alike; qwen3moe-q8_0 has every block on the device.
class VulkanBatching : public ::testing::TestWithParam<const char*> {};

TEST_P(VulkanBatching, FourSequencesInOnePassEqualEachAlone) {
  REQUIRE_SET(GetParam());
  const std::string path = fixture(GetParam());
  auto alone = vk_engine(path, true, 64);
  auto batched = vk_engine(path, true, 64, 0, 4);
  const int nv = alone->config().n_vocab;
  constexpr int kSeq = 4, kSteps = 2;
  std::vector<int32_t> prompts[kSeq];
  const int lens[kSeq] = {5, 11, 3, 8};
  for (int s = 0; s < kSeq; ++s)
    for (int i = 0; i < lens[s]; ++i) prompts[s].push_back((s * 101 + i * 29 + 7) % nv);
  std::vector<float> want[kSeq];
  std::vector<int32_t> tokens[kSeq];
  for (int s = 0; s < kSeq; ++s) {
    std::vector<float> row;
    alone->eval(0, prompts[s].data(), lens[s], 0, false, row);
    want[s] = row;
    for (int st = 0; st < kSteps; ++st) {
      const int32_t t = Sampler::argmax(row.data(), nv);
      tokens[s].push_back(t);
      alone->eval(0, &t, 1, lens[s] + st, false, row);
      want[s].insert(want[s].end(), row.begin(), row.end());
    }
  }
  std::vector<float> got;
  std::vector<SeqInput> in(kSeq);
  for (int s = 0; s < kSeq; ++s) in[s] = SeqInput{s, prompts[s].data(), lens[s]};
  batched->forward(in, got);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSeq) * nv);
  for (int s = 0; s < kSeq; ++s) EXPECT_EQ(0, std::memcmp(got.data() + s * nv, want[s].data(), nv * 4)) << "prompt of sequence " << s;
  for (int st = 0; st < kSteps; ++st) {
    for (int s = 0; s < kSeq; ++s) in[s] = SeqInput{s, &tokens[s][st], 1};
    batched->forward(in, got);
    for (int s = 0; s < kSeq; ++s)
      EXPECT_EQ(0, std::memcmp(got.data() + s * nv, want[s].data() + (st + 1) * nv, nv * 4)) << "step " << st << " of sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Sets, VulkanBatching, ::testing::Values("qwen3moe-q8_0", "deepseek2-q8_0", "qwen35moe-q8_0"),
                         [](const auto& i) { return vk_set_name(i.param); });

// The executor's figures: what crossed the bus per pass (the embeddings up, the final rows down, and
// per MoE layer the normalized rows and router product down, the routed sum up), per layer the
// device's time (its timestamps), the CPU's time (routed experts, CPU blocks) and the wall time;
// --prof's layer sync changes none of the results.
TEST(VulkanHybridStats, BusBytesAndTimesPerLayer) {
  REQUIRE_SET("deepseek2-q8_0");
  auto eng = vk_engine(fixture("deepseek2-q8_0"), true, 16);
  auto synced = vk_engine(fixture("deepseek2-q8_0"), true, 16);
  LayerExecutor* ex = const_cast<LayerExecutor*>(eng->model().executor());
  LayerExecutor* sx = const_cast<LayerExecutor*>(synced->model().executor());
  sx->set_layer_sync(true);
  const ModelConfig& cfg = eng->config();
  std::vector<int32_t> tokens = {3, 14, 15, 92, 65};
  std::vector<float> a, b;
  ex->reset_stats();
  eng->eval(0, tokens.data(), 5, 0, false, a);
  synced->eval(0, tokens.data(), 5, 0, false, b);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "layer sync changed the logits";
  const DeviceStats st = ex->stats();
  EXPECT_EQ(st.passes, 1u);
  EXPECT_EQ(st.tokens, 5u);
  ASSERT_EQ(st.layers.size(), static_cast<size_t>(cfg.n_layer));
  // Every layer's attention is on the CPU (MLA): per layer the rows go down and come back up.
  const uint64_t row_bytes = 5ull * cfg.n_embd * 4;
  EXPECT_GE(st.bytes_down, row_bytes * cfg.n_layer);
  EXPECT_GE(st.bytes_up, row_bytes * cfg.n_layer);
  double cpu = 0;
  for (int l = 0; l < cfg.n_layer; ++l) {
    EXPECT_GT(st.layers[l].cpu_s, 0.0) << "layer " << l << ": its attention ran on the CPU";
    EXPECT_GE(st.layers[l].wall_s, st.layers[l].cpu_s) << "layer " << l;
    cpu += st.layers[l].cpu_s;
  }
  EXPECT_NEAR(st.cpu_s, cpu, 1e-9);
  EXPECT_GE(st.run_s, cpu);
  if (st.timestamps) {
    EXPECT_GT(st.gpu_s, 0.0);
    const DeviceStats ss = sx->stats();
    for (int l = 0; l < cfg.n_layer; ++l) EXPECT_GT(ss.layers[l].gpu_s, 0.0) << "layer " << l << " with layer sync";
  }
  ex->reset_stats();
  EXPECT_EQ(ex->stats().passes, 0u);
  EXPECT_EQ(ex->stats().bytes_up, 0u);
}

#undef REQUIRE_SET

}  // namespace
}  // namespace strata::testing
