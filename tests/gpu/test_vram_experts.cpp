// The VRAM expert tier (model/vram_experts.h, issue 36): routed experts cached in device memory
// above the RAM tier, computed on the device while the CPU computes the others, promoted between
// passes. Golden sets with caches of one, a few and all experts; the same bits from two engines
// that run the same passes; four sequences in one pass equal each alone once the placement is fixed;
// the exclusive tiers' invariants under random routing with tiny budgets; the prompt-processing
// chooser on fake costs; a device lost mid-pass.
#include <random>

#include "core/error.h"
#include "experts/expert_cache.h"
#include "model/upload_choice.h"
#include "model/vram_experts.h"
#include "vulkan_golden.h"

namespace strata::testing {
namespace {

std::string vram_fixture(const std::string& set) { return test::fixtures_dir() + "/" + set + "/model.gguf"; }
#define REQUIRE_SET(set)                                                              \
  if (!std::filesystem::exists(vram_fixture(set))) STRATA_MISSING_FIXTURE(vram_fixture(set));

constexpr int kAllExperts = -1;

// An engine on the test device whose executor caches `slots` routed experts in VRAM (kAllExperts:
// a slot for each), streaming through a RAM cache of cache_experts experts when > 0.
std::unique_ptr<Engine> vram_engine(const std::string& path, int slots, int64_t cache_experts = 0, int n_seq = 1,
                                    TierMode mode = TierMode::exclusive, uint64_t lose_at_submit = 0, int n_batch = 16,
                                    PpUpload pp = PpUpload::off) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = GgmlType::F32;
  eo.tier.cache_experts = cache_experts;
  eo.n_seq = n_seq;
  auto eng = std::make_unique<Engine>(Model::load(path), eo);
  VramShape s = vk_shape(*eng);
  const auto blocks = vulkan_blocks(eng->config(), eng->model().weights());
  const VramExpertLayout lay = vram_expert_layout(eng->config(), eng->model().weights(), blocks, eng->config().n_layer, n_batch);
  EXPECT_TRUE(lay.any()) << lay.why;
  s.experts = slots == kAllExperts ? int64_t{1} << 40 : static_cast<int64_t>(slots * lay.slot_bytes + kVramPlanAlign);
  s.tiers = mode;
  s.pp = pp;
  gpu::DeviceOptions opt;
  opt.pipeline_cache = "none";
  opt.lose_at_submit = lose_at_submit;
  VramPlan plan;
  eng->model().set_executor(make_vulkan_executor(gpu::Device::open(vk_device().info().index, opt), eng->model(), s, &plan));
  if (slots != kAllExperts) {
    EXPECT_EQ(plan.expert_slots, slots) << plan.describe();
  }
  return eng;
}

VramExperts& vram_of(Engine& e) {
  VramExperts* v = e.model().executor()->vram_experts();
  if (!v) throw Error("no VRAM expert cache");
  return *v;
}

// Every routed expert of the device's layers, into VRAM before the first pass (a fixed placement).
void warm_all(Engine& e) {
  VramExperts& v = vram_of(e);
  std::vector<ExpertKey> all;
  for (int l = 0; l < e.config().n_layer; ++l)
    if (v.layout().eligible[l])
      for (int x = 0; x < e.config().layers[l].n_expert; ++x) all.push_back({l, x});
  ASSERT_EQ(v.warm(*e.model().expert_provider(), all), static_cast<int>(all.size()));
}

// A golden set through the device with `slots` experts in VRAM: llama.cpp's logits within the GPU
// path's tolerances (those of vulkan_golden.h), the CPU path's within 0.999, and a second engine
// running the same passes gives the same bits (the placement is decided in the pass's order).
void check_golden_with_slots(const std::string& set, int slots, PpUpload pp) {
  REQUIRE_SET(set);
  auto cpu = vk_engine(vram_fixture(set), false, 256);
  auto a = vram_engine(vram_fixture(set), slots, 0, 1, TierMode::exclusive, 0, 16, pp);
  auto b = vram_engine(vram_fixture(set), slots, 0, 1, TierMode::exclusive, 0, 16, pp);
  const VkGoldenWalk w = vk_walk_golden(set, *a, *cpu, b.get());
  const DeviceExpertStats st = a->model().executor()->stats().experts;
  EXPECT_GT(st.vram_hits, 0u) << set << ": no expert was computed from VRAM";
  EXPECT_GT(st.uploads, 0u);
  EXPECT_GT(st.gpu_rows, 0u);
  if (pp == PpUpload::always) {
    EXPECT_GT(st.pp_uploads, 0u) << "prompt passes uploaded no expert";
  }
  EXPECT_LE(vram_of(*a).state().resident_count(), static_cast<size_t>(vram_of(*a).n_slots()));
  std::printf("[%-18s] %d VRAM slots: hit rate %.3f, %llu uploads\n", set.c_str(), vram_of(*a).n_slots(), st.hit_rate(),
              static_cast<unsigned long long>(st.uploads));
  vk_print_walk(set, w, "vram experts");
}

struct SlotsCase {
  const char* set;
  int slots;
  PpUpload pp = PpUpload::off;  // auto follows measured costs: its placement (and last bits) can differ run to run
};
class VramExpertsGolden : public ::testing::TestWithParam<SlotsCase> {};

TEST_P(VramExpertsGolden, GoldenSetWithinTheGpuPathsTolerances) { check_golden_with_slots(GetParam().set, GetParam().slots, GetParam().pp); }

INSTANTIATE_TEST_SUITE_P(Sets, VramExpertsGolden,
                         ::testing::Values(SlotsCase{"qwen3moe-q4_k_m", 1}, SlotsCase{"qwen3moe-q4_k_m", 6}, SlotsCase{"qwen3moe-q4_k_m", kAllExperts},
                                           SlotsCase{"qwen3moe-q4_k_m", 1, PpUpload::always},
                                           SlotsCase{"deepseek2-q4_k_m", 6}, SlotsCase{"mixtral-q8_0", kAllExperts}, SlotsCase{"qwen35moe-q8_0", 6},
                                           SlotsCase{"glm4moe-q8_0", 6}),
                         [](const auto& i) {
                           return vk_set_name(i.param.set) + "_" + (i.param.slots == kAllExperts ? std::string("all") : std::to_string(i.param.slots)) +
                                  (i.param.pp == PpUpload::always ? "_prompt_uploads" : "");
                         });

// With the placement fixed (every expert in VRAM before the first pass), four sequences in one
// pass give each one's logits of a run alone, bit for bit, as the server's slots need.
TEST(VramExpertsBatching, FourSequencesInOnePassEqualEachAlone) {
  REQUIRE_SET("qwen3moe-q4_k_m");
  const std::string path = vram_fixture("qwen3moe-q4_k_m");
  auto alone = vram_engine(path, kAllExperts, 0, 1, TierMode::exclusive, 0, 64);
  auto batched = vram_engine(path, kAllExperts, 0, 4, TierMode::exclusive, 0, 64);
  warm_all(*alone);
  warm_all(*batched);
  const int nv = alone->config().n_vocab;
  constexpr int kSeq = 4;
  const int lens[kSeq] = {5, 11, 3, 8};
  std::vector<int32_t> prompts[kSeq];
  std::vector<float> want[kSeq];
  for (int s = 0; s < kSeq; ++s) {
    for (int i = 0; i < lens[s]; ++i) prompts[s].push_back((s * 101 + i * 29 + 7) % nv);
    alone->eval(0, prompts[s].data(), lens[s], 0, false, want[s]);
  }
  std::vector<SeqInput> in(kSeq);
  for (int s = 0; s < kSeq; ++s) in[s] = SeqInput{s, prompts[s].data(), lens[s]};
  std::vector<float> got;
  batched->forward(in, got);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSeq) * nv);
  for (int s = 0; s < kSeq; ++s) EXPECT_EQ(0, std::memcmp(got.data() + s * nv, want[s].data(), static_cast<size_t>(nv) * 4)) << "sequence " << s;
  EXPECT_EQ(batched->model().executor()->stats().experts.cpu, 0u) << "every expert was in VRAM";
  EXPECT_GT(batched->model().executor()->stats().experts.vram_hits, 0u);
}

