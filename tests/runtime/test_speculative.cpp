// Speculative decoding never changes greedy output: on every rewindable golden set, a prompt that
// repeats itself (so lookup drafts get accepted) is decoded 48 tokens plainly and speculatively,
// token for token the same; drafts from a dense model sharing the MoE set's vocabulary likewise.
// Rows of a decode-order pass are bit for bit lone-token decoding's. Vocabulary checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "plain_decode.h"
#include "../fixture_sets.h"
#include "../model/golden_util.h"
#include "core/clock.h"
#include "core/error.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "model/expert_layout.h"
#include "model/model.h"
#include "runtime/draft.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "tokenizer/vocab.h"

using namespace strata;
using namespace strata::test;

namespace {

constexpr int kGen = 48;

std::string spec_model_path(const std::string& set) { return fixtures_dir() + "/" + set + "/model.gguf"; }

std::unique_ptr<Engine> spec_engine(const std::string& set) {
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.n_threads = 2;
  eo.n_batch = 64;
  eo.type_k = eo.type_v = GgmlType::F32;
  return std::make_unique<Engine>(Model::load(spec_model_path(set)), eo);
}

// The golden p0 prompt, then its first 24 tokens again: lookup finds the continuation.
std::vector<int32_t> repeating_prompt(const std::string& set) {
  auto j = read_json(fixtures_dir() + "/" + set + "/golden/p0.json");
  auto p = j["prompt_tokens"].get<std::vector<int32_t>>();
  const size_t n = std::min<size_t>(p.size(), 24);
  p.insert(p.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
  return p;
}

std::vector<int32_t> spec_greedy(Engine& eng, const std::vector<int32_t>& prompt, DraftSource& draft, int k, SpecStats* stats) {
  SamplerParams sp;
  sp.temp = 0;
  SpecOptions so;
  so.k_max = k;
  DecodeRun r = decode_tokens(eng, prompt, kGen, sp, &draft, so);
  if (stats) *stats = r.stats;
  return r.out;
}

// Proposes k copies of a token greedy decoding never emits here: every draft is rejected.
class WrongDraft final : public DraftSource {
 public:
  explicit WrongDraft(int32_t t) : t_(t) {}
  const char* name() const override { return "wrong"; }
  void propose(std::span<const int32_t>, int k_max, Draft& out) override {
    out.clear();
    out.tokens.assign(static_cast<size_t>(k_max), t_);
  }

 private:
  int32_t t_;
};

// A costly source (as a draft model is) whose drafts never land and whose catch-up costs 2 ms per
// token (on the injected clock), far more than 1% of a plain pass: once the cost model gives up on
// it, the decoder lets it go. It "holds" `bytes` of the memory plan.
class DearWrongDraft final : public DraftSource {
 public:
  DearWrongDraft(int32_t t, uint64_t bytes, TickClock& clock) : t_(t), bytes_(bytes), clock_(clock) {}
  const char* name() const override { return "dear"; }
  bool costly() const override { return true; }
  void propose(std::span<const int32_t>, int k_max, Draft& out) override {
    EXPECT_EQ(released_, 0) << "no drafts after release()";
    clock_.add(2e-3);
    out.clear();
    out.tokens.assign(static_cast<size_t>(k_max), t_);
  }
  double deferred_s() const override { return 2e-3; }
  int deferred_rows() const override { return 1; }
  uint64_t release() override { return ++released_ == 1 ? bytes_ : 0; }
  int released_ = 0;

 private:
  int32_t t_;
  uint64_t bytes_;
  TickClock& clock_;
};

// The repeating prompt of `set`, plain greedy decoding's kGen tokens after it on a resident engine,
// and a token those never hold (drafts of it are always rejected).
struct RejectedDrafts {
  std::unique_ptr<Engine> plain;
  std::vector<int32_t> prompt, ref;
  int32_t never = 0;
};
RejectedDrafts rejected_drafts(const std::string& set) {
  RejectedDrafts r;
  r.plain = spec_engine(set);
  r.prompt = repeating_prompt(set);
  r.ref = plain_greedy_tokens(*r.plain, r.prompt, kGen);
  while (std::find(r.ref.begin(), r.ref.end(), r.never) != r.ref.end()) ++r.never;
  return r;
}

// Greedy decoding of kGen tokens after `prompt` through a SpeculativeDecoder with the cost model on
// (k_max 4), timed by `clock`; after_pass(decoder, pass index, plain passes before it) follows each pass.
std::vector<int32_t> adaptive_greedy(Engine& eng, const std::vector<int32_t>& prompt, DraftSource& draft, SpecStats& st, TickClock& clock,
                                     const std::function<void(const SpeculativeDecoder&, int, int64_t)>& after_pass = {}) {
  SamplerParams sp;
  sp.temp = 0;
  SpecOptions so;
  so.k_max = 4;
  so.adaptive = true;
  so.clock = clock.fn();
  int64_t plain_before = 0;
  DecodeRun r = decode_tokens(eng, prompt, kGen, sp, &draft, so, [&](const SpeculativeDecoder& sd, int pass) {
    if (after_pass) after_pass(sd, pass, plain_before);
    plain_before = sd.stats().k_hist[0];
  });
  st = r.stats;
  return r.out;
}

}  // namespace

// A draft source the cost model gave up on (no probe can pay for its catch-up, and 4 passes plain:
// the expert cache streams, so its memory waits) frees its memory, and the expert cache gets it: more slots, the plan's draft bytes gone,
// greedy output still plain decoding's.
TEST(Speculative, ADraftGivenUpOnGivesItsMemoryToTheExpertCache) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const std::string set = "qwen3moe-q8_0";
  const RejectedDrafts r = rejected_drafts(set);
  const MemoryPlan& rp = r.plain->tier().plan();
  constexpr uint64_t kDraftBytes = 4ull << 20;
  EngineOptions eo = r.plain->options();
  eo.tier.draft_bytes = kDraftBytes;
  uint64_t slot = 0;  // the largest expert slot
  {
    auto m = Model::load(spec_model_path(set));
    const ExpertStore store(expert_layout(m->gguf(), m->config(), m->weights()));
    for (int l = 0; l < store.n_layers(); ++l)
      if (store.is_moe(l)) slot = std::max(slot, align_up(store.layer(l).slot_bytes, io_align()));
  }
  eo.tier.ram_budget = rp.dense + rp.kv + rp.scratch + kDraftBytes + (kDefaultTransientSlots + 4) * slot;  // 4 slots
  Engine eng(Model::load(spec_model_path(set)), eo);
  ASSERT_NE(eng.tier().cache(), nullptr);
  const int slots = eng.tier().cache()->n_slots();
  const uint64_t cache_bytes = eng.tier().plan().expert_cache;
  EXPECT_EQ(eng.tier().plan().draft, kDraftBytes);
  TickClock clock;
  DearWrongDraft draft(r.never, kDraftBytes, clock);
  SpecStats st;
  EXPECT_EQ(adaptive_greedy(eng, r.prompt, draft, st, clock), r.ref);
  EXPECT_EQ(draft.released_, 1);
  // Pass index: after the warm-up (4 passes) and at least 4 plain ones. How many more depends on the
  // measured pass times the cost model weighs against the draft's catch-up (real clock: under load
  // 8 was seen instead of 7), so only the bound is asserted.
  EXPECT_GE(st.released_at, 4 + 4 - 1);
  EXPECT_LT(st.released_at, st.passes);
  EXPECT_GT(st.released_bytes, kDraftBytes / 2);
  EXPECT_LE(st.released_bytes, kDraftBytes);
  EXPECT_EQ(eng.tier().plan().draft, 0u);
  EXPECT_EQ(eng.tier().plan().expert_cache, cache_bytes + st.released_bytes);
  EXPECT_GT(eng.tier().cache()->n_slots(), slots);
}

