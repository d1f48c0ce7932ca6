#include "server/constraints.h"

#include <fmt/format.h>

namespace strata::server {

namespace {

// The param naming the tool whose schema failed (tools[i].function.parameters).
std::string tool_param(const ToolConstraint& tc, const std::string& name) {
  for (size_t i = 0; i < tc.tools->size(); ++i)
    if ((*tc.tools)[i].name == name) return fmt::format("tools[{}].function.parameters", i);
  return "tools";
}

std::shared_ptr<const grammar::Grammar> compile(const std::string& gbnf, const std::string& root, const std::string& param) {
  try {
    return grammar::parse_gbnf(gbnf, root);
  } catch (const grammar::GrammarError& e) {
    throw bad_request(fmt::format("'{}': {}", param, e.what()), param, "invalid_grammar");
  }
}

std::string schema_gbnf(const nlohmann::json& schema, const std::string& param) {
  try {
    return grammar::json_schema_to_gbnf(schema);
  } catch (const grammar::GrammarError& e) {
    throw bad_request(fmt::format("'{}': {}", param, e.what()), param, "unsupported_schema");
  }
}

// response_format: {"type": "text"} | {"type": "json_object"} | {"type": "json_schema", "json_schema": {"schema": {...}}}.
std::string response_format_gbnf(const Json& rf) {
  if (!rf.is_object()) throw wrong_type("response_format", "an object");
  const std::string type = opt_string(rf, "type", "response_format").value_or("");
  if (type == "text") return "";
  if (type == "json_object") {
    // llama-server also takes {"type": "json_object", "schema": {...}}.
    if (const Json* s = field(rf, "schema")) return schema_gbnf(nlohmann::json::parse(s->dump()), "response_format.schema");
    return grammar::json_object_gbnf();
  }
  if (type != "json_schema") throw bad_request("'response_format.type' must be text, json_object or json_schema", "response_format.type", "invalid_value");
  const Json* js = field(rf, "json_schema");
  if (!js || !js->is_object()) throw bad_request("'response_format.json_schema' must be an object", "response_format.json_schema", "invalid_type");
  const Json* schema = field(*js, "schema");
  if (!schema) throw bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema", "missing_required_parameter");
  if (!schema->is_object() && !schema->is_boolean())
    throw bad_request("'response_format.json_schema.schema' must be a JSON Schema object", "response_format.json_schema.schema", "invalid_type");
  return schema_gbnf(nlohmann::json::parse(schema->dump()), "response_format.json_schema.schema");
}

}  // namespace

std::vector<toolcall::ToolSpec> tool_specs(const Json& tools) {
  std::vector<toolcall::ToolSpec> out;
  for (const auto& t : tools) {
    const Json& f = t["function"];
    toolcall::ToolSpec s;
    s.name = f["name"].get<std::string>();
    if (f.contains("description") && f["description"].is_string()) s.description = f["description"].get<std::string>();
    if (f.contains("parameters") && f["parameters"].is_object()) s.parameters = nlohmann::json::parse(f["parameters"].dump());
    out.push_back(std::move(s));
  }
  return out;
}

GrammarText tool_grammar(const ToolConstraint& tc) {
  using Mode = ToolChoice::Mode;
  GrammarText g;
  if (!tc.tools || tc.tools->empty()) return g;
  const bool forced = tc.choice.mode == Mode::Required || tc.choice.mode == Mode::Named;
  if (!forced && !(tc.choice.mode == Mode::Auto && tc.format == toolcall::Format::Generic)) return g;
  std::string rules;
  int k = 0;
  std::string current;  // the tool whose schema is being compiled
  toolcall::CallGrammar cg;
  try {
    cg = toolcall::call_grammar(tc.format, *tc.tools, tc.parallel, tc.choice.mode == Mode::Named ? tc.choice.name : "",
                                [&](const nlohmann::json& schema) {
                                  for (const auto& t : *tc.tools)
                                    if (t.parameters == schema) current = t.name;
                                  const std::string name = fmt::format("tool-args-{}", k++);
                                  rules += grammar::json_schema_rules(schema.is_null() ? nlohmann::json{{"type", "object"}} : schema, name);
                                  rules += "\n";
                                  return name;
                                });
  } catch (const grammar::GrammarError& e) {
    const std::string param = tool_param(tc, current);
    throw bad_request(fmt::format("'{}': {}", param, e.what()), param, "unsupported_schema");
  }
  g.gbnf = cg.gbnf + "\n" + rules;
  if (!forced) {
    // Generic, auto: a call or a plain answer {"response": "..."}.
    g.gbnf += grammar::json_schema_rules(nlohmann::json{{"type", "string"}}, "generic-response-text");
    g.gbnf += "\ngeneric-response ::= \"{\\\"response\\\": \" generic-response-text \"}\"\n";
    g.gbnf += "generic-reply ::= root | generic-response\n";
    g.root = "generic-reply";
  }
  return g;
}

std::shared_ptr<const grammar::Grammar> request_grammar(const Json& body, const ToolConstraint* tc) {
  const Json* raw = field(body, "grammar");
  const Json* rf = field(body, "response_format");
  if (raw && !raw->is_string()) throw wrong_type("grammar", "a string (GBNF)");
  std::string text, root = "root", param;
  if (raw) text = raw->get<std::string>(), param = "grammar";
  if (text.size() > kMaxGrammarBytes)
    throw ApiError(413, fmt::format("'grammar' is {} bytes; at most {} are accepted", text.size(), kMaxGrammarBytes), "invalid_request_error", "grammar",
                   "grammar_too_large");
  if (rf) {
    std::string t = response_format_gbnf(*rf);
    if (!t.empty() && raw) throw bad_request("'grammar' and 'response_format' cannot both constrain the output", "response_format", "invalid_value");
    if (!t.empty()) text = std::move(t), param = "response_format";
  }
  if (tc) {
    GrammarText g = tool_grammar(*tc);
    if (!g.gbnf.empty()) {
      const bool forced = tc->choice.mode == ToolChoice::Mode::Required || tc->choice.mode == ToolChoice::Mode::Named;
      if (!text.empty() && forced)
        throw bad_request(fmt::format("'{}' cannot be combined with tool_choice required or a named function", param), param, "invalid_value");
      if (text.empty()) text = std::move(g.gbnf), root = g.root, param = "tools";
    }
  }
  if (text.empty()) return nullptr;
  return compile(text, root, param);
}

}  // namespace strata::server
