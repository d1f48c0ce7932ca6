// strata serve's agent-facing fields over HTTP with the qwen3moe fixture (random weights):
// logprobs, n, seed, reasoning budget and template variables, context errors, /v1/models.
#include <cmath>
#include <set>

#include "server/scheduler.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;
constexpr int kApiCtx = 256;

// ChatML that opens <think> for the reply unless enable_thinking is false; it raises when
// `forbid` is true (the server's default says true: requests must override it) or when
// reasoning_effort is "low" (to show that the field reaches the template).
constexpr const char* kThinkTemplate =
    "{% if forbid is defined and forbid %}{{ raise_exception('forbid is set') }}{% endif %}"
    "{% if reasoning_effort is defined and reasoning_effort == 'low' %}{{ raise_exception('effort low') }}{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}";

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_server_fixture()) return;
    server::ServerOptions so;
    so.max_queue = 32;
    plain_ = new TestServer(so, /*n_seq=*/4, kApiCtx);
    so.chat_template = kThinkTemplate;
    so.chat_template_kwargs = {{"forbid", true}};
    so.reasoning_budget = 4;
    think_ = new TestServer(so, /*n_seq=*/2, kApiCtx);
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete think_;
    plain_ = think_ = nullptr;
  }
  void SetUp() override { SKIP_WITHOUT_SERVER_FIXTURE(); }

  static httplib::Result post(const TestServer* ts, const std::string& path, const json& body) {
    return ts->client()->Post(path.c_str(), body.dump(), "application/json");
  }
  static json post_json(const TestServer* ts, const std::string& path, const json& body) {
    auto r = post(ts, path, body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  static json chat(const std::string& user, int max_tokens) {
    return json{{"messages", json::array({json{{"role", "user"}, {"content", user}}})},
                {"max_tokens", max_tokens},
                {"temperature", 0},
                {"ignore_eos", true}};
  }
  static std::vector<std::string> tokens_of(const json& choice) {
    std::vector<std::string> t;
    for (const auto& e : choice["logprobs"]["content"]) {
      std::string b;
      for (const auto& x : e["bytes"]) b += static_cast<char>(x.get<int>());
      t.push_back(b);
    }
    return t;
  }
  // As the JSON response shows text: invalid UTF-8 replaced by U+FFFD.
  static std::string shown(const std::string& s) { return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>(); }
  static bool whole(const std::string& s) { return s.find("\xEF\xBF\xBD") == std::string::npos; }
  static std::string join(const std::vector<std::string>& t, size_t from, size_t to) {
    std::string s;
    for (size_t i = from; i < std::min(to, t.size()); ++i) s += t[i];
    return s;
  }
  static TestServer* plain_;
  static TestServer* think_;
};
TestServer* ServerApi::plain_ = nullptr;
TestServer* ServerApi::think_ = nullptr;

TEST(ServerLogprobs, LogSoftmaxAndTopSorted) {
  const float logits[5] = {0.0f, std::log(2.0f), 1.0f, std::log(2.0f), -3.0f};  // Z = 1 + 2 + e + 2 + e^-3
  const double z = 5.0 + std::exp(1.0) + std::exp(-3.0);
  server::TokenLogprobs out;
  server::token_logprobs(logits, 5, /*token=*/1, /*n_top=*/3, out);
  EXPECT_NEAR(out.chosen.logprob, std::log(2.0 / z), 1e-6);
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].token, 2);
  EXPECT_EQ(out.top[1].token, 1);  // equal logits: the lower id first
  EXPECT_EQ(out.top[2].token, 3);
  EXPECT_NEAR(out.top[0].logprob, 1.0 - std::log(z), 1e-6);
  server::token_logprobs(logits, 5, 4, 0, out);
  EXPECT_TRUE(out.top.empty());
  EXPECT_NEAR(out.chosen.logprob, -3.0 - std::log(z), 1e-6);
}

