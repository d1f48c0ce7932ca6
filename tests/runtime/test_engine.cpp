// The engine's one batching path: passes over several sequences, the prompt chunk rule, the
// record of reusable rows (prefix reuse), output-head rows, and failures that touch only the
// sequences of the failed pass.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace strata::test {
namespace {

std::string fixture(const char* set) { return std::string(STRATA_FIXTURES_DIR) + "/" + set + "/model.gguf"; }

std::unique_ptr<Engine> engine(const char* set, int n_seq, int n_batch = 512, const TierOptions& tier = {}) {
  const std::string path = fixture(set);
  if (!std::filesystem::exists(path)) throw std::runtime_error("fixture " + path + " is absent");
  EngineOptions eo;
  eo.n_ctx = 128;
  eo.n_seq = n_seq;
  eo.n_threads = 2;
  eo.n_batch = n_batch;
  eo.type_k = eo.type_v = GgmlType::F32;
  eo.tier = tier;
  return std::make_unique<Engine>(Model::load(path), eo);
}

std::vector<int32_t> tokens(int n, int seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 100 + (seed * 37 + i * 11) % 500;
  return t;
}

TEST(EnginePromptChunk, NeverLeavesOrTakesALoneToken) {
  EXPECT_EQ(Engine::prompt_chunk(10, 32), 10);  // all of it
  EXPECT_EQ(Engine::prompt_chunk(10, 4), 4);
  EXPECT_EQ(Engine::prompt_chunk(5, 4), 3);     // 4 would leave one token
  EXPECT_EQ(Engine::prompt_chunk(2, 1), 0);     // one would be a lone token: wait for room
  EXPECT_EQ(Engine::prompt_chunk(3, 2), 0);     // 2 leaves one, 1 is lone
  EXPECT_EQ(Engine::prompt_chunk(1, 5), 1);     // a one-token prompt is a lone token anyway
  EXPECT_EQ(Engine::prompt_chunk(7, 0), 0);
  for (int rest = 1; rest < 40; ++rest)
    for (int room = 0; room < 40; ++room) {
      const int t = Engine::prompt_chunk(rest, room);
      ASSERT_LE(t, std::min(rest, room));
      if (t > 0 && rest > 1) {
        EXPECT_GE(t, 2) << rest << " " << room;
        EXPECT_NE(rest - t, 1) << rest << " " << room;
      }
    }
}

// Two sequences in one pass give, bit for bit, what each gives alone; positions follow each
// sequence's own length.
TEST(Engine, PassOverTwoSequencesEqualsEachAlone) {
  auto eng = engine("qwen3moe-q8_0", 2);
  auto solo = engine("qwen3moe-q8_0", 1);
  const auto a = tokens(9, 1), b = tokens(5, 2);
  std::vector<float> ref_a, ref_b, both;
  solo->eval(0, a.data(), 9, 0, false, ref_a);
  solo->eval(0, b.data(), 5, 0, false, ref_b);
  const SeqInput in[2] = {{0, a.data(), 9, Logits::Last}, {1, b.data(), 5, Logits::Last}};
  eng->forward(in, both);
  const size_t nv = static_cast<size_t>(eng->config().n_vocab);
  ASSERT_EQ(both.size(), 2 * nv);
  EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + nv), ref_a);
  EXPECT_EQ(std::vector<float>(both.begin() + nv, both.end()), ref_b);
  EXPECT_EQ(eng->seq_length(0), 9);
  EXPECT_EQ(eng->seq_length(1), 5);
  EXPECT_THROW(eng->forward(std::vector<SeqInput>{{0, a.data(), 1, Logits::Last}, {0, a.data(), 1, Logits::Last}}, both), Error);
}

// Prompt chunks other than the last compute no output head; Logits::None gives no rows.
TEST(Engine, OnlyRequestedRowsGoThroughTheHead) {
  auto eng = engine("qwen3moe-q8_0", 1, /*n_batch=*/7);
  const auto p = tokens(30, 3);
  std::vector<float> lg;
  const uint64_t h0 = eng->model().head_rows();
  eng->eval(0, p.data(), 30, 0, false, lg);
  EXPECT_EQ(eng->model().head_rows() - h0, 1u);  // 5 passes, one row of logits
  EXPECT_EQ(lg.size(), static_cast<size_t>(eng->config().n_vocab));
  const SeqInput none{0, p.data(), 2, Logits::None};
  eng->forward({&none, 1}, lg);
  EXPECT_TRUE(lg.empty());
  EXPECT_EQ(eng->model().head_rows() - h0, 1u);
}

