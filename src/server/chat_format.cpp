#include "server/chat_format.h"

#include <optional>

#include "core/json_depth.h"
#include "gguf/gguf_file.h"

namespace strata::server {

using ojson = nlohmann::ordered_json;

ChatFormat chat_format_from_gguf(const GgufModel& m, const std::string& template_override) {
  ChatFormat f;
  f.from_file = !template_override.empty();
  f.model_template = f.from_file ? template_override : chat_template_or_chatml(m, &f.chatml_fallback);
  f.options = chat_options_from_gguf(m);
  f.options.add_generation_prompt = true;
  if (!f.model_template.empty()) {
    f.object_arguments = template_wants_object_arguments(f.model_template, f.options);
    f.content_string = template_needs_content_string(f.model_template, f.options);
  }
  return f;
}

namespace {

constexpr const char* kProbeArgs = R"({"probe_key": "probe_value"})";

// A conversation with one tool call (arguments as a JSON string) and its result.
std::optional<std::string> render_probe(const std::string& tmpl, const ChatTemplateOptions& opts, bool null_content) {
  std::vector<ChatMessage> ms;
  ms.emplace_back("user", "probe");
  ChatMessage a("assistant", null_content ? std::nullopt : std::optional<std::string>(""));
  a.tool_calls = ojson::array({ojson{{"id", "call_probe"}, {"type", "function"}, {"function", {{"name", "probe_fn"}, {"arguments", kProbeArgs}}}}});
  ms.push_back(a);
  ChatMessage t("tool", "probe_result");
  t.tool_call_id = "call_probe";
  t.name = "probe_fn";
  ms.push_back(t);
  ChatTemplateOptions o = opts;
  o.add_generation_prompt = true;
  o.tools = ojson::array({ojson{{"type", "function"},
                                {"function", {{"name", "probe_fn"}, {"description", "probe"}, {"parameters", {{"type", "object"}, {"properties", ojson::object()}}}}}}});
  try {
    return apply_chat_template(tmpl, ms, o);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

bool template_wants_object_arguments(const std::string& tmpl, const ChatTemplateOptions& opts) {
  auto text = render_probe(tmpl, opts, /*null_content=*/true);
  if (!text) text = render_probe(tmpl, opts, false);
  return !text || text->find(kProbeArgs) == std::string::npos;
}

bool template_needs_content_string(const std::string& tmpl, const ChatTemplateOptions& opts) {
  return !render_probe(tmpl, opts, /*null_content=*/true) && render_probe(tmpl, opts, false);
}

namespace {

// OpenAI sends arguments as a JSON string; templates that iterate them get the parsed object
// (a string that does not parse stays a string).
std::vector<ChatMessage> for_template(const std::vector<ChatMsg>& messages, const ChatFormat& fmt) {
  std::vector<ChatMessage> ms = messages;
  for (auto& m : ms) {
    if (fmt.content_string && !m.content) m.content = "";
    if (!fmt.object_arguments) continue;
    if (!m.tool_calls.is_array()) continue;
    for (auto& c : m.tool_calls) {
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
      ojson& args = c["function"]["arguments"];
      if (!args.is_string() || json_nesting(args.get<std::string>()).over()) continue;  // stays a string
      ojson parsed = ojson::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) args = std::move(parsed);
    }
  }
  return ms;
}

}  // namespace

ChatPrompt format_chat(const std::vector<ChatMsg>& messages, const ChatFormat& fmt, const ChatInputs& in) {
  ChatPrompt p;
  ChatTemplateOptions o = fmt.options;
  o.tools = in.tools;
  if (in.kwargs.is_object()) {
    if (!o.extra_context.is_object()) o.extra_context = ojson::object();
    for (const auto& [k, v] : in.kwargs.items()) o.extra_context[k] = v;
  }
  p.text = apply_chat_template(fmt.model_template, for_template(messages, fmt), o);
  const std::string& bos = fmt.options.bos_token;
  p.add_special = !(!bos.empty() && p.text.rfind(bos, 0) == 0);
  return p;
}

const char* chat_format_name(const ChatFormat& fmt) { 
  return fmt.chatml_fallback ? "chatml-fallback" : fmt.from_file ? "template-file" : "gguf-template";
}

}  // namespace strata::server
