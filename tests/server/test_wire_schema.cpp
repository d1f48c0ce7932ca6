// Every response and stream event of /v1/chat/completions and /v1/completions checked against
// JSON Schemas written from the OpenAI API reference's field lists (tests/server/schemas/: required
// fields, nullable ones, enums), and the spec fields of issue 34 item 8: message.refusal and
// logprobs.refusal null, usage null on every chunk before the usage chunk, one choice per prompt.
#include <fstream>
#include <sstream>

#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

json load_schema(const std::string& name) {
  const std::string path = std::string(STRATA_TEST_DATA_DIR) + "/../server/schemas/" + name + ".json";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

bool schema_type_is(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  ADD_FAILURE() << "schema type '" << t << "' is not in the validator's subset";
  return false;
}

// The subset of JSON Schema the files use: type (a name or a list), enum, required, properties,
// items, $ref to #/definitions/NAME. Problems are appended to `errs` with their path.
void schema_validate(const json& v, const json& s, const json& root, const std::string& path, std::vector<std::string>& errs) {
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"].get<std::string>();
    const std::string prefix = "#/definitions/";
    ASSERT_EQ(ref.rfind(prefix, 0), 0u) << ref;
    return schema_validate(v, root["definitions"][ref.substr(prefix.size())], root, path, errs);
  }
  if (s.contains("type")) {
    const json types = s["type"].is_array() ? s["type"] : json::array({s["type"]});
    bool ok = false;
    for (const auto& t : types) ok = ok || schema_type_is(v, t.get<std::string>());
    if (!ok) return errs.push_back(path + ": " + v.dump().substr(0, 80) + " is not of type " + types.dump());
    if (v.is_null()) return;
  }
  if (s.contains("enum")) {
    bool in = false;
    for (const auto& e : s["enum"]) in = in || e == v;
    if (!in) return errs.push_back(path + ": " + v.dump() + " is not one of " + s["enum"].dump());
  }
  if (v.is_object()) {
    for (const auto& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) errs.push_back(path + ": required field '" + r.get<std::string>() + "' is missing");
    if (s.contains("properties"))
      for (const auto& [k, sub] : s["properties"].items())
        if (v.contains(k)) schema_validate(v[k], sub, root, path + "." + k, errs);
  }
  if (v.is_array() && s.contains("items"))
    for (size_t i = 0; i < v.size(); ++i) schema_validate(v[i], s["items"], root, path + "[" + std::to_string(i) + "]", errs);
}

void expect_valid(const json& v, const json& schema, const std::string& what) {
  std::vector<std::string> errs;
  schema_validate(v, schema, schema, "$", errs);
  std::string all;
  for (const auto& e : errs) all += "\n  " + e;
  EXPECT_TRUE(errs.empty()) << what << " does not follow its schema:" << all << "\n" << v.dump().substr(0, 2000);
}

const json kTool = json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]}}, "required": ["city"],
                 "additionalProperties": false}}})");

