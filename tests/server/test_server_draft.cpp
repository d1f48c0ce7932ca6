// The server's per-slot draft state (runtime/slot_draft.h): a draft model (-md) and MTP.
//   - ModelSlotDrafter drafts every slot that asks in one batched pass of the draft model per
//     draft position, and its drafts are those of the one-sequence ModelDraft for each history;
//   - with the target file as its own draft model, several concurrent greedy streams equal their
//     plain runs in text and per-token logprobs, and nearly every draft is accepted; with the
//     qwen3 dense fixture (the qwen3moe sets' vocabulary) likewise, drafts proposed;
//   - a draft model of another vocabulary is refused, naming both files;
//   - MTP (glm4moe-q8_0): concurrent streams equal plain, drafts proposed, oracle drafts
//     accepted, and each slot's NextN logits after the streams equal a fresh one-sequence run's
//     over the same history (the NextN rows followed accept, reject and a reused prefix);
//   - the memory plan holds the NextN KV rows and a draft model's bytes.
#include <algorithm>
#include <filesystem>
#include <map>
#include <span>
#include <thread>

#include "core/error.h"
#include "runtime/slot_draft.h"
#include "server/scheduler.h"
#include "tokenizer/vocab.h"
#include "../wait_until.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;
constexpr int kDraftCtx = 256;

const char* kDraftQuote =
    "Copy this text exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.";

// A server over `set` with a slot drafter made from its engine.
struct DraftServer {
  std::unique_ptr<tok::Tokenizer> tok;
  std::unique_ptr<Engine> eng;
  std::unique_ptr<server::HttpServer> srv;
  int port = 0;

  DraftServer(server::ServerOptions so, const char* set, int n_seq, std::shared_ptr<SlotDrafter> draft = nullptr) {
    auto model = Model::load(server_fixture(set));
    tok = tok::Tokenizer::from_gguf(model->gguf());
    EngineOptions eo;
    eo.n_ctx = kDraftCtx;
    eo.n_seq = n_seq;
    eo.n_threads = 1;
    eo.nextn_kv = so.draft == "mtp";
    eng = std::make_unique<Engine>(std::move(model), eo);
    so.host = "127.0.0.1";
    so.port = 0;
    so.draft_adaptive = false;  // every draft verified: the counts below do not depend on timing
    srv = std::make_unique<server::HttpServer>(so);
    port = srv->bind();
    srv->start();
    srv->attach(*eng, *tok, server_fixture(set), std::move(draft));
  }
  ~DraftServer() { srv->stop(); }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_read_timeout(120, 0);
    return c;
  }
};

using DraftStream = GreedyStream;

DraftStream draft_stream(const DraftServer& srv, json req) { return greedy_stream(*srv.client(), std::move(req)); }

json draft_chat(const std::string& user, int max_tokens) { return user_chat(user, max_tokens); }

std::vector<json> draft_requests() {
  return {draft_chat(kDraftQuote, 48), draft_chat("Write a poem about the sea", 40), draft_chat("1 2 3 4 5 6 7 8", 33),
          draft_chat("Tell me about the weather in spring", 45)};
}

// Every request plainly (speculative.n_max 0), one at a time, then all at once speculating (two
// rounds: the second reuses the slots' rows and draft state): the same text, tokens and logprobs.
void draft_check_streams(const DraftServer& srv, const std::vector<json>& reqs) {
  std::vector<DraftStream> plain;
  for (json r : reqs) {
    r["speculative.n_max"] = 0;
    plain.push_back(draft_stream(srv, r));
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<DraftStream> spec(reqs.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < reqs.size(); ++i) th.emplace_back([&, i] { spec[i] = draft_stream(srv, reqs[i]); });
    for (auto& t : th) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i) + ", round " + std::to_string(round));
      ASSERT_TRUE(plain[i].whole) << plain[i].text;
      ASSERT_TRUE(spec[i].whole) << spec[i].text;
      EXPECT_FALSE(plain[i].tokens.empty());
      EXPECT_EQ(spec[i].text, plain[i].text);
      EXPECT_EQ(spec[i].tokens, plain[i].tokens);
      EXPECT_EQ(spec[i].logprobs, plain[i].logprobs);
      EXPECT_EQ(spec[i].finish, plain[i].finish);
    }
  }
}

