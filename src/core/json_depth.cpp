#include "core/json_depth.h"

namespace strata {

JsonNesting json_nesting(std::string_view text, size_t limit) {
  JsonNesting n;
  size_t depth = 0, str_start = 0;
  std::string_view last_str;  // the last string closed at depth 1 (a key if ':' follows)
  bool in_str = false, esc = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_str) {
      if (esc) {
        esc = false;
      } else if (c == '\\') {
        esc = true;
      } else if (c == '"') {
        in_str = false;
        if (depth == 1) last_str = text.substr(str_start, i - str_start);
      }
      continue;
    }
    if (c == '"') {
      in_str = true;
      str_start = i + 1;
    } else if (c == ':' && depth == 1) {
      n.top_key = std::string(last_str.substr(0, 128));
    } else if (c == '{' || c == '[') {
      if (++depth > n.depth) n.depth = depth;
      if (depth > limit) {
        n.over_at = i;
        return n;
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return n;
}

}  // namespace strata