class WireSchema : public SharedServerSuite<4, 1024> {
 protected:
  static json post_json(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  static Sse post_sse(const std::string& path, json body) {
    body["stream"] = true;
    auto r = post(path, body);
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    Sse s = r ? parse_sse(r->body) : Sse{};
    EXPECT_TRUE(s.done && s.well_framed);
    return s;
  }
  static json chat(const std::string& text) {
    return json{{"messages", json::array({json{{"role", "user"}, {"content", text}}})}, {"max_tokens", 12}, {"temperature", 0}};
  }
};

TEST_F(WireSchema, ChatResponsesAndChunksFollowTheSchemas) {
  const json completion = load_schema("chat.completion"), chunk = load_schema("chat.completion.chunk");
  std::vector<json> bodies = {chat("Hello"), chat("Count to five")};
  bodies[1]["logprobs"] = true;
  bodies[1]["top_logprobs"] = 2;
  bodies[1]["n"] = 2;
  json tools = chat("Weather?");
  tools["tools"] = json::array({kTool});
  tools["tool_choice"] = "required";
  tools["max_tokens"] = 60;
  bodies.push_back(tools);
  for (size_t b = 0; b < bodies.size(); ++b) {
    SCOPED_TRACE("request " + std::to_string(b));
    const json r = post_json("/v1/chat/completions", bodies[b]);
    expect_valid(r, completion, "chat.completion");
    for (const auto& c : r["choices"]) {
      EXPECT_TRUE(c["message"].contains("refusal") && c["message"]["refusal"].is_null());
      if (b == 1) {
        EXPECT_TRUE(c["logprobs"].contains("refusal") && c["logprobs"]["refusal"].is_null());
      }
    }
    if (b == 2) {
      EXPECT_FALSE(r["choices"][0]["message"]["tool_calls"].empty());
    }
    json streamed = bodies[b];
    streamed["stream_options"] = {{"include_usage", true}};
    const Sse s = post_sse("/v1/chat/completions", streamed);
    ASSERT_GE(s.chunks.size(), 2u);
    for (size_t i = 0; i < s.chunks.size(); ++i) {
      expect_valid(s.chunks[i], chunk, "chunk " + std::to_string(i));
      // include_usage: null on every chunk before the last; the last has the usage and no choices.
      ASSERT_TRUE(s.chunks[i].contains("usage")) << s.chunks[i].dump();
      if (i + 1 < s.chunks.size()) {
        EXPECT_TRUE(s.chunks[i]["usage"].is_null()) << s.chunks[i].dump();
      }
    }
    EXPECT_TRUE(s.chunks.back()["usage"].is_object());
    EXPECT_TRUE(s.chunks.back()["choices"].empty());
    // Without include_usage no chunk has the field.
    json plain = bodies[b];
    for (const auto& c : post_sse("/v1/chat/completions", plain).chunks) EXPECT_FALSE(c.contains("usage")) << c.dump();
  }
}

TEST_F(WireSchema, CompletionsFollowTheSchemaWithSeveralPromptsAndEcho) {
  const json schema = load_schema("text_completion");
  const std::vector<std::string> prompts = {"The sky is", "One, two,", "Hello"};
  std::vector<std::string> alone;
  for (const auto& p : prompts) {
    const json r = post_json("/v1/completions", json{{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}});
    expect_valid(r, schema, "text_completion");
    alone.push_back(r["choices"][0]["text"].get<std::string>());
  }
  // Several prompts, submitted together (the engine batches them): one choice per prompt, in order,
  // each the same text as alone; n = 2: index = prompt x 2 + choice.
  json many{{"prompt", prompts}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 1}};
  const json r = post_json("/v1/completions", many);
  expect_valid(r, schema, "text_completion of 3 prompts");
  ASSERT_EQ(r["choices"].size(), 3u);
  int prompt_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_EQ(r["choices"][i]["text"], alone[i]) << "prompt " << i;
    prompt_tokens += json::parse(ts_->client()->Post("/tokenize", json{{"content", prompts[i]}, {"add_special", true}}.dump(), "application/json")->body)["tokens"].size();
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens);
  many["n"] = 2;
  many.erase("logprobs");
  const json r2 = post_json("/v1/completions", many);
  ASSERT_EQ(r2["choices"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r2["choices"][i]["index"], i);
    if (i % 2 == 0) {
      EXPECT_EQ(r2["choices"][i]["text"], alone[i / 2]) << "choice 0 of a prompt keeps the seed: the same greedy text";
    }
  }
  const Sse s = post_sse("/v1/completions", many);
  std::vector<std::string> streamed(6);
  for (const auto& c : s.chunks) {
    expect_valid(c, schema, "text_completion chunk");
    for (const auto& ch : c["choices"]) streamed[ch["index"].get<size_t>()] += ch["text"].get<std::string>();
  }
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(streamed[i], r2["choices"][i]["text"]) << "choice " << i;
  // echo: the prompt comes first, streamed and not.
  const json echo = post_json("/v1/completions", json{{"prompt", prompts[0]}, {"max_tokens", 8}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(echo["choices"][0]["text"], prompts[0] + alone[0]);
  const Sse es = post_sse("/v1/completions", json{{"prompt", prompts[0]}, {"max_tokens", 8}, {"temperature", 0}, {"echo", true}});
  ASSERT_FALSE(es.chunks.empty());
  EXPECT_EQ(es.chunks[0]["choices"][0]["text"], prompts[0]);
  EXPECT_EQ(sse_text(es, /*chat=*/false), prompts[0] + alone[0]);
}

// Item 3: echo with logprobs gives the prompt's tokens first, the first one's logprob null; the
// alternatives at prompt position i+1 are what a request whose prompt ends at token i generates
// first (the same model rows), and the generated part is the plain request's.
TEST_F(WireSchema, EchoWithLogprobsScoresThePromptTokens) {
  const json schema = load_schema("text_completion");
  const json tk = post_json("/tokenize", json{{"content", "The quick brown fox jumps over the lazy dog"}, {"add_special", true}});
  const std::vector<int> ids = tk["tokens"].get<std::vector<int>>();
  const size_t n = ids.size();
  ASSERT_GE(n, 4u);
  auto top1 = [](const json& top) {  // {piece: logprob} with one entry
    EXPECT_EQ(top.size(), 1u) << top.dump();
    return top.empty() ? std::make_pair(std::string(), 0.0) : std::make_pair(top.begin().key(), top.begin().value().get<double>());
  };
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    const json body{{"prompt", ids}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 2}, {"temperature", 0}};
    json lp{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
    std::string text;
    if (stream) {
      const Sse s = post_sse("/v1/completions", body);
      for (const auto& c : s.chunks) {
        expect_valid(c, schema, "echo chunk");
        for (const auto& ch : c["choices"]) {
          text += ch["text"].get<std::string>();
          if (ch["logprobs"].is_null()) continue;
          for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
            for (const auto& v : ch["logprobs"][k]) lp[k].push_back(v);
        }
      }
    } else {
      const json r = post_json("/v1/completions", body);
      expect_valid(r, schema, "echo response");
      lp = r["choices"][0]["logprobs"];
      text = r["choices"][0]["text"];
    }
    ASSERT_EQ(lp["tokens"].size(), n + 2) << lp.dump();
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    // The prompt's pieces are its text (ASCII here; a generated piece may end inside a UTF-8
    // character and show U+FFFD), offsets count their bytes.
    std::string pieces;
    for (size_t i = 0; i < lp["tokens"].size(); ++i) {
      if (i < n) {
        EXPECT_EQ(lp["text_offset"][i], pieces.size()) << i;
        pieces += lp["tokens"][i].get<std::string>();
      }
      if (i > 0) {
        EXPECT_GE(lp["text_offset"][i].get<size_t>(), lp["text_offset"][i - 1].get<size_t>()) << i;
        EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
      }
    }
    EXPECT_EQ(pieces, "The quick brown fox jumps over the lazy dog");
    EXPECT_EQ(text.substr(0, pieces.size()), pieces);
    for (size_t i : {size_t(0), n / 2, n - 2, n - 1}) {
      const std::vector<int> head(ids.begin(), ids.begin() + static_cast<long>(i) + 1);
      const json c = post_json("/v1/completions", json{{"prompt", head}, {"logprobs", 1}, {"max_tokens", 1}, {"temperature", 0}});
      const auto want = top1(c["choices"][0]["logprobs"]["top_logprobs"][0]);
      const auto got = top1(lp["top_logprobs"][i + 1]);
      EXPECT_EQ(got.first, want.first) << "position " << i + 1;
      EXPECT_NEAR(got.second, want.second, 1e-5) << "position " << i + 1;
    }
    const json plain = post_json("/v1/completions", json{{"prompt", ids}, {"logprobs", 1}, {"max_tokens", 2}, {"temperature", 0}});
    for (size_t g = 0; g < 2; ++g) EXPECT_EQ(lp["tokens"][n + g], plain["choices"][0]["logprobs"]["tokens"][g]);
  }
}

