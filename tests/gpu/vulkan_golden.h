#pragma once
// Shared by the Vulkan executor's golden tests (dense and MoE): an engine with or without the
// executor, and one golden set through it. Every prompt runs through the GPU path in passes of
// n_batch tokens (the KV cache on the device carries across passes) and is held to llama.cpp's
// logits with the tolerances the CPU path's K-quant sets meet (cosine >= 0.99, >= 0.999 for all
// but one prompt, teacher-forced top-1 agreement >= 0.9), to the CPU path's own logits, and to
// itself from run to run (bit for bit).
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "model/model.h"
#include "model/vram_plan.h"
#include "model/vulkan_executor.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "../model/golden_util.h"
#include "gpu_test_util.h"

namespace strata::testing {

// The executor's shape for an engine: its context, slots, batch size and KV cache types.
inline VramShape vk_shape(Engine& eng, uint64_t vram_budget = 0) {
  VramShape s;
  s.n_ctx = eng.kv().n_ctx();
  s.n_seq = eng.options().n_seq;
  s.n_batch = eng.options().n_batch;
  s.type_k = eng.options().type_k;
  s.type_v = eng.options().type_v;
  s.budget = vram_budget;
  return s;
}

// cache_experts > 0: the expert tier streams through a cache of that many experts. kv: the KV
// cache's type on both paths (the CPU's and the device's). vram_budget > 0: --vram-budget.
inline std::unique_ptr<Engine> vk_engine(const std::string& path, bool gpu, int n_batch, int64_t cache_experts = 0, int n_seq = 1,
                                         GgmlType kv = GgmlType::F32, uint64_t vram_budget = 0) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = kv;
  eo.tier.cache_experts = cache_experts;
  eo.n_seq = n_seq;
  auto eng = std::make_unique<Engine>(Model::load(path), eo);
  if (gpu) {
    gpu::DeviceOptions opt;
    opt.pipeline_cache = "none";
    eng->model().set_executor(make_vulkan_executor(gpu::Device::open(vk_device().info().index, opt), eng->model(), vk_shape(*eng, vram_budget)));
  }
  return eng;
}

