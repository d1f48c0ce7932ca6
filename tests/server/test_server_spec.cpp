// Per-slot speculation in the server (--draft lookup): greedy streams with speculation are token
// for token the streams without it, with several slots in the same passes (some speculating, one
// with speculation off, one grammar-constrained, one cut by a stop string, one by max_tokens, one
// whose reasoning budget forces tokens); a
// prompt the output quotes gets drafts accepted (from /metrics and /slots); bad per-request
// settings are a 400 naming the field; an architecture that cannot cut rows back does not speculate.
#include <algorithm>
#include <filesystem>
#include <span>
#include <thread>

#include "server/scheduler.h"
#include "../runtime/plain_decode.h"
#include "../wait_until.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;
constexpr int kSpecCtx = 256;

// A metric's value from /metrics text (-1 when absent).
double spec_metric(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

using SpecStream = GreedyStream;

SpecStream spec_stream(const TestServer& srv, json req) { return greedy_stream(*srv.client(), std::move(req)); }

json spec_chat(const std::string& user, int max_tokens) { return user_chat(user, max_tokens); }

}  // namespace

// Outside the anonymous namespace: the tests derive from it (-Wsubobject-linkage in the unity build).
class ServerSpec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_server_fixture()) return;
    server::ServerOptions so;
    so.draft = "lookup";
    so.draft_max = 4;
    // Every draft found is verified (the figures below do not depend on timing); the cost model's
    // choices are ServerSpecCost's.
    so.draft_adaptive = false;
    // Opens a reasoning block when asked (the reasoning budget then forces its close between drafts).
    so.chat_template =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "<|im_start|>assistant\n{% if think is defined and think %}<think>\n{% endif %}";
    srv_ = new TestServer(so, /*n_seq=*/4, kSpecCtx);
  }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  void SetUp() override { SKIP_WITHOUT_SERVER_FIXTURE(); }

  static std::string metrics() {
    auto r = srv_->client()->Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    return r ? "\n" + r->body : "";
  }
  // /metrics once `n` requests have completed: the scheduler publishes its figures after the step
  // that ended a request, which may come after the client has the reply.
  static std::string metrics_after(double n) {
    std::string m;
    EXPECT_TRUE(wait_until([&] { return spec_metric(m = metrics(), "strata_requests_completed_total") >= n; })) << m;
    return m;
  }
  static TestServer* srv_;
};
TestServer* ServerSpec::srv_ = nullptr;

namespace {

const char* kSpecQuote =
    "Copy this text exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog, the quick brown fox "
    "jumps over the lazy dog.";

}  // namespace

