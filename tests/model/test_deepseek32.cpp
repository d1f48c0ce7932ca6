// DeepSeek-V3.2 (deepseek32) specifics beyond the golden suite: config errors name the key; the
// indexer's key cache is part of the KV cache's bytes; the sparse attention is per sequence
// (batching two sequences changes neither's logits); and a sequence can be cut back and a prompt
// prefix reused (rewindable), giving a fresh run's logits bit for bit, with the top-k selection
// active (prompts longer than top_k = 16).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "load_error.h"
#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "golden_util.h"
#include "model/model.h"
#include "model/model_summary.h"
#include "runtime/engine.h"

using namespace strata;
using namespace strata::test;

namespace {

// Metadata of a 2-layer deepseek32 (no tensors: a bad value must be reported before any tensor
// is bound): the integer keys below with `changes` applied (value -1: the key is left out).
std::string write_meta_only(const std::string& name, const std::vector<std::pair<std::string, int>>& changes) {
  std::vector<std::pair<std::string, int>> keys = {
      {"vocab_size", 64}, {"embedding_length", 64}, {"block_count", 2}, {"attention.head_count", 2}, {"attention.head_count_kv", 1},
      {"attention.q_lora_rank", 64}, {"attention.kv_lora_rank", 64}, {"attention.key_length", 96}, {"attention.value_length", 64},
      {"attention.key_length_mla", 64}, {"attention.value_length_mla", 32}, {"rope.dimension_count", 32}, {"expert_count", 4},
      {"expert_used_count", 2}, {"expert_feed_forward_length", 64}, {"expert_gating_func", 2}, {"attention.indexer.head_count", 4},
      {"attention.indexer.key_length", 64}, {"attention.indexer.top_k", 8}};
  for (const auto& [k, v] : changes) {
    auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& e) { return e.first == k; });
    if (it == keys.end()) keys.emplace_back(k, v);
    else it->second = v;
  }
  GgufWriter w;
  w.set_string("general.architecture", "deepseek32");
  w.set_f32("deepseek32.attention.layer_norm_rms_epsilon", 1e-6f);
  for (const auto& [k, v] : keys)
    if (v >= 0) w.set_u32("deepseek32." + k, static_cast<uint32_t>(v));
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  w.write(path);
  return path;
}

using strata::test::load_error;

TEST(Deepseek32, MissingIndexerKeyFailsNamingIt) {
  const std::string err = load_error(write_meta_only("strata_ds32_noidx.gguf", {{"attention.indexer.top_k", -1}}));
  EXPECT_NE(err.find("deepseek32.attention.indexer.top_k"), std::string::npos) << err;
}

TEST(Deepseek32, OlderMlaLayoutFails) {
  // Without the *_mla keys a deepseek2 file is of the attn_kv_b layout; llama.cpp refuses it for deepseek32.
  const std::string err = load_error(write_meta_only("strata_ds32_kvb.gguf", {{"attention.key_length_mla", -1}}));
  EXPECT_NE(err.find("deepseek32.attention.key_length_mla"), std::string::npos) << err;
}

TEST(Deepseek32, NextnBlocksFailLoudly) {
  const std::string err = load_error(write_meta_only("strata_ds32_mtp.gguf", {{"nextn_predict_layers", 1}}));
  EXPECT_NE(err.find("nextn_predict_layers"), std::string::npos) << err;
  EXPECT_NE(err.find("not supported"), std::string::npos) << err;
}

TEST(Deepseek32, IndexerKeyShorterThanRopeFails) {
  const std::string err = load_error(write_meta_only("strata_ds32_idxdim.gguf", {{"attention.indexer.key_length", 16}}));
  EXPECT_NE(err.find("attention.indexer.key_length 16"), std::string::npos) << err;
}

std::string set_path(const char* set) { return fixtures_dir() + "/" + set + "/model.gguf"; }

std::unique_ptr<Engine> ds32_engine(const std::string& path, int n_seq, int n_batch, GgmlType kv = GgmlType::F32) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_seq = n_seq;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = kv;
  return std::make_unique<Engine>(Model::load(path), eo);
}

