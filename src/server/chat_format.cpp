#include "server/chat_format.h"

namespace strata::server {

std::string format_chat(const std::vector<ChatMsg>& messages, const ChatFormatOptions& opt) {
  // TODO(jinja): after the chat-template branch is merged, render opt.model_template with
  // strata::apply_chat_template(tmpl, messages -> ChatMessage{role, content}, ChatTemplateOptions
  // {add_generation_prompt}) when it is non-empty, and keep this ChatML text as the fallback.
  std::string out;
  for (const auto& m : messages) {
    out += "<|im_start|>";
    out += m.role == "developer" ? "system" : m.role;
    out += "\n";
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (opt.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

const char* chat_format_name(const ChatFormatOptions&) { return "chatml-fallback"; }

}  // namespace strata::server