TEST_F(WireSchema, BadPromptListsAre400sNamingTheField) {
  auto status_param = [](const json& body) {
    auto r = post("/v1/completions", body);
    if (!r) return std::make_pair(0, std::string());
    const json j = json::parse(r->body, nullptr, false);
    return std::make_pair(r->status, j.is_object() && j.contains("error") && j["error"]["param"].is_string() ? j["error"]["param"].get<std::string>() : "");
  };
  EXPECT_EQ(status_param(json{{"prompt", json::array({"a", 5})}}), std::make_pair(400, std::string("prompt[1]")));
  EXPECT_EQ(status_param(json{{"prompt", json::array({json::array({1, 2}), json::array({1, "x"})})}}), std::make_pair(400, std::string("prompt[1]")));
  EXPECT_EQ(status_param(json{{"prompt", std::vector<std::string>(40, "a")}}).first, 400);
  EXPECT_EQ(status_param(json{{"prompt", std::vector<std::string>(16, "a")}, {"n", 8}}), std::make_pair(400, std::string("n")));
  EXPECT_EQ(status_param(json{{"prompt", "a"}, {"suffix", "b"}}), std::make_pair(400, std::string("suffix")));
  EXPECT_EQ(status_param(json{{"prompt", "a"}, {"best_of", 2}}), std::make_pair(400, std::string("best_of")));
}

}  // namespace
}  // namespace strata::test