server::SchedulerStats draft_stats_after(const DraftServer& srv, uint64_t done) {
  server::SchedulerStats st;
  EXPECT_TRUE(wait_until([&] { return (st = srv.srv->scheduler()->stats()).requests_done >= done; }));
  return st;
}

std::string draft_path(const char* set) { return server_fixture(set); }

std::unique_ptr<Engine> draft_engine_for(const char* draft_set, const char* target_set, int n_seq) {
  auto target = Model::load(draft_path(target_set));
  const auto vocab = tok::Vocab::from_gguf(target->gguf());
  EngineOptions eo;
  eo.n_ctx = kDraftCtx;
  eo.n_seq = n_seq;
  eo.n_threads = 1;
  return load_draft_engine(draft_path(draft_set), draft_path(target_set), *vocab, eo);
}

}  // namespace

// Three slots' drafts of 4 tokens: catch-up passes and three draft passes (not 3 x 4), and each
// slot's drafts are what the one-sequence ModelDraft proposes for its history; a second round
// after the histories grew (as after acceptance) keeps the slots' rows and agrees again. Catching
// up on whole prompts is deferred work (deferred_s > 0); the rows drafting every pass leaves (the
// last draft and the target's token) are not.
TEST(ServerDraftModel, BatchedDraftsEqualOneSequenceDrafts) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  ModelSlotDrafter drafter(draft_engine_for("qwen3-dense-q8_0", "qwen3moe-q8_0", 3));
  SamplerParams greedy;
  greedy.temp = 0;
  std::unique_ptr<tok::Tokenizer> tok = tok::Tokenizer::from_gguf(drafter.engine().model().gguf());
  std::vector<std::vector<int32_t>> hist = {tok->encode("The quick brown fox", true, true), tok->encode(kDraftQuote, true, true),
                                            tok->encode("1 2 3 4 5", true, true)};
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<Draft> out(3);
    std::vector<SlotDraftJob> jobs;
    for (int i = 0; i < 3; ++i) jobs.push_back(SlotDraftJob{i, hist[static_cast<size_t>(i)], 4, &out[static_cast<size_t>(i)]});
    // Catch-up rows: the whole histories, then the one token after the accepted drafts.
    size_t rows = 0;
    for (const auto& h : hist) rows += round == 0 ? h.size() : 1;
    const size_t n_batch = static_cast<size_t>(drafter.engine().options().n_batch);
    EXPECT_EQ(n_batch, static_cast<size_t>(kDraftBatch));  // the draft's batch, not the target's
    const uint64_t p0 = drafter.draft_passes();
    drafter.propose(jobs);
    EXPECT_EQ(drafter.draft_passes() - p0, (rows + n_batch - 1) / n_batch + 3);  // catch-up passes + 3 more positions for all three slots
    if (round == 0) {
      EXPECT_GT(drafter.deferred_s(), 0.0);
    } else {
      EXPECT_EQ(drafter.deferred_s(), 0.0);
    }
    for (size_t i = 0; i < 3; ++i) {
      ModelDraft one(draft_engine_for("qwen3-dense-q8_0", "qwen3moe-q8_0", 1), greedy);
      Draft want;
      one.propose(hist[i], 4, want);
      EXPECT_GT(one.deferred_s(), 0.0);  // the whole history
      std::vector<int32_t> next = hist[i];  // every draft accepted, then the target's token
      next.insert(next.end(), want.tokens.begin(), want.tokens.end());
      next.push_back(7);
      Draft again;
      one.propose(next, 4, again);
      EXPECT_EQ(one.deferred_s(), 0.0);  // the last draft and the target's token: what drafting every pass leaves
      EXPECT_EQ(out[i].tokens.size(), 4u);
      EXPECT_EQ(out[i].tokens, want.tokens) << "slot " << i;
      EXPECT_TRUE(out[i].q.empty());
      // The next history: two drafts accepted and a token of the target's own.
      hist[i].insert(hist[i].end(), out[i].tokens.begin(), out[i].tokens.begin() + 2);
      hist[i].push_back(static_cast<int32_t>(5 + i));
    }
  }
}

