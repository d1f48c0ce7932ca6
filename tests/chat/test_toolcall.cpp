// Tool-call parsers, one test per family's canned outputs (content before, reasoning, one call,
// parallel calls, unicode and nested JSON in arguments), each fed whole and split at every byte
// boundary, byte by byte and in random chunks (toolcall_test_util.h).
#include "toolcall_test_util.h"

namespace strata::toolcall_test {
namespace {

Parsed expect(std::string content, std::string reasoning, std::vector<ToolCall> calls) {
  return Parsed{std::move(content), std::move(reasoning), std::move(calls)};
}

const std::string kNested = R"({"query": "café ☕ 東京", "filters": {"tags": ["a", {"b": [1, 2]}], "s": "}{\"]"}})";

TEST(ToolCallHermes, ContentThenOneCall) {
  expect_all_splits(Format::Hermes, opts(),
                    "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
                    expect("Let me check.", "", {call(0, "get_weather", R"({"location": "Paris"})")}));
}

TEST(ToolCallHermes, ReasoningAndParallelCallsWithNestedUnicode) {
  const std::string text = "<think>\nTwo tools.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                           "{\"location\": \"Zürich\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": " +
                           kNested + "}\n</tool_call>\nDone.";
  expect_all_splits(Format::Hermes, opts(), text,
                    expect("Done.", "Two tools.",
                           {call(0, "get_weather", R"({"location": "Zürich"})"), call(1, "search", kNested)}));
}

TEST(ToolCallHermes, ThinkingOpenedByThePrompt) {
  expect_all_splits(Format::Hermes, opts(true), "I think </think>\n\nThe answer is <b>4</b>.",
                    expect("The answer is <b>4</b>.", "I think", {}));
}

TEST(ToolCallHermes, ArgumentsAsAStringAndKeysInAnotherOrder) {
  expect_all_splits(Format::Hermes, opts(),
                    "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"query\\\": \\\"x\\\"}\"}</tool_call>"
                    "<tool_call>{\"arguments\": {\"query\": \"y\"}, \"name\": \"search\"}</tool_call>",
                    expect("", "", {call(0, "search", R"({"query": "x"})"), call(1, "search", R"({"query":"y"})")}));
}

TEST(ToolCallQwen3Coder, TypedParametersStreamAsJson) {
  const std::string text =
      "I'll search.\n\n<tool_call>\n<function=search>\n<parameter=query>\nbest café\nin \"Paris\"\n</parameter>\n"
      "<parameter=limit>\n5\n</parameter>\n<parameter=filters>\n{\"open\": true, \"tags\": [\"a\"]}\n</parameter>\n"
      "</function>\n</tool_call>";
  expect_all_splits(Format::Qwen3Coder, opts(), text,
                    expect("I'll search.", "",
                           {call(0, "search", R"({"query": "best café\nin \"Paris\"", "limit": 5, "filters": {"open":true,"tags":["a"]}})")}));
}

TEST(ToolCallQwen3Coder, ReasoningAndParallelCalls) {
  const std::string text =
      "<think>\nplan\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\n東京\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n<b>x</b>\n</parameter>\n"
      "</function>\n</tool_call>";
  expect_all_splits(Format::Qwen3Coder, opts(), text,
                    expect("", "plan",
                           {call(0, "get_weather", R"({"location": "東京"})"), call(1, "search", R"({"query": "<b>x</b>"})")}));
}

TEST(ToolCallLlama3, JsonReplyAndPythonTag) {
  expect_all_splits(Format::Llama3, opts(), R"({"name": "get_weather", "parameters": {"location": "Paris"}})",
                    expect("", "", {call(0, "get_weather", R"({"location": "Paris"})")}));
  expect_all_splits(Format::Llama3, opts(), "<|python_tag|>{\"name\": \"search\", \"parameters\": " + kNested + "}",
                    expect("", "", {call(0, "search", kNested)}));
}

TEST(ToolCallLlama3, BracesInProseAreContent) {
  expect_all_splits(Format::Llama3, opts(), R"(Use {"name": "x", "parameters": {}} like {this}.)",
                    expect(R"(Use {"name": "x", "parameters": {}} like {this}.)", "", {}));
}

TEST(ToolCallHarmony, AnalysisThenCall) {
  const std::string text =
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Zürich\"}<|call|>";
  expect_all_splits(Format::Harmony, opts(), text,
                    expect("", "Need the weather.", {call(0, "get_weather", R"({"location":"Zürich"})")}));
}

TEST(ToolCallHarmony, RecipientBeforeChannelAndFinalAnswer) {
  const std::string call_text =
      "<|start|>assistant to=functions.search<|channel|>commentary json<|message|>" + kNested + "<|call|>";
  expect_all_splits(Format::Harmony, opts(), call_text, expect("", "", {call(0, "search", kNested)}));
  expect_all_splits(Format::Harmony, opts(),
                    "<|channel|>analysis<|message|>2+2<|end|><|start|>assistant<|channel|>final<|message|>It is 4.<|return|>",
                    expect("It is 4.", "2+2", {}));
}

TEST(ToolCallDeepSeekV31, ReasoningContentAndParallelCalls) {
  const std::string text =
      "Check both.</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>" + kNested + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  expect_all_splits(Format::DeepSeekV31, opts(true), text,
                    expect("Sure.", "Check both.", {call(0, "get_weather", R"({"location": "Paris"})"), call(1, "search", kNested)}));
}

TEST(ToolCallDeepSeekV31, R1FencedForm) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Oslo\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  expect_all_splits(Format::DeepSeekV31, opts(), text, expect("", "", {call(0, "get_weather", R"({"location": "Oslo"})")}));
}

TEST(ToolCallGlm45, NewlineFormAndCompactForm) {
  expect_all_splits(Format::Glm45, opts(),
                    "<think>t</think>\nOK.\n<tool_call>get_weather\n<arg_key>location</arg_key>\n<arg_value>São Paulo</arg_value>\n"
                    "<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>",
                    expect("OK.", "t", {call(0, "get_weather", R"({"location": "São Paulo", "unit": "c"})")}));
  expect_all_splits(Format::Glm45, opts(),
                    "<tool_call>search<arg_key>query</arg_key><arg_value>a\"b</arg_value><arg_key>limit</arg_key>"
                    "<arg_value>3</arg_value><arg_key>filters</arg_key><arg_value>{\"x\": [1, {\"y\": null}]}</arg_value>"
                    "</tool_call><tool_call>get_weather<arg_key>location</arg_key><arg_value>Rome</arg_value></tool_call>",
                    expect("", "",
                           {call(0, "search", R"({"query": "a\"b", "limit": 3, "filters": {"x":[1,{"y":null}]}})"),
                            call(1, "get_weather", R"({"location": "Rome"})")}));
}

TEST(ToolCallKimiK2, SectionWithTwoCalls) {
  const std::string text =
      "<think>ok</think>Looking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"location\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.search:1"
      "<|tool_call_argument_begin|>" + kNested + "<|tool_call_end|><|tool_calls_section_end|>";
  expect_all_splits(Format::KimiK2, opts(), text,
                    expect("Looking.", "ok", {call(0, "get_weather", R"({"location": "Paris"})"), call(1, "search", kNested)}));
}

TEST(ToolCallMinimaxM2, InvokesInOneSection) {
  const std::string text =
      "<think>\nplan\n</think>\n\nI'll look.\n<minimax:tool_call>\n<invoke name=\"get_weather\"><parameter name=\"location\">"
      "Kraków</parameter>\n</invoke>\n<invoke name=\"search\"><parameter name=\"query\">x</parameter>\n"
      "<parameter name=\"limit\">2</parameter>\n</invoke>\n</minimax:tool_call>";
  expect_all_splits(Format::MinimaxM2, opts(), text,
                    expect("I'll look.", "plan",
                           {call(0, "get_weather", R"({"location": "Kraków"})"), call(1, "search", R"({"query": "x", "limit": 2})")}));
}

TEST(ToolCallGeneric, CallsResponseAndPlainText) {
  expect_all_splits(Format::Generic, opts(), R"({"tool_call": {"name": "get_weather", "arguments": {"location": "Paris"}}})",
                    expect("", "", {call(0, "get_weather", R"({"location":"Paris"})")}));
  expect_all_splits(Format::Generic, opts(),
                    R"({"tool_calls": [{"name": "search", "arguments": {"query": "東京"}}, {"name": "get_weather", "arguments": {"location": "x"}}]})",
                    expect("", "", {call(0, "search", R"({"query":"東京"})"), call(1, "get_weather", R"({"location":"x"})")}));
  expect_all_splits(Format::Generic, opts(), R"(  {"response": "Hello {there}"})", expect("Hello {there}", "", {}));
  expect_all_splits(Format::Generic, opts(), "Just text {with braces}.", expect("Just text {with braces}.", "", {}));
}

TEST(ToolCall, NoToolsMeansEverythingIsContent) {
  ParserOptions o;
  const std::string text = "<think>r</think>A<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
  expect_all_splits(Format::Hermes, o, text,
                    expect("A<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", "r", {}));
}

TEST(ToolCall, ReasoningOffKeepsThinkInContent) {
  ParserOptions o = opts();
  o.reasoning = false;
  expect_all_splits(Format::Hermes, o, "<think>r</think>A", expect("<think>r</think>A", "", {}));
}

TEST(ToolCall, IdsUseThePrefixAndAreUnique) {
  ParserOptions o = opts();
  o.id_prefix = "call_x7_";
  const Parsed p = parse_all(Format::KimiK2, o,
                             "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{}"
                             "<|tool_call_end|><|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{}"
                             "<|tool_call_end|><|tool_calls_section_end|>");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "call_x7_0");
  EXPECT_EQ(p.calls[1].id, "call_x7_1");
}

}  // namespace
}  // namespace strata::toolcall_test