// "qwen3moe-q8_0" -> "qwen3moe_q8_0" (gtest parameter names).
inline std::string vk_set_name(const char* set) {
  std::string s = set;
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

// A --vram-budget that holds the scratch and layers 0..layers-1 and half of layer `layers` (the
// executor's plan for the engine's shape on the test device).
inline uint64_t vk_budget_for_layers(Engine& eng, int layers) {
  VramShape s = vk_shape(eng);
  s.max_range = vk_device().max_range();
  const VramPlan p = plan_vram(eng.config(), eng.model().weights(), s);
  uint64_t b = p.scratch;
  for (int l = 0; l < layers; ++l) b += p.layer_weights[l] + p.layer_kv[l];
  if (layers < p.n_layer) b += (p.layer_weights[layers] + p.layer_kv[layers]) / 2;
  return b;
}

// How a golden set goes through the device: the KV cache's type (both paths), and how many
// leading layers a --vram-budget leaves on the device (-1: no budget, every layer).
struct VkGoldenRun {
  GgmlType kv = GgmlType::F32;
  int gpu_layers = -1;
};

// The worst figures of one golden set's walk.
struct VkGoldenWalk {
  double worst_cos = 1, worst_cpu_cos = 1, worst_agree = 1;
  int good = 0, prompts = 0;  // prompts, and those with last-position cosine >= 0.999 against llama.cpp
};

// Every prompt of `set` through `gpu` (and the CPU path `cpu`), held to llama.cpp's logits and the
// CPU's as the header says. Bit for bit: `twin` (an engine built as `gpu`) runs the same passes in
// lockstep, prompt and teacher-forced steps; without one, `gpu` runs each prompt twice.
inline VkGoldenWalk vk_walk_golden(const std::string& set, Engine& gpu, Engine& cpu, Engine* twin = nullptr) {
  const std::string dir = test::fixtures_dir() + "/" + set;
  const int nv = gpu.config().n_vocab;
  VkGoldenWalk w;
  for (const auto& p : test::golden_prompts(set)) {
    const auto j = test::read_json(dir + "/golden/" + p + ".json");
    const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
    const auto ref = test::read_f32(dir + "/golden/" + p + ".last_logits.f32");
    EXPECT_EQ(ref.size(), static_cast<size_t>(nv));
    if (ref.size() != static_cast<size_t>(nv)) return w;
    const int n = static_cast<int>(prompt.size());
    std::vector<float> row, again, c;
    gpu.eval(0, prompt.data(), n, 0, false, row);
    (twin ? *twin : gpu).eval(0, prompt.data(), n, 0, false, again);
    cpu.eval(0, prompt.data(), n, 0, false, c);
    EXPECT_EQ(row.size(), static_cast<size_t>(nv));
    EXPECT_EQ(0, std::memcmp(row.data(), again.data(), row.size() * 4)) << set << "/" << p << ": the same passes, run to run";
    const double cos = test::compare_logits(row.data(), ref.data(), ref.size()).cosine;
    const double cc = test::compare_logits(row.data(), c.data(), c.size()).cosine;
    EXPECT_GE(cos, 0.99) << set << "/" << p;
    EXPECT_GE(cc, 0.999) << set << "/" << p << ": against the CPU path";
    w.good += cos >= 0.999;
    ++w.prompts;
    w.worst_cos = std::min(w.worst_cos, cos);
    w.worst_cpu_cos = std::min(w.worst_cpu_cos, cc);
    // Teacher-forced: llama.cpp's greedy tokens fed one by one; the GPU's argmax agrees.
    const auto& steps = j["greedy"]["steps"];
    int agree = 0, counted = 0, pos = n;
    for (size_t s = 0; s < steps.size(); ++s) {
      const int32_t want = steps[s]["token"].get<int32_t>();
      agree += Sampler::argmax(row.data(), nv) == want;
      ++counted;
      if (s + 1 == steps.size()) break;
      gpu.eval(0, &want, 1, pos, false, row);
      if (twin) {
        twin->eval(0, &want, 1, pos, false, again);
        EXPECT_EQ(0, std::memcmp(row.data(), again.data(), static_cast<size_t>(nv) * 4)) << set << "/" << p << " step " << s;
      }
      ++pos;
    }
    const double rate = counted ? static_cast<double>(agree) / counted : 1.0;
    w.worst_agree = std::min(w.worst_agree, rate);
    EXPECT_GE(rate, 0.9) << set << "/" << p << " teacher-forced top-1 agreement";
  }
  EXPECT_GT(w.prompts, 0);
  EXPECT_GE(w.good, w.prompts - 1) << set << ": last-position cosine >= 0.999 needed for all but one prompt";
  return w;
}

inline void vk_print_walk(const std::string& set, const VkGoldenWalk& w, const char* what = "vulkan") {
  std::printf("[%-18s] %s: worst cosine %.6f against llama.cpp, %.6f against the CPU path, teacher-forced agreement %.3f\n", set.c_str(), what,
              w.worst_cos, w.worst_cpu_cos, w.worst_agree);
}

inline void vk_check_golden_set(const std::string& set, const VkGoldenRun& run = {}) {
  const std::string dir = test::fixtures_dir() + "/" + set;
  if (!std::filesystem::exists(dir + "/model.gguf")) STRATA_MISSING_FIXTURE(dir + "/model.gguf");
  auto cpu_eng = vk_engine(dir + "/model.gguf", false, 256, 0, 1, run.kv);
  const uint64_t budget = run.gpu_layers >= 0 ? vk_budget_for_layers(*vk_engine(dir + "/model.gguf", false, 16, 0, 1, run.kv), run.gpu_layers) : 0;
  auto gpu_eng = vk_engine(dir + "/model.gguf", true, 16, 0, 1, run.kv, budget);
  ASSERT_NE(gpu_eng->model().executor(), nullptr);
  if (run.gpu_layers >= 0) {
    ASSERT_EQ(gpu_eng->model().executor()->n_layers(), run.gpu_layers) << "layers placed under " << budget << " bytes";
  }
  EXPECT_NE(gpu_eng->model().executor()->name().find(vk_device().info().name), std::string::npos);
  const VkGoldenWalk w = vk_walk_golden(set, *gpu_eng, *cpu_eng);
  if (budget > 0) {
    EXPECT_LE(gpu_eng->model().executor()->device_memory().peak, budget) << "device memory past --vram-budget";
  }
  vk_print_walk(set, w);
}

}  // namespace strata::testing