// The target file as its own draft model: greedy drafts are the target's own choices, so nearly
// all are accepted (the draft's rows are computed in another order than the verify rows: a
// near-tie may flip), and the streams are plain decoding's.
TEST(ServerDraftModel, SelfDraftStreamsEqualPlainAndAccept) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  server::ServerOptions so;
  so.draft = "model";
  so.draft_max = 4;
  DraftServer srv(so, "qwen3moe-q8_0", 4, std::make_shared<ModelSlotDrafter>(draft_engine_for("qwen3moe-q8_0", "qwen3moe-q8_0", 4)));
  const auto reqs = draft_requests();
  draft_check_streams(srv, reqs);
  const server::SchedulerStats st = draft_stats_after(srv, 3 * reqs.size());
  std::printf("[self draft] %llu passes with drafts, %llu/%llu drafts accepted\n", (unsigned long long)st.draft_passes,
              (unsigned long long)st.drafts_accepted, (unsigned long long)st.drafts_proposed);
  EXPECT_GT(st.drafts_proposed, 0u);
  EXPECT_GE(static_cast<double>(st.drafts_accepted), 0.9 * static_cast<double>(st.drafts_proposed));
}

// The qwen3 dense fixture drafting for qwen3moe (the same vocabulary): drafts proposed, some
// accepted, streams equal plain.
TEST(ServerDraftModel, DenseDraftStreamsEqualPlain) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  server::ServerOptions so;
  so.draft = "model";
  so.draft_max = 3;
  DraftServer srv(so, "qwen3moe-q8_0", 4, std::make_shared<ModelSlotDrafter>(draft_engine_for("qwen3-dense-q8_0", "qwen3moe-q8_0", 4)));
  const auto reqs = draft_requests();
  draft_check_streams(srv, reqs);
  const server::SchedulerStats st = draft_stats_after(srv, 3 * reqs.size());
  std::printf("[dense draft] %llu passes with drafts, %llu/%llu drafts accepted\n", (unsigned long long)st.draft_passes,
              (unsigned long long)st.drafts_accepted, (unsigned long long)st.drafts_proposed);
  EXPECT_GT(st.drafts_proposed, 0u);
  EXPECT_LE(st.drafts_accepted, st.drafts_proposed);
}

TEST(ServerDraftModel, OtherVocabularyIsRefused) {
  if (!std::filesystem::exists(draft_path("kimi-k2-q8_0"))) STRATA_MISSING_FIXTURE(draft_path("kimi-k2-q8_0"));
  try {
    draft_engine_for("qwen3-dense-q8_0", "kimi-k2-q8_0", 2);
    ADD_FAILURE() << "a draft model of another vocabulary was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("qwen3-dense-q8_0/model.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("kimi-k2-q8_0/model.gguf"), std::string::npos) << m;
    EXPECT_NE(m.find("vocabular"), std::string::npos) << m;
  }
}

