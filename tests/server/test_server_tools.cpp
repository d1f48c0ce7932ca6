// Tool calls and structured output over HTTP with the qwen3moe fixture (random weights, plain
// ChatML template: the generic tool format). Constrained decoding makes even a random model
// produce a valid call or a schema-valid object.
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const json kWeather = json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                 "days": {"type": "integer"}}, "required": ["city", "days"], "additionalProperties": false}}})");
const json kAlarm = json::parse(R"({"type": "function", "function": {"name": "set_alarm", "description": "Sets an alarm",
  "parameters": {"type": "object", "properties": {"hour": {"type": "integer", "enum": [6, 7, 8]}, "loud": {"type": "boolean"}},
                 "required": ["hour", "loud"], "additionalProperties": false}}})");

// The subset of JSON Schema these tests use: type object/integer/boolean/string/array, enum,
// required, additionalProperties false, items, maxItems.
bool tools_valid(const json& v, const json& s) {
  if (s.contains("enum")) {
    bool in = false;
    for (const auto& e : s["enum"]) in = in || e == v;
    if (!in) return false;
  }
  const std::string type = s.value("type", "");
  if (type == "object") {
    if (!v.is_object()) return false;
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) {
        if (s.value("additionalProperties", true) == false) return false;
        continue;
      }
      if (!tools_valid(x, s["properties"][k])) return false;
    }
    return true;
  }
  if (type == "integer") return v.is_number_integer();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "array") {
    if (!v.is_array() || v.size() > s.value("maxItems", size_t(1000))) return false;
    for (const auto& x : v)
      if (!tools_valid(x, s["items"])) return false;
    return true;
  }
  return true;
}

class ServerTools : public SharedServerSuite<2, 2048> {
 protected:
  static json post_json(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  static json req(const json& tools, const json& choice, uint64_t seed) {
    return json{{"messages", json::array({json{{"role", "user"}, {"content", "What should I do?"}}})},
                {"tools", tools}, {"tool_choice", choice}, {"max_tokens", 300}, {"seed", seed}, {"temperature", 1.0}};
  }
  static void expect_call(const json& call, const json& tool) {
    SCOPED_TRACE(call.dump());
    EXPECT_EQ(call["type"], "function");
    EXPECT_TRUE(call["id"].is_string() && !call["id"].get<std::string>().empty());
    EXPECT_EQ(call["function"]["name"], tool["function"]["name"]);
    const json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_FALSE(args.is_discarded());
    EXPECT_TRUE(tools_valid(args, tool["function"]["parameters"])) << args.dump();
  }
};

TEST_F(ServerTools, RequiredAndNamedReturnSchemaValidCalls) {
  for (uint64_t seed : {1, 2, 3}) {
    json r = req(json::array({kWeather}), "required", seed);
    r["parallel_tool_calls"] = false;
    const json c = post_json("/v1/chat/completions", r)["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << c.dump();
    EXPECT_TRUE(c["message"]["content"].is_null()) << c.dump();
    const json calls = c["message"].value("tool_calls", json::array());
    ASSERT_EQ(calls.size(), 1u) << c.dump();
    expect_call(calls[0], kWeather);
  }
  // Named: always that function, whatever the others.
  for (uint64_t seed : {4, 5}) {
    json r = req(json::array({kWeather, kAlarm}), json{{"type", "function"}, {"function", {{"name", "set_alarm"}}}}, seed);
    r["parallel_tool_calls"] = false;
    const json c = post_json("/v1/chat/completions", r)["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << c.dump();
    const json calls = c["message"].value("tool_calls", json::array());
    ASSERT_EQ(calls.size(), 1u) << c.dump();
    expect_call(calls[0], kAlarm);
  }
}

TEST_F(ServerTools, StreamedDeltasRebuildTheCalls) {
  json r = req(json::array({kWeather, kAlarm}), "required", 7);
  r["parallel_tool_calls"] = false;
  const json whole = post_json("/v1/chat/completions", r)["choices"][0]["message"];
  r["stream"] = true;
  auto res = post("/v1/chat/completions", r);
  ASSERT_TRUE(res && res->status == 200);
  const Sse sse = parse_sse(res->body);
  ASSERT_TRUE(sse.done && sse.well_framed);
  json calls = json::array();
  std::string finish;
  for (const auto& ch : sse.chunks) {
    const json& c = ch["choices"][0];
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const auto& d : c["delta"]["tool_calls"]) {
      const size_t i = d["index"];
      if (i == calls.size()) {  // the first delta of a call: id, type, name, empty arguments
        ASSERT_TRUE(d.contains("id") && d["type"] == "function" && d["function"].contains("name")) << d.dump();
        EXPECT_EQ(d["function"]["arguments"], "");
        calls.push_back(json{{"id", d["id"]}, {"type", "function"}, {"function", {{"name", d["function"]["name"]}, {"arguments", ""}}}});
        continue;
      }
      ASSERT_LT(i, calls.size()) << d.dump();
      EXPECT_FALSE(d.contains("id")) << d.dump();
      calls[i]["function"]["arguments"] = calls[i]["function"]["arguments"].get<std::string>() + d["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), whole.value("tool_calls", json::array()).size()) << whole.dump();
  ASSERT_EQ(calls.size(), 1u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i]["function"], whole["tool_calls"][i]["function"]) << i;  // same seed: the same calls
    expect_call(calls[i], calls[i]["function"]["name"] == "set_alarm" ? kAlarm : kWeather);
  }
}

TEST_F(ServerTools, ResponseFormatAndGrammar) {
  const json schema = json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "enum": ["ada", "bob"]},
    "count": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "maxItems": 3}},
    "required": ["name", "count"], "additionalProperties": false})");
  json r{{"messages", json::array({json{{"role", "user"}, {"content", "Give me JSON"}}})}, {"max_tokens", 200}, {"temperature", 1.0},
         {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "thing"}, {"schema", schema}}}}}};
  for (uint64_t seed : {11, 12, 13}) {
    r["seed"] = seed;
    const json c = post_json("/v1/chat/completions", r)["choices"][0];
    EXPECT_EQ(c["finish_reason"], "stop") << c.dump();
    const json v = json::parse(c["message"]["content"].get<std::string>(), nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << c.dump();
    EXPECT_TRUE(tools_valid(v, schema)) << v.dump();
  }
  // Streamed: the concatenated content validates too.
  r["stream"] = true;
  auto res = post("/v1/chat/completions", r);
  ASSERT_TRUE(res && res->status == 200);
  std::string text;
  for (const auto& ch : parse_sse(res->body).chunks) text += ch["choices"][0]["delta"].value("content", "");
  const json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << text;
  EXPECT_TRUE(tools_valid(v, schema)) << text;
  // json_object: some JSON object.
  r.erase("stream");
  r["response_format"] = {{"type", "json_object"}};
  r["max_tokens"] = 400;
  r["seed"] = 14;
  const json o = post_json("/v1/chat/completions", r)["choices"][0];
  if (o["finish_reason"] == "stop") {
    EXPECT_TRUE(json::parse(o["message"]["content"].get<std::string>(), nullptr, false).is_object()) << o.dump();
  } else {
    EXPECT_EQ(o["message"]["content"].get<std::string>().rfind("{", 0), 0u) << o.dump();  // cut off by max_tokens, but an object so far
  }
  // A raw GBNF grammar, on completions too.
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    json g{{"max_tokens", 20}, {"temperature", 1.0}, {"seed", 15}, {"grammar", "root ::= (\"yes\" | \"no\") \"!\""}};
    if (std::string(path) == "/v1/completions") g["prompt"] = "Answer:";
    else g["messages"] = json::array({json{{"role", "user"}, {"content", "?"}}});
    const json c = post_json(path, g)["choices"][0];
    const std::string t = c.contains("text") ? c["text"].get<std::string>() : c["message"]["content"].get<std::string>();
    EXPECT_TRUE(t == "yes!" || t == "no!") << path << ": " << t;
  }
}

