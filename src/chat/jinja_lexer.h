#pragma once
// Jinja lexer: splits a template into text and tag tokens, applying whitespace control
// ({%- -%}, {{- -}}, {#- -#}) and the environment's trim_blocks / lstrip_blocks, then
// tokenizes the expressions inside tags. Every token carries its line:col.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace strata::jinja {

enum class Tok : uint8_t {
  Text,        // literal template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifier or keyword
  String,      // string literal (unescaped value in `text`)
  Int,
  Float,
  Op,          // punctuation / operator in `text`
  Eof,
};

struct Token {
  Tok kind = Tok::Eof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  SourcePos pos;
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag (HF default)
  bool lstrip_blocks = true;  // strip spaces/tabs before a block tag at line start (HF default)
  bool keep_trailing_newline = false;  // Jinja2 default: one trailing newline of the source is dropped
};

std::vector<Token> lex(std::string_view src, const LexOptions& opts);
const char* tok_name(Tok t);

}  // namespace strata::jinja
