// The Anthropic Messages, OpenAI Responses and Ollama wire formats over HTTP (qwen3moe fixture,
// random weights): each API's error shape for malformed bodies, the streaming event order, and
// streamed text equal to the non-streamed text (greedy) through each adapter.
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

class ServerWire : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_server_fixture()) return;
    server::ServerOptions so;
    so.api_key = "k";
    main_ = new TestServer(so, /*n_seq=*/2, /*n_ctx=*/1024);
  }
  static void TearDownTestSuite() {
    delete main_;
    main_ = nullptr;
  }
  void SetUp() override { SKIP_WITHOUT_SERVER_FIXTURE(); }

  static httplib::Result post(const std::string& path, const std::string& body, const httplib::Headers& h = {{"x-api-key", "k"}}) {
    return main_->client()->Post(path.c_str(), h, body, "application/json");
  }
  static json ok_json(const httplib::Result& r) {
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // {"type": "error", "error": {"type", "message"}}
  static void anthropic_error(const httplib::Result& r, int status, const std::string& type = "invalid_request_error") {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["type"], "error") << r->body;
    EXPECT_EQ(j["error"]["type"], type) << r->body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }
  // {"error": {"message", "type", "param", "code"}}
  static void openai_error(const httplib::Result& r, int status, const std::string& param = {}) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j["error"].is_object()) << r->body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r->body;
    }
  }
  // {"error": "message"}
  static void ollama_error(const httplib::Result& r, int status) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json j = json::parse(r->body);
    ASSERT_TRUE(j["error"].is_string()) << r->body;
    EXPECT_FALSE(j["error"].get<std::string>().empty());
  }
  // "event: X\ndata: {...}\n\n" events: (name, data).
  static std::vector<std::pair<std::string, json>> events(const std::string& body) {
    std::vector<std::pair<std::string, json>> out;
    size_t p = 0;
    while (p < body.size()) {
      const size_t e = body.find("\n\n", p);
      if (e == std::string::npos) break;
      const std::string ev = body.substr(p, e - p);
      p = e + 2;
      const size_t nl = ev.find('\n');
      EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
      if (nl == std::string::npos || ev.rfind("event: ", 0) != 0) continue;
      out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
    }
    EXPECT_EQ(p, body.size()) << "trailing bytes";
    return out;
  }
  static json user(const std::string& text) { return json::array({json{{"role", "user"}, {"content", text}}}); }
  static TestServer* main_;
};
TestServer* ServerWire::main_ = nullptr;