// With the cost model on and drafts that never land, greedy output is still plain decoding's and
// after the warm-up the passes are plain ones: only a handful of passes verify drafts (two
// in the warm-up, probes after 8 and 16 plain passes, a few while the acceptance estimate falls). Streaming through a 6-expert cache with
// rejected-only experts demoted, so that path is checked against plain output too.
TEST(Speculative, CostModelTurnsNeverAcceptedDraftsOff) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const RejectedDrafts r = rejected_drafts("qwen3moe-q8_0");
  EngineOptions eo = r.plain->options();
  eo.tier.cache_experts = 6;
  Engine eng(Model::load(spec_model_path("qwen3moe-q8_0")), eo);
  ASSERT_NE(eng.tier().cache(), nullptr);
  WrongDraft draft(r.never);
  SpecStats st;
  int late = 0;  // passes with drafts in the second half
  TickClock clock;
  const auto out = adaptive_greedy(eng, r.prompt, draft, st, clock, [&](const SpeculativeDecoder& sd, int pass, int64_t plain_before) {
    late += pass >= kGen / 2 && sd.stats().k_hist[0] == plain_before;
  });
  EXPECT_EQ(out, r.ref);
  EXPECT_EQ(st.accepted, 0);
  EXPECT_EQ(st.passes, kGen - 1);  // one token per pass
  const int64_t with_drafts = st.passes - st.k_hist[0];
  EXPECT_GE(with_drafts, 2);  // the warm-up measured two passes with drafts
  // Warm-up (2), probes (after 8 and 16 plain passes), and a few while the acceptance estimate
  // falls, fewer the dearer a draft row is: not timed here, so the bound is loose.
  EXPECT_LE(with_drafts, 12) << "k histogram: " << st.k_hist[0] << " " << st.k_hist[1] << " " << st.k_hist[2] << " " << st.k_hist[3] << " "
                             << st.k_hist[4];
  EXPECT_LE(late, 2);  // at most a probe
  // The drafts' rows routed to experts no kept row needed. How many draft rows are verified
  // follows the measured pass times (real clock): on a loaded machine so few were that none
  // qualified (seen once in a ctest -j2 run), so this holds where enough rows were verified.
  if (st.proposed >= 8) { EXPECT_GT(st.demoted, 0) << st.proposed << " draft rows verified"; }
}

