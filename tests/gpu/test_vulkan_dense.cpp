// The Vulkan executor (model/vulkan_executor.h) on the dense golden sets: every prompt through
// the GPU path in passes of 16 tokens (the KV cache on the device carries across passes), held to
// llama.cpp's logits with the tolerances the CPU path's K-quant sets meet (cosine >= 0.99, >= 0.999
// for all but one prompt, teacher-forced top-1 agreement >= 0.9), to the CPU path's own logits,
// and to itself from run to run (bit for bit). Architectures it does not run fail at load, named.
#include <cstdio>

#include "core/error.h"
#include "model/model.h"
#include "model/vulkan_executor.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "../model/golden_util.h"
#include "gpu_test_util.h"

namespace strata::testing {
namespace {

std::unique_ptr<Engine> vkd_engine(const std::string& path, bool gpu, int n_batch) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = GgmlType::F32;
  auto eng = std::make_unique<Engine>(Model::load(path), eo);
  if (gpu) {
    gpu::DeviceOptions opt;
    opt.pipeline_cache = "none";
    eng->model().set_executor(make_vulkan_executor(gpu::Device::open(vk_device().info().index, opt), eng->model(), eng->kv().n_ctx()));
  }
  return eng;
}

class VulkanDense : public ::testing::TestWithParam<const char*> {};

TEST_P(VulkanDense, GoldenSetWithinTheKQuantTolerances) {
  const std::string set = GetParam();
  const std::string dir = test::fixtures_dir() + "/" + set;
  if (!std::filesystem::exists(dir + "/model.gguf")) STRATA_MISSING_FIXTURE(dir + "/model.gguf");
  auto gpu_eng = vkd_engine(dir + "/model.gguf", true, 16);
  auto cpu_eng = vkd_engine(dir + "/model.gguf", false, 256);
  ASSERT_NE(gpu_eng->model().executor(), nullptr);
  EXPECT_NE(gpu_eng->model().executor()->name().find(vk_device().info().name), std::string::npos);
  const int nv = gpu_eng->config().n_vocab;
  double worst_cos = 1, worst_cpu_cos = 1, worst_agree = 1;
  int good = 0, prompts = 0;
  for (const auto& p : test::golden_prompts(set)) {
    const auto j = test::read_json(dir + "/golden/" + p + ".json");
    const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
    const auto ref = test::read_f32(dir + "/golden/" + p + ".last_logits.f32");
    ASSERT_EQ(ref.size(), static_cast<size_t>(nv));
    const int n = static_cast<int>(prompt.size());
    std::vector<float> row, again, cpu;
    gpu_eng->eval(0, prompt.data(), n, 0, false, row);
    gpu_eng->eval(0, prompt.data(), n, 0, false, again);
    cpu_eng->eval(0, prompt.data(), n, 0, false, cpu);
    ASSERT_EQ(row.size(), static_cast<size_t>(nv));
    EXPECT_EQ(0, std::memcmp(row.data(), again.data(), row.size() * 4)) << set << "/" << p << ": run to run";
    const auto c = test::compare_logits(row.data(), ref.data(), ref.size());
    const auto cc = test::compare_logits(row.data(), cpu.data(), cpu.size());
    EXPECT_GE(c.cosine, 0.99) << set << "/" << p;
    good += c.cosine >= 0.999;
    ++prompts;
    worst_cos = std::min(worst_cos, c.cosine);
    worst_cpu_cos = std::min(worst_cpu_cos, cc.cosine);
    EXPECT_GE(cc.cosine, 0.999) << set << "/" << p << ": against the CPU path";
    // Teacher-forced: llama.cpp's greedy tokens fed one by one; the GPU's argmax agrees.
    const auto& steps = j["greedy"]["steps"];
    int agree = 0, counted = 0, pos = n;
    std::vector<float> next;
    for (size_t s = 0; s < steps.size(); ++s) {
      const int32_t want = steps[s]["token"].get<int32_t>();
      agree += Sampler::argmax(row.data(), nv) == want;
      ++counted;
      if (s + 1 == steps.size()) break;
      gpu_eng->eval(0, &want, 1, pos++, false, next);
      row.assign(next.begin(), next.begin() + nv);
    }
    const double rate = counted ? static_cast<double>(agree) / counted : 1.0;
    worst_agree = std::min(worst_agree, rate);
    EXPECT_GE(rate, 0.9) << set << "/" << p << " teacher-forced top-1 agreement";
  }
  ASSERT_GT(prompts, 0);
  EXPECT_GE(good, prompts - 1) << set << ": last-position cosine >= 0.999 needed for all but one prompt";
  std::printf("[%-18s] vulkan: worst cosine %.6f against llama.cpp, %.6f against the CPU path, teacher-forced agreement %.3f\n", set.c_str(),
              worst_cos, worst_cpu_cos, worst_agree);
}

INSTANTIATE_TEST_SUITE_P(Sets, VulkanDense,
                         ::testing::Values("llama-dense-f32", "llama-dense-q8_0", "qwen3-dense-f32", "qwen3-dense-q4_k_m", "qwen3-dense-q8_0"),
                         [](const auto& i) {
                           std::string s = i.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

// An architecture the executor does not run fails at load with its name, before any upload.
TEST(VulkanDenseRefusal, MoeArchitectureIsNamed) {
  const std::string path = test::fixtures_dir() + "/qwen3moe-q8_0/model.gguf";
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  auto model = Model::load(path);
  gpu::DeviceOptions opt;
  opt.pipeline_cache = "none";
  try {
    make_vulkan_executor(gpu::Device::open(vk_device().info().index, opt), *model, 64);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not qwen3moe"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::testing