TEST_F(ServerSpec, GreedyStreamsEqualPlainWithConcurrentSlots) {
  const json schema = json::parse(R"({"type":"object","properties":{"unit":{"enum":["c","f"]},"n":{"type":"integer"}},"required":["unit","n"]})");
  std::vector<json> reqs = {spec_chat(kSpecQuote, 60), spec_chat("Write a poem about the sea", 41), spec_chat("1 2 3 4 5 6 7 8", 40),
                            spec_chat("Which unit?", 40), spec_chat(kSpecQuote, 50), spec_chat(kSpecQuote, 30)};
  reqs[5]["chat_template_kwargs"] = {{"think", true}};
  reqs[5]["reasoning_budget"] = 6;
  reqs[2]["speculative.n_max"] = 0;  // this one does not speculate
  reqs[3]["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "u"}, {"schema", schema}}}};
  reqs[1]["speculative.n_max"] = 3;
  reqs[1]["speculative.n_min"] = 2;
  const double done0 = spec_metric(metrics(), "strata_requests_completed_total");
  // Plain: every request with speculation off, one at a time.
  std::vector<SpecStream> plain;
  for (json r : reqs) {
    r["speculative.n_max"] = 0;
    plain.push_back(spec_stream(*srv_, r));
  }
  // A stop string from the middle of the last reply (the stream ends where it first appears).
  ASSERT_GE(plain[4].text.size(), 12u) << plain[4].text;
  reqs[4]["stop"] = plain[4].text.substr(plain[4].text.size() * 2 / 3, 3);
  json stop_plain = reqs[4];
  stop_plain["speculative.n_max"] = 0;
  plain[4] = spec_stream(*srv_, stop_plain);
  EXPECT_EQ(plain[4].finish, "stop");
  const std::string before = metrics_after(done0 + static_cast<double>(reqs.size()) + 1);
  EXPECT_EQ(spec_metric(before, "strata_draft_tokens_total"), 0) << "speculative.n_max 0 still drafted";
  // Speculating: all of them at once, sharing passes.
  for (int round = 0; round < 2; ++round) {
    std::vector<SpecStream> spec(reqs.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < reqs.size(); ++i) th.emplace_back([&, i] { spec[i] = spec_stream(*srv_, reqs[i]); });
    for (auto& t : th) t.join();
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i) + ", round " + std::to_string(round));
      ASSERT_TRUE(plain[i].whole) << plain[i].text;
      ASSERT_TRUE(spec[i].whole) << spec[i].text;
      EXPECT_EQ(spec[i].text, plain[i].text);
      EXPECT_EQ(spec[i].tokens, plain[i].tokens);
      EXPECT_EQ(spec[i].logprobs, plain[i].logprobs);  // bit for bit: the verify rows are plain decoding's
      EXPECT_EQ(spec[i].finish, plain[i].finish);
      EXPECT_EQ(spec[i].completion_tokens, plain[i].completion_tokens);
      EXPECT_EQ(static_cast<long>(spec[i].tokens.size()), spec[i].completion_tokens);
    }
  }
  EXPECT_EQ(plain[0].finish, "length");
  // The budget closed the reasoning block after 6 tokens ("</think>\n\n" forced).
  std::string after_budget;
  for (size_t i = 6; i < plain[5].tokens.size(); ++i) after_budget += plain[5].tokens[i];
  EXPECT_EQ(after_budget.rfind("</think>\n\n", 0), 0u) << after_budget;
  EXPECT_EQ(plain[0].completion_tokens, 60);
  const std::string after = metrics_after(done0 + 3.0 * static_cast<double>(reqs.size()) + 1);
  EXPECT_GT(spec_metric(after, "strata_draft_tokens_total"), 0) << after;
  EXPECT_GT(spec_metric(after, "strata_draft_passes_total"), 0) << after;
  // Kept drafts: rows past the first of a multi-row pass gave tokens that were streamed.
  EXPECT_GT(spec_metric(after, "strata_draft_tokens_accepted_total"), 0) << after;
  for (size_t i = 0; i < plain.size(); ++i) std::printf("[request %zu] %ld tokens, %s\n", i, plain[i].completion_tokens, plain[i].finish.c_str());
}

// The output of a random-weight model falls into a loop that repeats itself: n-gram lookup in the
// prompt and history drafts it, and the drafts are accepted.
TEST_F(ServerSpec, QuotingOutputGetsDraftsAccepted) {
  const std::string before = metrics();
  const double done0 = spec_metric(before, "strata_requests_completed_total");
  json req{{"prompt", kSpecQuote}, {"max_tokens", 120}, {"temperature", 0}, {"ignore_eos", true}};
  auto r = srv_->client()->Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 120);
  const std::string after = metrics_after(done0 + 1);
  const double proposed = spec_metric(after, "strata_draft_tokens_total") - spec_metric(before, "strata_draft_tokens_total");
  const double accepted = spec_metric(after, "strata_draft_tokens_accepted_total") - spec_metric(before, "strata_draft_tokens_accepted_total");
  std::printf("[quoting prompt] %g drafts proposed, %g accepted\n", proposed, accepted);
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, proposed);
  // /slots: the same counts per slot, and the settings of a busy slot.
  auto s = srv_->client()->Get("/slots");
  ASSERT_TRUE(s && s->status == 200);
  double slot_accepted = 0;
  for (const auto& slot : json::parse(s->body)) {
    ASSERT_TRUE(slot.contains("speculative.n_max") && slot.contains("n_draft_total")) << slot.dump();
    slot_accepted += slot["n_draft_accepted"].get<double>();
  }
  EXPECT_EQ(slot_accepted, spec_metric(after, "strata_draft_tokens_accepted_total"));
  auto props = srv_->client()->Get("/props");
  ASSERT_TRUE(props && props->status == 200);
  EXPECT_EQ(json::parse(props->body)["default_generation_settings"]["params"]["speculative.n_max"], 4);
  // Sampled (the speculative-sampling rule): still exactly max_tokens tokens.
  req["temperature"] = 0.8;
  req["max_tokens"] = 37;
  r = srv_->client()->Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 37);
}

TEST_F(ServerSpec, BadSettingsAre400) {
  const std::vector<std::pair<json, std::string>> bad = {{json{{"speculative.n_max", -1}}, "speculative.n_max"},
                                                         {json{{"speculative.n_max", 64}}, "speculative.n_max"},
                                                         {json{{"speculative.n_max", "4"}}, "speculative.n_max"},
                                                         {json{{"speculative.n_min", 1.5}}, "speculative.n_min"},
                                                         {json{{"speculative.n_max", 2}, {"speculative.n_min", 3}}, "speculative.n_min"}};
  for (const auto& [fields, param] : bad) {
    json req = spec_chat("Hi", 4);
    req.update(fields);
    auto r = srv_->client()->Post("/v1/chat/completions", req.dump(), "application/json");
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, 400) << fields.dump() << ": " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], param) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(param), std::string::npos) << r->body;
  }
}

