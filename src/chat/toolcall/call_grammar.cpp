// call_grammar: GBNF forcing one (or more) call(s) in a family's own syntax. The arguments' JSON
// comes from the caller's args_rule; key/value families (Qwen3-Coder, GLM, MiniMax) get one item
// per schema property, required ones first in schema order, then each optional one or not.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "chat/toolcall/stream_core.h"
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
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out + "\"";
}

struct KvSyntax {  // one argument: key_open KEY key_close VALUE value_close
  std::string_view key_open, key_close, value_close;
};

const nlohmann::json kAnyObject = {{"type", "object"}};

// The rules being written beside the calls: the caller's JSON argument rules and raw-text rules.
struct Rules {
  const std::function<std::string(const nlohmann::json&)>& args_rule;
  std::string extra;  // raw-text rules, appended to the grammar
  int n = 0;
};

// A raw string value of at most `max` code points (max < 0: unbounded), at least `min`, in which
// "</" never occurs (the parsers end a value at its closing tag, and every closing tag starts
// with "</"). Two rule families: A (the previous code point is not '<') and B (it is); B may not
// take '/'. Bounded: A_k/B_k take at most k more; the first `min` steps have no empty choice.
std::string raw_string_rule(Rules& r, int64_t min, int64_t max) {
  if (max < 0 && min == 0) return "xml-text";
  const std::string base = "raw-" + std::to_string(r.n++) + "-";
  const auto name = [&](char fam, int64_t k, bool req) { return base + (req ? "r" : "") + fam + std::to_string(k); };
  // Optional part: A_k ::= "" | [^<] A_{k-1} | "<" B_{k-1}; unbounded: one looping pair.
  if (max < 0) {
    r.extra += name('a', 0, false) + " ::= \"\" | [^<] " + name('a', 0, false) + " | \"<\" " + name('b', 0, false) + "\n";
    r.extra += name('b', 0, false) + " ::= \"\" | [^</] " + name('a', 0, false) + " | \"<\" " + name('b', 0, false) + "\n";
  } else {
    for (int64_t k = 0; k <= max - min; ++k) {
      const std::string a = name('a', k - 1, false), b = name('b', k - 1, false);
      r.extra += name('a', k, false) + " ::= \"\"" + (k ? " | [^<] " + a + " | \"<\" " + b : "") + "\n";
      r.extra += name('b', k, false) + " ::= \"\"" + (k ? " | [^</] " + a + " | \"<\" " + b : "") + "\n";
    }
  }
  const int64_t opt = max < 0 ? 0 : max - min;
  // Required part: RA_j ::= [^<] RA_{j-1} | "<" RB_{j-1}; RA_0 is A_opt.
  for (int64_t j = 1; j <= min; ++j) {
    const std::string a = j == 1 ? name('a', opt, false) : name('a', j - 1, true);
    const std::string b = j == 1 ? name('b', opt, false) : name('b', j - 1, true);
    r.extra += name('a', j, true) + " ::= [^<] " + a + " | \"<\" " + b + "\n";
    r.extra += name('b', j, true) + " ::= [^</] " + a + " | \"<\" " + b + "\n";
  }
  return min > 0 ? name('a', min, true) : name('a', opt, false);
}

int64_t length_bound(const nlohmann::json& prop, const char* key, int64_t absent) {
  const auto it = prop.find(key);
  if (it == prop.end()) return absent;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 10000)
    throw std::invalid_argument(std::string("call_grammar: '") + key + "' must be an integer in [0, 10000]");
  return it->get<int64_t>();
}

// The value of a string-typed argument as the key/value parsers read it: raw text (not JSON).
std::string raw_value(Rules& r, const nlohmann::json& prop) {
  for (const char* key : {"enum", "const"}) {
    const auto it = prop.is_object() ? prop.find(key) : prop.end();
    if (it == prop.end()) continue;
    std::string alts;
    for (const auto& v : it->is_array() && std::string(key) == "enum" ? *it : nlohmann::json::array({*it})) {
      if (!v.is_string() || v.get<std::string>().find("</") != std::string::npos) continue;  // not writable raw
      alts += (alts.empty() ? "" : " | ") + lit(v.get<std::string>());
    }
    if (alts.empty()) throw std::invalid_argument(std::string("call_grammar: a string argument's '") + key + "' has no value writable as raw text");
    return "(" + alts + ")";
  }
  if (!prop.is_object()) return "xml-text";
  const int64_t min = length_bound(prop, "minLength", 0), max = length_bound(prop, "maxLength", -1);
  if (max >= 0 && max < min) throw std::invalid_argument("call_grammar: 'maxLength' is below 'minLength'");
  return raw_string_rule(r, min, max);
}

