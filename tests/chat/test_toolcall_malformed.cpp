// Tool-call parsers on malformed output: each case has the result toolcall.h documents, whatever
// the split; detect_format on every template of tests/chat/data; call_grammar's shape.
#include <filesystem>
#include <map>
#include <set>

#include "chat_test_util.h"
#include "toolcall_test_util.h"

namespace strata::toolcall_test {
namespace {

Parsed expect_parsed(std::string content, std::string reasoning, std::vector<ToolCall> calls) {
  return Parsed{std::move(content), std::move(reasoning), std::move(calls)};
}

TEST(ToolCallMalformed, JsonCutOffAtFinishKeepsTheRawArguments) {
  expect_all_splits(Format::Hermes, opts(), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Par",
                    expect_parsed("", "", {call(0, "get_weather", R"({"location": "Par)")}));
  expect_all_splits(Format::KimiK2, opts(),
                    "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{\"query\": [1,",
                    expect_parsed("", "", {call(0, "search", R"({"query": [1,)")}));
}

TEST(ToolCallMalformed, ArgumentsThatDoNotParseAreKeptRaw) {
  expect_all_splits(Format::Hermes, opts(), "<tool_call>{\"name\": \"search\", \"arguments\": {bad json}}</tool_call>",
                    expect_parsed("", "", {call(0, "search", "{bad json}")}));
  expect_all_splits(Format::DeepSeekV31, opts(),
                    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": 1} trailing junk<｜tool▁call▁end｜>"
                    "<｜tool▁calls▁end｜>after",
                    expect_parsed("after", "", {call(0, "search", R"({"query": 1})")}));
}

TEST(ToolCallMalformed, ArgumentsValueThatIsNotJsonGivesEmptyArguments) {
  expect_all_splits(Format::Llama3, opts(), "{\"name\": \"search\", \"parameters\": `x` {\"q\": 1}} after",
                    expect_parsed("after", "", {call(0, "search", "")}));
}

TEST(ToolCallMalformed, UnknownFunctionIsKeptAsWritten) {
  expect_all_splits(Format::Hermes, opts(), "<tool_call>{\"name\": \"launch_rocket\", \"arguments\": {\"when\": 1}}</tool_call>",
                    expect_parsed("", "", {call(0, "launch_rocket", R"({"when": 1})")}));
  // Unknown function in a key/value family: values are JSON when they parse, strings otherwise.
  expect_all_splits(Format::Glm45, opts(), "<tool_call>mystery<arg_key>n</arg_key><arg_value>12</arg_value>"
                    "<arg_key>s</arg_key><arg_value>hi there</arg_value></tool_call>",
                    expect_parsed("", "", {call(0, "mystery", R"({"n": 12, "s": "hi there"})")}));
}

TEST(ToolCallMalformed, HeaderLongerThanTheStreamingLimitIsTakenWhole) {
  const std::string name(5000, 'n');
  expect_all_splits(Format::Hermes, opts(), "<tool_call>{\"name\": \"" + name + "\", \"arguments\": {\"a\": [1, 2]}}</tool_call>",
                    expect_parsed("", "", {call(0, name, R"({"a":[1,2]})")}));
}

TEST(ToolCallMalformed, MarkerWithoutACallIsContent) {
  expect_all_splits(Format::Hermes, opts(), "See <tool_call>hello</tool_call> here",
                    expect_parsed("See <tool_call>hello</tool_call> here", "", {}));
  expect_all_splits(Format::Hermes, opts(), "<tool_call>\n{\"na", expect_parsed("<tool_call>\n{\"na", "", {}));
  expect_all_splits(Format::Qwen3Coder, opts(), "a <tool_call> b", expect_parsed("a <tool_call> b", "", {}));
  expect_all_splits(Format::MinimaxM2, opts(), "x<minimax:tool_call>y", expect_parsed("x<minimax:tool_call>y", "", {}));
  expect_all_splits(Format::Generic, opts(), R"({"other": 1} and more)", expect_parsed(R"({"other": 1} and more)", "", {}));
}

TEST(ToolCallMalformed, KeyValueCallCutOffIsClosed) {
  expect_all_splits(Format::Qwen3Coder, opts(),
                    "<tool_call>\n<function=search>\n<parameter=query>\nabc\n</parameter>\n<parameter=limit>\nfive\n</parameter>\n"
                    "<parameter=query>\nunfinished",
                    expect_parsed("", "", {call(0, "search", R"({"query": "abc", "limit": "five", "query": "unfinished"})")}));
  expect_all_splits(Format::MinimaxM2, opts(),
                    "<minimax:tool_call>\n<invoke name=\"search\"><parameter name=\"limit\">7",
                    expect_parsed("", "", {call(0, "search", R"({"limit": 7})")}));
}

// Raw string values are JSON-escaped whole: control characters as \u00XX, a code point split
// between chunks kept together, bytes that are not UTF-8 as U+FFFD; the arguments always parse.
TEST(ToolCallMalformed, RawValuesWithControlAndInvalidBytesGiveValidJson) {
  const std::string value = "a\x01\x1f\"\\\xE2\x82\xAC\xFF\xC3(\xED\xA0\x80z";
  const std::string args = R"({"query": "a\u0001\u001f\"\\€\ufffd\ufffd(\ufffd\ufffd\ufffdz"})";
  expect_all_splits(Format::MinimaxM2, opts(),
                    "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"query\">" + value +
                        "</parameter>\n</invoke>\n</minimax:tool_call>",
                    expect_parsed("", "", {call(0, "search", args)}));
  expect_all_splits(Format::Qwen3Coder, opts(),
                    "<tool_call>\n<function=search>\n<parameter=query>\n" + value + "\n</parameter>\n</function>\n</tool_call>",
                    expect_parsed("", "", {call(0, "search", args)}));
  ASSERT_TRUE(nlohmann::json::parse(args, nullptr, false).is_object());
}

// A JSON value ends at the closing tag outside its strings; a string of it may hold the tag.
TEST(ToolCallMalformed, KeyValueJsonValueHoldingTheClosingTag) {
  expect_all_splits(Format::Qwen3Coder, opts(),
                    "<tool_call>\n<function=search>\n<parameter=query>\na\n</parameter>\n<parameter=filters>\n"
                    "{\"q\": \"x</parameter>\\\"</parameter>\"}\n</parameter>\n</function>\n</tool_call>",
                    expect_parsed("", "", {call(0, "search", R"({"query": "a", "filters": {"q":"x</parameter>\"</parameter>"}})")}));
  expect_all_splits(Format::MinimaxM2, opts(),
                    "<minimax:tool_call>\n<invoke name=\"search\">\n<parameter name=\"filters\">[\"</parameter>\"]</parameter>\n"
                    "<parameter name=\"limit\">\"7</parameter>\n</invoke>\n</minimax:tool_call>",
                    expect_parsed("", "", {call(0, "search", R"({"filters": ["</parameter>"], "limit": "\"7"})")}));
}

TEST(ToolCallMalformed, HarmonyOtherRecipientsAreContent) {
  expect_all_splits(Format::Harmony, opts(),
                    "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"q\": 1}<|call|>",
                    expect_parsed("{\"q\": 1}", "", {}));
}

TEST(ToolCallMalformed, DeepNestingAndGarbageNeverCrash) {
  const std::string deep = "{\"tool_call\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  const Parsed p = parse_all(Format::Generic, opts(), deep);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, deep);
  const std::string junk = "<tool_call>{\"name\": \"\xff\xfe\", \"arguments\": {\"\xc3\": \"\x80\x01\"}}</tool_call><think>";
  for (const Format f : {Format::Generic, Format::Hermes, Format::Qwen3Coder, Format::Llama3, Format::Harmony,
                         Format::DeepSeekV31, Format::Glm45, Format::KimiK2, Format::MinimaxM2}) {
    EXPECT_NO_THROW(parse_all(f, opts(), junk)) << format_name(f);
  }
}

TEST(ToolCallDetect, EveryTemplateInTheTestData) {
  const std::map<std::string, Format> expected = {
      {"chatml.jinja", Format::Generic},         {"deepseek_r1.jinja", Format::DeepSeekV31},
      {"deepseek_v3.jinja", Format::DeepSeekV31}, {"deepseek_v3_1.jinja", Format::DeepSeekV31},
      {"deepseek_v3_2.jinja", Format::Generic},  {"glm4_6.jinja", Format::Glm45},
      {"glm4_7.jinja", Format::Glm45},           {"gpt_oss.jinja", Format::Harmony},
      {"kimi_k2.jinja", Format::KimiK2},         {"kimi_k2_instruct.jinja", Format::KimiK2},
      {"kimi_k2_thinking.jinja", Format::KimiK2}, {"llama3.jinja", Format::Generic},
      {"llama3_1.jinja", Format::Llama3},        {"minimax_m2.jinja", Format::MinimaxM2},
      {"mixtral.jinja", Format::Generic},        {"qwen3.jinja", Format::Hermes},
      {"qwen3_5.jinja", Format::Qwen3Coder},
  };
  std::set<std::string> seen;
  for (const auto& entry : std::filesystem::directory_iterator(chat_test::data_dir())) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    seen.insert(name);
    const auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << name << " is new: add its format to this test";
    EXPECT_EQ(format_name(detect_format(chat_test::read_data(name))), std::string(format_name(it->second))) << name;
  }
  EXPECT_EQ(seen.size(), expected.size());
}

// A minimal GBNF check: a root rule, every rule referenced is defined, quotes and brackets balance.
void expect_sane_gbnf(const std::string& g, const std::string& where) {
  std::set<std::string> defined, used;
  size_t line_start = 0;
  while (line_start < g.size()) {
    const size_t end = g.find('\n', line_start);
    const std::string line = g.substr(line_start, end - line_start);
    line_start = end == std::string::npos ? g.size() : end + 1;
    const size_t def = line.find(" ::= ");
    ASSERT_NE(def, std::string::npos) << where << ": " << line;
    defined.insert(line.substr(0, def));
    int parens = 0;
    bool in_str = false, in_class = false;
    std::string word;
    for (size_t i = def + 5; i <= line.size(); ++i) {
      const char c = i < line.size() ? line[i] : ' ';
      if (in_str || in_class) {
        if (c == '\\') ++i;
        else if (in_str && c == '"') in_str = false;
        else if (in_class && c == ']') in_class = false;
        continue;
      }
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-') {
        word += c;
        continue;
      }
      if (!word.empty() && !std::isdigit(static_cast<unsigned char>(word[0]))) used.insert(word);
      word.clear();
      if (c == '"') in_str = true;
      else if (c == '[') in_class = true;
      else if (c == '(') ++parens;
      else if (c == ')') --parens;
      EXPECT_GE(parens, 0) << where << ": " << line;
    }
    EXPECT_FALSE(in_str) << where << ": unclosed literal in " << line;
    EXPECT_EQ(parens, 0) << where << ": " << line;
  }
  EXPECT_TRUE(defined.count("root")) << where;
  for (const auto& u : used) EXPECT_TRUE(defined.count(u)) << where << ": rule " << u << " is used, not defined";
}

TEST(ToolCallGrammar, EveryFormatHasTheTriggerAndTheTools) {
  const auto args_rule = [](const nlohmann::json& schema) {
    return schema.contains("type") && schema["type"] == "object" ? std::string("json-object") : std::string("json-value");
  };
  for (const Format f : {Format::Generic, Format::Hermes, Format::Qwen3Coder, Format::Llama3, Format::Harmony,
                         Format::DeepSeekV31, Format::Glm45, Format::KimiK2, Format::MinimaxM2}) {
    for (const bool parallel : {false, true}) {
      const std::string where = std::string(format_name(f)) + (parallel ? " parallel" : "");
      CallGrammar g = call_grammar(f, tools(), parallel, "", args_rule);
      EXPECT_FALSE(g.trigger.empty()) << where;
      std::string escaped_trigger;
      for (const char c : g.trigger) escaped_trigger += c == '"' ? std::string("\\\"") : std::string(1, c);
      EXPECT_NE(g.gbnf.find(escaped_trigger), std::string::npos) << where << ": " << g.gbnf;
      EXPECT_NE(g.gbnf.find("get_weather"), std::string::npos) << where;
      EXPECT_NE(g.gbnf.find("search"), std::string::npos) << where;
      g.gbnf += "json-object ::= \"{}\"\njson-value ::= \"0\"\n";
      expect_sane_gbnf(g.gbnf, where);
      const CallGrammar named = call_grammar(f, tools(), parallel, "search", args_rule);
      EXPECT_EQ(named.gbnf.find("get_weather"), std::string::npos) << where << ": tool_choice names search only";
    }
  }
  EXPECT_THROW(call_grammar(Format::Hermes, tools(), false, "nope", args_rule), std::invalid_argument);
  EXPECT_THROW(call_grammar(Format::Hermes, {}, false, "", args_rule), std::invalid_argument);
}

TEST(ToolCallGeneric, PromptDescribesTheToolsAndTheReplyShape) {
  const std::string one = generic_tools_prompt(tools(), false);
  EXPECT_NE(one.find("\"get_weather\""), std::string::npos);
  EXPECT_NE(one.find("\"tool_call\""), std::string::npos);
  EXPECT_NE(one.find("\"response\""), std::string::npos);
  EXPECT_NE(generic_tools_prompt(tools(), true).find("\"tool_calls\""), std::string::npos);
}

}  // namespace
}  // namespace strata::toolcall_test
