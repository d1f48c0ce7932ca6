// Tool-call parsers on output cut off by max_tokens (finish_cut, issue 34 item 1): every family's
// canned output cut at every byte gives the calls it has so far, never their syntax as content.
#include "toolcall_test_util.h"

namespace strata::toolcall_test {
namespace {

std::string rtrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}
bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool utf8_boundary(std::string_view s, size_t k) { return k == s.size() || (static_cast<unsigned char>(s[k]) & 0xC0) != 0x80; }

Parsed cut_by_bytes(Format f, const ParserOptions& o, std::string_view text) {
  auto p = StreamParser::make(f, o);
  std::vector<Event> events;
  for (size_t i = 0; i < text.size(); ++i) p->feed(text.substr(i, 1), events);
  p->finish_cut(events);
  expect_well_formed(events, "cut, byte by byte");
  return fold(events);
}

// Cut at every byte: content and reasoning are prefixes of the whole output's (trailing whitespace
// aside: a call that follows would drop it); calls are the whole output's first calls, every one
// but a cut last one equal to it; calls are never lost as the cut moves on; fed whole or byte by
// byte the same. The whole output "cut" at its end is the whole output.
void expect_every_cut(Format f, const ParserOptions& o, const std::string& text) {
  const Parsed full = parse_all(f, o, text);
  ASSERT_FALSE(full.calls.empty()) << "the case should make calls: " << describe(full);
  size_t seen_whole = 0, seen_any = 0;
  for (size_t k = 0; k <= text.size(); ++k) {
    if (!utf8_boundary(text, k)) continue;  // generated text comes in whole characters
    const std::string_view part = std::string_view(text).substr(0, k);
    const Parsed got = parse_cut(f, o, part);
    SCOPED_TRACE("cut at " + std::to_string(k) + ": [" + std::string(part) + "] -> " + describe(got));
    ASSERT_TRUE(same(got, cut_by_bytes(f, o, part)));
    EXPECT_TRUE(starts_with(full.content, rtrim(got.content))) << "content is not a prefix of " << full.content;
    EXPECT_TRUE(starts_with(full.reasoning, rtrim(got.reasoning))) << "reasoning is not a prefix of " << full.reasoning;
    ASSERT_LE(got.calls.size(), full.calls.size());
    size_t whole = 0;
    for (size_t i = 0; i < got.calls.size(); ++i) {
      const ToolCall& c = got.calls[i];
      EXPECT_EQ(c.name, full.calls[i].name);
      EXPECT_EQ(c.id, full.calls[i].id);
      if (i + 1 < got.calls.size()) {
        EXPECT_FALSE(c.cut) << "only the last call can be cut";
      }
      if (!c.cut) {
        EXPECT_EQ(c.arguments, full.calls[i].arguments);
        ++whole;
      }
    }
    EXPECT_GE(got.calls.size(), seen_any) << "a call was lost";
    EXPECT_GE(whole, seen_whole) << "a whole call was lost";
    seen_any = got.calls.size();
    seen_whole = whole;
  }
  const Parsed at_end = parse_cut(f, o, text);
  EXPECT_TRUE(same(at_end, full)) << describe(at_end) << "\nwhole: " << describe(full);
  for (const auto& c : at_end.calls) EXPECT_FALSE(c.cut);
}

const std::string kCutNested = R"({"query": "café ☕ 東京", "filters": {"tags": ["a", {"b": [1, 2]}], "s": "}{\"]"}})";

TEST(ToolCallCut, EveryFamilyCutAtEveryByte) {
  expect_every_cut(Format::Hermes, opts(),
                   "<think>\nTwo tools.\n</think>\n\nLet me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                   "{\"location\": \"Zürich\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": " + kCutNested +
                       "}\n</tool_call>");
  expect_every_cut(Format::Qwen3Coder, opts(),
                   "<think>\nplan\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=location>\n東京\n</parameter>\n"
                   "</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n<b>x</b>\n</parameter>\n"
                   "<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>");
  expect_every_cut(Format::Llama3, opts(), "<|python_tag|>{\"name\": \"search\", \"parameters\": " + kCutNested + "}");
  expect_every_cut(Format::Harmony, opts(),
                   "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                   "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Zürich\"}<|call|>");
  expect_every_cut(Format::DeepSeekV31, opts(true),
                   "Check both.</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Paris\"}"
                   "<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>" + kCutNested + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  expect_every_cut(Format::Glm45, opts(),
                   "<tool_call>search<arg_key>query</arg_key><arg_value>a\"b</arg_value><arg_key>limit</arg_key>"
                   "<arg_value>3</arg_value></tool_call><tool_call>get_weather<arg_key>location</arg_key><arg_value>Rome</arg_value></tool_call>");
  expect_every_cut(Format::KimiK2, opts(),
                   "<think>ok</think>Looking.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                   "<|tool_call_argument_begin|>{\"location\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.search:1"
                   "<|tool_call_argument_begin|>" + kCutNested + "<|tool_call_end|><|tool_calls_section_end|>");
  expect_every_cut(Format::MinimaxM2, opts(),
                   "<think>\nplan\n</think>\n\nI'll look.\n<minimax:tool_call>\n<invoke name=\"get_weather\"><parameter name=\"location\">"
                   "Kraków</parameter>\n</invoke>\n<invoke name=\"search\"><parameter name=\"query\">x</parameter>\n"
                   "<parameter name=\"limit\">2</parameter>\n</invoke>\n</minimax:tool_call>");
  expect_every_cut(Format::Generic, opts(),
                   R"({"tool_calls": [{"name": "search", "arguments": {"query": "東京", "limit": 3}}, {"name": "get_weather", "arguments": {"location": "x\"y"}}]})");
}

