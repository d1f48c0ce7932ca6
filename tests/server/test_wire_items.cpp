// Issue 34's wire-format items over HTTP (qwen3moe fixture, random weights, the generic tool
// format): a tool call cut off by max_tokens comes out as calls in every API (item 1), CORS
// (item 4), Responses' incomplete items and function_call_arguments.done's name (item 5), Ollama's
// measured timings and its load request (items 6, 8).
#include "server/http_policy.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const json kCity = json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                 "note": {"type": "string", "maxLength": 12}}, "required": ["city", "note"], "additionalProperties": false}}})");

// "event: X\ndata: {...}\n\n" -> (X, data).
std::vector<std::pair<std::string, json>> named_events(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  for (size_t p = 0; p < body.size();) {
    const size_t e = body.find("\n\n", p);
    if (e == std::string::npos) break;
    const std::string ev = body.substr(p, e - p);
    p = e + 2;
    const size_t nl = ev.find('\n');
    if (nl == std::string::npos || ev.rfind("event: ", 0) != 0) continue;
    out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
  }
  return out;
}

std::vector<json> ndjson_lines(const std::string& body) {
  std::vector<json> lines;
  for (size_t p = 0; p < body.size();) {
    const size_t e = body.find('\n', p);
    if (e == std::string::npos) break;
    lines.push_back(json::parse(body.substr(p, e - p)));
    p = e + 1;
  }
  return lines;
}

