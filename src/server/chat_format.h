#pragma once
// Chat messages -> prompt text. The one place where chat rendering is chosen: the model's
// `tokenizer.chat_template` (or --chat-template-file) through the Jinja engine (src/chat), or,
// when there is none, a built-in ChatML fallback.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace strata {
class GgufModel;
}

namespace strata::server {

// role, content (nullopt: none), reasoning_content, tool_calls, tool_call_id, name.
using ChatMsg = ChatMessage;

struct ChatFormat {
  std::string model_template;     // the Jinja template (chat/chat_template.h's ChatML when the model has none)
  bool chatml_fallback = false;   // model_template is that ChatML
  ChatTemplateOptions options;    // bos / eos tokens of the model; add_generation_prompt; extra_context = server default kwargs
  // Assistant tool-call arguments reach the template as objects (parsed from the OpenAI JSON
  // string) when the template cannot render them as a string; see template_wants_object_arguments.
  bool object_arguments = true;
  bool content_string = false;    // a null content (tool-call-only turn) reaches the template as ""
  bool from_file = false;         // --chat-template-file
};
// `template_override`: the text of --chat-template-file ("" : the GGUF's).
ChatFormat chat_format_from_gguf(const GgufModel& m, const std::string& template_override = {});

// Per request: OpenAI tools (null or an array) and template variables merged over the server's.
struct ChatInputs {
  nlohmann::ordered_json tools;
  nlohmann::ordered_json kwargs;  // null or an object
};

struct ChatPrompt {
  std::string text;
  bool add_special = true;  // false when the rendered text already starts with the BOS text
};

// Renders the conversation. Throws strata::Error when the template fails (e.g. it raises on
// roles that do not alternate).
ChatPrompt format_chat(const std::vector<ChatMsg>& messages, const ChatFormat& fmt, const ChatInputs& in = {});

// Does the template need tool-call arguments as a mapping? It renders a probe call whose
// arguments are a JSON string; a template that fails on it, or does not show that JSON text
// verbatim (e.g. `arguments | tojson` double-encodes it, `arguments.items()` fails), gets
// objects (llama-server converts likewise for such templates).
bool template_wants_object_arguments(const std::string& tmpl, const ChatTemplateOptions& opts);

// Does the template fail on a null content (an assistant turn with only tool calls) but render ""?
bool template_needs_content_string(const std::string& tmpl, const ChatTemplateOptions& opts);

// "gguf-template", "template-file" or "chatml-fallback".
const char* chat_format_name(const ChatFormat& fmt);

}  // namespace strata::server
