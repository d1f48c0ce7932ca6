#pragma once
// Chat messages -> prompt text. The one place where chat rendering is chosen: the model's
// `tokenizer.chat_template` through the Jinja engine (src/chat), or, when the GGUF has none,
// a built-in ChatML fallback.
#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace strata {
class GgufModel;
}

namespace strata::server {

struct ChatMsg {
  std::string role;     // system, developer, user, assistant, tool
  std::string content;  // text parts concatenated
};

struct ChatFormat {
  std::string model_template;     // tokenizer.chat_template ("" when absent: ChatML fallback)
  ChatTemplateOptions options;    // bos / eos tokens of the model; add_generation_prompt
};
ChatFormat chat_format_from_gguf(const GgufModel& m);

struct ChatPrompt {
  std::string text;
  bool add_special = true;  // false when the rendered text already starts with the BOS text
};

// Renders the conversation. Throws strata::Error when the template fails (e.g. it raises on
// roles that do not alternate).
ChatPrompt format_chat(const std::vector<ChatMsg>& messages, const ChatFormat& fmt);

// "gguf-template" or "chatml-fallback".
const char* chat_format_name(const ChatFormat& fmt);

}  // namespace strata::server
