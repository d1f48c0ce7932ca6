#include "server/chat_request.h"

#include <fmt/format.h>

namespace strata::server {

namespace {

ApiError invalid(const std::string& where, const std::string& what) { return bad_request(where + " " + what, where, "invalid_value"); }

// content: a string, text parts, or (assistant with tool calls) null.
std::optional<std::string> parse_content(const Json& m, const std::string& where, bool may_be_null) {
  const Json* c = field(m, "content");
  if (!c) {
    if (!may_be_null) throw bad_request(where + ".content is required", where + ".content", "missing_required_parameter");
    return std::nullopt;
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) throw bad_request(where + ".content must be a string or an array of text parts", where + ".content", "invalid_type");
  std::string text;
  for (const auto& part : *c) {
    const Json* type = part.is_object() ? field(part, "type") : nullptr;
    const Json* t = part.is_object() ? field(part, "text") : nullptr;
    if (!type || !type->is_string() || type->get<std::string>() != "text" || !t || !t->is_string())
      throw invalid(where + ".content", "parts must be {\"type\": \"text\", \"text\": string}");
    text += t->get<std::string>();
  }
  return text;
}

// [{id, type: "function", function: {name, arguments}}]; arguments stay as sent (a JSON string
// in OpenAI's format; an object is accepted too), the chat format decides what the template gets.
Json parse_tool_calls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) throw bad_request(where + " must be an array", where, "invalid_type");
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string w = fmt::format("{}[{}]", where, i);
    const Json& c = calls[i];
    if (!c.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
    if (auto type = opt_string(c, "type", w); type && *type != "function") throw invalid(w + ".type", "must be \"function\"");
    const Json* f = field(c, "function");
    if (!f) throw bad_request(w + ".function is required", w + ".function", "missing_required_parameter");
    if (!f->is_object()) throw bad_request(w + ".function must be an object", w + ".function", "invalid_type");
    auto name = opt_string(*f, "name", w + ".function");
    if (!name || name->empty()) throw bad_request(w + ".function.name is required", w + ".function.name", "missing_required_parameter");
    Json args = "{}";
    if (const Json* a = field(*f, "arguments")) {
      if (!a->is_string() && !a->is_object()) throw bad_request(w + ".function.arguments must be a JSON string", w + ".function.arguments", "invalid_type");
      args = *a;
    }
    Json oc = Json::object();
    oc["id"] = opt_string(c, "id", w).value_or(fmt::format("call_{}", i));
    oc["type"] = "function";
    oc["function"] = Json{{"name", *name}, {"arguments", args}};
    out.push_back(std::move(oc));
  }
  return out;
}

