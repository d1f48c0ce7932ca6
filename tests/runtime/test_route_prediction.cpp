// Predicted routing for speculative decoding (runtime/routing_memory.h): the history position a
// draft token is predicted to route like (bigram match, else the token's latest position, else
// none) on a hand-made history, cut back and with gaps; the per-row comparison of predicted and
// routed experts; and on the small trained model streaming its experts, greedy speculative output
// with the prediction on is plain decoding's, token for token, with a precision and recall of the
// predicted experts in (0, 1] on an edit-like prompt.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../fixture_sets.h"
#include "core/error.h"
#include "model/model.h"
#include "plain_decode.h"
#include "runtime/draft.h"
#include "runtime/engine.h"
#include "runtime/routing_memory.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

using namespace strata;
using namespace strata::test;

namespace {

// Three layers (the first dense), 8 experts, top-2, a vocabulary of 16.
ModelConfig tiny_route_config() {
  ModelConfig cfg;
  cfg.n_vocab = 16;
  cfg.n_layer = 3;
  cfg.layers.resize(3);
  for (int l = 1; l < 3; ++l) {
    cfg.layers[l].ffn = FfnKind::Moe;
    cfg.layers[l].n_expert = 8;
    cfg.layers[l].n_expert_used = 2;
  }
  return cfg;
}

// Position p routes to experts {p % 8, (p + 1) % 8} in both MoE layers.
std::vector<int16_t> routes_from(int pos0, int n) {
  std::vector<int16_t> r;
  for (int p = pos0; p < pos0 + n; ++p)
    for (int m = 0; m < 2; ++m) r.insert(r.end(), {static_cast<int16_t>(p % 8), static_cast<int16_t>((p + 1) % 8)});
  return r;
}

}  // namespace

TEST(RoutePrediction, SourceIsTheLatestBigramMatchThenTheLatestToken) {
  const ModelConfig cfg = tiny_route_config();
  SeqRouting mem(cfg, 32);
  ASSERT_EQ(mem.n_moe(), 2);
  EXPECT_EQ(mem.layer_of(0), 1);
  EXPECT_EQ(mem.moe_index(0), -1);
  EXPECT_EQ(mem.width(), 4);
  //                          pos: 0  1  2  3  4  5  6  7  8
  const std::vector<int32_t> toks = {1, 2, 3, 1, 4, 3, 1, 2, 5};
  const auto r = routes_from(0, 9);
  mem.commit(0, toks.data(), 5, r.data());  // in two passes, as a prompt in chunks
  mem.commit(5, toks.data() + 5, 4, r.data() + 5 * 4);
  ASSERT_EQ(mem.length(), 9);
  EXPECT_EQ(mem.source(3, 2), 2);   // "2 3" at 1-2, though token 3 is later at 5 (after 4)
  EXPECT_EQ(mem.source(3, 4), 5);
  EXPECT_EQ(mem.source(3, 9), 5);   // no "9 3": the latest 3
  EXPECT_EQ(mem.source(3, -1), 5);  // nothing before it known
  EXPECT_EQ(mem.source(2, 1), 7);   // the most recent "1 2"
  EXPECT_EQ(mem.source(7, 1), -1);  // never seen
  EXPECT_EQ(mem.source(99, 1), -1); // outside the vocabulary
  EXPECT_EQ(mem.routes(5)[0], 5);
  EXPECT_EQ(mem.routes(5)[3], 6);

  // Rows of rejected drafts are cut back: the positions before stay, the chains with them.
  mem.truncate(7);
  EXPECT_EQ(mem.source(2, 1), 1);
  EXPECT_EQ(mem.source(5, 2), -1);
  // A pass the memory did not see (positions 7..9) leaves a gap of unknown positions.
  const std::vector<int32_t> late = {2, 6};
  const auto r2 = routes_from(10, 2);
  mem.commit(10, late.data(), 2, r2.data());
  EXPECT_EQ(mem.length(), 12);
  EXPECT_EQ(mem.source(2, 1), 1);   // position 10's 2 follows an unknown token
  EXPECT_EQ(mem.source(2, 4), 10);  // no "4 2": the latest 2
  EXPECT_EQ(mem.source(6, 2), 11);

  // A pass's rows: the pending token after the history's last token, each draft after the one before.
  RoutePredictor pred(cfg, 4);
  const std::vector<int32_t> drafts = {1, 2, 7};  // pending 3 (after 6), drafts 1 2 7
  pred.predict(mem, 6, 3, drafts);
  ASSERT_EQ(pred.n_rows(), 4);
  EXPECT_EQ(pred.source(0), 5);   // no "6 3": the latest 3
  EXPECT_EQ(pred.source(1), 6);   // the most recent "3 1" (5-6; also 2-3)
  EXPECT_EQ(pred.source(2), 1);   // "1 2" at 0-1 (7 was cut)
  EXPECT_EQ(pred.source(3), -1);
  EXPECT_THROW(pred.predict(mem, 6, 3, std::vector<int32_t>(4, 1)), Error);
}