std::vector<int32_t> ds32_golden_prompt(const char* set, const char* p) {
  return read_json(fixtures_dir() + "/" + set + "/golden/" + p + ".json")["prompt_tokens"].get<std::vector<int32_t>>();
}

// `strata inspect` shows the indexer (heads x dims, top-k) as the set's README records it.
TEST(Deepseek32, InspectShowsTheIndexer) {
  const std::string path = set_path("deepseek32-q8_0");
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  const MoeHParams h = ModelSummary::of(*GgufModel::open(path)).hp;
  EXPECT_EQ(h.indexer_heads, 16);
  EXPECT_EQ(h.indexer_dim, 64);
  EXPECT_EQ(h.indexer_top_k, 16);
  const auto model = Model::load(path);
  const LayerConfig& l = model->config().layers[2];
  EXPECT_EQ(l.attn, AttnKind::MlaSparse);
  EXPECT_EQ(l.idx_n_head * 1000 + l.idx_head_dim * 10 + l.idx_top_k, 16 * 1000 + 64 * 10 + 16);
}

TEST(Deepseek32, IndexerKeysCountInTheKvCache) {
  const std::string path = set_path("deepseek32-q8_0");
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  for (GgmlType t : {GgmlType::F32, GgmlType::Q8_0}) {
    auto eng = ds32_engine(path, 2, 16, t);
    const ModelConfig& cfg = eng->config();
    const LayerConfig& l = cfg.layers[0];
    const uint64_t cells = static_cast<uint64_t>(eng->kv().n_ctx()) * eng->kv().n_seq() * cfg.n_layer;
    const uint64_t mla = cells * ggml_row_size(t, static_cast<uint64_t>(l.kv_lora_rank + l.qk_rope_dim));
    const uint64_t keys = cells * ggml_row_size(t, static_cast<uint64_t>(l.idx_head_dim));
    EXPECT_GE(eng->kv().bytes(), mla + keys) << ggml_type_name(t);
    EXPECT_EQ(eng->tier().plan().kv, eng->kv().bytes()) << ggml_type_name(t);
  }
}

// Two sequences in one pass give each the logits it gets alone (the selection is per sequence).
TEST(Deepseek32, BatchedSequencesMatchSeparateRuns) {
  const std::string path = set_path("deepseek32-q8_0");
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  const auto a = ds32_golden_prompt("deepseek32-q8_0", "p1"), b = ds32_golden_prompt("deepseek32-q8_0", "p2");
  auto both = ds32_engine(path, 2, 256);
  const SeqInput in[2] = {{0, a.data(), static_cast<int>(a.size()), Logits::All}, {1, b.data(), static_cast<int>(b.size()), Logits::All}};
  std::vector<float> got;
  both->forward(in, got);
  std::vector<float> ra, rb;
  ds32_engine(path, 1, 256)->eval(0, a.data(), static_cast<int>(a.size()), 0, true, ra);
  ds32_engine(path, 1, 256)->eval(0, b.data(), static_cast<int>(b.size()), 0, true, rb);
  ASSERT_EQ(got.size(), ra.size() + rb.size());
  EXPECT_TRUE(std::equal(ra.begin(), ra.end(), got.begin())) << "sequence 0";
  EXPECT_TRUE(std::equal(rb.begin(), rb.end(), got.begin() + static_cast<std::ptrdiff_t>(ra.size()))) << "sequence 1";
}

