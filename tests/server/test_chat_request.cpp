// The chat request as OpenAI clients send it (tool calls with arguments as JSON strings, tool
// results, reasoning), validated and rendered through the family templates of tests/chat/data.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "../chat/chat_test_util.h"
#include "server/chat_request.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;
using server::Json;

// Python's json.dumps (", " and ": " separators), as the reference renders used.
std::string py_dump(const Json& j) {
  if (j.is_object()) {
    std::string s = "{";
    for (auto it = j.begin(); it != j.end(); ++it) s += (it == j.begin() ? "" : ", ") + Json(it.key()).dump() + ": " + py_dump(it.value());
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + py_dump(j[i]);
    return s + "]";
  }
  return j.dump();
}

// The case's conversation as an OpenAI client sends it: tool-call arguments as JSON strings,
// every other case's reasoning under the alias `reasoning`.
Json openai_body(const Json& c, bool alias_reasoning) {
  Json body{{"messages", c["messages"]}};
  for (auto& m : body["messages"]) {
    if (m.contains("tool_calls"))
      for (auto& tc : m["tool_calls"])
        if (!tc["function"]["arguments"].is_string()) tc["function"]["arguments"] = py_dump(tc["function"]["arguments"]);
    if (alias_reasoning && m.contains("reasoning_content")) {
      m["reasoning"] = m["reasoning_content"];
      m.erase("reasoning_content");
    }
  }
  if (c.contains("tools")) body["tools"] = c["tools"];
  if (c.contains("extra_context")) body["chat_template_kwargs"] = c["extra_context"];
  return body;
}

TEST(ServerChatRequest, FamilyTemplatesRenderOpenAiHistory) {
  const fs::path dir = fs::path(chat_test::data_dir()) / "cases";
  std::map<std::string, int> exact;
  int n = 0, i = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const Json c = Json::parse(chat_test::read_file(entry.path().string()));
    if (c.contains("now")) continue;  // gpt-oss's cases fix strftime_now (not a request field)
    SCOPED_TRACE(entry.path().filename().string());
    server::ChatFormat f;
    f.model_template = chat_test::read_data(c["template"].get<std::string>());
    f.options.add_generation_prompt = c.value("add_generation_prompt", true);
    f.options.bos_token = c.value("bos_token", "");
    f.options.eos_token = c.value("eos_token", "");
    f.object_arguments = server::template_wants_object_arguments(f.model_template, f.options);
    f.content_string = server::template_needs_content_string(f.model_template, f.options);
    const server::ChatRequest r = server::parse_chat_request(openai_body(c, ++i % 2 == 0));
    server::ChatInputs in{r.tools, r.kwargs};
    const std::string got = server::format_chat(r.messages, f, in).text;
    const std::string expected = chat_test::read_file(fs::path(entry.path()).replace_extension(".expected").string());
    EXPECT_EQ(got, expected);
    if (got == expected) exact[c["template"].get<std::string>()]++;
    ++n;
  }
  EXPECT_GE(n, 60);
  for (const char* t : {"glm4_6.jinja", "glm4_7.jinja", "minimax_m2.jinja", "qwen3_5.jinja", "deepseek_v3_1.jinja", "deepseek_v3_2.jinja",
                        "kimi_k2.jinja", "kimi_k2_instruct.jinja", "kimi_k2_thinking.jinja"})
    EXPECT_GE(exact[t], 5) << t;
}

TEST(ServerChatRequest, ObjectArgumentsOnlyForTemplatesThatIterateThem) {
  const ChatTemplateOptions o;
  // Templates that show a string as it is keep the client's text.
  for (const char* t : {"kimi_k2_instruct.jinja", "kimi_k2_thinking.jinja", "qwen3.jinja"})
    EXPECT_FALSE(server::template_wants_object_arguments(chat_test::read_data(t), o)) << t;
  // Templates that iterate the mapping or tojson it get the parsed object.
  for (const char* t : {"glm4_6.jinja", "glm4_7.jinja", "minimax_m2.jinja", "qwen3_5.jinja", "kimi_k2.jinja", "llama3_1.jinja", "deepseek_v3_1.jinja"})
    EXPECT_TRUE(server::template_wants_object_arguments(chat_test::read_data(t), o)) << t;
  // qwen3 tests `'</think>' in content`: a tool-call-only turn gets "" instead of none.
  EXPECT_TRUE(server::template_needs_content_string(chat_test::read_data("qwen3.jinja"), o));
  EXPECT_FALSE(server::template_needs_content_string(chat_test::read_data("qwen3_5.jinja"), o));
}