ChatMsg parse_message(const Json& m, const std::string& where) {
  if (!m.is_object()) throw bad_request(where + " must be an object", where, "invalid_type");
  const Json* role = field(m, "role");
  if (!role || !role->is_string()) throw bad_request(where + ".role must be a string", where + ".role", "invalid_type");
  ChatMsg cm;
  cm.role = role->get<std::string>();
  if (cm.role != "system" && cm.role != "developer" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
    throw invalid(where + ".role", fmt::format("'{}' is not one of system, developer, user, assistant, tool", cm.role));
  const bool assistant = cm.role == "assistant";
  cm.content = parse_content(m, where, assistant);
  if (assistant) {
    if (const Json* tc = field(m, "tool_calls")) cm.tool_calls = parse_tool_calls(*tc, where + ".tool_calls");
    cm.reasoning_content = opt_string(m, "reasoning_content", where);
    if (!cm.reasoning_content) cm.reasoning_content = opt_string(m, "reasoning", where);
  } else if (field(m, "tool_calls")) {
    throw invalid(where + ".tool_calls", "is only allowed on assistant messages");
  }
  if (cm.role == "tool") {
    cm.tool_call_id = opt_string(m, "tool_call_id", where);
    cm.name = opt_string(m, "name", where);
  }
  return cm;
}

// [{"type": "function", "function": {"name", "description"?, "parameters"?}}]
Json parse_tools(const Json& j) {
  const Json* ts = field(j, "tools");
  if (!ts) return nullptr;
  if (!ts->is_array()) throw wrong_type("tools", "an array");
  if (ts->empty()) return nullptr;
  // Before any work: every tool becomes prompt text and grammar rules.
  if (ts->size() > kMaxTools)
    throw bad_request(fmt::format("'tools' has {} entries; at most {} are accepted", ts->size(), kMaxTools), "tools", "too_many_tools");
  if (const size_t bytes = ts->dump().size(); bytes > kMaxToolsBytes)
    throw ApiError(413, fmt::format("'tools' takes {} bytes as JSON; at most {} are accepted", bytes, kMaxToolsBytes), "invalid_request_error", "tools",
                   "tools_too_large");
  for (size_t i = 0; i < ts->size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const Json& t = (*ts)[i];
    if (!t.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
    auto type = opt_string(t, "type", w);
    if (!type || *type != "function") throw invalid(w + ".type", "must be \"function\" (the only tool type supported)");
    const Json* f = field(t, "function");
    if (!f) throw bad_request(w + ".function is required", w + ".function", "missing_required_parameter");
    if (!f->is_object()) throw bad_request(w + ".function must be an object", w + ".function", "invalid_type");
    auto name = opt_string(*f, "name", w + ".function");
    if (!name || name->empty()) throw bad_request(w + ".function.name is required", w + ".function.name", "missing_required_parameter");
    opt_string(*f, "description", w + ".function");
    if (const Json* p = field(*f, "parameters"); p && !p->is_object())
      throw bad_request(w + ".function.parameters must be a JSON Schema object", w + ".function.parameters", "invalid_type");
  }
  return *ts;
}

bool has_tool(const Json& tools, const std::string& name) {
  if (!tools.is_array()) return false;
  for (const auto& t : tools)
    if (t["function"]["name"] == name) return true;
  return false;
}

ToolChoice parse_tool_choice(const Json& j, const Json& tools) {
  ToolChoice tc;
  const Json* c = field(j, "tool_choice");
  if (!c) return tc;
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "auto") tc.mode = ToolChoice::Mode::Auto;
    else if (s == "none") tc.mode = ToolChoice::Mode::None;
    else if (s == "required") tc.mode = ToolChoice::Mode::Required;
    else throw invalid("tool_choice", fmt::format("'{}' is not one of none, auto, required or a function object", s));
  } else if (c->is_object()) {
    auto type = opt_string(*c, "type", "tool_choice");
    const Json* f = field(*c, "function");
    if (!type || *type != "function" || !f || !f->is_object())
      throw invalid("tool_choice", "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    tc.mode = ToolChoice::Mode::Named;
    tc.name = opt_string(*f, "name", "tool_choice.function").value_or("");
    if (!has_tool(tools, tc.name)) throw invalid("tool_choice.function.name", fmt::format("'{}' is not one of the request's tools", tc.name));
  } else {
    throw wrong_type("tool_choice", "a string or an object");
  }
  if (tc.mode == ToolChoice::Mode::Required && !tools.is_array()) throw invalid("tool_choice", "'required' needs 'tools'");
  return tc;
}

}  // namespace

std::vector<ChatMsg> parse_messages(const Json& j) {
  const Json* ms = field(j, "messages");
  if (!ms) throw bad_request("'messages' is required", "messages", "missing_required_parameter");
  if (!ms->is_array()) throw wrong_type("messages", "an array");
  if (ms->empty()) throw bad_request("'messages' must not be empty", "messages", "invalid_value");
  std::vector<ChatMsg> out;
  out.reserve(ms->size());
  for (size_t i = 0; i < ms->size(); ++i) out.push_back(parse_message((*ms)[i], fmt::format("messages[{}]", i)));
  return out;
}

ChatRequest parse_chat_request(const Json& j) {
  ChatRequest r;
  r.messages = parse_messages(j);
  r.tools = parse_tools(j);
  r.tool_choice = parse_tool_choice(j, r.tools);
  r.parallel_tool_calls = opt_boolean(j, "parallel_tool_calls").value_or(true);
  if (const Json* kw = field(j, "chat_template_kwargs")) {
    if (!kw->is_object()) throw wrong_type("chat_template_kwargs", "an object");
    r.kwargs = *kw;
  }
  if (auto effort = opt_string(j, "reasoning_effort")) {
    if (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "minimal")
      throw invalid("reasoning_effort", fmt::format("'{}' is not one of minimal, low, medium, high", *effort));
    r.kwargs["reasoning_effort"] = *effort;
  }
  if (auto b = opt_integer(j, "reasoning_budget", -1, INT32_MAX)) r.reasoning_budget = static_cast<int>(*b);
  return r;
}

}  // namespace strata::server
