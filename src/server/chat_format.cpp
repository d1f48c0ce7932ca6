#include "server/chat_format.h"

#include "gguf/gguf_file.h"

namespace strata::server {

ChatFormat chat_format_from_gguf(const GgufModel& m) {
  ChatFormat f;
  f.model_template = m.get_string("tokenizer.chat_template").value_or("");
  f.options = chat_options_from_gguf(m);
  f.options.add_generation_prompt = true;
  return f;
}

ChatPrompt format_chat(const std::vector<ChatMsg>& messages, const ChatFormat& fmt) {
  ChatPrompt p;
  if (!fmt.model_template.empty()) {
    std::vector<ChatMessage> ms;
    ms.reserve(messages.size());
    for (const auto& m : messages) ms.emplace_back(m.role, m.content);
    p.text = apply_chat_template(fmt.model_template, ms, fmt.options);
    const std::string& bos = fmt.options.bos_token;
    p.add_special = !(!bos.empty() && p.text.rfind(bos, 0) == 0);
    return p;
  }
  // No template in the GGUF: ChatML ("<|im_start|>role\ncontent<|im_end|>\n" ... + assistant header).
  for (const auto& m : messages) {
    p.text += "<|im_start|>";
    p.text += m.role == "developer" ? "system" : m.role;
    p.text += "\n";
    p.text += m.content;
    p.text += "<|im_end|>\n";
  }
  if (fmt.options.add_generation_prompt) p.text += "<|im_start|>assistant\n";
  return p;
}

const char* chat_format_name(const ChatFormat& fmt) { return fmt.model_template.empty() ? "chatml-fallback" : "gguf-template"; }

}  // namespace strata::server
