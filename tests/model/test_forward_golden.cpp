// Golden forward-pass checks against llama.cpp outputs for every model fixture.
#include <gtest/gtest.h>

#include <cmath>

#include "core/thread_pool.h"
#include "golden_util.h"
#include "model/model.h"

using namespace strata;
using namespace strata::test;

namespace {

struct PromptResult {
  LogitCompare last;
};

std::vector<float> run_prompt(Model& m, const std::vector<int32_t>& toks, ThreadPool& pool) {
  KvCacheOptions ko;
  ko.n_ctx = 256;
  ko.type_k = ko.type_v = GgmlType::F32;
  KvCache kv(m.config(), ko);
  std::vector<int32_t> pos(toks.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  Batch b;
  b.n = static_cast<int>(toks.size());
  b.tokens = toks.data();
  b.pos = pos.data();
  std::vector<float> logits(m.config().n_vocab);
  m.set_threads(&pool);
  m.forward(b, kv, logits.data());
  return logits;
}

}  // namespace

TEST(ForwardGolden, F32SetsLastLogits) {
  if (!have_fixtures()) GTEST_SKIP() << "!!! fixtures folder " << fixtures_dir() << " is absent: golden forward tests SKIPPED !!!";
  ThreadPool pool(2);
  for (const auto& set : model_sets()) {
    if (set.find("-f32") == std::string::npos) continue;
    std::unique_ptr<Model> m;
    try {
      m = Model::load(fixtures_dir() + "/" + set + "/model.gguf");
    } catch (const std::exception& e) {
      std::printf("[%s] not loadable: %s\n", set.c_str(), e.what());
      continue;
    }
    double worst_cos = 1, worst_rel = 0;
    for (const auto& p : golden_prompts(set)) {
      auto j = read_json(fixtures_dir() + "/" + set + "/golden/" + p + ".json");
      std::vector<int32_t> toks = j["prompt_tokens"].get<std::vector<int32_t>>();
      auto ref = read_f32(fixtures_dir() + "/" + set + "/golden/" + p + ".last_logits.f32");
      auto got = run_prompt(*m, toks, pool);
      auto c = compare_logits(got.data(), ref.data(), ref.size());
      worst_cos = std::min(worst_cos, c.cosine);
      worst_rel = std::max(worst_rel, c.max_abs / c.ref_std);
      EXPECT_GE(c.cosine, 0.9999) << set << " " << p;
      EXPECT_LE(c.max_abs, 0.01 * c.ref_std) << set << " " << p;
    }
    std::printf("[%s] worst cosine %.6f, worst max|d|/std %.5f\n", set.c_str(), worst_cos, worst_rel);
  }
}
