#pragma once
// The chat-only fields of /v1/chat/completions: messages (with tool calls, tool results and
// reasoning), tools and tool_choice, reasoning controls. Every problem is a 400 naming the field.
#include <optional>
#include <string>
#include <vector>

#include "server/chat_format.h"
#include "server/openai_api.h"

namespace strata::server {

// A request's allowance, checked before any work (every tool becomes prompt text and grammar
// rules): OpenAI's own limit of 128 tools, and their JSON at most kMaxToolsBytes (413 beyond).
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolsBytes = 512u << 10;

struct ToolChoice {
  enum class Mode { Auto, None, Required, Named } mode = Mode::Auto;
  std::string name;  // Named: the function
};

struct ChatRequest {
  std::vector<ChatMsg> messages;
  Json tools;                    // null, or the validated OpenAI function tools (as sent)
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  Json kwargs = Json::object();  // template variables: chat_template_kwargs, reasoning_effort
  std::optional<int> reasoning_budget;  // tokens; -1 unlimited, 0 no thinking
};

// messages: role system|developer|user|assistant|tool; content a string or text parts (null
// allowed for an assistant with tool_calls); assistant `tool_calls` [{id, type:"function",
// function:{name, arguments: string or object}}] and `reasoning_content` (alias `reasoning`);
// tool `tool_call_id`, `name`.
std::vector<ChatMsg> parse_messages(const Json& j);

ChatRequest parse_chat_request(const Json& j);

}  // namespace strata::server
