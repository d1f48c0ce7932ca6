#pragma once
// Jinja parser: token stream -> statement list. Precedence follows Jinja2:
// ternary < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary - < filters/tests/postfix.
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace strata::jinja {

// Fails with the line:col of the offending token for bad syntax, unknown tags and unclosed blocks.
Body parse(const std::vector<Token>& toks);

}  // namespace strata::jinja
