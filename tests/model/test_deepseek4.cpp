// DeepSeek-V4 (deepseek4) specifics: unknown config values fail loudly, and the compressed-KV /
// indexer state carried across forward calls gives the same logits whether the prompt is
// evaluated in one batch, in chunks, or token by token.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "golden_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

using namespace strata;
using namespace strata::test;

namespace {

// Metadata of a 2-layer deepseek4 up to the per-layer loop of load_config (no tensors: a bad
// value must be reported before any tensor is bound).
std::string ds4_write_meta_only(const std::string& name, const std::vector<int32_t>& ratios, int gating) {
  GgufWriter w;
  w.set_string("general.architecture", "deepseek4");
  w.set_u32("deepseek4.vocab_size", 64);
  w.set_u32("deepseek4.embedding_length", 64);
  w.set_u32("deepseek4.block_count", 2);
  w.set_f32("deepseek4.attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_u32("deepseek4.attention.head_count", 2);
  w.set_u32("deepseek4.attention.head_count_kv", 1);
  w.set_u32("deepseek4.attention.key_length", 64);
  w.set_u32("deepseek4.attention.value_length", 64);
  w.set_u32("deepseek4.rope.dimension_count", 32);
  w.set_u32("deepseek4.attention.q_lora_rank", 64);
  w.set_u32("deepseek4.attention.output_group_count", 2);
  w.set_u32("deepseek4.attention.output_lora_rank", 32);
  w.set_u32("deepseek4.attention.sliding_window", 8);
  w.set_u32("deepseek4.hyper_connection.count", 4);
  w.set_u32("deepseek4.hyper_connection.sinkhorn_iterations", 20);
  w.set_f32("deepseek4.hyper_connection.epsilon", 1e-6f);
  w.set_array_i32("deepseek4.attention.compress_ratios", ratios);
  w.set_array_f32("deepseek4.swiglu_clamp_exp", {3.0f, 3.0f});
  w.set_array_f32("deepseek4.swiglu_clamp_shexp", {3.0f, 3.0f});
  w.set_u32("deepseek4.expert_count", 4);
  w.set_u32("deepseek4.expert_used_count", 2);
  w.set_u32("deepseek4.expert_feed_forward_length", 64);
  w.set_u32("deepseek4.expert_gating_func", static_cast<uint32_t>(gating));
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  w.write(path);
  return path;
}

std::string ds4_load_error(const std::string& path) {
  try {
    Model::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Deepseek4, UnknownCompressRatioFails) {
  const std::string path = ds4_write_meta_only("strata_ds4_ratio.gguf", {0, 64}, 4);
  const std::string err = ds4_load_error(path);
  std::filesystem::remove(path);
  EXPECT_NE(err.find("compress_ratios"), std::string::npos) << err;
  EXPECT_NE(err.find("64"), std::string::npos) << err;
  EXPECT_NE(err.find("0, 4, 128"), std::string::npos) << err;
}

TEST(Deepseek4, UnknownGatingFails) {
  const std::string path = ds4_write_meta_only("strata_ds4_gating.gguf", {0, 4}, 9);
  const std::string err = ds4_load_error(path);
  std::filesystem::remove(path);
  EXPECT_NE(err.find("expert_gating_func 9"), std::string::npos) << err;
}

std::unique_ptr<Engine> ds4_engine(const std::string& path, int n_batch) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(path), eo);
}

// The longest prompt crosses the 128-token HCA block and many indexer-selected CSA blocks.
TEST(Deepseek4, ChunkedPrefillMatchesOneBatch) {
  const std::string dir = fixtures_dir() + "/deepseek4-f32";
  if (!std::filesystem::exists(dir + "/model.gguf")) STRATA_MISSING_FIXTURE(dir + "/model.gguf");
  const auto j = read_json(dir + "/golden/p3.json");
  const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  std::vector<float> ref;
  auto whole = ds4_engine(dir + "/model.gguf", 256);
  whole->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, ref);
  const int nv = whole->config().n_vocab;
  for (int chunk : {1, 7}) {
    auto eng = ds4_engine(dir + "/model.gguf", chunk);
    std::vector<float> got;
    eng->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, got);
    ASSERT_EQ(got.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(got[i] - ref[i])));
    EXPECT_LE(worst, 1e-3) << "chunks of " << chunk;
    // Then a few greedy steps one token at a time, against llama.cpp's tokens.
    std::vector<float> last(got.end() - nv, got.end());
    int pos = static_cast<int>(prompt.size());
    const auto& steps = j["greedy"]["steps"];
    for (size_t s = 0; s < 8 && s < steps.size(); ++s) {
      const int32_t tok = Sampler::argmax(last.data(), nv);
      EXPECT_EQ(tok, steps[s]["token"].get<int32_t>()) << "chunks of " << chunk << ", greedy step " << s;
      eng->eval(0, &tok, 1, pos++, false, last);
    }
  }
  // A new prompt in the same cache slot starts over (no stale compressed blocks).
  std::vector<float> again;
  whole->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, true, again);
  EXPECT_EQ(again, ref);
}

}  // namespace
