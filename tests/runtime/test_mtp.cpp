// MTP drafting from GLM's NextN block: greedy output with MTP drafts is plain decoding's token for
// token (q8_0 and q4_k_m, depth 1 and 2, with drafts rejected and, forced from an oracle,
// accepted); the NextN logits are the same bits whether the trunk ran the prompt in one
// decode-order pass or token by token, and after speculative steps with accepted and rejected
// drafts they equal a fresh run's over the same history (the NextN rows follow accept/reject);
// streamed through a tiny expert cache MTP drafts what it drafts resident; a file without NextN
// gives a clear error. The weights are random: acceptance of MTP's own drafts is near zero.
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "plain_decode.h"
#include "../fixture_sets.h"
#include "../model/golden_util.h"
#include "core/error.h"
#include "model/model.h"
#include "runtime/draft.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"

using namespace strata;
using namespace strata::test;

namespace {

constexpr int kMtpGen = 40;

std::string mtp_model(const std::string& set) { return fixtures_dir() + "/" + set + "/model.gguf"; }

std::unique_ptr<Engine> mtp_engine(const std::string& set, int64_t cache_experts = 0) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 64;
  eo.type_k = eo.type_v = GgmlType::F32;
  eo.tier.cache_experts = cache_experts;
  return std::make_unique<Engine>(Model::load(mtp_model(set)), eo);
}

std::vector<int32_t> mtp_prompt(const std::string& set) {
  return read_json(fixtures_dir() + "/" + set + "/golden/p0.json")["prompt_tokens"].get<std::vector<int32_t>>();
}

SamplerParams mtp_greedy_params() {
  SamplerParams sp;
  sp.temp = 0;
  return sp;
}

// Passes MTP's proposals on and records them (tokens and depth-1 logits). With an oracle (the
// plain greedy continuation of the prompt), every third proposal is replaced by the oracle's
// tokens, which the target accepts: the NextN rows then follow passes that kept several rows.
class MtpRecorder final : public DraftSource {
 public:
  MtpRecorder(MtpDraft& mtp, const std::vector<int32_t>* oracle) : mtp_(mtp), oracle_(oracle) {}
  const char* name() const override { return "mtp"; }
  void propose(std::span<const int32_t> history, int k_max, Draft& out) override {
    mtp_.propose(history, k_max, out);
    tokens.insert(tokens.end(), out.tokens.begin(), out.tokens.end());
    if (const float* l = mtp_.logits(0)) logits.insert(logits.end(), l, l + mtp_.logits_size());
    if (oracle_ && calls_++ % 3 == 1) {
      const size_t at = history.size();
      for (size_t i = 0; i < out.tokens.size(); ++i) out.tokens[i] = at + i < oracle_->size() ? (*oracle_)[at + i] : out.tokens[i];
    }
  }
  void observe(std::span<const int32_t> history) override { mtp_.observe(history); }
  std::vector<int32_t> tokens;
  std::vector<float> logits;

 private:
  MtpDraft& mtp_;
  const std::vector<int32_t>* oracle_;
  int calls_ = 0;
};

struct MtpRun {
  std::vector<int32_t> out, history;
  SpecStats stats;
};

// Greedy speculative decoding with `draft` (MTP created on `eng` before the prompt).
MtpRun mtp_spec(Engine& eng, const std::vector<int32_t>& prompt, DraftSource& draft, int k) {
  SpecOptions so;
  so.k_max = k;
  so.adaptive = false;
  MtpRun r;
  int passes = 0;
  DecodeRun d = decode_tokens(eng, prompt, kMtpGen, mtp_greedy_params(), &draft, so, [&](const SpeculativeDecoder&, int) { ++passes; });
  EXPECT_EQ(eng.seq_length(0), static_cast<int>(prompt.size() + d.out.size()) - 1);  // all but the last token, whose pass never came
  EXPECT_EQ(passes, d.stats.passes);
  r.out = d.out;
  r.history = prompt;
  r.history.insert(r.history.end(), d.out.begin(), d.out.end());
  r.stats = d.stats;
  return r;
}

std::vector<float> mtp_copy_logits(const MtpDraft& m, int d) {
  const float* l = m.logits(d);
  return l ? std::vector<float>(l, l + m.logits_size()) : std::vector<float>{};
}

}  // namespace