namespace {

// MTP's drafts, some replaced by the tokens plain decoding chose (the oracle: each request's
// prompt followed by its plain output), so that drafts are accepted.
class DraftMtpOracle final : public SlotDrafter {
 public:
  DraftMtpOracle(MtpSlotDrafter& mtp, std::vector<std::vector<int32_t>> oracles) : mtp_(mtp), oracles_(std::move(oracles)) {}
  const char* name() const override { return "mtp+oracle"; }
  void propose(std::span<const SlotDraftJob> jobs) override {
    mtp_.propose(jobs);
    for (const SlotDraftJob& j : jobs) {
      last_[j.slot].assign(j.history.begin(), j.history.end());
      if (calls_++ % 2 == 0) continue;
      for (const auto& o : oracles_) {
        if (o.size() <= j.history.size() || !std::equal(j.history.begin(), j.history.end(), o.begin())) continue;
        for (size_t i = 0; i < j.out->tokens.size() && j.history.size() + i < o.size(); ++i) j.out->tokens[i] = o[j.history.size() + i];
      }
    }
  }
  void observe(int slot, std::span<const int32_t> history) override { mtp_.observe(slot, history); }
  int reusable(int slot, std::span<const int32_t> prompt, int keep) const override { return mtp_.reusable(slot, prompt, keep); }
  std::map<int, std::vector<int32_t>> last_;  // each slot's history at its last proposal

 private:
  MtpSlotDrafter& mtp_;
  std::vector<std::vector<int32_t>> oracles_;
  int calls_ = 0;
};

}  // namespace