namespace {

// Proposes k copies of one token: every draft is rejected when greedy output never emits it.
class SrvWrongDraft final : public DraftSource {
 public:
  explicit SrvWrongDraft(int32_t t) : t_(t) {}
  const char* name() const override { return "wrong"; }
  bool costly() const override { return false; }
  void propose(std::span<const int32_t>, int k_max, Draft& out) override {
    out.clear();
    out.tokens.assign(static_cast<size_t>(k_max), t_);
  }

 private:
  int32_t t_;
};

struct SrvSpecRun {
  std::vector<int32_t> tokens;
  server::SchedulerStats stats;
  std::vector<int> pass_rows;  // rows of each pass (the prompt's first)
};

// The passes (after the prompt's) that verified drafts, by index from 0.
std::vector<int> draft_pass_indices(const SrvSpecRun& r) {
  std::vector<int> at;
  for (size_t i = 1; i < r.pass_rows.size(); ++i)
    if (r.pass_rows[i] > 1) at.push_back(static_cast<int>(i) - 1);
  return at;
}

// One greedy request of n tokens through a fresh scheduler; tokens from the logprobs events.
SrvSpecRun srv_spec_run(Engine& eng, const tok::Tokenizer& tok, server::SchedulerOptions so, int draft_max, int n) {
  SrvSpecRun out;
  so.on_step = [&](int tokens, int, double, double) { out.pass_rows.push_back(tokens); };
  server::Scheduler sched(eng, tok, so);
  server::GenParams p;
  p.prompt = tok.encode(kSpecQuote, true, true);
  p.sampling.temp = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  p.n_probs = 0;
  p.draft_max = draft_max;
  auto r = std::make_shared<server::GenRequest>(std::move(p));
  EXPECT_TRUE(sched.submit(r));
  for (bool done = false; !done;)
    for (auto& e : r->wait(60000)) {
      for (const auto& pr : e.probs) out.tokens.push_back(pr.chosen.token);
      done = done || e.final;
    }
  sched.stop();
  out.stats = sched.stats();
  return out;
}

}  // namespace

// Drafts that are never accepted: with each slot's cost model (the default) only the warm-up
// verifies any; with --draft-fixed every pass does. The output is plain decoding's. Timed by an
// injected clock: the decisions, not the machine's speed, are checked.
TEST(ServerSpecCost, NeverAcceptedDraftsAreTurnedOff) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(1, kSpecCtx, &tok);
  constexpr int kN = 64;
  server::SchedulerOptions so;
  so.draft = std::make_shared<LookupDraft>();
  const SrvSpecRun plain = srv_spec_run(*eng, *tok, so, 0, kN);
  ASSERT_EQ(plain.tokens.size(), static_cast<size_t>(kN));
  EXPECT_EQ(plain.stats.draft_passes, 0u);
  int32_t never = 0;
  while (std::find(plain.tokens.begin(), plain.tokens.end(), never) != plain.tokens.end()) ++never;
  so.draft = std::make_shared<SrvWrongDraft>(never);
  for (bool adaptive : {true, false}) {
    SCOPED_TRACE(adaptive ? "cost model" : "--draft-fixed");
    so.draft_adaptive = adaptive;
    TickClock clock;  // every pass takes the same time: the decisions are the cost model's alone
    so.clock = clock.fn();
    const SrvSpecRun spec = srv_spec_run(*eng, *tok, so, 4, kN);

    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.stats.drafts_accepted, 0u);
    std::printf("[%s] %llu of %d passes verified drafts\n", adaptive ? "cost model" : "fixed", (unsigned long long)spec.stats.draft_passes, kN - 1);
    if (adaptive) {
      // The warm-up alternates plain passes and passes with drafts; once both are fitted, drafts
      // that are never kept and cost a pass's time per row are off, and no probe fits the budget.
      EXPECT_EQ(draft_pass_indices(spec), (std::vector<int>{1, 3}));
    } else {
      EXPECT_EQ(spec.stats.draft_passes, static_cast<uint64_t>(kN - 2));  // every decode pass but the last (max_tokens leaves no room)
    }
  }
}

