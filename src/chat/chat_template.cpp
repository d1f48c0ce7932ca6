#include "chat/chat_template.h"

#include "chat/jinja.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_names.h"

namespace strata {

nlohmann::ordered_json chat_message_to_json(const ChatMessage& m) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["role"] = m.role;
  j["content"] = m.content ? nlohmann::ordered_json(*m.content) : nlohmann::ordered_json(nullptr);
  if (m.reasoning_content) {
    j["reasoning_content"] = *m.reasoning_content;
    j["thinking"] = *m.reasoning_content;
  }
  if (!m.tool_calls.is_null()) {
    if (!m.tool_calls.is_array()) throw Error("chat message: tool_calls must be a JSON array");
    j["tool_calls"] = m.tool_calls;
  }
  if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
  if (m.name) j["name"] = *m.name;
  return j;
}

ChatMessage chat_message_from_json(const nlohmann::ordered_json& j) {
  STRATA_CHECK(j.is_object() && j.contains("role") && j["role"].is_string(),
               "chat message must be an object with a string 'role': {}", j.dump());
  auto opt_string = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    STRATA_CHECK(j[key].is_string(), "chat message field '{}' must be a string: {}", key, j.dump());
    return j[key].get<std::string>();
  };
  ChatMessage m;
  m.role = j["role"].get<std::string>();
  m.content = opt_string("content");
  m.reasoning_content = opt_string("reasoning_content");
  if (j.contains("tool_calls") && !j["tool_calls"].is_null()) m.tool_calls = j["tool_calls"];
  m.tool_call_id = opt_string("tool_call_id");
  m.name = opt_string("name");
  return m;
}

std::string apply_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                const ChatTemplateOptions& opts) {
  STRATA_CHECK(!tmpl.empty(), "chat template is empty; the model has no usable tokenizer.chat_template");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  auto msgs = nlohmann::ordered_json::array();
  for (const auto& m : messages) msgs.push_back(chat_message_to_json(m));
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = opts.add_generation_prompt;
  ctx["bos_token"] = opts.bos_token;
  ctx["eos_token"] = opts.eos_token;
  if (!opts.tools.is_null()) {
    STRATA_CHECK(opts.tools.is_array(), "chat template options: tools must be a JSON array");
    ctx["tools"] = opts.tools;
  }
  if (!opts.extra_context.is_null()) {
    STRATA_CHECK(opts.extra_context.is_object(), "chat template options: extra_context must be a JSON object");
    for (const auto& [k, v] : opts.extra_context.items()) ctx[k] = v;
  }
  jinja::Value context = jinja::Value::from_json(ctx);
  if (opts.now) {
    const std::time_t now = *opts.now;
    context.as_object().set("strftime_now", jinja::Value::function([now](jinja::CallArgs& a) -> jinja::Value {
      const jinja::Value f = a.get(0, "format");
      if (!f.is_string()) jinja::fail_at(a.where, "strftime_now() expects a format string");
      std::tm tm{};
      gmtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof(buf), f.as_string().c_str(), &tm);
      return jinja::Value(std::string(buf, n));
    }));
  }
  return jinja::Template::parse(tmpl).render(context);
}

std::string chat_template_from_gguf(const GgufModel& model) {
  auto t = model.get_string(key::kChatTemplate);
  if (!t || t->empty())
    fail("{}: no '{}' in the GGUF metadata; pass a chat template explicitly (Strata does not guess one)",
         model.path(), key::kChatTemplate);
  return *t;
}

// (Newlines inside expressions: the renderer trims the one after a block tag, as transformers does.)
const char* const kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + ('system' if message['role'] == 'developer' else message['role']) + '\n' + "
    "(message['content'] if message['content'] else '') + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

std::string chat_template_or_chatml(const GgufModel& model, bool* fallback) {
  auto t = model.get_string(key::kChatTemplate);
  const bool none = !t || t->empty();
  if (fallback) *fallback = none;
  return none ? std::string(kChatMlTemplate) : *t;
}

ChatTemplateOptions chat_options_from_gguf(const GgufModel& model) {
  ChatTemplateOptions o;
  const GgufValue* toks = model.find(key::kTokTokens);
  auto token = [&](const char* key) -> std::string {
    auto id = model.get_int(key);
    if (!toks || !id || *id < 0 || static_cast<size_t>(*id) >= toks->strings.size()) return "";
    return std::string(toks->strings[static_cast<size_t>(*id)]);
  };
  o.bos_token = token(key::kTokBosId);
  o.eos_token = token(key::kTokEosId);
  return o;
}

}  // namespace strata