TEST_F(ServerWire, MalformedBodiesGetEachApisErrorShapeAndTheServerStaysUp) {
  const json msg{{"model", "x"}, {"max_tokens", 4}, {"messages", user("hi")}};
  anthropic_error(post("/v1/messages", "{not json"), 400);
  anthropic_error(post("/v1/messages", "[1]"), 400);
  anthropic_error(post("/v1/messages", json{{"messages", user("hi")}}.dump()), 400);  // max_tokens required
  for (const auto& [key, bad] : std::vector<std::pair<std::string, json>>{
           {"messages", "hi"},
           {"messages", json::array({json{{"role", "robot"}, {"content", "x"}}})},
           {"messages", json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "image"}}})}}})},
           {"system", 5},
           {"tools", json::array({json{{"name", "f"}}})},
           {"tool_choice", json{{"type", "tool"}, {"name", "nope"}}},
           {"thinking", json{{"type", "sometimes"}}},
           {"max_tokens", 0},
           {"temperature", "warm"}}) {
    json b = msg;
    b[key] = bad;
    anthropic_error(post("/v1/messages", b.dump()), 400);
  }
  anthropic_error(post("/v1/messages/count_tokens", "{\"messages\": 3}"), 400);
  anthropic_error(post("/v1/messages", msg.dump(), {{"x-api-key", "wrong"}}), 401, "authentication_error");
  anthropic_error(main_->client()->Get("/v1/messages/nothing"), 404, "not_found_error");

  const json rsp{{"input", "hi"}, {"max_output_tokens", 4}};
  openai_error(post("/v1/responses", "{not json"), 400);
  openai_error(post("/v1/responses", json{{"model", "x"}}.dump()), 400, "input");
  for (const auto& [key, bad, param] : std::vector<std::tuple<std::string, json, std::string>>{
           {"previous_response_id", "resp_1", "previous_response_id"},
           {"store", true, "store"},
           {"input", json::array({json{{"type", "image_generation_call"}}}), "input[0].type"},
           {"input", 7, "input"},
           {"tools", json::array({json{{"type", "web_search"}}}), "tools[0].type"},
           {"text", json{{"format", json{{"type", "xml"}}}}, "text.format.type"},
           {"max_output_tokens", -1, "max_output_tokens"}}) {
    json b = rsp;
    b[key] = bad;
    openai_error(post("/v1/responses", b.dump()), 400, param);
  }

  const json chat{{"model", "x"}, {"stream", false}, {"messages", user("hi")}, {"options", {{"num_predict", 3}}}};
  ollama_error(post("/api/chat", "{not json"), 400);
  // No messages: Ollama's "load the model" request, answered at once.
  const json load = ok_json(post("/api/chat", json{{"model", "x"}, {"stream", false}}.dump()));
  EXPECT_EQ(load["done_reason"], "load");
  EXPECT_EQ(load["done"], true);
  for (const auto& [key, bad] : std::vector<std::pair<std::string, json>>{{"messages", 1},
                                                                           {"options", "fast"},
                                                                           {"options", json{{"num_ctx", 1 << 20}}},
                                                                           {"options", json{{"temperature", "x"}}},
                                                                           {"format", 12},
                                                                           {"think", 3},
                                                                           {"messages", json::array({json{{"role", "user"}, {"content", "x"}, {"images", {"aGk="}}}})}}) {
    json b = chat;
    b[key] = bad;
    ollama_error(post("/api/chat", b.dump()), 400);
  }
  ollama_error(post("/api/generate", json{{"model", "x"}}.dump()), 400);
  ollama_error(post("/api/generate", json{{"prompt", "x"}, {"suffix", "y"}}.dump()), 400);
  ollama_error(post("/api/show", "{}"), 400);
  ollama_error(main_->client()->Get("/api/nothing"), 404);

  // Still serving, in every format.
  EXPECT_EQ(ok_json(post("/v1/messages", msg.dump()))["type"], "message");
  EXPECT_EQ(ok_json(post("/v1/responses", rsp.dump()))["object"], "response");
  EXPECT_EQ(ok_json(post("/api/chat", chat.dump()))["done"], true);
}

TEST_F(ServerWire, AnyModelNameIsAcceptedWithoutStrictModel) {
  const json j = ok_json(post("/v1/chat/completions", json{{"model", "gpt-17"}, {"max_tokens", 1}, {"messages", user("hi")}}.dump(),
                              {{"Authorization", "Bearer k"}}));
  EXPECT_EQ(j["object"], "chat.completion");
}

