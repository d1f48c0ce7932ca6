#pragma once
// Chat formatting driven by a model's `tokenizer.chat_template` (a Jinja2 template), with the
// variables Hugging Face transformers passes: messages, tools, add_generation_prompt,
// bos_token, eos_token, plus any extra context (enable_thinking, reasoning_effort, ...).
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

class GgufModel;

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::optional<std::string> c) : role(std::move(r)), content(std::move(c)) {}

  std::string role;                              // system | user | assistant | tool | developer
  std::optional<std::string> content;            // nullopt renders as `none` (tool-call-only turns)
  std::optional<std::string> reasoning_content;  // also exposed as `thinking` (gpt-oss templates)
  nlohmann::ordered_json tool_calls;             // null or an array of OpenAI-style tool calls
  std::optional<std::string> tool_call_id;       // for role == "tool"
  std::optional<std::string> name;               // for role == "tool" (function name)
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json tools;          // null, or an array of OpenAI-style tool definitions
  nlohmann::ordered_json extra_context;  // object merged into the context, e.g. {"enable_thinking": false}
  std::optional<std::time_t> now;        // fixes strftime_now() (UTC) for reproducible output
};

// Renders `tmpl` for `messages`. Throws strata::Error with the template line:col on any
// template error, including unsupported constructs; an empty template is an error.
std::string apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                const ChatTemplateOptions& opts);

// The message as the template sees it (a JSON object).
nlohmann::ordered_json chat_message_to_json(const ChatMessage& m);
// An OpenAI-style message object ({"role", "content", "reasoning_content", "tool_calls", ...}).
ChatMessage chat_message_from_json(const nlohmann::ordered_json& j);

// `tokenizer.chat_template` of a model; throws naming the file when the GGUF has none.
std::string chat_template_from_gguf(const GgufModel& model);

// The one rule for a model whose GGUF has no template, in `strata chat` and the server alike:
// ChatML ("<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, OpenAI's "developer" as "system",
// then "<|im_start|>assistant\n").
extern const char* const kChatMlTemplate;
// The model's template, or kChatMlTemplate when it has none (`fallback`, when given, tells which).
std::string chat_template_or_chatml(const GgufModel& model, bool* fallback = nullptr);

// Options with bos_token / eos_token filled from the model's vocabulary (empty when absent).
ChatTemplateOptions chat_options_from_gguf(const GgufModel& model);

}  // namespace strata