// Every row of a decode-order pass gives the logits lone-token decoding gives, bit for bit.
TEST(Speculative, DecodeOrderRowsEqualLoneTokens) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  for (const char* set : {"qwen3moe-f32", "mixtral-q8_0", "llama-dense-f32"}) {
    auto eng = spec_engine(set);
    const auto prompt = repeating_prompt(set);
    const int np = static_cast<int>(prompt.size());
    const std::vector<int32_t> next = {prompt[3], prompt[7], prompt[1], prompt[9]};
    const size_t nv = static_cast<size_t>(eng->config().n_vocab);
    std::vector<float> logits, lone;
    eng->eval(0, prompt.data(), np, 0, false, logits);
    for (size_t i = 0; i < next.size(); ++i) {
      std::vector<float> row;
      eng->eval(0, &next[i], 1, np + static_cast<int>(i), false, row);
      lone.insert(lone.end(), row.begin(), row.end());
    }
    eng->truncate(0, np);
    const SeqInput in{0, next.data(), static_cast<int>(next.size()), Logits::All, /*decode_order=*/true};
    eng->forward({&in, 1}, logits);
    ASSERT_EQ(logits.size(), next.size() * nv);
    EXPECT_EQ(logits, lone) << set << ": a decode-order pass differs from lone tokens";
    EXPECT_EQ(eng->reusable_rows(0), np) << set << ": decode-order rows are not reusable by a later prompt";
  }
}

// Greedy speculative output (lookup drafts) == plain greedy output on every rewindable set.
TEST(Speculative, LookupGreedyEqualsPlainOnEveryGoldenSet) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  int sets = 0, rewindable = 0;
  int64_t accepted = 0, multi = 0;
  for (const std::string& set : model_sets()) {
    if (unsupported_set(set)) continue;
    ++sets;
    auto eng = spec_engine(set);
    const auto prompt = repeating_prompt(set);
    if (!eng->model().rewindable()) {
      LookupDraft d;
      Generator gen(nullptr, eng->config().n_vocab);
      EXPECT_THROW(SpeculativeDecoder(*eng, 0, gen, &d, SpecOptions{}), Error) << set;
      continue;
    }
    ++rewindable;
    const auto want = plain_greedy_tokens(*eng, prompt, kGen);
    LookupDraft d;
    SpecStats st;
    EXPECT_EQ(spec_greedy(*eng, prompt, d, 4, &st), want) << set;
    accepted += st.accepted;
    multi += st.proposed > 0;
    std::printf("[%-22s] lookup: %lld passes, %lld/%lld drafts accepted, %.2f tokens per pass\n", set.c_str(), (long long)st.passes,
                (long long)st.accepted, (long long)st.proposed, double(st.accepted + st.passes) / std::max<int64_t>(1, st.passes));
  }
  EXPECT_GT(sets, 0);
  EXPECT_GT(rewindable, 0);
  EXPECT_GT(accepted, 0) << "no lookup draft was ever accepted: the multi-row verification went untested";
  EXPECT_EQ(multi, rewindable) << "every set should have verified some drafts";
}

// Drafts from a dense model that shares the target's vocabulary (the fixtures' READMEs).
TEST(Speculative, DraftModelGreedyEqualsPlain) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  const std::pair<const char*, const char*> pairs[] = {
      {"qwen3moe-q8_0", "qwen3-dense-q8_0"}, {"qwen3moe-q4_k_m", "qwen3-dense-q4_k_m"}, {"mixtral-q8_0", "llama-dense-q8_0"}, {"mixtral-f32", "llama-dense-f32"}};
  for (const auto& [target, dset] : pairs) {
    auto eng = spec_engine(target);
    const auto target_vocab = tok::Vocab::from_gguf(eng->model().gguf());
    SamplerParams sp;
    sp.temp = 0;
    auto draft = load_model_draft(spec_model_path(dset), spec_model_path(target), *target_vocab, eng->options(), sp);
    const auto prompt = repeating_prompt(target);
    const auto want = plain_greedy_tokens(*eng, prompt, kGen);
    SpecStats st;
    EXPECT_EQ(spec_greedy(*eng, prompt, *draft, 3, &st), want) << target << " with draft " << dset;
    EXPECT_GT(st.proposed, 0);
    std::printf("[%-16s <- %-18s] %lld/%lld drafts accepted, %.2f tokens per pass\n", target, dset, (long long)st.accepted, (long long)st.proposed,
                double(st.accepted + st.passes) / std::max<int64_t>(1, st.passes));
  }
}

