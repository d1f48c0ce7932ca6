#pragma once
// Constrained decoding for a request: the grammar its output must follow, from `grammar` (GBNF),
// `response_format` (json_object / json_schema) or, for tool calls, tool_choice required / a named
// function (and, for templates without a tool syntax, the generic JSON reply object). An invalid
// grammar or an unsupported schema keyword is a 400 naming the field and the keyword.
#include <memory>
#include <string>
#include <vector>

#include "chat/toolcall/toolcall.h"
#include "grammar/grammar.h"
#include "server/chat_request.h"
#include "server/openai_api.h"

namespace strata::server {

// A request's GBNF "grammar" text at most this long (413 beyond).
inline constexpr size_t kMaxGrammarBytes = 256u << 10;

// The validated `tools` of a chat request (ChatRequest::tools) as the tool-call layer's specs.
std::vector<toolcall::ToolSpec> tool_specs(const Json& tools);

// What the tools of a chat request ask for (null tools: none).
struct ToolConstraint {
  toolcall::Format format = toolcall::Format::Generic;
  const std::vector<toolcall::ToolSpec>* tools = nullptr;
  ToolChoice choice;
  bool parallel = true;
};

// The grammar text and its root rule for the tool calls: tool_choice required / named: one call
// (or more when parallel) in the family's syntax, arguments following each tool's schema; auto
// with the Generic format: a call or {"response": "..."}; otherwise none ("").
struct GrammarText {
  std::string gbnf, root = "root";
};
GrammarText tool_grammar(const ToolConstraint& tc);

// The compiled grammar of a request, or null when the output is free. `tc` may be null (completions).
std::shared_ptr<const grammar::Grammar> request_grammar(const Json& body, const ToolConstraint* tc);

}  // namespace strata::server
