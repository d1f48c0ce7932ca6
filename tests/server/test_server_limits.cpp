// Issue 33: hostile request shapes get a 400/413 naming the field and the limit, before any work,
// and the server stays up: JSON nested 100k deep in each field that is walked recursively (the
// serializer, the JSON-Schema converter, template values, the GBNF parser), and request
// allowances (tools, grammar text).
#include <string>

#include "core/json_depth.h"
#include "grammar/grammar.h"
#include "server/chat_request.h"
#include "server/constraints.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

std::string deep_object(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(static_cast<size_t>(depth), '}');
  return s;
}

class ServerLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_server_fixture()) return;
    server::ServerOptions so;
    server_ = new TestServer(so, /*n_seq=*/1, /*n_ctx=*/256);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { SKIP_WITHOUT_SERVER_FIXTURE(); }

  // POSTs a raw body; the status (0: no response), the body in *out.
  static int post(const std::string& path, const std::string& body, std::string* out = nullptr) {
    auto r = server_->client()->Post(path.c_str(), body, "application/json");
    if (!r) return 0;
    if (out) *out = r->body;
    return r->status;
  }
  static void expect_alive() {
    auto r = server_->client()->Get("/health");
    ASSERT_TRUE(r) << "the server stopped answering";
    EXPECT_EQ(r->status, 200);
  }
  static TestServer* server_;
};
TestServer* ServerLimits::server_ = nullptr;

constexpr const char* kUser = R"([{"role": "user", "content": "hi"}])";

TEST_F(ServerLimits, JsonNested100kDeepInEveryWalkedFieldIs400) {
  const std::string d = deep_object(100000);
  const std::string msgs = kUser;
  const std::pair<const char*, std::string> cases[] = {
      {"/v1/chat/completions", R"({"messages": )" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": )" + d + "}}]}"},
      {"/v1/chat/completions", R"({"messages": )" + msgs + R"(, "chat_template_kwargs": )" + d + "}"},
      {"/v1/chat/completions", R"({"messages": )" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": )" + d + "}}}"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": )" +
                                   d + R"(}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})"},
      {"/v1/messages", R"({"model": "m", "max_tokens": 4, "messages": )" + msgs + R"(, "tools": [{"name": "f", "input_schema": )" + d + "}]}"},
      {"/api/chat", R"({"model": "m", "stream": false, "messages": )" + msgs + R"(, "format": )" + d + "}"},
      {"/v1/responses", R"({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": )" + d + "}}}"},
  };
  for (const auto& [path, body] : cases) {
    std::string out;
    const int status = post(path, body, &out);
    EXPECT_EQ(status, 400) << path << ": " << out.substr(0, 300);
    EXPECT_NE(out.find("deeper than " + std::to_string(kMaxJsonDepth)), std::string::npos) << path << ": " << out.substr(0, 300);
    expect_alive();
  }
}

TEST_F(ServerLimits, GrammarWith50kNestedGroupsIs400) {
  const std::string g = "root ::= " + std::string(50000, '(') + "\\\"a\\\"" + std::string(50000, ')');
  std::string out;
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2, "grammar": ")" + g + "\"}", &out), 400) << out.substr(0, 300);
  EXPECT_NE(out.find("nested deeper than"), std::string::npos) << out.substr(0, 300);
  expect_alive();
}

// Tool-call arguments given as a string of deep JSON stay a string for the template (no walk).
TEST_F(ServerLimits, DeepJsonInsideAnArgumentsStringIsNotWalked) {
  const std::string arr = std::string(100000, '[') + std::string(100000, ']');
  const std::string body = R"({"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ")" +
                           arr + R"("}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})";
  std::string out;
  const int status = post("/v1/chat/completions", body, &out);
  EXPECT_TRUE(status == 200 || status == 400) << status << ": " << out.substr(0, 300);
  expect_alive();
}

TEST_F(ServerLimits, RequestAllowancesAreCheckedBeforeWork) {
  // 3000 tools: 400 naming the limit (OpenAI's 128).
  std::string tools = "[";
  for (int i = 0; i < 3000; ++i) tools += fmt::format(R"({}{{"type": "function", "function": {{"name": "f{}", "parameters": {{"type": "object"}}}}}})", i ? "," : "", i);
  tools += "]";
  std::string out;
  EXPECT_EQ(post("/v1/chat/completions", R"({"messages": )" + std::string(kUser) + R"(, "tools": )" + tools + "}", &out), 400) << out.substr(0, 300);
  EXPECT_NE(out.find("at most " + std::to_string(server::kMaxTools)), std::string::npos) << out.substr(0, 300);
  // A tools list over kMaxToolsBytes within the count: 413.
  const std::string big_desc(server::kMaxToolsBytes, 'x');
  EXPECT_EQ(post("/v1/chat/completions", R"({"messages": )" + std::string(kUser) + R"(, "tools": [{"type": "function", "function": {"name": "f", "description": ")" + big_desc +
                                              R"("}}]})",
                 &out),
            413)
      << out.substr(0, 300);
  // A grammar over kMaxGrammarBytes: 413.
  const std::string big_grammar = "root ::= \\\"" + std::string(server::kMaxGrammarBytes, 'a') + "\\\"";
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2, "grammar": ")" + big_grammar + "\"}", &out), 413) << out.substr(0, 300);
  expect_alive();
}


// A grammar no token can follow, or one too ambiguous to track (an anyOf of 5000 constants): the
// request's fault, a 400 (it was a 500).
TEST_F(ServerLimits, GrammarsThatCannotBeFollowedAre400) {
  std::string out;
  EXPECT_EQ(post("/v1/completions", R"({"prompt": "hi", "max_tokens": 4, "grammar": "root ::= [^\\x00-\\U0010FFFF]"})", &out), 400) << out;
  EXPECT_NE(out.find("invalid_grammar"), std::string::npos) << out;
  std::string any = "[";
  for (int i = 0; i < 5000; ++i) any += fmt::format(R"({}{{"const": "v{}"}})", i ? "," : "", i);
  any += "]";
  EXPECT_EQ(post("/v1/chat/completions", R"({"max_tokens": 4, "messages": )" + std::string(kUser) +
                                              R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"anyOf": )" + any + "}}}}",
                 &out),
            400)
      << out.substr(0, 300);
  expect_alive();
}

}  // namespace
}  // namespace strata::test