// MTP through the scheduler (engine-level requests, so the oracle knows the token histories): three
// slots decode concurrently, twice (the second round reuses the prompts' rows); the output is plain
// decoding's, MTP drafts are proposed and oracle drafts accepted, and then every slot's NextN
// logits for its last history equal those of a fresh one-sequence MtpDraft over that history.
TEST(ServerDraftMtp, SlotsFollowTheirSequences) {
  const char* set = "glm4moe-q8_0";
  if (!std::filesystem::exists(draft_path(set))) STRATA_MISSING_FIXTURE(draft_path(set));
  auto model = Model::load(draft_path(set));
  auto tok = tok::Tokenizer::from_gguf(model->gguf());
  EngineOptions eo;
  eo.n_ctx = kDraftCtx;
  eo.n_seq = 3;
  eo.n_threads = 1;
  eo.nextn_kv = true;
  Engine eng(std::move(model), eo);
  const std::vector<std::string> texts = {kDraftQuote, "Write a poem about the sea", "1 2 3 4 5 6 7 8"};
  constexpr int kN = 30;
  auto run = [&](server::Scheduler& sched, int draft_max) {
    std::vector<std::shared_ptr<server::GenRequest>> rs;
    for (const auto& t : texts) {
      server::GenParams p;
      p.prompt = tok->encode(t, true, true);
      p.sampling.temp = 0;
      p.max_tokens = kN;
      p.ignore_eos = true;
      p.n_probs = 0;
      p.draft_max = draft_max;
      rs.push_back(std::make_shared<server::GenRequest>(std::move(p)));
    }
    EXPECT_TRUE(sched.submit(rs));
    std::vector<std::vector<int32_t>> out(rs.size());
    for (size_t i = 0; i < rs.size(); ++i)
      for (bool done = false; !done;)
        for (auto& e : rs[i]->wait(60000)) {
          for (const auto& pr : e.probs) out[i].push_back(pr.chosen.token);
          done = done || e.final;
        }
    return out;
  };
  std::vector<std::vector<int32_t>> plain;
  {
    server::SchedulerOptions so;
    server::Scheduler sched(eng, *tok, so);
    plain = run(sched, 0);
  }
  std::vector<std::vector<int32_t>> oracles;
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(plain[i].size(), static_cast<size_t>(kN));
    oracles.push_back(tok->encode(texts[i], true, true));
    oracles.back().insert(oracles.back().end(), plain[i].begin(), plain[i].end());
  }
  MtpSlotDrafter mtp(eng, 2);
  auto oracle = std::make_shared<DraftMtpOracle>(mtp, oracles);
  server::SchedulerOptions so;
  so.slot_draft = oracle;
  so.draft_max = 2;
  so.draft_adaptive = false;
  server::Scheduler sched(eng, *tok, so);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    EXPECT_EQ(run(sched, -1), plain);
  }
  server::SchedulerStats st;
  EXPECT_TRUE(wait_until([&] { return (st = sched.stats()).requests_done >= 2 * texts.size(); }));
  std::printf("[mtp slots] %llu passes with drafts, %llu/%llu drafts accepted, %llu prompt tokens reused\n", (unsigned long long)st.draft_passes,
              (unsigned long long)st.drafts_accepted, (unsigned long long)st.drafts_proposed, (unsigned long long)st.prompt_tokens_reused);
  EXPECT_GT(st.drafts_proposed, 0u);
  EXPECT_GT(st.drafts_accepted, 0u);
  EXPECT_LT(st.drafts_accepted, st.drafts_proposed);
  EXPECT_GT(st.prompt_tokens_reused, 0u) << "the second round kept none of the prompts' rows";
  sched.stop();
  // Each slot's NextN rows: its logits at the last proposal equal a fresh one-sequence run's.
  for (int i = 0; i < eo.n_seq; ++i) {
    SCOPED_TRACE("slot " + std::to_string(i));
    const MtpDraft& m = mtp.slot(i);
    EXPECT_FALSE(m.lost());
    const float* got = m.logits(0);
    ASSERT_NE(got, nullptr);
    const std::vector<int32_t>& h = oracle->last_[i];
    auto ref_model = Model::load(draft_path(set));
    EngineOptions ro = eo;
    ro.n_seq = 1;
    Engine ref(std::move(ref_model), ro);
    SamplerParams greedy;
    greedy.temp = 0;
    MtpDraft ref_mtp(ref, 0, greedy, 2);
    // The prompt in one pass, then one token at a time (the server's rows: a prompt chunk, then decode rows).
    size_t n_prompt = 0;
    for (const auto& o : oracles)
      if (std::equal(o.begin(), o.begin() + static_cast<ptrdiff_t>(std::min(o.size(), h.size())), h.begin()))
        n_prompt = tok->encode(texts[static_cast<size_t>(&o - oracles.data())], true, true).size();
    ASSERT_GT(n_prompt, 0u);
    std::vector<float> lg;
    ref.eval(0, h.data(), static_cast<int>(n_prompt), 0, false, lg);
    for (size_t p = n_prompt; p + 1 < h.size(); ++p) {
      const SeqInput in{0, &h[p], 1, Logits::Last};
      ref.forward({&in, 1}, lg);
    }
    Draft d;
    ref_mtp.propose(h, 1, d);
    const float* want = ref_mtp.logits(0);
    ASSERT_NE(want, nullptr);
    EXPECT_TRUE(std::equal(got, got + m.logits_size(), want)) << "slot " << i << "'s NextN rows do not follow its sequence";
  }
}

// --draft mtp through HTTP: concurrent streams equal plain; MTP drafts are proposed.
TEST(ServerDraftMtp, HttpStreamsEqualPlain) {
  const char* set = "glm4moe-q8_0";
  if (!std::filesystem::exists(draft_path(set))) STRATA_MISSING_FIXTURE(draft_path(set));
  server::ServerOptions so;
  so.draft = "mtp";
  so.draft_max = 2;
  DraftServer srv(so, set, 3);
  ASSERT_NE(srv.eng->nextn_kv(2), nullptr);
  std::vector<json> reqs = draft_requests();
  reqs.pop_back();
  draft_check_streams(srv, reqs);
  const server::SchedulerStats st = draft_stats_after(srv, 3 * reqs.size());
  std::printf("[mtp http] %llu/%llu drafts accepted\n", (unsigned long long)st.drafts_accepted, (unsigned long long)st.drafts_proposed);
  EXPECT_GT(st.drafts_proposed, 0u);
}