// A draft model lets go of its engine once: release() gives the bytes its target's plan holds for
// it (what -md planned), then nothing.
TEST(Speculative, DraftModelReleasesWhatThePlanHoldsForIt) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  auto eng = spec_engine("qwen3moe-q8_0");
  const auto target_vocab = tok::Vocab::from_gguf(eng->model().gguf());
  SamplerParams sp;
  sp.temp = 0;
  auto draft = load_model_draft(spec_model_path("qwen3-dense-q8_0"), spec_model_path("qwen3moe-q8_0"), *target_vocab, eng->options(), sp);
  const uint64_t planned = draft_plan_bytes(draft->engine());
  EXPECT_GT(planned, std::filesystem::file_size(spec_model_path("qwen3-dense-q8_0")) / 2);
  EXPECT_EQ(draft->release(), planned);
  EXPECT_EQ(draft->release(), 0u);
}

// Sampling with a draft model runs and keeps the engine's rows in step with the history.
TEST(Speculative, SampledDraftsKeepRowsInStep) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  auto eng = spec_engine("qwen3moe-q8_0");
  const auto target_vocab = tok::Vocab::from_gguf(eng->model().gguf());
  SamplerParams sp;
  sp.temp = 0.8f;
  auto draft = load_model_draft(spec_model_path("qwen3-dense-q8_0"), spec_model_path("qwen3moe-q8_0"), *target_vocab, eng->options(), sp);
  const auto prompt = repeating_prompt("qwen3moe-q8_0");
  std::vector<float> logits;
  eng->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
  GenerateParams gp;
  gp.prompt = prompt;
  gp.sampling = sp;
  gp.ignore_eos = true;
  Generator gen(nullptr, eng->config().n_vocab);
  SpecOptions so;
  so.k_max = 3;
  SpeculativeDecoder sd(*eng, 0, gen, draft.get(), so);
  gen.start(gp, eng->options().n_ctx);
  ASSERT_TRUE(gen.take(logits.data()));
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(sd.step());
    ASSERT_EQ(eng->seq_length(0) + 1, static_cast<int>(gen.history().size()));
  }
  EXPECT_EQ(sd.stats().proposed, 36);  // a draft model always proposes k tokens
  EXPECT_EQ(sd.stats().emitted + 1, gen.n_generated());  // the passes' tokens and the prompt row's
}

TEST(Speculative, VocabularyMismatchNamesBothFilesAndTheToken) {
  tok::Vocab a, b;
  for (const char* t : {"a", "b", "c"}) a.tokens.push_back({t});
  b = a;
  EXPECT_NO_THROW(check_same_vocab(a, "target.gguf", b, "draft.gguf"));
  b.tokens[2].text = "z";
  try {
    check_same_vocab(a, "target.gguf", b, "draft.gguf");
    ADD_FAILURE() << "different vocabularies were accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("draft.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("target.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("token 2"), std::string::npos) << m;
  }
  b.tokens.pop_back();
  EXPECT_THROW(check_same_vocab(a, "target.gguf", b, "draft.gguf"), Error);
}

// The 768-token fixture vocabularies share their token texts; kimi-k2's has 2265 tokens.
TEST(Speculative, DraftModelOfAnotherVocabularyIsRefused) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir());
  auto eng = spec_engine("kimi-k2-q8_0");
  const auto vocab = tok::Vocab::from_gguf(eng->model().gguf());
  try {
    load_model_draft(spec_model_path("qwen3-dense-q8_0"), spec_model_path("kimi-k2-q8_0"), *vocab, eng->options(), SamplerParams{});
    ADD_FAILURE() << "a draft of another vocabulary was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("qwen3-dense-q8_0"), std::string::npos) << m;
    EXPECT_NE(m.find("kimi-k2-q8_0"), std::string::npos) << m;
  }
}

TEST(Speculative, LookupProposesWhatFollowedTheLongestMatch) {
  LookupDraft d(3, 1);
  Draft out;
  const std::vector<int32_t> h = {1, 2, 3, 4, 5, 9, 2, 3, 4, 6, 7, 2, 3, 4};
  d.propose(h, 3, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{6, 7, 2}));  // most recent "2 3 4" is followed by 6 7 2
  d.propose(std::vector<int32_t>{5, 6, 8}, 4, out);
  EXPECT_TRUE(out.tokens.empty());
  d.propose(std::vector<int32_t>{5, 6, 7, 5}, 4, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{6, 7, 5}));
  EXPECT_TRUE(out.q.empty());
}