class WireItems : public SharedServerSuite<2, 2048> {
 protected:
  static json post_json(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  static json messages() { return json::array({json{{"role", "user"}, {"content", "Weather in Paris?"}}}); }
  // A forced call (the generic format's JSON, arguments by the tool's schema), greedy.
  static json call_request(int max_tokens) {
    return json{{"messages", messages()}, {"tools", json::array({kCity})}, {"tool_choice", "required"}, {"parallel_tool_calls", false},
                {"max_tokens", max_tokens}, {"temperature", 0}};
  }
};

// Item 1: at every cut of a forced call the reply has no content (the call's syntax never leaks),
// finish_reason stays "length", and what there is of the call is a call to the tool; streamed
// deltas rebuild the same call.
TEST_F(WireItems, ToolCallCutByMaxTokensComesOutAsCallsInEveryApi) {
  const json whole = post_json("/v1/chat/completions", call_request(200));
  ASSERT_EQ(whole["choices"][0]["finish_reason"], "tool_calls") << whole.dump();
  const int n = whole["usage"]["completion_tokens"].get<int>();
  ASSERT_GT(n, 4);
  int with_call = 0;
  for (int cut = 1; cut < n; ++cut) {
    SCOPED_TRACE("max_tokens " + std::to_string(cut));
    const json r = post_json("/v1/chat/completions", call_request(cut));
    const json& ch = r["choices"][0];
    EXPECT_EQ(ch["finish_reason"], "length");
    EXPECT_TRUE(ch["message"]["content"].is_null() || ch["message"]["content"] == "") << ch.dump();
    if (!ch["message"].contains("tool_calls")) continue;
    ++with_call;
    ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u);
    const json& call = ch["message"]["tool_calls"][0];
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_TRUE(json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false).is_object()) << "the generic format's arguments are closed";
  }
  EXPECT_GT(with_call, 0) << "no cut came after the name";
  // One cut inside the arguments (the last one), through every API.
  const int cut = n - 1;
  const json r = post_json("/v1/chat/completions", call_request(cut));
  const json call = r["choices"][0]["message"]["tool_calls"][0];
  json sreq = call_request(cut);
  sreq["stream"] = true;
  auto sr = post("/v1/chat/completions", sreq);
  ASSERT_TRUE(sr && sr->status == 200);
  const Sse s = parse_sse(sr->body);
  std::string finish, args, name;
  EXPECT_EQ(sse_text(s, true, &finish), "");
  EXPECT_EQ(finish, "length");
  for (const auto& c : s.chunks)
    for (const auto& tc : c["choices"][0]["delta"].value("tool_calls", json::array())) {
      if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
      args += tc["function"].value("arguments", "");
    }
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, call["function"]["arguments"]);

  // Each API renders its own prompt: its whole call's length first, then one token short of it.
  json ab{{"messages", messages()}, {"max_tokens", 200}, {"temperature", 0},
          {"tools", json::array({json{{"name", "get_weather"}, {"input_schema", kCity["function"]["parameters"]}}})},
          {"tool_choice", json{{"type", "any"}, {"disable_parallel_tool_use", true}}}};
  const json aw = post_json("/v1/messages", ab);
  ASSERT_EQ(aw["stop_reason"], "tool_use") << aw.dump();
  ab["max_tokens"] = aw["usage"]["output_tokens"].get<int>() - 1;
  const json am = post_json("/v1/messages", ab);
  EXPECT_EQ(am["stop_reason"], "max_tokens");
  ASSERT_FALSE(am["content"].empty());
  EXPECT_EQ(am["content"].back()["type"], "tool_use") << am.dump();
  EXPECT_EQ(am["content"].back()["name"], "get_weather");
  EXPECT_TRUE(am["content"].back()["input"].is_object());
  for (const auto& b : am["content"]) EXPECT_NE(b["type"], "text") << am.dump();

  json rb{{"input", "Weather in Paris?"}, {"max_output_tokens", 200}, {"temperature", 0}, {"tool_choice", "required"}, {"parallel_tool_calls", false},
          {"tools", json::array({json{{"type", "function"}, {"name", "get_weather"}, {"parameters", kCity["function"]["parameters"]}}})}};
  const json rw = post_json("/v1/responses", rb);
  ASSERT_EQ(rw["status"], "completed") << rw.dump();
  rb["max_output_tokens"] = rw["usage"]["output_tokens"].get<int>() - 1;
  const json rsp = post_json("/v1/responses", rb);
  EXPECT_EQ(rsp["status"], "incomplete");
  ASSERT_FALSE(rsp["output"].empty());
  EXPECT_EQ(rsp["output"].back()["type"], "function_call") << rsp.dump();
  EXPECT_EQ(rsp["output"].back()["name"], "get_weather");
  EXPECT_EQ(rsp["output"].back()["status"], "incomplete");
  for (const auto& it : rsp["output"]) EXPECT_NE(it["type"], "message") << rsp.dump();

  json ob{{"messages", messages()}, {"stream", false}, {"tools", json::array({kCity})}, {"tool_choice", "required"}, {"parallel_tool_calls", false},
          {"options", {{"num_predict", 200}, {"temperature", 0}}}};
  const json ow = post_json("/api/chat", ob);
  ASSERT_EQ(ow["done_reason"], "stop") << ow.dump();
  ob["options"]["num_predict"] = ow["eval_count"].get<int>() - 1;
  const json ol = post_json("/api/chat", ob);
  EXPECT_EQ(ol["done_reason"], "length");
  EXPECT_EQ(ol["message"]["content"], "");
  ASSERT_EQ(ol["message"]["tool_calls"].size(), 1u) << ol.dump();
  EXPECT_EQ(ol["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(ol["message"]["tool_calls"][0]["function"]["arguments"].is_object());
}

// Item 5: at max_output_tokens the message item is incomplete too (streamed and not); a call's
// function_call_arguments.done names the function.
TEST_F(WireItems, ResponsesIncompleteMessageAndArgumentsDoneName) {
  json b{{"input", "Tell me a story"}, {"max_output_tokens", 3}, {"temperature", 0}};
  const json whole = post_json("/v1/responses", b);
  EXPECT_EQ(whole["status"], "incomplete");
  EXPECT_EQ(whole["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(whole["output"].back()["type"], "message");
  EXPECT_EQ(whole["output"].back()["status"], "incomplete");
  EXPECT_TRUE(whole["usage"]["input_tokens_details"]["cached_tokens"].is_number_integer());
  EXPECT_TRUE(whole["usage"]["output_tokens_details"]["reasoning_tokens"].is_number_integer());
  b["stream"] = true;
  auto r = post("/v1/responses", b);
  ASSERT_TRUE(r && r->status == 200);
  const auto ev = named_events(r->body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back().first, "response.incomplete");
  EXPECT_EQ(ev.back().second["response"]["output"].back()["status"], "incomplete");
  bool item_done = false;
  for (const auto& [name, d] : ev) {
    if (name != "response.output_item.done" || d["item"]["type"] != "message") continue;
    item_done = true;
    EXPECT_EQ(d["item"]["status"], "incomplete");
  }
  EXPECT_TRUE(item_done);

  json tools{{"input", "Weather?"}, {"max_output_tokens", 200}, {"temperature", 0}, {"stream", true}, {"tool_choice", "required"}, {"parallel_tool_calls", false},
             {"tools", json::array({json{{"type", "function"}, {"name", "get_weather"}, {"parameters", kCity["function"]["parameters"]}, {"strict", true}}})}};
  auto tr = post("/v1/responses", tools);
  ASSERT_TRUE(tr && tr->status == 200);
  int done = 0;
  for (const auto& [name, d] : named_events(tr->body)) {
    if (name == "response.function_call_arguments.done") {
      ++done;
      EXPECT_EQ(d["name"], "get_weather") << d.dump();
      EXPECT_TRUE(json::parse(d["arguments"].get<std::string>(), nullptr, false).is_object());
    }
    if (name == "response.completed") {
      const json& t = d["response"]["tools"][0];
      EXPECT_EQ(t["strict"], true);
      EXPECT_EQ(t["name"], "get_weather");
      EXPECT_TRUE(t["description"].is_null());
    }
  }
  EXPECT_EQ(done, 1);
  tools.erase("stream");
  tools["tools"][0].erase("strict");
  EXPECT_EQ(post_json("/v1/responses", tools)["tools"][0]["strict"], false) << "the schema requires strict";
}

// Item 6: Ollama's durations are measured on the engine thread: prompt eval > 0 (prompt tokens
// were evaluated), eval > 0 (tokens were generated), and the total covers load + prompt + eval.
TEST_F(WireItems, OllamaTimingsAreMeasured) {
  auto check = [](const json& j) {
    SCOPED_TRACE(j.dump());
    for (const char* k : {"total_duration", "load_duration", "prompt_eval_duration", "eval_duration", "prompt_eval_count", "eval_count"})
      ASSERT_TRUE(j[k].is_number_integer()) << k;
    EXPECT_GT(j["prompt_eval_count"].get<int64_t>(), 0);
    EXPECT_GT(j["prompt_eval_duration"].get<int64_t>(), 0);
    EXPECT_EQ(j["eval_count"], 8);
    EXPECT_GT(j["eval_duration"].get<int64_t>(), 0);
    EXPECT_GE(j["load_duration"].get<int64_t>(), 0);
    EXPECT_GE(j["total_duration"].get<int64_t>(),
              j["load_duration"].get<int64_t>() + j["prompt_eval_duration"].get<int64_t>() + j["eval_duration"].get<int64_t>());
    EXPECT_LT(j["eval_duration"].get<int64_t>(), j["total_duration"].get<int64_t>());
  };
  const json opts{{"num_predict", 8}, {"temperature", 0}, {"stop", json::array()}};
  check(post_json("/api/generate", json{{"prompt", "Tell me a long story about the sea"}, {"stream", false}, {"options", opts}}));
  auto r = post("/api/chat", json{{"messages", json::array({json{{"role", "user"}, {"content", "A story, please"}}})}, {"options", opts}});
  ASSERT_TRUE(r && r->status == 200);
  const auto lines = ndjson_lines(r->body);
  ASSERT_FALSE(lines.empty());
  check(lines.back());
  // Item 8: /api/chat without messages loads the model: 200, done, done_reason "load".
  for (const json& body : {json{{"model", "m"}}, json{{"model", "m"}, {"messages", json::array()}, {"stream", false}}}) {
    const json j = post_json("/api/chat", body);
    EXPECT_EQ(j["done"], true);
    EXPECT_EQ(j["done_reason"], "load");
    EXPECT_EQ(j["message"]["content"], "");
  }
}

TEST(WireCors, ParsesOriginListsAndRefusesMalformedOnes) {
  using server::cors_allows;
  using server::parse_cors;
  const auto list = parse_cors("https://app.example, http://localhost:3000/");
  EXPECT_TRUE(cors_allows(list, "https://app.example"));
  EXPECT_TRUE(cors_allows(list, "HTTPS://APP.example"));
  EXPECT_TRUE(cors_allows(list, "http://localhost:3000"));
  EXPECT_FALSE(cors_allows(list, "http://localhost:3001"));
  EXPECT_FALSE(cors_allows(list, "https://app.example.evil"));
  EXPECT_FALSE(cors_allows(list, ""));
  EXPECT_TRUE(cors_allows(parse_cors("*"), "https://anything.example"));
  EXPECT_FALSE(cors_allows({}, "https://app.example"));
  for (const char* bad : {"", ",", "app.example", "https://app.example/path", "://x"}) EXPECT_THROW(parse_cors(bad), std::invalid_argument) << bad;
}

// Item 4: without --cors no CORS headers and preflights are refused; with it, allowed origins get
// the preflight's allow headers and Access-Control-Allow-Origin on responses (streams included),
// other origins stay refused by the keyless loopback server.
TEST_F(WireItems, CorsPreflightAndAllowOrigin) {
  const json body{{"messages", messages()}, {"max_tokens", 2}};
  auto preflight = [](const TestServer& s, const std::string& origin) {
    return s.client()->Options("/v1/chat/completions", {{"Origin", origin}, {"Access-Control-Request-Method", "POST"},
                                                        {"Access-Control-Request-Headers", "content-type, authorization"}});
  };
  for (const char* origin : {"https://app.example", "http://localhost:3000"}) {
    auto p = preflight(*ts_, origin);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->status, 403) << origin;
    EXPECT_FALSE(p->has_header("Access-Control-Allow-Origin"));
  }
  auto plain = post("/v1/chat/completions", body, {{"Origin", "http://localhost:3000"}});
  ASSERT_TRUE(plain && plain->status == 200);
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin"));

  server::ServerOptions so;
  so.cors = server::parse_cors("https://app.example");
  TestServer cors(so, /*n_seq=*/1, /*n_ctx=*/512);
  auto p = preflight(cors, "https://app.example");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 204);
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(p->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Headers"), "content-type, authorization");
  EXPECT_EQ(p->get_header_value("Access-Control-Max-Age"), "600");
  auto other = preflight(cors, "https://evil.example");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 403);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  for (bool stream : {false, true}) {
    json b = body;
    b["stream"] = stream;
    auto r = cors.client()->Post("/v1/chat/completions", {{"Origin", "https://app.example"}}, b.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example") << "stream " << stream;
    auto evil = cors.client()->Post("/v1/chat/completions", {{"Origin", "https://evil.example"}}, b.dump(), "application/json");
    ASSERT_TRUE(evil);
    EXPECT_EQ(evil->status, 403);
    EXPECT_FALSE(evil->has_header("Access-Control-Allow-Origin"));
  }
  auto models = cors.client()->Get("/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(models && models->status == 200);
  EXPECT_EQ(models->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
}

}  // namespace
}  // namespace strata::test
