#pragma once
// A Jinja2 subset interpreter for chat templates (HF `tokenizer.chat_template`).
//   auto t = jinja::Template::parse(src);        // lex + parse; errors name line:col
//   std::string s = t.render(context);           // context: a dict Value
// Environment matches Hugging Face transformers: trim_blocks and lstrip_blocks on, no
// autoescape, loop controls (break/continue) on, `tojson` as json.dumps(ensure_ascii=False); plus
// llama.cpp's `from_json` filter (json.loads), which the DeepSeek-V3.2 template uses.
#include <memory>
#include <string>
#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace strata::jinja {

class Template {
 public:
  static Template parse(std::string_view source, const LexOptions& opts = {});
  // Renders with `context` (a dict) layered over the built-in globals (range, namespace,
  // raise_exception, strftime_now, dict). Throws strata::Error naming line:col on failure.
  std::string render(const Value& context) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace strata::jinja
