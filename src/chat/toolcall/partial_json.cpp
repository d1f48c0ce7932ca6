// JSON cut off anywhere, completed as far as it parses (close_partial_json, arguments_object; see
// toolcall.h). One scan keeps the last few places where the text could end: right after an opening
// bracket, after a whole string, container or scalar; the text is cut at the latest of them that
// parses once its open containers are closed.
#include <array>
#include <string>
#include <vector>

#include "chat/toolcall/stream_core.h"
#include "chat/toolcall/toolcall.h"
#include "core/json_depth.h"

namespace strata::toolcall {

namespace {

struct EndPoint {
  size_t pos = 0;
  std::string closers;  // what closes the containers open at pos, innermost first
};

std::string closers_of(const std::vector<char>& stack) {
  std::string s;
  for (auto it = stack.rbegin(); it != stack.rend(); ++it) s += *it == '{' ? '}' : ']';
  return s;
}

// Where an unfinished escape at the end of a string body starts (s.size() when none).
size_t escape_start(std::string_view s) {
  const size_t from = s.size() >= 6 ? s.size() - 6 : 0;
  for (size_t i = s.size(); i-- > from;) {
    if (s[i] != '\\') continue;
    size_t run = 0;  // backslashes ending at i: an even count before it means this one escapes
    for (size_t k = i; k > 0 && s[k - 1] == '\\'; --k) ++run;
    if (run % 2 != 0) continue;
    const std::string_view tail = s.substr(i + 1);
    if (tail.empty()) return i;
    if (tail[0] == 'u' && tail.size() < 5) return i;
    return s.size();
  }
  return s.size();
}

}  // namespace

nlohmann::json close_partial_json(std::string_view text, bool close_strings) {
  constexpr size_t kKept = 6;  // a failing end point is a cut-off key, a comma or a colon: the latest few suffice
  std::array<EndPoint, kKept> ends;
  size_t n_ends = 0;
  auto keep = [&](size_t pos, const std::vector<char>& stack) {
    ends[n_ends % kKept] = EndPoint{pos, closers_of(stack)};
    ++n_ends;
  };
  std::vector<char> stack;
  bool in_str = false, esc = false, in_scalar = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') {
        in_str = false;
        keep(i + 1, stack);
      }
      continue;
    }
    const bool scalar_char = !detail::is_ws(c) && c != ',' && c != ':' && c != '"' && c != '{' && c != '[' && c != '}' && c != ']';
    if (in_scalar && !scalar_char) {
      in_scalar = false;
      keep(i, stack);
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      if (stack.size() >= kMaxJsonDepth) return nullptr;  // deeper than anything parse_json takes
      stack.push_back(c);
      keep(i + 1, stack);
    } else if (c == '}' || c == ']') {
      if (!stack.empty()) stack.pop_back();
      if (stack.empty()) {
        if (auto whole = detail::parse_json(text.substr(0, i + 1))) return *whole;
        return nullptr;
      }
      keep(i + 1, stack);
    } else if (scalar_char) {
      in_scalar = true;
    }
  }
  // The whole text first (a cut-off string closed, when allowed), then the end points, latest first.
  if (!in_str || close_strings) {
    std::string t(text.substr(0, detail::utf8_complete_prefix(text)));
    if (in_str) {
      t.resize(escape_start(t));
      t += '"';
    }
    t += closers_of(stack);
    if (auto j = detail::parse_json(t)) return *j;
  }
  for (size_t k = 0; k < std::min(n_ends, kKept); ++k) {
    const EndPoint& e = ends[(n_ends - 1 - k) % kKept];
    std::string t(text.substr(0, e.pos));
    t += e.closers;
    if (auto j = detail::parse_json(t)) return *j;
  }
  return nullptr;
}

nlohmann::json arguments_object(std::string_view arguments) {
  if (auto j = detail::parse_json(arguments); j && j->is_object()) return *j;
  nlohmann::json j = close_partial_json(arguments, /*close_strings=*/true);
  return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace strata::toolcall