TEST(Mtp, GreedyEqualsPlainOnGlmSets) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  for (const char* set : {"glm4moe-q8_0", "glm4moe-q4_k_m"}) {
    const auto prompt = mtp_prompt(set);
    const auto want = plain_greedy_tokens(*mtp_engine(set), prompt, kMtpGen);
    std::vector<int32_t> oracle = prompt;
    oracle.insert(oracle.end(), want.begin(), want.end());
    for (int depth : {1, 2}) {
      for (bool forced : {false, true}) {
        auto eng = mtp_engine(set);
        MtpDraft mtp(*eng, 0, mtp_greedy_params(), depth);
        MtpRecorder rec(mtp, forced ? &oracle : nullptr);
        const MtpRun r = mtp_spec(*eng, prompt, rec, depth);
        const std::string what = std::string(set) + " depth " + std::to_string(depth) + (forced ? " (oracle drafts)" : "");
        EXPECT_EQ(r.out, want) << what;
        EXPECT_FALSE(mtp.lost()) << what;
        const SpecStats& st = r.stats;
        ASSERT_EQ(st.proposed_at.size(), static_cast<size_t>(depth));
        // Every pass verifies a depth-1 draft (--draft-fixed), but where one token was left to generate.
        EXPECT_EQ(st.proposed_at[0], st.passes - st.k_hist[0]) << what;
        EXPECT_LE(st.k_hist[0], 1) << what;
        EXPECT_EQ(st.proposed, static_cast<int64_t>(rec.tokens.size())) << what;
        EXPECT_LE(st.accepted, st.proposed);
        EXPECT_EQ(st.accepted_at[0] + (depth > 1 ? st.accepted_at[1] : 0), st.accepted);
        if (forced) {
          EXPECT_GT(st.accepted, 0) << what << ": oracle drafts were not accepted";
        }
        std::printf("[%-15s] MTP depth %d%s: %lld passes, %lld/%lld drafts accepted, %.2f tokens per pass\n", set, depth, forced ? " + oracle" : "",
                    (long long)st.passes, (long long)st.accepted, (long long)st.proposed, double(st.accepted + st.passes) / double(st.passes));
      }
    }
  }
}

// The trunk's decode-order rows are bit for bit lone tokens' rows; the NextN rows are computed in
// the decode order too, so the drafts' logits do not depend on how the trunk's passes were cut.
TEST(Mtp, NextnLogitsSameForOnePassAndTokenByToken) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const std::string set = "glm4moe-q8_0";
  const auto prompt = mtp_prompt(set);
  std::vector<int32_t> hist = prompt;
  hist.push_back(prompt[2]);  // the pending token
  std::vector<std::vector<float>> runs[2];
  std::vector<int32_t> drafts[2];
  for (int way = 0; way < 2; ++way) {
    for (int rep = 0; rep < 2; ++rep) {
      auto eng = mtp_engine(set);
      MtpDraft mtp(*eng, 0, mtp_greedy_params(), 2);
      std::vector<float> logits;
      if (way == 0) {
        const SeqInput in{0, prompt.data(), static_cast<int>(prompt.size()), Logits::Last, /*decode_order=*/true};
        eng->forward({&in, 1}, logits);
      } else {
        for (const int32_t t : prompt) {
          const SeqInput in{0, &t, 1, Logits::Last};
          eng->forward({&in, 1}, logits);
        }
      }
      Draft d;
      mtp.propose(hist, 2, d);
      ASSERT_EQ(d.tokens.size(), 2u);
      EXPECT_EQ(mtp.nextn_rows(), static_cast<int>(prompt.size()));
      const auto l0 = mtp_copy_logits(mtp, 0), l1 = mtp_copy_logits(mtp, 1);
      ASSERT_EQ(l0.size(), static_cast<size_t>(eng->config().n_vocab));
      EXPECT_NE(l0, l1);
      if (rep == 0) {
        runs[way] = {l0, l1};
        drafts[way] = d.tokens;
      } else {
        EXPECT_EQ(runs[way][0], l0) << "way " << way << ": not deterministic";
        EXPECT_EQ(runs[way][1], l1) << "way " << way << ": not deterministic";
      }
    }
  }
  EXPECT_EQ(runs[0][0], runs[1][0]) << "depth 1: one decode-order pass vs token by token";
  EXPECT_EQ(runs[0][1], runs[1][1]) << "depth 2: one decode-order pass vs token by token";
  EXPECT_EQ(drafts[0], drafts[1]);
}