// Random routing (random tokens), tiny budgets, exclusive tiers: after every pass no expert is both
// in VRAM and in RAM, VRAM holds at most its slots and the device stays under its budget; inclusive
// tiers keep RAM copies and run too.
TEST(VramExpertsTiers, ExclusiveInvariantsUnderRandomRouting) {
  REQUIRE_SET("qwen3moe-q8_0");
  auto eng = vram_engine(vram_fixture("qwen3moe-q8_0"), 3, 6);
  VramExperts& v = vram_of(*eng);
  ExpertCache* ram = eng->tier().cache();
  ASSERT_NE(ram, nullptr) << "the RAM tier streams";
  std::mt19937 rng(7);
  const int nv = eng->config().n_vocab;
  std::vector<float> row;
  int pos = 0;
  for (int pass = 0; pass < 24; ++pass) {
    const int n = pass % 5 == 0 ? 6 : 1;
    std::vector<int32_t> toks(static_cast<size_t>(n));
    for (int32_t& t : toks) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(nv));
    eng->eval(0, toks.data(), n, pos, false, row);
    pos += n;
    int in_vram = 0;
    for (int l = 0; l < eng->config().n_layer; ++l)
      for (int e = 0; e < eng->config().layers[l].n_expert; ++e) {
        if (!v.holds(l, e)) continue;
        ++in_vram;
        EXPECT_FALSE(ram->in_memory(l, e)) << "pass " << pass << ": expert " << l << "/" << e << " in VRAM and in RAM";
      }
    EXPECT_LE(in_vram, v.n_slots());
    EXPECT_LE(static_cast<int>(v.state().resident_count()), v.n_slots());
    const DeviceMemory dm = eng->model().executor()->device_memory();
    EXPECT_LE(dm.peak, dm.budget);
  }
  const DeviceExpertStats st = eng->model().executor()->stats().experts;
  EXPECT_GT(st.uploads, 0u);
  EXPECT_GT(st.vram_hits, 0u);
  EXPECT_EQ(ram->given_up(), st.uploads) << "every promotion gave up its RAM slot";

  auto inc = vram_engine(vram_fixture("qwen3moe-q8_0"), 3, 6, 1, TierMode::inclusive);
  pos = 0;
  for (int pass = 0; pass < 12; ++pass) {
    const int32_t t = static_cast<int32_t>(rng() % static_cast<uint32_t>(nv));
    inc->eval(0, &t, 1, pos++, false, row);
  }
  EXPECT_EQ(inc->tier().cache()->given_up(), 0u) << "inclusive tiers keep the RAM copy";
  EXPECT_GT(inc->model().executor()->stats().experts.uploads, 0u);
}