namespace {

struct SrvSpecPair {
  std::vector<int32_t> tokens[2];
  server::SchedulerStats stats;
};

// Two slots of qwen3moe-q8_0 whose experts stream through a cache of 5 of 16 (most passes read).
std::unique_ptr<Engine> streaming_pair_engine(std::unique_ptr<tok::Tokenizer>* tok) {
  TierOptions tier;
  tier.cache_experts = 5;
  return load_fixture_engine(2, kSpecCtx, tok, "qwen3moe-q8_0", tier);
}

// Two greedy requests of n tokens in the same passes of a fresh scheduler: the first with
// draft_max `draft_a`, the second without speculation.
SrvSpecPair srv_spec_pair(Engine& eng, const tok::Tokenizer& tok, const server::SchedulerOptions& so, int draft_a, int n) {
  server::Scheduler sched(eng, tok, so);
  std::shared_ptr<server::GenRequest> r[2];
  for (int i = 0; i < 2; ++i) {
    server::GenParams p;
    p.prompt = tok.encode(kSpecQuote, true, true);
    p.sampling.temp = 0;
    p.max_tokens = n;
    p.ignore_eos = true;
    p.n_probs = 0;
    p.draft_max = i == 0 ? draft_a : 0;
    r[i] = std::make_shared<server::GenRequest>(std::move(p));
  }
  EXPECT_TRUE(sched.submit({r[0], r[1]}));
  SrvSpecPair out;
  for (int i = 0; i < 2; ++i)
    for (bool done = false; !done;)
      for (auto& e : r[i]->wait(60000)) {
        for (const auto& pr : e.probs) out.tokens[i].push_back(pr.chosen.token);
        done = done || e.final;
      }
  EXPECT_TRUE(wait_until([&] { return sched.stats().requests_done == 2; }));
  sched.stop();
  out.stats = sched.stats();
  return out;
}

// The streaming pair engine (checked: experts stream) and its plain run (lookup drafts offered,
// none verified) of kPairTokens on both slots: the reference the ServerSpecCost runs with drafts
// compare against.
constexpr int kPairTokens = 40;
struct PlainPair {
  std::unique_ptr<tok::Tokenizer> tok;
  std::unique_ptr<Engine> eng;
  SrvSpecPair plain;
  // The same two requests with up to 4 drafts on slot 0 under `so`: both outputs are the plain
  // run's, and some pass verified drafts.
  SrvSpecPair speculate(const server::SchedulerOptions& so) const {
    SrvSpecPair spec = srv_spec_pair(*eng, *tok, so, 4, kPairTokens);
    EXPECT_EQ(spec.tokens[0], plain.tokens[0]);
    EXPECT_EQ(spec.tokens[1], plain.tokens[1]);
    EXPECT_GT(spec.stats.draft_passes, 0u);
    return spec;
  }
};
PlainPair plain_pair() {
  PlainPair p;
  p.eng = streaming_pair_engine(&p.tok);
  server::SchedulerOptions so;
  so.draft = std::make_shared<LookupDraft>();
  p.plain = srv_spec_pair(*p.eng, *p.tok, so, 0, kPairTokens);
  EXPECT_NE(p.eng->tier().cache(), nullptr) << "experts stream";
  EXPECT_EQ(p.plain.tokens[0].size(), static_cast<size_t>(kPairTokens));
  return p;
}

}  // namespace

// Experts stream through a small cache; one slot verifies drafts that are always rejected
// (--draft-fixed), the other does not speculate, in the same passes. The bytes read for experts
// only the drafts routed to are the speculating slot's and none the other's (within what the
// passes read); the experts read only for those rejected rows are demoted in the cache (none with
// SchedulerOptions::draft_demote off), and both outputs are plain decoding's.
TEST(ServerSpecCost, DraftReadsAreChargedToTheirSlotAndRejectedOnesDemoted) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const PlainPair pp = plain_pair();
  const SrvSpecPair& plain = pp.plain;
  server::SchedulerOptions so;
  EXPECT_EQ(plain.stats.draft_passes, 0u);
  EXPECT_EQ(plain.stats.draft_experts_demoted, 0u);
  int32_t never = 0;
  while (std::find(plain.tokens[0].begin(), plain.tokens[0].end(), never) != plain.tokens[0].end()) ++never;
  so.draft = std::make_shared<SrvWrongDraft>(never);
  so.draft_adaptive = false;
  uint64_t read_before = plain.stats.expert_bytes_read;  // the engine's counters run on across schedulers
  for (bool demote : {true, false}) {
    SCOPED_TRACE(demote ? "demotion on" : "demotion off");
    so.draft_demote = demote;
    const SrvSpecPair spec = pp.speculate(so);
    EXPECT_EQ(spec.stats.drafts_accepted, 0u);
    uint64_t charged = 0;
    int speculating = 0;
    for (const auto& si : spec.stats.slot_info) {
      if (si.n_drafted > 0) {
        ++speculating;
        EXPECT_GT(si.draft_bytes_read, 0u);
      } else {
        EXPECT_EQ(si.draft_bytes_read, 0u);
      }
      charged += si.draft_bytes_read;
    }
    EXPECT_EQ(speculating, 1);
    EXPECT_LE(charged, spec.stats.expert_bytes_read - read_before);
    read_before = spec.stats.expert_bytes_read;
    if (demote) EXPECT_GT(spec.stats.draft_experts_demoted, 0u);
    else EXPECT_EQ(spec.stats.draft_experts_demoted, 0u);
  }
}