// After speculative steps that accepted some drafts and rejected others (drafts of depth 2 wrote
// K/V rows past the kept ones), the NextN logits for the history equal those of a fresh engine
// that decoded the same history one token at a time: rejected rows were cut back.
TEST(Mtp, NextnRowsFollowAcceptAndReject) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const std::string set = "glm4moe-q8_0";
  const auto prompt = mtp_prompt(set);
  const auto want = plain_greedy_tokens(*mtp_engine(set), prompt, kMtpGen);
  std::vector<int32_t> oracle = prompt;
  oracle.insert(oracle.end(), want.begin(), want.end());
  auto eng = mtp_engine(set);
  MtpDraft mtp(*eng, 0, mtp_greedy_params(), 2);
  MtpRecorder rec(mtp, &oracle);
  const MtpRun r = mtp_spec(*eng, prompt, rec, 2);
  ASSERT_GT(r.stats.accepted, 0);
  ASSERT_LT(r.stats.accepted, r.stats.proposed);
  Draft d;
  mtp.propose(r.history, 2, d);
  const auto got0 = mtp_copy_logits(mtp, 0), got1 = mtp_copy_logits(mtp, 1);

  auto ref = mtp_engine(set);
  MtpDraft ref_mtp(*ref, 0, mtp_greedy_params(), 2);
  std::vector<float> logits;
  ref->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);  // as mtp_spec did
  for (size_t i = prompt.size(); i + 1 < r.history.size(); ++i) {
    const SeqInput in{0, &r.history[i], 1, Logits::Last};
    ref->forward({&in, 1}, logits);
  }
  Draft rd;
  ref_mtp.propose(r.history, 2, rd);
  EXPECT_EQ(mtp.nextn_rows(), static_cast<int>(r.history.size()) - 1);
  EXPECT_EQ(ref_mtp.nextn_rows(), mtp.nextn_rows());
  EXPECT_EQ(got0, mtp_copy_logits(ref_mtp, 0));
  EXPECT_EQ(got1, mtp_copy_logits(ref_mtp, 1));
  EXPECT_EQ(d.tokens, rd.tokens);
}

// The NextN block's routed experts go through the expert tier (layer n_layer): streamed through a
// cache of a few experts, MTP proposes the same drafts from the same logits as resident.
TEST(Mtp, StreamedTinyCacheDraftsAsResident) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const std::string set = "glm4moe-q4_k_m";
  const auto prompt = mtp_prompt(set);
  std::vector<int32_t> tokens[2];
  std::vector<float> logits[2];
  std::vector<int32_t> outs[2];
  for (int streamed = 0; streamed < 2; ++streamed) {
    auto eng = mtp_engine(set, streamed ? 4 : 0);
    ASSERT_EQ(eng->tier().cache() != nullptr, streamed == 1);
    MtpDraft mtp(*eng, 0, mtp_greedy_params(), 2);
    MtpRecorder rec(mtp, nullptr);
    outs[streamed] = mtp_spec(*eng, prompt, rec, 2).out;
    tokens[streamed] = rec.tokens;
    logits[streamed] = rec.logits;
    if (streamed) {
      const ExpertStats& st = eng->tier().cache()->stats();
      const int nextn_layer = eng->config().n_layer;
      ASSERT_EQ(st.n_layer(), nextn_layer + 1) << "the NextN block's experts are not in the tier";
      uint64_t acc = 0;
      for (int e = 0; e < st.n_expert(); ++e) acc += st.cell({nextn_layer, e}).accesses;
      EXPECT_GT(acc, 0u) << "no NextN expert went through the cache";
    }
  }
  ASSERT_FALSE(tokens[0].empty());
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(logits[0], logits[1]);
  EXPECT_EQ(outs[0], outs[1]);
}

// Sampled drafts (with their q) keep the trunk's and the NextN block's rows in step.
TEST(Mtp, SampledDraftsKeepRowsInStep) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const std::string set = "glm4moe-q8_0";
  auto eng = mtp_engine(set);
  SamplerParams sp;
  sp.temp = 0.8f;
  MtpDraft mtp(*eng, 0, sp, 2);
  const auto prompt = mtp_prompt(set);
  std::vector<float> logits;
  eng->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
  GenerateParams gp;
  gp.prompt = prompt;
  gp.sampling = sp;
  gp.ignore_eos = true;
  Generator gen(nullptr, eng->config().n_vocab);
  SpecOptions so;
  so.k_max = 2;
  SpeculativeDecoder sd(*eng, 0, gen, &mtp, so);
  gen.start(gp, eng->options().n_ctx);
  ASSERT_TRUE(gen.take(logits.data()));
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(sd.step());
    ASSERT_EQ(eng->seq_length(0) + 1, static_cast<int>(gen.history().size()));
  }
  EXPECT_EQ(sd.stats().proposed, 24);  // depth 2 every pass
  EXPECT_FALSE(mtp.lost());
  EXPECT_EQ(sd.stats().emitted + 1, gen.n_generated());  // the passes' tokens and the prompt row's
}

TEST(Mtp, FileWithoutNextnIsAClearError) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  auto eng = mtp_engine("qwen3moe-q8_0");
  try {
    MtpDraft mtp(*eng, 0, mtp_greedy_params(), 2);
    ADD_FAILURE() << "MTP drafting accepted a file without a NextN block";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no NextN"), std::string::npos) << m;
    EXPECT_NE(m.find("qwen3moe-q8_0/model.gguf"), std::string::npos) << m;
  }
  EXPECT_EQ(eng->pass_listeners(), 0u);
}
