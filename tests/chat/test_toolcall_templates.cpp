// What a family's chat template renders for an assistant message with tool calls is what its
// models emit: render that message with each template of tests/chat/data, parse the rendered
// assistant turn (from where it leaves the generation prompt) with the detected format, and get
// the same calls back (split at every byte too).
#include "chat/chat_template.h"
#include "chat_test_util.h"
#include "toolcall_test_util.h"

namespace strata::toolcall_test {
namespace {

nlohmann::ordered_json tools_json() {
  nlohmann::ordered_json arr = nlohmann::ordered_json::array();
  for (const auto& t : tools()) {
    arr.push_back({{"type", "function"},
                   {"function", {{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}}}});
  }
  return arr;
}

struct Sent {
  std::string name;
  nlohmann::json args;
};

// The assistant turn the template renders for `calls` (the text after the generation prompt).
std::string rendered_turn(const std::string& tmpl, const std::vector<Sent>& calls) {
  std::vector<ChatMessage> msgs;
  msgs.emplace_back("user", "Weather in Paris, and cafés?");
  ChatTemplateOptions o;
  o.tools = tools_json();
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.now = 0;
  const std::string prompt = apply_chat_template(tmpl, msgs, o);
  ChatMessage a("assistant", std::string());
  a.tool_calls = nlohmann::ordered_json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    a.tool_calls.push_back({{"id", "call_" + std::to_string(i)},
                            {"type", "function"},
                            {"function", {{"name", calls[i].name}, {"arguments", calls[i].args}}}});
  }
  msgs.push_back(a);
  o.add_generation_prompt = false;
  const std::string full = apply_chat_template(tmpl, msgs, o);
  // Where the rendered history leaves the prompt (templates that open <think> in the generation
  // prompt render a closed or no block in the history).
  size_t common = 0;
  while (common < prompt.size() && common < full.size() && prompt[common] == full[common]) ++common;
  return full.substr(common);
}

void expect_round_trip(const std::string& file, bool parallel) {
  SCOPED_TRACE(file);
  const std::string tmpl = chat_test::read_data(file);
  const Format f = detect_format(tmpl);
  std::vector<Sent> sent = {{"get_weather", {{"location", "Paris"}, {"unit", "c"}}}};
  if (parallel) sent.push_back({"search", {{"query", "café \"crème\"\n2"}, {"limit", 3}, {"filters", {{"open", true}}}}});
  const std::string turn = rendered_turn(tmpl, sent);
  const Parsed p = parse_all(f, opts(), turn);
  ASSERT_EQ(p.calls.size(), sent.size()) << format_name(f) << " on:\n" << turn << "\n" << describe(p);
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(p.calls[i].name, sent[i].name);
    const auto args = nlohmann::json::parse(p.calls[i].arguments, nullptr, false);
    EXPECT_EQ(args, sent[i].args) << p.calls[i].arguments;
  }
  expect_all_splits(f, opts(), turn, p);
}

TEST(ToolCallTemplates, RenderedCallsParseBack) {
  for (const char* file : {"qwen3.jinja", "qwen3_5.jinja", "deepseek_v3_1.jinja", "glm4_6.jinja",
                           "glm4_7.jinja", "kimi_k2.jinja", "kimi_k2_instruct.jinja", "kimi_k2_thinking.jinja",
                           "minimax_m2.jinja"}) {
    expect_round_trip(file, true);
  }
  // These templates render one call per assistant message.
  expect_round_trip("llama3_1.jinja", false);
  expect_round_trip("gpt_oss.jinja", false);
}

}  // namespace
}  // namespace strata::toolcall_test