// Experts stream through a small cache, lookup drafts, each slot's cost model on: with predicted
// routing (the default) the cost models price draft rows by their predicted experts, and without
// it they do not; both slots' outputs are plain decoding's either way.
TEST(ServerSpecCost, PredictedRoutingPricesDraftRowsAndKeepsGreedyOutput) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const PlainPair pp = plain_pair();
  server::SchedulerOptions so;
  so.draft = std::make_shared<LookupDraft>();
  for (bool predict : {true, false}) {
    SCOPED_TRACE(predict ? "predicted routing" : "fitted bytes only");
    so.draft_predict = predict;
    const SrvSpecPair spec = pp.speculate(so);
    if (predict) EXPECT_GT(spec.stats.draft_rows_predicted, 0u);
    else EXPECT_EQ(spec.stats.draft_rows_predicted, 0u);
  }
}

// Sampling (temperature 0.8, a seed): lookup drafts take plain sampling's draw, so a slot that
// speculates streams the tokens the same request streams without speculation, with drafts accepted.
TEST(ServerSpecCost, SampledStreamWithDraftsIsPlainSamplingsForTheSeed) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(1, kSpecCtx, &tok);
  server::SchedulerOptions so;
  so.draft = std::make_shared<LookupDraft>();
  so.draft_adaptive = false;
  std::vector<int32_t> out[2];
  uint64_t accepted = 0;
  for (int draft_max : {0, 4}) {
    server::Scheduler sched(*eng, *tok, so);
    server::GenParams p;
    p.prompt = tok->encode(kSpecQuote, true, true);
    p.sampling.temp = 0.8f;
    p.sampling.seed = 7;
    p.max_tokens = 48;
    p.ignore_eos = true;
    p.n_probs = 0;
    p.draft_max = draft_max;
    auto r = std::make_shared<server::GenRequest>(std::move(p));
    ASSERT_TRUE(sched.submit(r));
    for (bool done = false; !done;)
      for (auto& e : r->wait(60000)) {
        for (const auto& pr : e.probs) out[draft_max > 0].push_back(pr.chosen.token);
        done = done || e.final;
      }
    EXPECT_TRUE(wait_until([&] { return sched.stats().requests_done == 1; }));
    if (draft_max > 0) accepted = sched.stats().drafts_accepted;
  }
  ASSERT_EQ(out[0].size(), 48u);
  EXPECT_EQ(out[1], out[0]);
  EXPECT_GT(accepted, 0u);
}

// DeepSeek-V4 keeps per-sequence state beyond KV rows: its slots never draft, and decode as before.
TEST(ServerSpecArch, UnrewindableArchitectureDoesNotSpeculate) {
  const char* set = "deepseek4-q8_0";
  if (!std::filesystem::exists(server_fixture(set))) STRATA_MISSING_FIXTURE(server_fixture(set) + " (speculation off test)");
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(2, kSpecCtx, &tok, set);
  ASSERT_FALSE(eng->model().rewindable());
  server::SchedulerOptions so;
  so.draft = std::make_shared<LookupDraft>();
  server::Scheduler sched(*eng, *tok, so);
  server::GenParams p;
  p.prompt = tok->encode(kSpecQuote, true, true);
  p.sampling.temp = 0;
  p.max_tokens = 40;
  p.ignore_eos = true;
  auto r = std::make_shared<server::GenRequest>(std::move(p));
  ASSERT_TRUE(sched.submit(r));
  server::Finish f = server::Finish::None;
  int n = 0;
  while (f == server::Finish::None)
    for (auto& e : r->wait(60000))
      if (e.final) f = e.finish, n = e.completion_tokens;
  EXPECT_EQ(f, server::Finish::Length);
  EXPECT_EQ(n, 40);
  EXPECT_EQ(sched.stats().drafts_proposed, 0u);
}

}  // namespace strata::test