// The record of reusable rows: prompt rows (multi-token passes) are reusable, decoded ones are
// not; a prompt that shares a prefix keeps those rows and gives a fresh run's logits bit for bit.
TEST(Engine, PrefixReuseKeepsPromptRowsOnlyAndMatchesAFreshRun) {
  auto eng = engine("qwen3moe-f32", 1, /*n_batch=*/8);
  auto fresh = engine("qwen3moe-f32", 1, /*n_batch=*/8);
  const auto p = tokens(20, 4);
  std::vector<float> lg;
  eng->eval(0, p.data(), 20, 0, false, lg);  // passes of 8, 8... split so none is a lone token
  EXPECT_EQ(eng->reusable_rows(0), 20);
  const int32_t t = 7;
  eng->eval(0, &t, 1, 20, false, lg);        // a decode step: not reusable
  EXPECT_EQ(eng->seq_length(0), 21);
  EXPECT_EQ(eng->reusable_rows(0), 20);
  std::vector<int32_t> q(p.begin(), p.begin() + 15);
  for (int32_t x : tokens(6, 5)) q.push_back(x);
  EXPECT_EQ(eng->reusable_prefix(0, q), 15);
  std::vector<int32_t> same = p;
  same.push_back(t);
  EXPECT_EQ(eng->reusable_prefix(0, same), 19);  // two tokens are always left to evaluate
  const int kept = eng->start_prompt(0, q);
  ASSERT_EQ(kept, 15);
  EXPECT_EQ(eng->seq_length(0), 15);
  std::vector<float> got, ref;
  eng->eval(0, q.data() + kept, static_cast<int>(q.size()) - kept, kept, false, got);
  fresh->eval(0, q.data(), static_cast<int>(q.size()), 0, false, ref);
  EXPECT_EQ(got, ref);
}

// DeepSeek-V4 keeps compressed blocks per sequence: no reuse, and no cutting back mid-sequence.
TEST(Engine, NonRewindableArchitectureNeverReusesRows) {
  auto eng = engine("deepseek4-q8_0", 1);
  const auto p = tokens(12, 6);
  std::vector<float> lg;
  eng->eval(0, p.data(), 12, 0, false, lg);
  EXPECT_EQ(eng->reusable_rows(0), 0);
  EXPECT_EQ(eng->reusable_prefix(0, p), 0);
  try {
    eng->truncate(0, 5);
    FAIL() << "cut back a deepseek4 sequence";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deepseek4"), std::string::npos) << e.what();
  }
  eng->truncate(0, 0);
  EXPECT_EQ(eng->seq_length(0), 0);
}

// A pass that fails resets the sequences in it (their rows are of unknown state) and no other.
TEST(Engine, FailedPassResetsOnlyItsSequences) {
  auto eng = engine("qwen3moe-q8_0", 3);
  const auto a = tokens(6, 7), b = tokens(4, 8);
  std::vector<float> lg;
  eng->eval(0, a.data(), 6, 0, false, lg);
  eng->eval(1, b.data(), 4, 0, false, lg);
  std::vector<int32_t> bad = tokens(3, 9);
  bad[1] = eng->config().n_vocab + 5;  // the model rejects the pass
  const SeqInput in[2] = {{1, b.data(), 2, Logits::Last}, {2, bad.data(), 3, Logits::Last}};
  EXPECT_THROW(eng->forward(in, lg), Error);
  EXPECT_EQ(eng->seq_length(0), 6);  // not in the pass
  EXPECT_EQ(eng->reusable_rows(0), 6);
  EXPECT_EQ(eng->seq_length(1), 0);  // in the pass
  EXPECT_EQ(eng->seq_length(2), 0);
  // The untouched sequence goes on as if nothing happened.
  auto solo = engine("qwen3moe-q8_0", 1);
  std::vector<float> ref;
  solo->eval(0, a.data(), 6, 0, false, ref);
  const int32_t t = 42;
  solo->eval(0, &t, 1, 6, false, ref);
  eng->eval(0, &t, 1, 6, false, lg);
  EXPECT_EQ(lg, ref);
}

// Passes bigger than the planned batch, past the context, or for a slot that does not exist are refused.
TEST(Engine, RefusesPassesOutsideThePlan) {
  auto eng = engine("qwen3moe-q8_0", 1, /*n_batch=*/4);
  const auto p = tokens(5, 10);
  std::vector<float> lg;
  const SeqInput big{0, p.data(), 5, Logits::Last};
  EXPECT_THROW(eng->forward({&big, 1}, lg), Error);
  const SeqInput other{3, p.data(), 2, Logits::Last};
  EXPECT_THROW(eng->forward({&other, 1}, lg), Error);
  EXPECT_THROW(eng->eval(0, p.data(), 2, 3, false, lg), Error);  // position 3 of an empty sequence
  EXPECT_EQ(eng->seq_length(0), 0);
}

}  // namespace
}  // namespace strata::test
