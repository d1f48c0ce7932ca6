// strata serve over HTTP: the OpenAI wire format, errors, scheduling, determinism under batching.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstring>
#include <thread>

#include "runtime/expert_tier.h"
#include "chat/chat_template.h"
#include "server/chat_format.h"
#include "server/scheduler.h"
#include "runtime/text_stream.h"
#include "../wait_until.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;
constexpr int kServerCtx = 256;

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_server_fixture()) return;
    server::ServerOptions so;
    so.max_body = 64 * 1024;
    so.max_queue = 32;
    so.strict_model = true;
    main_ = new TestServer(so, /*n_seq=*/4, kServerCtx);
  }
  static void TearDownTestSuite() {
    delete main_;
    main_ = nullptr;
  }
  void SetUp() override { SKIP_WITHOUT_SERVER_FIXTURE(); }

  static httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& h = {}) {
    return main_->client()->Post(path.c_str(), h, body, "application/json");
  }
  static json post_json(const std::string& path, const json& body, int want_status = 200) {
    auto r = post(path, body.dump());
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    EXPECT_EQ(r->status, want_status) << r->body;
    return json::parse(r->body);
  }
  static void expect_error(const httplib::Result& r, int status, const std::string& code = {}) {
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error")) << r->body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r->body;
    EXPECT_TRUE(e["type"].is_string()) << r->body;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << r->body;
    if (!code.empty()) {
      EXPECT_EQ(e["code"], code) << r->body;
    }
  }
  static json chat_req(const std::string& user, int max_tokens, bool stream = false) {
    return json{{"model", "tiny-qwen3moe-seed11"},
                {"messages", json::array({json{{"role", "system"}, {"content", "You are terse."}}, json{{"role", "user"}, {"content", user}}})},
                {"max_tokens", max_tokens},
                {"temperature", 0},
                {"ignore_eos", true},
                {"stream", stream}};
  }
  static TestServer* main_;
};
TestServer* Server::main_ = nullptr;

TEST_F(Server, HealthModelsMetrics) {
  auto c = main_->client();
  auto h = c->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body), json({{"status", "ok"}}));
  auto m = c->Get("/v1/models");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  const json mj = json::parse(m->body);
  EXPECT_EQ(mj["object"], "list");
  EXPECT_EQ(mj["data"][0]["id"], "tiny-qwen3moe-seed11");
  EXPECT_EQ(mj["data"][0]["object"], "model");
  post_json("/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 2}});
  // Errors are counted too, and every request is counted before its response is sent.
  auto nf = c->Get("/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  auto bad = c->Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  auto mt = c->Get("/metrics");
  ASSERT_TRUE(mt);
  EXPECT_EQ(mt->status, 200);
  for (const char* name : {"strata_requests_total{endpoint=\"/v1/completions\",status=\"200\"}", "strata_prompt_tokens_total",
                           "strata_completion_tokens_total", "strata_generation_tokens_per_second", "strata_queue_length", "strata_slots_busy",
                           "strata_expert_cache_hit_ratio", "strata_expert_bytes_read_total", "strata_expert_fetch_wait_seconds_total",
                           "# TYPE strata_prompt_tokens_total counter", "strata_requests_total{endpoint=\"other\",status=\"404\"}",
                           "strata_requests_total{endpoint=\"/v1/completions\",status=\"400\"}"})
    EXPECT_NE(mt->body.find(name), std::string::npos) << name;
}

TEST_F(Server, LoadingStateAnswers503) {
  server::ServerOptions so;
  so.port = 0;
  server::HttpServer srv(so);
  const int port = srv.bind();
  srv.start();
  httplib::Client c("127.0.0.1", port);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body), json({{"status", "loading"}}));
  expect_error(c.Post("/v1/chat/completions", "{}", "application/json"), 503, "model_loading");
  srv.stop();
}

TEST_F(Server, ChatNonStream) {
  const json j = post_json("/v1/chat/completions", chat_req("What is the capital of France?", 8));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny-qwen3moe-seed11");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const json& u = j["usage"];
  EXPECT_EQ(u["completion_tokens"], 8);
  // ChatML rendering of the two messages, tokenized as the server does.
  const std::string text = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(u["prompt_tokens"], main_->tok->encode(text, true, true).size());
  EXPECT_EQ(u["total_tokens"], u["prompt_tokens"].get<int>() + 8);
}

