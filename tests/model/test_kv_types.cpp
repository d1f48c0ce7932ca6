// f16 and q8_0 KV caches (the default is f16): logits stay close to the f32 cache's, on every
// attention path (GQA, MLA with V inside K, DeepSeek-V4's shared KV), in a prompt and in decode.
// (DeepSeek-V3.2's sparse attention: tests/model/test_deepseek32.cpp.)
#include <gtest/gtest.h>

#include "golden_util.h"
#include "runtime/engine.h"

using namespace strata;
using namespace strata::test;

namespace {

std::vector<float> run(const std::string& path, GgmlType kv, const std::vector<int32_t>& prompt) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.type_k = eo.type_v = kv;
  Engine eng(Model::load(path), eo);
  std::vector<float> lg, all;
  eng.eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, lg);
  all = lg;
  int pos = static_cast<int>(prompt.size());
  for (int s = 0; s < 3; ++s) {  // decode a few fixed tokens (the same for every cache type)
    const int32_t t = prompt[static_cast<size_t>(s)];
    eng.eval(0, &t, 1, pos++, false, lg);
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

}  // namespace

TEST(KvTypes, F16AndQ8CachesStayCloseToF32) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (KV type test)");
  int checked = 0;
  for (const char* set : {"qwen3moe-f32", "deepseek2-f32", "gpt-oss-f32", "deepseek4-f32", "mixtral-f32"}) {
    const std::string dir = fixtures_dir() + "/" + set;
    if (!std::filesystem::exists(dir + "/model.gguf")) {
      ADD_FAILURE() << "missing fixture " << dir << "/model.gguf";
      continue;
    }
    const auto prompt = read_json(dir + "/golden/p1.json")["prompt_tokens"].get<std::vector<int32_t>>();
    const auto ref = run(dir + "/model.gguf", GgmlType::F32, prompt);
    const size_t nv = ref.size() / 4;
    for (const auto& [kv, min_cos] : {std::pair{GgmlType::F16, 0.9999}, std::pair{GgmlType::Q8_0, 0.999}}) {
      const auto got = run(dir + "/model.gguf", kv, prompt);
      ASSERT_EQ(got.size(), ref.size()) << set;
      for (size_t s = 0; s < 4; ++s) {
        const auto c = compare_logits(got.data() + s * nv, ref.data() + s * nv, nv);
        EXPECT_GE(c.cosine, min_cos) << set << " kv " << ggml_info(kv).name << " step " << s;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}
