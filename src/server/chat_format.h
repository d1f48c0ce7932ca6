#pragma once
// Chat messages -> prompt text. The one place where chat rendering is chosen.
#include <string>
#include <vector>

namespace strata::server {

struct ChatMsg {
  std::string role;     // system, developer, user, assistant, tool
  std::string content;  // text parts concatenated
};

struct ChatFormatOptions {
  std::string model_template;        // tokenizer.chat_template from the GGUF ("" when absent)
  bool add_generation_prompt = true; // end with the assistant's header
};

// Renders the conversation. Today: the built-in ChatML fallback
// ("<|im_start|>role\ncontent<|im_end|>\n" per message, then "<|im_start|>assistant\n").
std::string format_chat(const std::vector<ChatMsg>& messages, const ChatFormatOptions& opt);

// Name of the renderer format_chat uses (for logs and /v1/models): "chatml-fallback".
const char* chat_format_name(const ChatFormatOptions& opt);

}  // namespace strata::server