TEST_F(ServerApi, ChatLogprobsGreedyIsTheMaxAndStreamedTheSame) {
  json req = chat("Hello there", 10);
  req["logprobs"] = true;
  req["top_logprobs"] = 5;
  const json j = post_json(plain_, "/v1/chat/completions", req);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), j["usage"]["completion_tokens"].get<size_t>());
  for (const auto& e : content) {
    const json& top = e["top_logprobs"];
    ASSERT_EQ(top.size(), 5u);
    EXPECT_EQ(e["logprob"].get<double>(), top[0]["logprob"].get<double>());  // greedy: the sampled token is the most likely
    EXPECT_EQ(e["token"], top[0]["token"]);
    double p = 0;
    for (size_t k = 0; k < top.size(); ++k) {
      p += std::exp(top[k]["logprob"].get<double>());
      EXPECT_LE(top[k]["logprob"].get<double>(), 0.0);
      if (k > 0) {
        EXPECT_LE(top[k]["logprob"].get<double>(), top[k - 1]["logprob"].get<double>());
      }
    }
    EXPECT_LE(p, 1.0 + 1e-5);
    std::string bytes;
    for (const auto& b : e["bytes"]) bytes += static_cast<char>(b.get<int>());
    const std::string token = e["token"];
    if (token.find("\xEF\xBF\xBD") == std::string::npos) {  // a whole-character token: its bytes are its text
      EXPECT_EQ(bytes, token);
    }
  }
  // Streamed: the same entries, spread over the chunks.
  req["stream"] = true;
  auto r = post(plain_, "/v1/chat/completions", req);
  ASSERT_TRUE(r && r->status == 200);
  json streamed = json::array();
  for (const auto& c : parse_sse(r->body).chunks)
    if (!c["choices"].empty() && c["choices"][0]["logprobs"].is_object())
      for (const auto& e : c["choices"][0]["logprobs"]["content"]) streamed.push_back(e);
  EXPECT_EQ(streamed, content);
  // Without logprobs: null.
  EXPECT_TRUE(post_json(plain_, "/v1/chat/completions", chat("Hello there", 2))["choices"][0]["logprobs"].is_null());
}