TEST(ServerChatRequest, ToolsAndResultsReachTheTemplate) {
  const Json body = Json::parse(R"({
    "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "reasoning": "need a tool",
       "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_9", "name": "get_weather", "content": "rain, 4C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "chat_template_kwargs": {"enable_thinking": false}, "reasoning_effort": "high"})");
  const server::ChatRequest r = server::parse_chat_request(body);
  server::ChatFormat f;
  f.model_template = chat_test::read_data("qwen3_5.jinja");
  f.object_arguments = server::template_wants_object_arguments(f.model_template, f.options);
  f.options.extra_context = Json{{"enable_thinking", true}, {"server_default", 1}};
  const std::string text = server::format_chat(r.messages, f, {r.tools, r.kwargs}).text;
  EXPECT_NE(text.find("\"name\": \"get_weather\""), std::string::npos) << text;          // the tool definition
  EXPECT_NE(text.find("<parameter=city>\nOslo\n</parameter>"), std::string::npos) << text;  // the call, arguments as a mapping
  EXPECT_NE(text.find("rain, 4C"), std::string::npos) << text;                             // the result
  // The request's enable_thinking=false wins over the server's true: the reply starts closed.
  EXPECT_TRUE(text.size() > 20 && text.substr(text.size() - 19) == "<think>\n\n</think>\n\n") << text;
  EXPECT_EQ(r.kwargs["reasoning_effort"], "high");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].reasoning_content.value_or(""), "need a tool");
}

void expect_400(const char* body, const std::string& param, const std::string& code) {
  SCOPED_TRACE(body);
  try {
    server::parse_chat_request(Json::parse(body));
    ADD_FAILURE() << "no error";
  } catch (const server::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, param) << e.what();
    EXPECT_EQ(e.code, code) << e.what();
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
}

TEST(ServerChatRequest, WrongShapesNameTheField) {
  const std::string u = R"("messages": [{"role": "user", "content": "hi"}])";
  expect_400(("{" + u + R"(, "tools": {"a": 1}})").c_str(), "tools", "invalid_type");
  expect_400(("{" + u + R"(, "tools": [{"type": "retrieval"}]})").c_str(), "tools[0].type", "invalid_value");
  expect_400(("{" + u + R"(, "tools": [{"type": "function"}]})").c_str(), "tools[0].function", "missing_required_parameter");
  expect_400(("{" + u + R"(, "tools": [{"type": "function", "function": {"name": 3}}]})").c_str(), "tools[0].function.name", "invalid_type");
  expect_400(("{" + u + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})").c_str(),
             "tools[0].function.parameters", "invalid_type");
  expect_400(("{" + u + R"(, "tool_choice": "sometimes"})").c_str(), "tool_choice", "invalid_value");
  expect_400(("{" + u + R"(, "tool_choice": "required"})").c_str(), "tool_choice", "invalid_value");
  expect_400(("{" + u + R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})").c_str(),
             "tool_choice.function.name", "invalid_value");
  expect_400(R"({"messages": [{"role": "assistant", "tool_calls": {"id": 1}}]})", "messages[0].tool_calls", "invalid_type");
  expect_400(R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}]})", "messages[0].tool_calls[0].function",
             "missing_required_parameter");
  expect_400(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]})",
             "messages[0].tool_calls[0].function.arguments", "invalid_type");
  expect_400(R"({"messages": [{"role": "user", "content": "a", "tool_calls": []}]})", "messages[0].tool_calls", "invalid_value");
  expect_400(R"({"messages": [{"role": "tool", "content": "r", "tool_call_id": 7}]})", "messages[0].tool_call_id", "invalid_type");
  expect_400(R"({"messages": [{"role": "assistant", "content": "a", "reasoning": ["x"]}]})", "messages[0].reasoning", "invalid_type");
  expect_400(R"({"messages": [{"role": "user"}]})", "messages[0].content", "missing_required_parameter");
  expect_400(("{" + u + R"(, "chat_template_kwargs": "x"})").c_str(), "chat_template_kwargs", "invalid_type");
  expect_400(("{" + u + R"(, "reasoning_effort": "extreme"})").c_str(), "reasoning_effort", "invalid_value");
  expect_400(("{" + u + R"(, "reasoning_budget": -2})").c_str(), "reasoning_budget", "invalid_value");
  expect_400(("{" + u + R"(, "parallel_tool_calls": 1})").c_str(), "parallel_tool_calls", "invalid_type");
}

}  // namespace
}  // namespace strata::test