// The key/value items of a tool's arguments.
std::string kv_items(const ToolSpec& tool, const KvSyntax& syn, Rules& r) {
  const nlohmann::json& schema = tool.parameters;
  const auto props = schema.is_object() ? schema.find("properties") : schema.end();
  if (!schema.is_object() || props == schema.end() || !props->is_object() || props->empty()) {
    return "(" + lit(syn.key_open) + " xml-key " + lit(syn.key_close) + " xml-text " + lit(syn.value_close) + ")*";
  }
  std::vector<std::string> required;
  if (const auto req = schema.find("required"); req != schema.end() && req->is_array()) {
    for (const auto& k : *req) {
      if (k.is_string()) required.push_back(k.get<std::string>());
    }
  }
  const auto item = [&](const std::string& key, const nlohmann::json& prop) {
    // Typed exactly as the parser types it (detail::arg_is_string): raw text or JSON.
    const std::string value = detail::arg_is_string(&tool, key) ? raw_value(r, prop) : r.args_rule(prop);
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
std::string call_body(Format f, const ToolSpec& t, Rules& r) {
  const std::string args = r.args_rule(t.parameters.is_null() ? kAnyObject : t.parameters);
  switch (f) {
    case Format::Generic: return lit("{\"name\": \"" + t.name + "\", \"arguments\": ") + " " + args + " \"}\"";
    case Format::Hermes:
      return lit("<tool_call>\n{\"name\": \"" + t.name + "\", \"arguments\": ") + " " + args + " " + lit("}\n</tool_call>");
    case Format::Qwen3Coder:
      return lit("<tool_call>\n<function=" + t.name + ">\n") + " " +
             kv_items(t, {"<parameter=", ">\n", "\n</parameter>\n"}, r) + " " + lit("</function>\n</tool_call>");
    case Format::Llama3: return lit("{\"name\": \"" + t.name + "\", \"parameters\": ") + " " + args + " \"}\"";
    case Format::Harmony:
      return lit("<|channel|>commentary to=functions." + t.name + " <|constrain|>json<|message|>") + " " + args;
    case Format::DeepSeekV31:
      return lit("<｜tool▁call▁begin｜>" + t.name + "<｜tool▁sep｜>") + " " + args + " " + lit("<｜tool▁call▁end｜>");
    case Format::Glm45:
      return lit("<tool_call>" + t.name + "\n") + " " + kv_items(t, {"<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n"}, r) +
             " " + lit("</tool_call>");
    case Format::KimiK2:
      return lit("<|tool_call_begin|>functions." + t.name + ":") + " [0-9]+ " + lit("<|tool_call_argument_begin|>") + " " +
             args + " " + lit("<|tool_call_end|>");
    case Format::MinimaxM2:
      return lit("<invoke name=\"" + t.name + "\">\n") + " " +
             kv_items(t, {"<parameter name=\"", "\">", "</parameter>\n"}, r) + " " + lit("</invoke>\n");
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
  Rules rules{args_rule, {}, 0};
  for (size_t i = 0; i < allowed.size(); ++i) {
    calls += (i ? " | call-" : "call-") + std::to_string(i);
    bodies += "call-" + std::to_string(i) + " ::= " + call_body(f, *allowed[i], rules) + "\n";
  }
  std::string root = "root ::= " + fr.prefix + (fr.prefix.empty() ? "" : " ") + "call";
  if (parallel) root += " (" + fr.sep + (fr.sep.empty() ? "" : " ") + "call)*";
  if (!fr.suffix.empty()) root += " " + fr.suffix;
  g.gbnf = root + "\n" + calls + "\n" + bodies;
  g.gbnf += "ws ::= [ \\t\\n]*\n";
  g.gbnf += "xml-key ::= [^<>\\n\"]+\n";  // a key as the parsers read it (MiniMax ends it at '"')
  g.gbnf += "xml-text ::= raw-any-a\n";    // raw text without "</" (see raw_string_rule)
  g.gbnf += "raw-any-a ::= \"\" | [^<] raw-any-a | \"<\" raw-any-b\n";
  g.gbnf += "raw-any-b ::= \"\" | [^</] raw-any-a | \"<\" raw-any-b\n";
  g.gbnf += rules.extra;
  return g;
}

}  // namespace strata::toolcall