TEST_F(Server, ChatStreamFramingAndUsage) {
  const json plain = post_json("/v1/chat/completions", chat_req("Tell me a story", 12));
  json req = chat_req("Tell me a story", 12, true);
  req["stream_options"] = {{"include_usage", true}};
  auto r = post("/v1/chat/completions", req.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const Sse s = parse_sse(r->body);
  EXPECT_TRUE(s.well_framed) << r->body;
  EXPECT_TRUE(s.done) << r->body;
  ASSERT_GE(s.chunks.size(), 3u);
  const std::string id = s.chunks[0]["id"];
  for (const auto& c : s.chunks) {
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], id);
  }
  EXPECT_EQ(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  // The last chunk carries usage and no choices; the one before it the finish reason.
  const json& last = s.chunks.back();
  EXPECT_TRUE(last["choices"].is_array() && last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 12);
  for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"}) EXPECT_EQ(last["usage"][k], plain["usage"][k]) << k;
  // The same prompt again: the slot that ran it keeps all but its last two tokens.
  EXPECT_EQ(last["usage"]["prompt_tokens_details"]["cached_tokens"], plain["usage"]["prompt_tokens"].get<int>() - 2);
  const json& fin = s.chunks[s.chunks.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  std::string finish;
  EXPECT_EQ(sse_text(s, true, &finish), plain["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "length");
  // Without include_usage no usage chunk.
  auto r2 = post("/v1/chat/completions", chat_req("Tell me a story", 3, true).dump());
  const Sse s2 = parse_sse(r2->body);
  EXPECT_TRUE(s2.done && s2.well_framed);
  for (const auto& c : s2.chunks) EXPECT_FALSE(c.contains("usage") && !c["usage"].is_null());
}

TEST_F(Server, CompletionsTokenArrayAndStream) {
  const json j = post_json("/v1/completions", json{{"prompt", json::array({1, 2, 3, 4, 5})}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  auto r = post("/v1/completions", json{{"prompt", json::array({1, 2, 3, 4, 5})}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}}.dump());
  ASSERT_TRUE(r);
  const Sse s = parse_sse(r->body);
  EXPECT_TRUE(s.done && s.well_framed) << r->body;
  for (const auto& c : s.chunks) EXPECT_EQ(c["object"], "text_completion");
  std::string finish;
  EXPECT_EQ(sse_text(s, false, &finish), j["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(finish, "length");
}

// usage.prompt_tokens_details.cached_tokens: the prompt tokens whose KV rows the slot kept from its
// previous request, plain and in the include_usage chunk, on a one-slot server (so the slot is known).
TEST_F(Server, CachedTokensInUsage) {
  TestServer one(server::ServerOptions{}, /*n_seq=*/1, kServerCtx);
  auto c = one.client();
  int sum = 0;  // of every answer's cached_tokens
  // The usage of one request (plain, or the include_usage chunk when streaming).
  auto usage = [&](const char* path, json req, bool stream) {
    req["max_tokens"] = 3;
    req["temperature"] = 0;
    req["ignore_eos"] = true;
    req["stream"] = stream;
    if (stream) req["stream_options"] = {{"include_usage", true}};
    auto r = c->Post(path, req.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    if (!r || r->status != 200) return json();
    json u;
    if (stream) {
      const Sse s = parse_sse(r->body);
      EXPECT_TRUE(s.done && s.well_framed && !s.chunks.empty()) << r->body;
      if (!s.chunks.empty()) u = s.chunks.back()["usage"];
    } else {
      u = json::parse(r->body)["usage"];
    }
    EXPECT_TRUE(u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) << r->body;
    if (u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) sum += u["prompt_tokens_details"]["cached_tokens"].get<int>();
    return u;
  };
  auto cached = [](json u) { return u["prompt_tokens_details"]["cached_tokens"]; };  // a copy: null when a request failed
  json a = json::array();
  for (int t = 1; t <= 10; ++t) a.push_back(t);
  json b = a;
  for (int t : {11, 12, 13, 14}) b.push_back(t);

  // A fresh slot reuses nothing (streamed); a longer prompt then keeps all of the first one.
  EXPECT_EQ(cached(usage("/v1/completions", {{"prompt", a}}, true)), 0);
  json ub = usage("/v1/completions", {{"prompt", b}}, false);
  EXPECT_EQ(ub["prompt_tokens"], 14);
  EXPECT_EQ(cached(ub), 10);
  // The same prompt again: all but its last two tokens (evaluated again for the logits).
  EXPECT_EQ(cached(usage("/v1/completions", {{"prompt", b}}, true)), 12);
  // A prompt that differs at its first token reuses nothing.
  json d = b;
  d[0] = 20;
  EXPECT_EQ(cached(usage("/v1/completions", {{"prompt", d}}, false)), 0);
  // Chat: the same messages three times, plain, streamed, plain.
  const json chat = chat_req("Tell me a story", 3);
  const int n = usage("/v1/chat/completions", chat, false)["prompt_tokens"].get<int>();
  json u2 = usage("/v1/chat/completions", chat, true);
  EXPECT_EQ(u2["prompt_tokens"], n);
  EXPECT_EQ(cached(u2), n - 2);
  EXPECT_EQ(cached(usage("/v1/chat/completions", chat, false)), n - 2);
  // strata_prompt_tokens_reused_total counts the same tokens.
  auto* sched = one.srv->scheduler();
  EXPECT_TRUE(wait_until([&] { return sched->stats().requests_done >= 7; })) << "the 7 requests are not all counted as done";
  EXPECT_EQ(sched->stats().prompt_tokens_reused, static_cast<uint64_t>(sum));
}

TEST_F(Server, SeededSamplingIsReproducible) {
  json req = chat_req("Surprise me", 16);
  req["temperature"] = 1.0;
  req["top_p"] = 0.9;
  req["seed"] = 1234;
  req["presence_penalty"] = 0.5;
  req["frequency_penalty"] = 0.5;
  const std::string a = post_json("/v1/chat/completions", req)["choices"][0]["message"]["content"];
  const std::string b = post_json("/v1/chat/completions", req)["choices"][0]["message"]["content"];
  EXPECT_EQ(a, b);
  req["max_completion_tokens"] = 5;  // wins over max_tokens
  EXPECT_EQ(post_json("/v1/chat/completions", req)["usage"]["completion_tokens"], 5);
}

TEST_F(Server, StopSequenceIsNotEmitted) {
  const json base = post_json("/v1/completions", json{{"prompt", "The quick brown fox"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}});
  const std::string text = base["choices"][0]["text"];
  // A stop string from the middle of the greedy text (ASCII letters only, so it is whole characters).
  size_t at = std::string::npos;
  for (size_t i = 4; i + 3 < text.size(); ++i)
    if (std::isalpha(static_cast<unsigned char>(text[i])) && std::isalpha(static_cast<unsigned char>(text[i + 1])) &&
        std::isalpha(static_cast<unsigned char>(text[i + 2]))) {
      at = i;
      break;
    }
  ASSERT_NE(at, std::string::npos) << "no ASCII run in: " << text;
  const std::string stop = text.substr(at, 3);
  const std::string want = text.substr(0, text.find(stop));
  for (bool stream : {false, true}) {
    json req{{"prompt", "The quick brown fox"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}, {"stop", json::array({"@@never@@", stop})}, {"stream", stream}};
    auto r = post("/v1/completions", req.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    std::string got, finish;
    if (stream) {
      const Sse s = parse_sse(r->body);
      EXPECT_TRUE(s.done && s.well_framed);
      got = sse_text(s, false, &finish);
    } else {
      const json j = json::parse(r->body);
      got = j["choices"][0]["text"];
      finish = j["choices"][0]["finish_reason"];
      EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 24);
    }
    EXPECT_EQ(got, want) << "stop '" << stop << "' in '" << text << "'";
    EXPECT_EQ(finish, "stop");
  }
}

TEST_F(Server, Errors) {
  expect_error(post("/v1/chat/completions", "{\"messages\": [1,"), 400, "invalid_json");
  expect_error(post("/v1/chat/completions", "[1, 2]"), 400, "invalid_json");
  expect_error(post("/v1/chat/completions", json{{"model", "strata"}}.dump()), 400, "missing_required_parameter");
  expect_error(post("/v1/completions", json{{"max_tokens", 3}}.dump()), 400, "missing_required_parameter");
  auto wrong = chat_req("hi", 3);
  wrong["temperature"] = "hot";
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_type");
  wrong = chat_req("hi", 3);
  wrong["messages"] = "hello";
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_type");
  wrong = chat_req("hi", 3);
  wrong["messages"][0]["role"] = "wizard";
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_value");
  wrong = chat_req("hi", 3);
  wrong["max_tokens"] = -5;
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_value");
  wrong = chat_req("hi", 3);
  wrong["stop"] = 7;
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_type");
  wrong = chat_req("hi", 3);
  wrong["presence_penalty"] = 5;
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_value");
  wrong = chat_req("hi", 3);
  wrong["n"] = 9;
  expect_error(post("/v1/chat/completions", wrong.dump()), 400, "invalid_value");
  // Token ids outside the vocabulary, prompt longer than the context.
  expect_error(post("/v1/completions", json{{"prompt", json::array({1, 99999})}}.dump()), 400, "invalid_value");
  expect_error(post("/v1/completions", json{{"prompt", std::vector<int>(kServerCtx, 5)}}.dump()), 400, "context_length_exceeded");
  // Unknown model: 404; the served name and its aliases are accepted.
  wrong = chat_req("hi", 3);
  wrong["model"] = "gpt-17";
  auto r404 = post("/v1/chat/completions", wrong.dump());
  expect_error(r404, 404, "model_not_found");
  EXPECT_EQ(json::parse(r404->body)["error"]["param"], "model");
  for (const char* alias : {"strata", "default", "model", "model.gguf"}) {
    auto ok = chat_req("hi", 1);
    ok["model"] = alias;
    post_json("/v1/chat/completions", ok);
  }
  // Invalid UTF-8 (raw and inside a JSON string).
  expect_error(post("/v1/completions", std::string("{\"prompt\": \"caf\xC3\x28\"}")), 400, "invalid_utf8");
  expect_error(post("/v1/completions", std::string("{\"prompt\": \"\xFF\xFE\"}")), 400, "invalid_utf8");
  // Body over --max-body (64 KiB here).
  expect_error(post("/v1/completions", json{{"prompt", std::string(100 * 1024, 'a')}}.dump()), 413, "request_too_large");
  // Unknown endpoint.
  expect_error(main_->client()->Get("/v1/nothing"), 404, "not_found");
  // The server is still fine.
  post_json("/v1/completions", json{{"prompt", "ok"}, {"max_tokens", 1}});
}

TEST_F(Server, ApiKeyAndQueueFull) {
  server::ServerOptions so;
  so.api_key = "sekret";
  so.max_queue = 1;
  TestServer ts(so, /*n_seq=*/1, kServerCtx);
  auto c = ts.client();
  auto h = c->Get("/health");  // exempt
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  expect_error(c->Get("/v1/models"), 401, "invalid_api_key");
  expect_error(c->Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, R"({"prompt":"a"})", "application/json"), 401, "invalid_api_key");
  expect_error(c->Get("/metrics"), 401, "invalid_api_key");
  const httplib::Headers auth{{"Authorization", "Bearer sekret"}};
  auto ok = c->Post("/v1/completions", auth, R"({"prompt":"a","max_tokens":2})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  // 1 slot + 1 queued: of 6 long concurrent requests some must get 503 queue_full, the rest 200.
  std::atomic<int> n200{0}, n503{0}, other{0};
  std::vector<std::thread> th;
  for (int i = 0; i < 6; ++i)
    th.emplace_back([&] {
      auto cl = ts.client();
      auto r = cl->Post("/v1/completions", auth, R"({"prompt":"a b c","max_tokens":150,"ignore_eos":true})", "application/json");
      if (r && r->status == 200) n200++;
      else if (r && r->status == 503 && json::parse(r->body)["error"]["code"] == "queue_full") n503++;
      else other++;
    });
  for (auto& t : th) t.join();
  std::printf("[queue] 200: %d, 503: %d, other: %d\n", n200.load(), n503.load(), other.load());
  EXPECT_GE(n200.load(), 2);
  EXPECT_GE(n503.load(), 1);
  EXPECT_EQ(other.load(), 0);
}

TEST_F(Server, StreamingExpertsMetricsAndSameText) {
  TierOptions tier;
  tier.cache_experts = 5;
  TestServer ts(server::ServerOptions{}, /*n_seq=*/3, kServerCtx, tier);
  const std::vector<std::string> users = {"one", "two two", "three three three"};
  std::vector<std::thread> th;
  std::vector<std::string> got(users.size());
  for (size_t i = 0; i < users.size(); ++i)
    th.emplace_back([&, i] {
      auto r = ts.client()->Post("/v1/chat/completions", chat_req(users[i], 12).dump(), "application/json");
      if (r && r->status == 200) got[i] = json::parse(r->body)["choices"][0]["message"]["content"];
    });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < users.size(); ++i)
    EXPECT_EQ(got[i], post_json("/v1/chat/completions", chat_req(users[i], 12))["choices"][0]["message"]["content"].get<std::string>()) << users[i];
  auto m = ts.client()->Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("strata_expert_streaming 1"), std::string::npos) << m->body;
  const auto st = ts.srv->scheduler()->stats();
  EXPECT_GT(st.expert_bytes_read, 0u);
  EXPECT_GT(st.expert_misses, 0u);
  std::printf("[experts] hits %llu misses %llu read %llu bytes wait %.4f s\n", static_cast<unsigned long long>(st.expert_hits),
              static_cast<unsigned long long>(st.expert_misses), static_cast<unsigned long long>(st.expert_bytes_read), st.expert_wait_s);
}

TEST_F(Server, EngineFailureFailsTheRequestNotTheServer) {
  TierOptions tier;
  tier.cache_experts = 2;
  tier.faults.fail_first = 40;  // expert reads fail for a while, then the device recovers
  TestServer ts(server::ServerOptions{}, /*n_seq=*/2, kServerCtx, tier);
  auto c = ts.client();
  const std::string body = json{{"prompt", "The quick brown fox"}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  auto r = c->Post("/v1/completions", body, "application/json");
  expect_error(r, 500);
  EXPECT_NE(r->body.find("failed after retries"), std::string::npos) << r->body;
  auto s = c->Post("/v1/completions", json{{"prompt", "The quick brown fox"}, {"max_tokens", 4}, {"temperature", 0}, {"stream", true}}.dump(),
                   "application/json");
  ASSERT_TRUE(s);
  const Sse sse = parse_sse(s->body);
  EXPECT_TRUE(sse.done && sse.well_framed) << s->body;
  // Either it still failed (an error object in the stream) or the device had recovered.
  // In any case the server answers, and after recovery the text equals a fault-free server's.
  std::string text;
  for (int i = 0; i < 20; ++i) {
    auto ok = c->Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(ok);
    if (ok->status == 200) {
      text = json::parse(ok->body)["choices"][0]["text"];
      break;
    }
  }
  EXPECT_EQ(text, post_json("/v1/completions", json::parse(body))["choices"][0]["text"].get<std::string>());
  EXPECT_GE(ts.srv->scheduler()->stats().requests_failed, 1u);
}

TEST_F(Server, ClientDisconnectFreesTheSlot) {
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, /*n_ctx=*/2048);
  auto cl = ts.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = json{{"prompt", "go"}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}}.dump();
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // hang up early
  cl->send(req);
  EXPECT_GE(chunks, 1);
  server::SchedulerStats st;
  wait_until([&] {
    st = ts.srv->scheduler()->stats();
    return st.requests_cancelled == 1 && st.busy == 0;
  });
  EXPECT_EQ(st.requests_cancelled, 1u);
  EXPECT_EQ(st.busy, 0);
  EXPECT_LT(st.completion_tokens, 2000u);
  std::printf("[disconnect] cancelled after %llu of 2000 tokens\n", static_cast<unsigned long long>(st.completion_tokens));
  // The slot serves the next request.
  auto r = cl->Post("/v1/completions", json{{"prompt", "again"}, {"max_tokens", 3}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A raw HTTP/1.1 POST whose answer is never read: the test closes the socket to hang up.
int open_request(int port, const std::string& path, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Polls the scheduler's figures until `ok` holds (or something is stuck); returns the last figures.
template <typename F>
server::SchedulerStats wait_stats(server::Scheduler& s, F ok) {
  server::SchedulerStats st;
  wait_until([&] {
    st = s.stats();
    return ok(st);
  });
  return st;
}

// Non-streaming requests: a client that hangs up while its request waits in the queue leaves the
// queue, and one that hangs up while generating frees its slot at the next step (not after
// max_tokens). One slot: A generates, B waits behind it.
TEST_F(Server, NonStreamingClientDisconnectFreesTheSlot) {
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, /*n_ctx=*/4096);
  server::Scheduler& sch = *ts.srv->scheduler();
  constexpr int kMax = 4000;
  const std::string body = json{{"prompt", "go"}, {"max_tokens", kMax}, {"ignore_eos", true}}.dump();
  const int a = open_request(ts.port, "/v1/completions", body);
  ASSERT_GE(a, 0);
  // A is generating: its slot is busy and a few decode steps ran.
  server::SchedulerStats st = wait_stats(sch, [](const server::SchedulerStats& s) { return s.busy == 1 && s.steps >= 4; });
  ASSERT_EQ(st.busy, 1);
  const int b = open_request(ts.port, "/v1/chat/completions",
                             json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 5}}.dump());
  ASSERT_GE(b, 0);
  st = wait_stats(sch, [](const server::SchedulerStats& s) { return s.queued == 1; });
  ASSERT_EQ(st.queued, 1);

  ::close(b);
  st = wait_stats(sch, [](const server::SchedulerStats& s) { return s.requests_cancelled == 1; });
  EXPECT_EQ(st.requests_cancelled, 1u);
  EXPECT_EQ(st.queued, 0);
  EXPECT_EQ(st.busy, 1);  // A still generates
  EXPECT_EQ(st.requests_done, 0u);

  ::close(a);
  st = wait_stats(sch, [](const server::SchedulerStats& s) { return s.requests_cancelled == 2 && s.busy == 0; });
  EXPECT_EQ(st.requests_cancelled, 2u);
  EXPECT_EQ(st.busy, 0);
  EXPECT_EQ(st.requests_done, 0u);  // A did not run to max_tokens: cancelled, not finished
  EXPECT_LT(st.completion_tokens, static_cast<uint64_t>(kMax));
  std::printf("[disconnect] non-streaming request cancelled after %llu of %d tokens\n", static_cast<unsigned long long>(st.completion_tokens), kMax);
  // The slot serves the next request.
  auto r = ts.client()->Post("/v1/completions", json{{"prompt", "again"}, {"max_tokens", 3}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(wait_stats(sch, [](const server::SchedulerStats& s) { return s.requests_done == 1; }).requests_done, 1u);
}

// Bitwise: every sequence's logits in a mixed batch equal a solo run of that sequence
// (prompt in one forward pass, then one token per pass), with prompts chunked across steps.
// F32 weights matter here: with quantized weights the activations are rounded to 8 bits before
// most products, which hides differences in the attention's summation order.
class BatchedLogits : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, BatchedLogits, ::testing::Values("qwen3moe-f32", "qwen3moe-q8_0", "deepseek2-f32", "gpt-oss-f32"));

TEST_P(BatchedLogits, EqualSoloRun) {
  const char* set = GetParam();
  if (!std::filesystem::exists(server_fixture(set))) STRATA_MISSING_FIXTURE(server_fixture(set) + " (batching invariance test)");
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(/*n_seq=*/4, kServerCtx, &tok, set);
  const std::vector<std::string> prompts = {"Hi", "The quick brown fox jumps over the lazy dog.",
                                            "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
                                            "Permission is hereby granted, free of charge, to any person obtaining a copy of this software"};
  const int n_gen = 10;
  const int nv = eng->config().n_vocab;
  std::vector<std::vector<std::vector<float>>> got(prompts.size());
  std::vector<std::shared_ptr<server::GenRequest>> reqs;
  {
    server::SchedulerOptions so;
    so.step_tokens = 16;  // prompts are chunked and share steps with decoding sequences
    server::Scheduler sched(*eng, *tok, so);
    for (size_t i = 0; i < prompts.size(); ++i) {
      server::GenParams p;
      p.prompt = tok->encode(prompts[i], true, true);
      p.sampling.temp = 0;
      p.max_tokens = n_gen;
      p.ignore_eos = true;
      p.on_logits = [&got, i](const float* l, int n) { got[i].emplace_back(l, l + n); };
      reqs.push_back(std::make_shared<server::GenRequest>(std::move(p)));
      ASSERT_TRUE(sched.submit(reqs.back()));
      if (i == 1) {  // staggered arrivals: the last two come once the first two are being served
        ASSERT_TRUE(wait_until([&] { return sched.stats().steps >= 1; })) << "the scheduler ran no step";
      }
    }
    for (auto& r : reqs)
      while (!r->done()) r->wait(100);
  }
  auto solo = load_fixture_engine(/*n_seq=*/1, kServerCtx, nullptr, set);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].size(), static_cast<size_t>(n_gen));
    const auto prompt = tok->encode(prompts[i], true, true);
    std::vector<float> logits;
    solo->eval(0, prompt.data(), static_cast<int>(prompt.size()), 0, false, logits);
    int pos = static_cast<int>(prompt.size());
    for (int s = 0; s < n_gen; ++s) {
      ASSERT_EQ(0, std::memcmp(logits.data(), got[i][s].data(), sizeof(float) * nv)) << "prompt " << i << " step " << s;
      const int32_t t = Sampler::argmax(logits.data(), nv);
      solo->eval(0, &t, 1, pos++, false, logits);
    }
  }
}

TEST_F(Server, GreedyTextSameAloneOrConcurrent) {
  const std::vector<std::string> users = {"Hello there", "Write a poem about the sea", "1 2 3 4 5 6 7 8", "Why?"};
  std::vector<std::string> alone;
  for (const auto& u : users) alone.push_back(post_json("/v1/chat/completions", chat_req(u, 20))["choices"][0]["message"]["content"]);
  std::vector<std::string> together(users.size());
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> th;
    for (size_t i = 0; i < users.size(); ++i)
      th.emplace_back([&, i, round] {
        const bool stream = (i + round) % 2 == 1;
        auto r = post("/v1/chat/completions", chat_req(users[i], 20, stream).dump());
        if (!r || r->status != 200) together[i] = "<failed>";
        else if (stream) together[i] = sse_text(parse_sse(r->body), true);
        else together[i] = json::parse(r->body)["choices"][0]["message"]["content"];
      });
    // Noise: sampled requests sharing the batches.
    for (int k = 0; k < 3; ++k)
      th.emplace_back([&, k] { post("/v1/completions", json{{"prompt", "noise " + std::to_string(k)}, {"max_tokens", 30}, {"temperature", 1.0}}.dump()); });
    for (auto& t : th) t.join();
    for (size_t i = 0; i < users.size(); ++i) EXPECT_EQ(together[i], alone[i]) << users[i] << " (round " << round << ")";
  }
}

// One streamed request through wire format k % 4 (OpenAI chat, Anthropic Messages, OpenAI
// Responses, Ollama chat); the completion tokens it reports, or -1 when the stream is not whole.
static long stream_through(httplib::Client& cl, int k, const std::string& user, int max_tokens) {
  const json msgs = json::array({json{{"role", "user"}, {"content", user}}});
  auto last_json_line = [](const std::string& body, const std::string& prefix) {
    json out;
    for (size_t at = 0; at < body.size();) {
      size_t nl = body.find('\n', at);
      if (nl == std::string::npos) nl = body.size();
      const std::string line = body.substr(at, nl - at);
      if (line.rfind(prefix, 0) == 0) out = json::parse(line.substr(prefix.size()), nullptr, false);
      at = nl + 1;
    }
    return out;
  };
  switch (k % 4) {
    case 0: {
      json req{{"model", "tiny-qwen3moe-seed11"}, {"messages", msgs}, {"max_tokens", max_tokens}, {"temperature", 0.8}, {"stream", true}};
      req["stream_options"] = {{"include_usage", true}};
      auto r = cl.Post("/v1/chat/completions", req.dump(), "application/json");
      if (!r || r->status != 200) return -1;
      const Sse s = parse_sse(r->body);
      if (!s.done || !s.well_framed || s.chunks.empty() || !s.chunks.back().contains("usage")) return -1;
      return s.chunks.back()["usage"]["completion_tokens"].get<long>();
    }
    case 1: {
      json req{{"model", "tiny-qwen3moe-seed11"}, {"messages", msgs}, {"max_tokens", max_tokens}, {"temperature", 0.8}, {"stream", true}};
      auto r = cl.Post("/v1/messages", req.dump(), "application/json");
      if (!r || r->status != 200 || r->body.find("event: message_stop") == std::string::npos) return -1;
      long n = -1;  // the output tokens of the message_delta event
      for (size_t at = r->body.find("\"type\":\"message_delta\""); at != std::string::npos; at = std::string::npos) {
        const size_t b = r->body.rfind("data: ", at), e = r->body.find('\n', at);
        const json d = json::parse(r->body.substr(b + 6, e - b - 6), nullptr, false);
        if (d.is_object()) n = d["usage"]["output_tokens"].get<long>();
      }
      return n;
    }
    case 2: {
      json req{{"model", "tiny-qwen3moe-seed11"}, {"input", user}, {"max_output_tokens", max_tokens}, {"temperature", 0.8}, {"stream", true}};
      auto r = cl.Post("/v1/responses", req.dump(), "application/json");
      if (!r || r->status != 200) return -1;
      const json fin = last_json_line(r->body, "data: ");
      if (!fin.is_object() || (fin["type"] != "response.completed" && fin["type"] != "response.incomplete")) return -1;
      return fin["response"]["usage"]["output_tokens"].get<long>();
    }
    default: {
      json req{{"model", "tiny-qwen3moe-seed11"}, {"messages", msgs}, {"options", {{"num_predict", max_tokens}, {"temperature", 0.8}}}};
      auto r = cl.Post("/api/chat", req.dump(), "application/json");
      if (!r || r->status != 200) return -1;
      const json fin = last_json_line(r->body, "");
      if (!fin.is_object() || fin["done"] != true) return -1;
      return fin["eval_count"].get<long>();
    }
  }
}

// 16 clients stream 20 requests each, through the four wire formats in turn.
TEST_F(Server, LoadTest16StreamingClients) {
  const int clients = 16, per_client = 20;
  // Warm up (scratch buffers, thread pool) before the RSS baseline.
  for (int i = 0; i < 4; ++i) post("/v1/chat/completions", chat_req("warm up", 8, true).dump());
  const uint64_t rss0 = process_rss();
  std::atomic<int> ok{0}, failed{0};
  std::atomic<long> tokens{0};
  const double t0 = now_s();
  std::vector<std::thread> th;
  for (int c = 0; c < clients; ++c)
    th.emplace_back([&, c] {
      auto cl = main_->client();
      for (int k = 0; k < per_client; ++k) {
        const long n = stream_through(*cl, c + k, "client " + std::to_string(c) + " request " + std::to_string(k), 8 + (c + k) % 9);
        if (n <= 0) {
          failed++;
          continue;
        }
        tokens += n;
        ok++;
      }
    });
  for (auto& t : th) t.join();
  const double secs = now_s() - t0;
  const uint64_t rss1 = process_rss();
  std::printf("[load] %d clients x %d streaming requests: %d ok, %d failed, %.2f s, %ld tokens (%.0f tok/s), RSS %.1f -> %.1f MiB\n", clients,
              per_client, ok.load(), failed.load(), secs, tokens.load(), tokens.load() / secs, rss0 / 1048576.0, rss1 / 1048576.0);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(ok.load(), clients * per_client);  // (the time is printed, not asserted: machines differ)
#if defined(__SANITIZE_ADDRESS__)
  // ASan keeps freed memory in quarantine and adds shadow pages: RSS says nothing here.
  std::printf("[load] (AddressSanitizer build: RSS bound not checked)\n");
#else
  EXPECT_LT(static_cast<double>(rss1), static_cast<double>(rss0) + 64.0 * 1048576.0) << "RSS grew";
#endif
  // Slots are free again.
  const auto st = main_->srv->scheduler()->stats();
  EXPECT_EQ(st.queued, 0);
}

TEST(ServerText, StopMatcherHoldsBackPartialMatches) {
  StopMatcher m({"END", "xyz"});
  EXPECT_EQ(m.push("abc E"), "abc ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("Dmore"), "");
  EXPECT_TRUE(m.matched());
  StopMatcher m2({"END"});
  EXPECT_EQ(m2.push("xEN"), "x");
  EXPECT_EQ(m2.push("q"), "ENq");
  EXPECT_EQ(m2.push("E"), "");
  EXPECT_EQ(m2.flush(), "E");
}

TEST(ServerText, ReasoningSplitter) {
  ReasoningSplitter r;
  std::string reasoning, content;
  for (const char* piece : {"  <th", "ink>I am ", "thinking</th", "ink>\n\nThe answer", " is 4."}) {
    auto o = r.push(piece);
    reasoning += o.reasoning;
    content += o.content;
  }
  auto f = r.flush();
  reasoning += f.reasoning;
  content += f.content;
  EXPECT_EQ(reasoning, "I am thinking");
  EXPECT_EQ(content, "The answer is 4.");
  ReasoningSplitter plain;
  EXPECT_EQ(plain.push("no think here").content, "no think here");
  ReasoningSplitter off(false);
  EXPECT_EQ(off.push("<think>x</think>y").content, "<think>x</think>y");
  ReasoningSplitter open(true, /*start_in_think=*/true);
  auto o = open.push("hmm</think>ok");
  EXPECT_EQ(o.reasoning, "hmm");
  EXPECT_EQ(o.content, "ok");
  EXPECT_TRUE(valid_utf8("caf\xC3\xA9"));
  EXPECT_FALSE(valid_utf8("caf\xC3"));
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));  // surrogate
}

}  // namespace
}  // namespace strata::test

namespace strata::test {
namespace {

TEST(ServerChatFormat, TemplateFallbackAndErrors) {
  const std::vector<server::ChatMsg> msgs = {{"system", "S"}, {"user", "U"}};
  server::ChatFormat none;  // no template in the GGUF: ChatML (chat_format_from_gguf puts it there)
  none.model_template = kChatMlTemplate;
  none.chatml_fallback = true;
  none.options.add_generation_prompt = true;
  EXPECT_EQ(server::format_chat(msgs, none).text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(server::format_chat({{"developer", "D"}}, none).text, "<|im_start|>system\nD<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_STREQ(server::chat_format_name(none), "chatml-fallback");
  server::ChatFormat t;
  t.model_template = "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}";
  t.options.bos_token = "<s>";
  const auto p = server::format_chat(msgs, t);
  EXPECT_EQ(p.text, "<s>[system:S][user:U]>");
  EXPECT_FALSE(p.add_special);  // the template wrote the BOS text itself
  server::ChatFormat bad;
  bad.model_template = "{{ raise_exception('roles must alternate') }}";
  EXPECT_THROW(server::format_chat(msgs, bad), std::exception);
}

}  // namespace
}  // namespace strata::test