TEST_F(ServerWire, AnthropicStreamEventsInOrderAndSameTextAsNonStreaming) {
  json b{{"model", "claude"}, {"max_tokens", 6}, {"temperature", 0}, {"system", "Be brief."}, {"messages", user("Tell me a story")}};
  const json whole = ok_json(post("/v1/messages", b.dump()));
  const json count = ok_json(post("/v1/messages/count_tokens", json{{"model", "claude"}, {"system", "Be brief."}, {"messages", user("Tell me a story")}}.dump()));
  EXPECT_EQ(count["input_tokens"], whole["usage"]["input_tokens"]);
  EXPECT_GT(count["input_tokens"].get<int>(), 0);
  b["stream"] = true;
  auto r = post("/v1/messages", b.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto ev = events(r->body);
  ASSERT_GE(ev.size(), 3u);
  for (const auto& [name, data] : ev) EXPECT_EQ(data["type"], name);
  EXPECT_EQ(ev.front().first, "message_start");
  EXPECT_EQ(ev.front().second["message"]["usage"]["input_tokens"], whole["usage"]["input_tokens"]);
  EXPECT_EQ(ev[ev.size() - 2].first, "message_delta");
  EXPECT_EQ(ev.back().first, "message_stop");
  EXPECT_EQ(ev[ev.size() - 2].second["delta"]["stop_reason"], whole["stop_reason"]);
  EXPECT_EQ(ev[ev.size() - 2].second["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
  // Blocks: start, deltas of its kind, stop, with indexes 0, 1, ...
  std::string text;
  int open = -1, next = 0;
  for (size_t i = 1; i + 2 < ev.size(); ++i) {
    const auto& [name, d] = ev[i];
    if (name == "content_block_start") {
      EXPECT_EQ(open, -1);
      EXPECT_EQ(d["index"], next);
      open = next++;
    } else if (name == "content_block_delta") {
      EXPECT_EQ(d["index"], open);
      if (d["delta"]["type"] == "text_delta") text += d["delta"]["text"].get<std::string>();
    } else {
      EXPECT_EQ(name, "content_block_stop");
      EXPECT_EQ(d["index"], open);
      open = -1;
    }
  }
  EXPECT_EQ(open, -1);
  std::string whole_text;
  for (const auto& c : whole["content"])
    if (c["type"] == "text") whole_text += c["text"].get<std::string>();
  EXPECT_EQ(text, whole_text);
}

TEST_F(ServerWire, ResponsesStreamIsNumberedAndEndsWithTheWholeResponse) {
  json b{{"model", "m"}, {"max_output_tokens", 6}, {"temperature", 0}, {"instructions", "Be brief."}, {"input", "Tell me a story"}};
  const json whole = ok_json(post("/v1/responses", b.dump()));
  EXPECT_EQ(whole["id"].get<std::string>().rfind("resp_", 0), 0u);
  ASSERT_FALSE(whole["output"].empty());
  const json& item = whole["output"].back();
  EXPECT_EQ(item["id"].get<std::string>().rfind("msg_", 0), 0u);
  b["stream"] = true;
  auto r = post("/v1/responses", b.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto ev = events(r->body);
  ASSERT_GE(ev.size(), 3u);
  std::string text;
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].second["type"], ev[i].first);
    EXPECT_EQ(ev[i].second["sequence_number"], i);
    if (ev[i].first == "response.output_text.delta") text += ev[i].second["delta"].get<std::string>();
  }
  EXPECT_EQ(ev[0].first, "response.created");
  EXPECT_EQ(ev[1].first, "response.in_progress");
  const std::string last = ev.back().first;
  EXPECT_TRUE(last == "response.completed" || last == "response.incomplete") << last;
  const json& fin = ev.back().second["response"];
  EXPECT_EQ(fin["status"], whole["status"]);
  ASSERT_FALSE(fin["output"].empty());
  EXPECT_EQ(fin["output"].back()["content"][0]["text"], item["content"][0]["text"]);
  EXPECT_EQ(text, item["content"][0]["text"]);
  // The same counts, except the prompt tokens the second request found cached (prefix reuse).
  json a = fin["usage"], w = whole["usage"];
  EXPECT_LE(a["input_tokens_details"]["cached_tokens"].get<int>(), a["input_tokens"].get<int>());
  a["input_tokens_details"].erase("cached_tokens");
  w["input_tokens_details"].erase("cached_tokens");
  EXPECT_EQ(a, w);
}

TEST_F(ServerWire, OllamaNdjsonStreamHasTheSameTextAndEndsDone) {
  json b{{"model", "strata"}, {"messages", user("Tell me a story")}, {"options", {{"num_predict", 6}, {"temperature", 0}}}};
  b["stream"] = false;
  const json whole = ok_json(post("/api/chat", b.dump()));
  EXPECT_EQ(whole["done"], true);
  EXPECT_EQ(whole["eval_count"], 6);
  b.erase("stream");  // streaming is the default
  auto r = post("/api/chat", b.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string text;
  std::vector<json> lines;
  for (size_t p = 0; p < r->body.size();) {
    const size_t e = r->body.find('\n', p);
    ASSERT_NE(e, std::string::npos) << "unterminated line";
    lines.push_back(json::parse(r->body.substr(p, e - p)));
    p = e + 1;
  }
  ASSERT_GE(lines.size(), 2u);
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["done"], false);
    text += lines[i]["message"]["content"].get<std::string>();
  }
  EXPECT_EQ(lines.back()["done"], true);
  EXPECT_EQ(lines.back()["done_reason"], "length");
  EXPECT_EQ(text, whole["message"]["content"]);
  // generate and the listing endpoints.
  const json g = ok_json(post("/api/generate", json{{"prompt", "Hello"}, {"stream", false}, {"options", {{"num_predict", 2}}}}.dump()));
  EXPECT_EQ(g["eval_count"], 2);
  EXPECT_TRUE(g["response"].is_string());
  auto c = main_->client();
  c->set_default_headers({{"x-api-key", "k"}});
  EXPECT_EQ(ok_json(c->Get("/api/tags"))["models"][0]["name"], main_->srv->model_id());
  EXPECT_EQ(ok_json(c->Get("/api/ps"))["models"][0]["context_length"], 1024);
  EXPECT_TRUE(ok_json(c->Get("/api/version"))["version"].is_string());
  EXPECT_TRUE(ok_json(post("/api/show", json{{"model", "strata"}}.dump()))["capabilities"].is_array());
}

}  // namespace
}  // namespace strata::test
