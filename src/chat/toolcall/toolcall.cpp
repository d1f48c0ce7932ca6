// The front of chat/toolcall/: format detection and names, the parser factory, folding events,
// and the generic format's system prompt.
#include "chat/toolcall/toolcall.h"

#include "chat/toolcall/families.h"
#include "chat/toolcall/stream_core.h"

namespace strata::toolcall {

Format detect_format(std::string_view t) {
  const auto has = [&](std::string_view m) { return t.find(m) != std::string_view::npos; };
  if (has("<|channel|>")) return Format::Harmony;
  if (has("tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin")) return Format::DeepSeekV31;  // tool▁calls▁begin
  if (has("tool_calls_section_begin")) return Format::KimiK2;
  if (has("minimax:tool_call")) return Format::MinimaxM2;
  if (has("<arg_key>")) return Format::Glm45;
  if (has("<tool_call>") && has("<function=")) return Format::Qwen3Coder;
  if (has("<tool_call>")) return Format::Hermes;
  if (has("<|python_tag|>") || has("ipython")) return Format::Llama3;
  return Format::Generic;
}

const char* format_name(Format f) {
  switch (f) {
    case Format::Generic: return "generic";
    case Format::Hermes: return "hermes";
    case Format::Qwen3Coder: return "qwen3-coder";
    case Format::Llama3: return "llama3";
    case Format::Harmony: return "harmony";
    case Format::DeepSeekV31: return "deepseek-v3.1";
    case Format::Glm45: return "glm-4.5";
    case Format::KimiK2: return "kimi-k2";
    case Format::MinimaxM2: return "minimax-m2";
  }
  return "unknown";
}

StreamParser::~StreamParser() = default;

std::unique_ptr<StreamParser> StreamParser::make(Format f, ParserOptions o) {
  using namespace detail;
  switch (f) {
    case Format::Generic: return make_generic(std::move(o));
    case Format::Hermes: return make_hermes(std::move(o));
    case Format::Qwen3Coder: return make_qwen3_coder(std::move(o));
    case Format::Llama3: return make_llama3(std::move(o));
    case Format::Harmony: return make_harmony(std::move(o));
    case Format::DeepSeekV31: return make_deepseek_v31(std::move(o));
    case Format::Glm45: return make_glm45(std::move(o));
    case Format::KimiK2: return make_kimi_k2(std::move(o));
    case Format::MinimaxM2: return make_minimax_m2(std::move(o));
  }
  return make_generic(std::move(o));
}

void fold_into(Parsed& p, const std::vector<Event>& events) {
  for (const auto& e : events) {
    switch (e.kind) {
      case Event::Kind::Content: p.content += e.text; break;
      case Event::Kind::Reasoning: p.reasoning += e.text; break;
      case Event::Kind::CallStart: p.calls.push_back(ToolCall{e.id, e.name, {}}); break;
      case Event::Kind::CallArgs:
        if (!p.calls.empty()) p.calls.back().arguments += e.text;
        break;
      case Event::Kind::CallEnd:
        if (!p.calls.empty()) p.calls.back().cut = e.cut;
        break;
    }
  }
}

Parsed fold(const std::vector<Event>& events) {
  Parsed p;
  fold_into(p, events);
  return p;
}

Parsed parse_all(Format f, ParserOptions o, std::string_view text) {
  auto parser = StreamParser::make(f, std::move(o));
  std::vector<Event> events;
  parser->feed(text, events);
  parser->finish(events);
  return fold(events);
}

Parsed parse_cut(Format f, ParserOptions o, std::string_view text) {
  auto parser = StreamParser::make(f, std::move(o));
  std::vector<Event> events;
  parser->feed(text, events);
  parser->finish_cut(events);
  return fold(events);
}

// Tools lists longer than this (compact JSON bytes) are not indented in the generic prompt.
constexpr size_t kPrettyToolsMax = 64u << 10;

std::string generic_tools_prompt(const std::vector<ToolSpec>& tools, bool parallel) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& t : tools) {
    nlohmann::ordered_json fn;
    fn["name"] = t.name;
    if (!t.description.empty()) fn["description"] = t.description;
    fn["parameters"] = t.parameters.is_null() ? nlohmann::json::object() : t.parameters;
    list.push_back(fn);
  }
  std::string s = "You can call these tools (JSON Schema of each one's arguments in \"parameters\"):\n";
  // Indented like llama.cpp's generic prompt while that stays small; past kPrettyToolsMax one compact
  // tool per line (indentation grows with depth times size: a deep schema would cost gigabytes).
  const std::string compact = list.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (compact.size() <= kPrettyToolsMax) {
    s += list.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    s += "[\n";
    for (size_t i = 0; i < list.size(); ++i)
      s += list[i].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + (i + 1 < list.size() ? ",\n" : "\n");
    s += "]";
  }
  s += "\n\nRespond with exactly one JSON object and nothing else.\nTo call a tool:\n";
  if (parallel) {
    s += "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}, ...]}\n";
    s += "(one entry per call; several calls run in parallel)\n";
  } else {
    s += "{\"tool_call\": {\"name\": \"<tool name>\", \"arguments\": {<arguments>}}}\n";
  }
  s += "To answer the user directly:\n{\"response\": \"<your answer>\"}\n";
  return s;
}

}  // namespace strata::toolcall
