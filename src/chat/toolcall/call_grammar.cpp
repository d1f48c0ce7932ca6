// call_grammar: GBNF forcing one (or more) call(s) in a family's own syntax. The arguments' JSON
// comes from the caller's args_rule; key/value families (Qwen3-Coder, GLM, MiniMax) get one item
// per schema property, required ones first in schema order, then each optional one or not.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "chat/toolcall/toolcall.h"

namespace strata::toolcall {
namespace {

std::string lit(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

struct KvSyntax {  // one argument: key_open KEY key_close VALUE value_close
  std::string_view key_open, key_close, value_close;
};

const nlohmann::json kAnyObject = {{"type", "object"}};

// The key/value items of a tool's arguments.
std::string kv_items(const ToolSpec& tool, const KvSyntax& syn,
                     const std::function<std::string(const nlohmann::json&)>& args_rule) {
  const nlohmann::json& schema = tool.parameters;
  const auto props = schema.is_object() ? schema.find("properties") : schema.end();
  if (!schema.is_object() || props == schema.end() || !props->is_object() || props->empty()) {
    return "(" + lit(syn.key_open) + " xml-key " + lit(syn.key_close) + " xml-text " + lit(syn.value_close) + ")*";
  }
  std::vector<std::string> required;
  if (const auto r = schema.find("required"); r != schema.end() && r->is_array()) {
    for (const auto& k : *r) {
      if (k.is_string()) required.push_back(k.get<std::string>());
    }
  }
  const auto item = [&](const std::string& key, const nlohmann::json& prop) {
    const bool is_string = prop.is_object() && prop.contains("type") && prop["type"] == "string";
    const std::string value = is_string ? "xml-text" : args_rule(prop);
    return lit(std::string(syn.key_open) + key + std::string(syn.key_close)) + " " + value + " " + lit(syn.value_close);
  };
  std::string out;
  for (const auto& [key, prop] : props->items()) {
    if (std::find(required.begin(), required.end(), key) != required.end()) out += item(key, prop) + " ";
  }
  for (const auto& [key, prop] : props->items()) {
    if (std::find(required.begin(), required.end(), key) == required.end()) out += "(" + item(key, prop) + ")? ";
  }
  return out;
}

// One call to `tool` in format f.
std::string call_body(Format f, const ToolSpec& t, const std::function<std::string(const nlohmann::json&)>& args_rule) {
  const std::string args = args_rule(t.parameters.is_null() ? kAnyObject : t.parameters);
  switch (f) {
    case Format::Generic: return lit("{\"name\": \"" + t.name + "\", \"arguments\": ") + " " + args + " \"}\"";
    case Format::Hermes:
      return lit("<tool_call>\n{\"name\": \"" + t.name + "\", \"arguments\": ") + " " + args + " " + lit("}\n</tool_call>");
    case Format::Qwen3Coder:
      return lit("<tool_call>\n<function=" + t.name + ">\n") + " " +
             kv_items(t, {"<parameter=", ">\n", "\n</parameter>\n"}, args_rule) + " " + lit("</function>\n</tool_call>");
    case Format::Llama3: return lit("{\"name\": \"" + t.name + "\", \"parameters\": ") + " " + args + " \"}\"";
    case Format::Harmony:
      return lit("<|channel|>commentary to=functions." + t.name + " <|constrain|>json<|message|>") + " " + args;
    case Format::DeepSeekV31:
      return lit("<｜tool▁call▁begin｜>" + t.name + "<｜tool▁sep｜>") + " " + args + " " + lit("<｜tool▁call▁end｜>");
    case Format::Glm45:
      return lit("<tool_call>" + t.name + "\n") + " " + kv_items(t, {"<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n"}, args_rule) +
             " " + lit("</tool_call>");
    case Format::KimiK2:
      return lit("<|tool_call_begin|>functions." + t.name + ":") + " [0-9]+ " + lit("<|tool_call_argument_begin|>") + " " +
             args + " " + lit("<|tool_call_end|>");
    case Format::MinimaxM2:
      return lit("<invoke name=\"" + t.name + "\">\n") + " " +
             kv_items(t, {"<parameter name=\"", "\">", "</parameter>\n"}, args_rule) + " " + lit("</invoke>\n");
  }
  throw std::invalid_argument("call_grammar: unknown tool-call format");
}

struct Frame {  // around the calls: prefix, between two calls, suffix; trigger
  std::string prefix, sep, suffix, trigger;
};

Frame frame(Format f, bool parallel) {
  switch (f) {
    case Format::Generic:
      return parallel ? Frame{lit("{\"tool_calls\": ["), lit(", "), lit("]}"), "{"}
                      : Frame{lit("{\"tool_call\": "), "", lit("}"), "{"};
    case Format::Hermes: return {"", "ws", "", "<tool_call>"};
    case Format::Qwen3Coder: return {"", "ws", "", "<tool_call>"};
    case Format::Llama3: return {"", "ws", "", "{\"name\": \""};
    case Format::Harmony: return {"", lit("<|call|><|start|>assistant"), "", "<|channel|>commentary to=functions."};
    case Format::DeepSeekV31:
      return {lit("<｜tool▁calls▁begin｜>"), "", lit("<｜tool▁calls▁end｜>"), "<｜tool▁calls▁begin｜>"};
    case Format::Glm45: return {"", "ws", "", "<tool_call>"};
    case Format::KimiK2:
      return {lit("<|tool_calls_section_begin|>"), "", lit("<|tool_calls_section_end|>"), "<|tool_calls_section_begin|>"};
    case Format::MinimaxM2: return {lit("<minimax:tool_call>\n"), "", lit("</minimax:tool_call>"), "<minimax:tool_call>"};
  }
  throw std::invalid_argument("call_grammar: unknown tool-call format");
}

}  // namespace

CallGrammar call_grammar(Format f, const std::vector<ToolSpec>& tools, bool parallel, std::string_view only,
                         const std::function<std::string(const nlohmann::json& schema)>& args_rule) {
  CallGrammar g;
  std::vector<const ToolSpec*> allowed;
  for (const auto& t : tools) {
    if (only.empty() || t.name == only) allowed.push_back(&t);
  }
  if (allowed.empty()) {
    throw std::invalid_argument(only.empty() ? std::string("call_grammar: no tools")
                                             : "call_grammar: tool_choice names \"" + std::string(only) + "\", which is not among the tools");
  }
  const Frame fr = frame(f, parallel);
  g.trigger = fr.trigger;
  std::string calls = "call ::= ";
  std::string bodies;
  for (size_t i = 0; i < allowed.size(); ++i) {
    calls += (i ? " | call-" : "call-") + std::to_string(i);
    bodies += "call-" + std::to_string(i) + " ::= " + call_body(f, *allowed[i], args_rule) + "\n";
  }
  std::string root = "root ::= " + fr.prefix + (fr.prefix.empty() ? "" : " ") + "call";
  if (parallel) root += " (" + fr.sep + (fr.sep.empty() ? "" : " ") + "call)*";
  if (!fr.suffix.empty()) root += " " + fr.suffix;
  g.gbnf = root + "\n" + calls + "\n" + bodies;
  g.gbnf += "ws ::= [ \\t\\n]*\n";
  g.gbnf += "xml-key ::= [^<>\\n]+\n";
  g.gbnf += "xml-text ::= ([^<] | \"<\" [^/])*\n";
  return g;
}

}  // namespace strata::toolcall