// The prompt-processing chooser on fake rates: it uploads exactly the experts whose modelled cost
// is lower on the device, and a faster bus moves the line (no fixed batch-size threshold).
TEST(UploadChoice, UploadsExactlyTheExpertsCheaperOnTheDevice) {
  UploadRates r;
  r.bus_Bps = 1e9, r.cpu_read_Bps = 1e10, r.cpu_row_Bps = 1e10, r.gpu_read_Bps = 1e11, r.gpu_row_Bps = 1e12;
  // 1 MB experts: CPU max(1e-4, rows * 1e-4) s; device 1e-3 + max(1e-5, rows * 1e-6) s.
  const std::vector<ExpertWork> w = {{1000000, 1}, {1000000, 10}, {1000000, 11}, {1000000, 100}, {1000000, 0}, {4000000, 11}};
  std::vector<uint8_t> up(w.size());
  EXPECT_EQ(choose_uploads(r, w, up), 3);
  EXPECT_EQ(up, (std::vector<uint8_t>{0, 0, 1, 1, 0, 1}));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(up[i] != 0, w[i].rows > 0 && gpu_cost_s(r, w[i]) < cpu_cost_s(r, w[i])) << i;
  r.bus_Bps = 4e9;  // 2.5e-4 s per MB up: 3 rows already pay
  EXPECT_EQ(choose_uploads(r, w, up), 4);
  EXPECT_EQ(up, (std::vector<uint8_t>{0, 1, 1, 1, 0, 1}));
  r.observe_bus(1000000, 1e-2);  // a slow bus measured: the rate follows it
  EXPECT_LT(r.bus_Bps, 4e9);
  r.observe_bus(1000000, 0);  // nothing measured: unchanged
  EXPECT_DOUBLE_EQ(r.bus_Bps, 0.75 * 4e9 + 0.25 * 1e8);
}

// A device lost in the middle of a pass with experts in VRAM: that pass and every later one fail
// with the reason, the engine does not hang, and nothing is left half-promoted.
TEST(VramExpertsFaults, DeviceLostMidPassFailsClearly) {
  REQUIRE_SET("qwen3moe-q8_0");
  auto eng = vram_engine(vram_fixture("qwen3moe-q8_0"), 6, 0, 1, TierMode::exclusive, 9);
  std::vector<float> row;
  const int32_t toks[3] = {11, 22, 33};
  std::string first;
  try {
    for (int i = 0; i < 6; ++i) eng->eval(0, toks, 3, 0, false, row);
    ADD_FAILURE() << "the lost device was not reported";
  } catch (const Error& e) {
    first = e.what();
  }
  EXPECT_NE(first.find("lost"), std::string::npos) << first;
  EXPECT_FALSE(eng->model().executor()->lost().empty());
  try {
    eng->eval(0, toks, 1, 0, false, row);
    ADD_FAILURE() << "a pass after the loss ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lost"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::testing