// The NextN KV rows are the engine's, one cache per slot, in the memory plan; a draft model's
// bytes (TierOptions::draft_bytes) are planned too: the expert cache gets what is left.
TEST(ServerDraftPlan, NextnKvAndDraftBytesAreInThePlan) {
  const char* set = "glm4moe-q8_0";
  if (!std::filesystem::exists(draft_path(set))) STRATA_MISSING_FIXTURE(draft_path(set));
  auto make = [&](bool nextn, uint64_t draft_bytes, uint64_t budget) {
    EngineOptions eo;
    eo.n_ctx = kDraftCtx;
    eo.n_seq = 3;
    eo.n_threads = 1;
    eo.nextn_kv = nextn;
    eo.tier.draft_bytes = draft_bytes;
    eo.tier.ram_budget = budget;
    return std::make_unique<Engine>(Model::load(draft_path(set)), eo);
  };
  auto plain = make(false, 0, 0);
  EXPECT_EQ(plain->nextn_kv(0), nullptr);
  EXPECT_EQ(plain->tier().plan().draft, 0u);
  auto mtp = make(true, 0, 0);
  uint64_t nextn = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_NE(mtp->nextn_kv(i), nullptr);
    nextn += mtp->nextn_kv(i)->bytes();
  }
  EXPECT_GT(nextn, 0u);
  EXPECT_EQ(mtp->tier().plan().draft, nextn);
  EXPECT_NE(mtp->tier().plan().describe().find("drafting"), std::string::npos) << mtp->tier().plan().describe();
  // Streaming under a budget: the drafting bytes come out of the expert cache.
  const MemoryPlan& p = plain->tier().plan();
  const uint64_t fixed = p.fixed();
  const uint64_t budget = fixed + nextn + p.experts_total * 3 / 4;
  const uint64_t extra = p.experts_total / 8;
  std::printf("[plan] experts %llu, NextN KV %llu\n", (unsigned long long)p.experts_total, (unsigned long long)nextn);
  auto a = make(true, 0, budget), b = make(true, extra, budget);
  ASSERT_TRUE(a->tier().plan().streaming && b->tier().plan().streaming);
  EXPECT_EQ(b->tier().plan().draft, nextn + extra);
  EXPECT_LT(b->tier().plan().expert_cache, a->tier().plan().expert_cache);
  for (Engine* e : {a.get(), b.get()}) {
    const MemoryPlan& q = e->tier().plan();
    EXPECT_LE(q.total(), budget) << q.describe();
  }
  try {
    make(true, budget, budget);
    ADD_FAILURE() << "a budget the drafting bytes exceed was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drafting"), std::string::npos) << e.what();
  }
}

// The server's MTP drafter copies each pass's hidden rows (PassHiddenCopy): what the copy holds is
// in the plan beside the NextN KV rows when the engine is told (EngineOptions::nextn_hidden_copy).
TEST(ServerDraftPlan, MtpHiddenRowCopyIsInThePlan) {
  const char* set = "glm4moe-q8_0";
  if (!std::filesystem::exists(draft_path(set))) STRATA_MISSING_FIXTURE(draft_path(set));
  auto make = [&](bool copy) {
    EngineOptions eo;
    eo.n_ctx = kDraftCtx;
    eo.n_seq = 3;
    eo.n_threads = 1;
    eo.n_batch = 24;
    eo.nextn_kv = true;
    eo.nextn_hidden_copy = copy;
    return std::make_unique<Engine>(Model::load(draft_path(set)), eo);
  };
  auto without = make(false), with = make(true);
  MtpSlotDrafter drafter(*with);
  const PassHiddenCopy held(*with);  // what the drafter's copy holds
  EXPECT_GE(held.bytes(), 24u * static_cast<uint64_t>(with->config().n_embd) * sizeof(float));
  EXPECT_EQ(with->tier().plan().draft - without->tier().plan().draft, held.bytes());
}

}  // namespace strata::test