TEST(ToolCallCut, GenericObjectClosedAsFarAsItParses) {
  const Parsed two = parse_cut(Format::Generic, opts(),
                               R"({"tool_calls": [{"name": "search", "arguments": {"query": "x"}}, {"name": "get_weather", "arguments": {"location": "Pa)");
  ASSERT_EQ(two.calls.size(), 2u) << describe(two);
  EXPECT_EQ(two.content, "");
  EXPECT_EQ(two.calls[0].arguments, R"({"query":"x"})");
  EXPECT_FALSE(two.calls[0].cut);
  EXPECT_EQ(two.calls[1].name, "get_weather");
  EXPECT_EQ(two.calls[1].arguments, R"({"location":"Pa"})");
  EXPECT_TRUE(two.calls[1].cut);
  // The example of the issue: a name cut off is no call, and no content either.
  const Parsed name_cut = parse_cut(Format::Generic, opts(), R"({"tool_calls": [{"name": "get_current_wea)");
  EXPECT_TRUE(name_cut.calls.empty() && name_cut.content.empty()) << describe(name_cut);
  const Parsed response = parse_cut(Format::Generic, opts(), R"(  {"response": "Hello \"wo)");
  EXPECT_EQ(response.content, "Hello \"wo");
  EXPECT_TRUE(response.calls.empty());
  // Plain finish keeps the documented malformed-output rule: an unfinished object is content.
  EXPECT_EQ(parse_all(Format::Generic, opts(), R"({"tool_call": {"name": "sea)").content, R"({"tool_call": {"name": "sea)");
}

TEST(ToolCallCut, MarkersAndHeadersCutOffAreDropped) {
  const Parsed header = parse_cut(Format::Hermes, opts(), "Hi.\n<tool_call>\n{\"na");
  EXPECT_EQ(rtrim(header.content), "Hi.");
  EXPECT_TRUE(header.calls.empty());
  EXPECT_EQ(rtrim(parse_cut(Format::Hermes, opts(), "Hi.\n<tool_ca").content), "Hi.");
  const Parsed args = parse_cut(Format::Hermes, opts(), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Par");
  ASSERT_EQ(args.calls.size(), 1u);
  EXPECT_EQ(args.calls[0].arguments, R"({"location": "Par)");  // as written: streamed fragments cannot be taken back
  EXPECT_TRUE(args.calls[0].cut);
  const Parsed kv = parse_cut(Format::Qwen3Coder, opts(), "<tool_call>\n<function=search>\n<parameter=query>\nabc</param");
  ASSERT_EQ(kv.calls.size(), 1u);
  EXPECT_EQ(kv.calls[0].arguments, R"({"query": "abc"})");
  // Without tools nothing is a call: the text stays content.
  EXPECT_EQ(parse_cut(Format::Hermes, ParserOptions{}, "A <tool_call>\n{\"na").content, "A <tool_call>\n{\"na");
}

TEST(ToolCallCut, ArgumentsObjectClosesCutOffJson) {
  EXPECT_EQ(arguments_object(R"({"location": "Par)").dump(), R"({"location":"Par"})");
  EXPECT_EQ(arguments_object(R"({"a": [1, {"b": tr)").dump(), R"({"a":[1,{}]})");
  EXPECT_EQ(arguments_object(R"({"a": 1, "b)").dump(), R"({"a":1})");
  EXPECT_EQ(arguments_object(R"({"a": 1, "b":)").dump(), R"({"a":1})");
  EXPECT_EQ(arguments_object(R"({"a": "x\u00)").dump(), R"({"a":"x"})");
  EXPECT_EQ(arguments_object(R"({"a": "x\)").dump(), R"({"a":"x"})");
  EXPECT_EQ(arguments_object(R"({"n": 12)").dump(), R"({"n":12})");
  EXPECT_EQ(arguments_object(R"({"a": {"b": [1, 2], "c": "}{"}})").dump(), R"({"a":{"b":[1,2],"c":"}{"}})");
  EXPECT_EQ(arguments_object("not json").dump(), "{}");
  EXPECT_EQ(arguments_object("").dump(), "{}");
  EXPECT_TRUE(close_partial_json(R"({"a": "unfinished)", false).is_object());
  EXPECT_EQ(close_partial_json(R"({"a": "unfinished)", false).dump(), "{}");
  EXPECT_TRUE(close_partial_json("nothing", true).is_null());
  // Nested past the JSON depth limit: nothing parses, quickly (no quadratic closing).
  EXPECT_EQ(arguments_object(std::string(1 << 20, '[')).dump(), "{}");
  EXPECT_EQ(arguments_object("{\"a\": " + std::string(1 << 20, '[')).dump(), "{}");
}

}  // namespace
}  // namespace strata::toolcall_test