TEST(RoutePrediction, MatchCountsPredictedRoutedAndBoth) {
  // Two layers, top-2: layer 0 predicted {1, 2} routed {2, 3}; layer 1 predicted {4, -1} routed {4, 5}.
  const std::vector<int16_t> predicted = {1, 2, 4, -1}, routed = {2, 3, 4, 5};
  RouteMatch m;
  match_routes(predicted, routed, 2, m);
  EXPECT_EQ(m.predicted, 3);
  EXPECT_EQ(m.routed, 4);
  EXPECT_EQ(m.both, 2);
  match_routes({}, routed, 2, m);  // a row without a prediction: routed experts none predicted
  EXPECT_EQ(m.predicted, 3);
  EXPECT_EQ(m.routed, 8);
  EXPECT_EQ(m.both, 2);
}

// The trained model through an expert cache of about half its experts (64 MiB budget, 102 MiB of
// experts), lookup drafts on the edit-like prompt of bench/speculation.sh (its continuation is
// in it), the cost model on: the prediction must never change output, and on this text it is
// mostly right.
TEST(RoutePrediction, TrainedModelStreamingGreedyEqualsPlain) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";
  if (!std::filesystem::exists(path)) STRATA_MISSING_FIXTURE(path);
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 64;
  eo.tier.ram_budget = 64ull << 20;
  Engine eng(Model::load(path), eo);
  ASSERT_NE(eng.tier().cache(), nullptr) << "the budget should make the experts stream";
  const auto tk = tok::Tokenizer::from_gguf(eng.model().gguf());
  const std::vector<int32_t> prompt = tk->encode(
      "And God said unto Moses, I will be not done, and I will be done, and I will be done, and I will be done, and I will be done. "
      "And I will say unto you, I will not be done, and I will be done, and I will be done,",
      true, true);
  constexpr int kTokens = 48;
  const std::vector<int32_t> want = plain_greedy_tokens(eng, prompt, kTokens);

  SamplerParams sp;
  sp.temp = 0;
  LookupDraft draft;
  SpecOptions so;
  so.k_max = 4;
  so.adaptive = true;
  const DecodeRun run = decode_tokens(eng, prompt, kTokens, sp, &draft, so);  // the decoder before the prompt: its routing is remembered
  EXPECT_EQ(run.out, want);

  const SpecStats& st = run.stats;
  ASSERT_TRUE(st.predicting);
  const RoutePredictionStats& p = st.prediction;
  EXPECT_GT(st.accepted, 0);
  EXPECT_GT(p.rows, 0);
  EXPECT_GT(p.rows_predicted, 0) << "lookup drafts quote the history: their tokens were seen";
  EXPECT_LE(p.rows_predicted, p.rows);
  EXPECT_LE(p.experts_both, p.experts_predicted);
  EXPECT_LE(p.experts_both, p.experts_routed);
  // Some predictions were right, some routed experts were not predicted (a prediction is a guess).
  EXPECT_GT(p.experts_both, 0);
  EXPECT_LT(p.experts_both, p.experts_routed);
  EXPECT_DOUBLE_EQ(p.precision(), static_cast<double>(p.experts_both) / static_cast<double>(p.experts_predicted));
  EXPECT_DOUBLE_EQ(p.recall(), static_cast<double>(p.experts_both) / static_cast<double>(p.experts_routed));
  EXPECT_GE(p.calibration, 0.25);
  EXPECT_LE(p.calibration, 4.0);
  std::printf("[strata-moe-tiny, 64 MiB] %lld passes, %lld/%lld drafts accepted; predicted routing: precision %.3f, recall %.3f, %lld/%lld rows, "
              "%lld passes read %llu (predicted %.0f), drafts alone %llu (predicted %.0f), calibration %.2f\n",
              (long long)st.passes, (long long)st.accepted, (long long)st.proposed, p.precision(), p.recall(), (long long)p.rows_predicted,
              (long long)p.rows, (long long)p.passes, (unsigned long long)p.actual_bytes, p.bytes, (unsigned long long)p.actual_extra, p.extra_bytes,
              p.calibration);
}
