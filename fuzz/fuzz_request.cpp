// libFuzzer target for the OpenAI request parsers (src/server/): the input is a request body.
// parse_body, parse_common (chat and completions), parse_prompt, parse_chat_request, tool_specs,
// request_grammar (grammar / response_format, and the tool grammar of every tool-call family),
// generic_tools_prompt, and the chat template rendered over the parsed messages, tools and
// template variables (inputs up to 1 MiB: deep and wide JSON reach every walk). Checked: every input ends in a result or an ApiError (a 400); any other
// exception, a crash or a hang is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/toolcall/toolcall.h"
#include "core/error.h"
#include "server/chat_request.h"
#include "server/constraints.h"
#include "server/openai_api.h"

namespace {

using namespace strata;
using namespace strata::server;

template <class F>
void api(F&& f) {
  try {
    f();
  } catch (const ApiError&) {
  }
}

// ChatML with what templates do to requests: tools and tool-call arguments through tojson, every
// message field, template variables.
constexpr const char* kTemplate =
    "{%- if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{{ m.reasoning_content }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if enable_thinking is defined %}{{ enable_thinking }}{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

void render(const ChatRequest& cr) {
  ChatTemplateOptions o;
  o.tools = cr.tools;
  o.extra_context = cr.kwargs;
  o.now = 0;
  try {
    (void)apply_chat_template(kTemplate, cr.messages, o);
  } catch (const Error&) {  // a template error is the request's 400
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  Json j;
  try {
    j = parse_body(body);
  } catch (const ApiError&) {
    return 0;
  }
  const SamplerParams defaults;
  api([&] { parse_common(j, defaults, true); });
  api([&] { parse_common(j, defaults, false); });
  api([&] { parse_prompts(j); });
  api([&] { request_grammar(j, nullptr); });
  api([&] {
    const ChatRequest cr = parse_chat_request(j);
    const std::vector<toolcall::ToolSpec> specs = cr.tools.is_array() ? tool_specs(cr.tools) : std::vector<toolcall::ToolSpec>{};
    (void)toolcall::generic_tools_prompt(specs, cr.parallel_tool_calls);
    render(cr);
    for (int f = 0; f < 9; ++f) {
      ToolConstraint tc;
      tc.format = static_cast<toolcall::Format>(f);
      tc.tools = cr.tools.is_array() ? &specs : nullptr;
      tc.choice = cr.tool_choice;
      tc.parallel = cr.parallel_tool_calls;
      api([&] { request_grammar(j, &tc); });
    }
  });
  return 0;
}