TEST_F(ServerTools, ChoiceNoneAndGenericAuto) {
  // none: no parsing, no constraint.
  json r = req(json::array({kWeather}), "none", 21);
  r["max_tokens"] = 8;
  const json n = post_json("/v1/chat/completions", r)["choices"][0];
  EXPECT_FALSE(n["message"].contains("tool_calls")) << n.dump();
  EXPECT_TRUE(n["message"]["content"].is_string()) << n.dump();
  EXPECT_NE(n["finish_reason"], "tool_calls");
  // auto with the generic format: the reply is a call or {"response": ...}, shown as content.
  for (uint64_t seed : {22, 23, 24, 25}) {
    const json c = post_json("/v1/chat/completions", req(json::array({kWeather, kAlarm}), "auto", seed))["choices"][0];
    SCOPED_TRACE(c.dump());
    if (c["finish_reason"] == "tool_calls") {
      for (const auto& call : c["message"]["tool_calls"]) expect_call(call, call["function"]["name"] == "set_alarm" ? kAlarm : kWeather);
    } else if (c["finish_reason"] == "stop") {
      EXPECT_FALSE(c["message"].contains("tool_calls"));
      EXPECT_NE(c["message"]["content"].get<std::string>().rfind("{\"response\"", 0), 0u);  // unwrapped
    } else {
      EXPECT_EQ(c["finish_reason"], "length");
    }
  }
}

TEST_F(ServerTools, BadConstraintsAre400sNamingTheField) {
  auto err = [&](const json& patch, const char* path = "/v1/chat/completions") {
    json r{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 2}, {"prompt", "x"}};
    if (std::string(path) == "/v1/chat/completions") r.erase("prompt");
    else r.erase("messages");
    r.merge_patch(patch);
    auto res = post(path, r);
    EXPECT_TRUE(res && res->status == 400) << (res ? res->body : "no response");
    return res ? json::parse(res->body)["error"] : json();
  };
  json e = err({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "object"}, {"patternProperties", {{"^x", {{"type", "string"}}}}}}}}}}}});
  EXPECT_EQ(e["param"], "response_format.json_schema.schema");
  EXPECT_NE(e["message"].get<std::string>().find("patternProperties"), std::string::npos) << e.dump();
  e = err({{"response_format", {{"type", "xml"}}}});
  EXPECT_EQ(e["param"], "response_format.type");
  e = err({{"response_format", {{"type", "json_schema"}}}});
  EXPECT_EQ(e["param"], "response_format.json_schema");
  e = err({{"grammar", "root ::= undefined-rule"}}, "/v1/completions");
  EXPECT_EQ(e["param"], "grammar");
  EXPECT_EQ(e["code"], "invalid_grammar");
  e = err({{"grammar", 5}});
  EXPECT_EQ(e["param"], "grammar");
  e = err({{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(e["param"], "response_format");
  json bad_tool = kWeather;
  bad_tool["function"]["parameters"]["patternProperties"] = {{"^x", {{"type", "string"}}}};
  e = err({{"tools", json::array({kAlarm, bad_tool})}, {"tool_choice", "required"}});
  EXPECT_EQ(e["param"], "tools[1].function.parameters") << e.dump();
  EXPECT_NE(e["message"].get<std::string>().find("patternProperties"), std::string::npos) << e.dump();
  e = err({{"tools", json::array({kAlarm})}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(e["param"], "response_format");
}

}  // namespace
}  // namespace strata::test