// Prefix reuse and cutting back: the kept rows (KV and indexer keys) serve a new prompt exactly.
TEST(Deepseek32, RewindAndPrefixReuseMatchAFreshRun) {
  const std::string path = set_path("deepseek32-q8_0");
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  ASSERT_TRUE(Model::load(path)->rewindable());
  const auto p = ds32_golden_prompt("deepseek32-q8_0", "p3");  // 150 tokens, far beyond top_k
  ASSERT_GT(p.size(), 100u);
  auto eng = ds32_engine(path, 1, 8);
  std::vector<float> lg;
  eng->eval(0, p.data(), 90, 0, false, lg);
  for (int pos = 90; pos < 94; ++pos) eng->eval(0, &p[static_cast<size_t>(pos)], 1, pos, false, lg);  // decoded rows: not reusable
  // A prompt that shares 60 tokens, then differs (p's tail from token 100 on).
  std::vector<int32_t> q(p.begin(), p.begin() + 60);
  q.insert(q.end(), p.begin() + 100, p.end());
  EXPECT_EQ(eng->reusable_prefix(0, q), 60);
  const int kept = eng->start_prompt(0, q);
  ASSERT_EQ(kept, 60);
  std::vector<float> got, ref;
  eng->eval(0, q.data() + kept, static_cast<int>(q.size()) - kept, kept, true, got);
  auto fresh = ds32_engine(path, 1, 8);
  fresh->eval(0, q.data(), static_cast<int>(q.size()), 0, true, ref);
  const size_t nv = static_cast<size_t>(eng->config().n_vocab);
  ASSERT_EQ(got.size(), (q.size() - kept) * nv);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin() + static_cast<std::ptrdiff_t>(kept * nv)));
  // Cut back mid-sequence and decode: the same as the fresh engine decoding the same tokens.
  eng->truncate(0, 70);
  fresh->truncate(0, 70);
  for (int pos = 70; pos < 74; ++pos) {
    const int32_t t = p[static_cast<size_t>(pos)];
    std::vector<float> x, y;
    eng->eval(0, &t, 1, pos, false, x);
    fresh->eval(0, &t, 1, pos, false, y);
    EXPECT_EQ(x, y) << "decode at " << pos;
  }
}

}  // namespace

namespace {

// f16 and q8_0 caches hold the indexer keys in the same type. While a query sees no more than
// top_k positions nothing is selected, and the logits stay as close to the f32 cache's as
// deepseek2-q8_0's (the same MLA without the indexer: worst cosine 0.98 on this prompt, where Q8
// activations amplify the cache's rounding). Beyond that the top-k choice itself can change with
// the keys' rounding (these random models have many near-tied and exactly-zero scores) and the
// change spreads through later layers' rows, so there the median position must stay close and
// none may be far off (a key read from the wrong row gives cosines near 0).
TEST(Deepseek32, F16AndQ8CachesBeforeAndAfterTheTopK) {
  const std::string path = set_path("deepseek32-q8_0");
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  const auto p = ds32_golden_prompt("deepseek32-q8_0", "p2");
  std::vector<float> ref;
  ds32_engine(path, 1, 256)->eval(0, p.data(), static_cast<int>(p.size()), 0, true, ref);
  const int top = Model::load(path)->config().layers[0].idx_top_k;
  const size_t nv = ref.size() / p.size();
  for (GgmlType kv : {GgmlType::F16, GgmlType::Q8_0}) {
    std::vector<float> got;
    ds32_engine(path, 1, 256, kv)->eval(0, p.data(), static_cast<int>(p.size()), 0, true, got);
    ASSERT_EQ(got.size(), ref.size());
    std::vector<double> later;
    for (size_t pos = 0; pos < p.size(); ++pos) {
      const double c = compare_logits(got.data() + pos * nv, ref.data() + pos * nv, nv).cosine;
      if (static_cast<int>(pos) < top) EXPECT_GE(c, 0.98) << ggml_type_name(kv) << " position " << pos;
      else later.push_back(c);
    }
    std::sort(later.begin(), later.end());
    const double median = later[later.size() / 2];
    std::printf("[deepseek32 kv %-4s] after the top-k: median cosine %.5f, worst %.5f\n", ggml_type_name(kv), median, later.front());
    EXPECT_GE(median, 0.99) << ggml_type_name(kv);
    EXPECT_GE(later.front(), 0.7) << ggml_type_name(kv);
  }
}

}  // namespace