TEST_F(ServerApi, CompletionLogprobsHaveOffsetsAndTops) {
  const json j = post_json(plain_, "/v1/completions", json{{"prompt", "Once upon"}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 3}});
  const json& lp = j["choices"][0]["logprobs"];
  const size_t n = j["usage"]["completion_tokens"].get<size_t>();
  ASSERT_EQ(lp["tokens"].size(), n);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  // Offsets advance by each token's bytes; the sampled (greedy) token is the best of its top 3.
  // Tokens that end inside a UTF-8 character show as U+FFFD, so only whole-character ones are checked.
  for (size_t i = 0; i < n; ++i) {
    const std::string t = lp["tokens"][i];
    if (i + 1 < n && whole(t)) {
      EXPECT_EQ(lp["text_offset"][i + 1].get<size_t>() - lp["text_offset"][i].get<size_t>(), t.size()) << i;
    }
    EXPECT_LE(lp["top_logprobs"][i].size(), 3u);
    double best = -1e30;
    bool all_whole = whole(t);
    for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>()), all_whole = all_whole && whole(tok);
    if (all_whole) {
      EXPECT_EQ(lp["token_logprobs"][i].get<double>(), best) << i;
    }
  }
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(ServerApi, SeveralChoicesAreReproducibleAndEqualWhenGreedy) {
  json req = chat("Pick a word", 12);
  req["n"] = 3;
  const json g = post_json(plain_, "/v1/chat/completions", req);
  ASSERT_EQ(g["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(g["choices"][i]["index"], i);
    EXPECT_EQ(g["choices"][i]["message"]["content"], g["choices"][0]["message"]["content"]);
  }
  EXPECT_EQ(g["usage"]["completion_tokens"], 36);
  req["temperature"] = 1.0;
  req["top_k"] = 0;
  req["top_p"] = 1.0;
  req["min_p"] = 0.0;
  req["seed"] = 1234;
  const json a = post_json(plain_, "/v1/chat/completions", req), b = post_json(plain_, "/v1/chat/completions", req);
  std::set<std::string> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["message"]["content"], b["choices"][i]["message"]["content"]) << i;
    distinct.insert(a["choices"][i]["message"]["content"].get<std::string>());
  }
  EXPECT_EQ(distinct.size(), 3u);  // each choice has its own seed
  // Streaming: chunks carry the index; each choice's text is the non-streamed one.
  req["stream"] = true;
  auto r = post(plain_, "/v1/chat/completions", req);
  ASSERT_TRUE(r && r->status == 200);
  const Sse sse = parse_sse(r->body);
  EXPECT_TRUE(sse.done && sse.well_framed);
  std::vector<std::string> text(3);
  std::vector<int> finished(3, 0);
  for (const auto& c : sse.chunks) {
    const int i = c["choices"][0]["index"];
    ASSERT_TRUE(i >= 0 && i < 3);
    text[i] += c["choices"][0]["delta"].value("content", "");
    finished[i] += c["choices"][0]["finish_reason"].is_null() ? 0 : 1;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[i], a["choices"][i]["message"]["content"].get<std::string>()) << i;
    EXPECT_EQ(finished[i], 1) << i;
  }
  // Completions too.
  const json c = post_json(plain_, "/v1/completions", json{{"prompt", "x"}, {"n", 2}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(c["choices"].size(), 2u);
  EXPECT_EQ(c["choices"][0]["text"], c["choices"][1]["text"]);
}

TEST_F(ServerApi, ReasoningBudgetForcesTheCloseAfterNTokens) {
  auto run = [&](const json& budget) {
    json req = chat("Think about it", 20);
    req["logprobs"] = true;
    req["chat_template_kwargs"] = {{"forbid", false}};
    if (!budget.is_null()) req["reasoning_budget"] = budget;
    return post_json(think_, "/v1/chat/completions", req)["choices"][0];
  };
  for (int n : {0, 3, 7}) {
    const json c = run(n);
    const auto t = tokens_of(c);
    SCOPED_TRACE(n);
    EXPECT_EQ(join(t, n, t.size()).rfind("</think>\n\n", 0), 0u) << join(t, 0, t.size());
    EXPECT_EQ(join(t, 0, n).find("</think>"), std::string::npos);
    EXPECT_EQ(c["message"].value("reasoning_content", ""), shown(join(t, 0, n)));
  }
  // The server's default (4 here) when the request says nothing; -1: unlimited.
  const auto d = tokens_of(run(nullptr));
  EXPECT_EQ(join(d, 4, d.size()).rfind("</think>", 0), 0u);
  const auto u = tokens_of(run(-1));
  EXPECT_EQ(join(u, 0, u.size()).find("</think>"), std::string::npos);
}

TEST_F(ServerApi, GrammarAppliesAfterTheReasoningBlock) {
  // The prompt opens <think>: the model reasons freely (4 tokens, the server's budget), then the
  // answer follows the schema.
  const json schema = json::parse(R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false})");
  json req = chat("Answer in JSON", 120);
  req.erase("ignore_eos");
  req["logprobs"] = true;
  req["temperature"] = 1.0;
  req["seed"] = 3;
  req["chat_template_kwargs"] = {{"forbid", false}};
  req["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schema}}}};
  const json c = post_json(think_, "/v1/chat/completions", req)["choices"][0];
  const auto t = tokens_of(c);
  EXPECT_EQ(c["message"].value("reasoning_content", ""), shown(join(t, 0, 4)));
  EXPECT_EQ(join(t, 4, t.size()).rfind("</think>", 0), 0u);
  EXPECT_EQ(c["finish_reason"], "stop") << c.dump();
  const json v = json::parse(c["message"]["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(v.is_object()) << c.dump();
  EXPECT_TRUE(v["ok"].is_boolean()) << v.dump();
  EXPECT_EQ(v.size(), 1u);
}

TEST_F(ServerApi, TemplateKwargsAndReasoningEffortReachTheTemplate) {
  // The server default forbid=true makes the template raise; the request's kwargs override it.
  auto r = post(think_, "/v1/chat/completions", chat("hi", 2));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("forbid is set"), std::string::npos) << r->body;
  json req = chat("hi", 2);
  req["chat_template_kwargs"] = {{"forbid", false}};
  post_json(think_, "/v1/chat/completions", req);
  req["reasoning_effort"] = "low";
  r = post(think_, "/v1/chat/completions", req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("effort low"), std::string::npos) << r->body;
  // enable_thinking=false: the template closes the block, nothing is reasoning.
  req.erase("reasoning_effort");
  req["chat_template_kwargs"]["enable_thinking"] = false;
  req["max_tokens"] = 8;
  const json c = post_json(think_, "/v1/chat/completions", req)["choices"][0];
  EXPECT_FALSE(c["message"].contains("reasoning_content")) << c.dump();
}

TEST_F(ServerApi, ContextErrorNamesBothLengthsAndModelsShowNCtx) {
  auto r = post(plain_, "/v1/completions", json{{"prompt", std::vector<int>(300, 5)}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  const std::string msg = e["message"];
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("300"), std::string::npos) << msg;
  auto m = plain_->client()->Get("/v1/models");
  ASSERT_TRUE(m && m->status == 200);
  const json meta = json::parse(m->body)["data"][0]["meta"];
  EXPECT_EQ(meta["n_ctx"], kApiCtx);
  EXPECT_EQ(meta["n_ctx_train"], 256);  // qwen3moe.context_length of the fixture
}

TEST_F(ServerApi, FieldErrors) {
  auto code = [&](const json& patch) {
    json req = chat("hi", 2);
    req.merge_patch(patch);
    auto r = post(plain_, "/v1/chat/completions", req);
    const json e = json::parse(r->body)["error"];
    return std::to_string(r->status) + " " + e["code"].get<std::string>() + " " + e["param"].get<std::string>();
  };
  EXPECT_EQ(code({{"n", 9}}), "400 invalid_value n");
  EXPECT_EQ(code({{"n", "2"}}), "400 invalid_type n");
  EXPECT_EQ(code({{"logprobs", true}, {"top_logprobs", 21}}), "400 invalid_value top_logprobs");
  EXPECT_EQ(code({{"top_logprobs", 2}}), "400 invalid_value top_logprobs");
  EXPECT_EQ(code({{"logprobs", 3}}), "400 invalid_type logprobs");
  EXPECT_EQ(code({{"tools", "x"}}), "400 invalid_type tools");
  EXPECT_EQ(code({{"reasoning_budget", "x"}}), "400 invalid_type reasoning_budget");
  auto r = post(plain_, "/v1/completions", json{{"prompt", "x"}, {"logprobs", true}});
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "logprobs");
}

}  // namespace
}  // namespace strata::test
