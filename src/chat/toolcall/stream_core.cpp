// The shared streaming core of the tool-call parsers: marker scanning with hold-back, the content
// and reasoning modes, and the call pieces the families share (JSON arguments, the JSON envelope,
// key/value arguments). See stream_core.h.
#include "chat/toolcall/stream_core.h"

#include "core/json_depth.h"

#include <algorithm>
#include <cctype>

namespace strata::toolcall::detail {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

Scan scan_markers(std::string_view s, std::span<const std::string_view> markers) {
  Scan r;
  size_t longest = 0;
  for (size_t i = 0; i < markers.size(); ++i) {
    const std::string_view m = markers[i];
    if (m.empty()) continue;
    longest = std::max(longest, m.size());
    const size_t at = s.find(m);
    if (at == std::string_view::npos) continue;
    if (at < r.at || (at == r.at && m.size() > markers[r.which].size())) {
      r.at = at;
      r.which = static_cast<int>(i);
    }
  }
  r.hold = s.size();
  const size_t from = s.size() >= longest ? s.size() - longest + 1 : 0;
  for (size_t k = from; k < s.size(); ++k) {
    const std::string_view tail = s.substr(k);
    const bool partial = std::any_of(markers.begin(), markers.end(), [&](std::string_view m) {
      return m.size() > tail.size() && m.substr(0, tail.size()) == tail;
    });
    if (partial) {
      r.hold = k;
      break;
    }
  }
  return r;
}

void Cur::ws() {
  while (ok() && p < s.size() && is_ws(s[p])) ++p;
}

void Cur::lit(std::string_view m) {
  if (!ok()) return;
  const size_t n = std::min(m.size(), s.size() - p);
  if (s.substr(p, n) != m.substr(0, n)) {
    st = R::Fail;
  } else if (n < m.size()) {
    more();
  } else {
    p += m.size();
  }
}

bool Cur::try_lit(std::string_view m) {
  if (!ok()) return false;
  const size_t n = std::min(m.size(), s.size() - p);
  if (s.substr(p, n) != m.substr(0, n)) return false;
  if (n < m.size()) {
    if (!final) more();
    return false;
  }
  p += m.size();
  return true;
}

void Cur::until(std::string_view m, std::string_view& body, size_t max) {
  if (!ok()) return;
  const size_t at = s.find(m, p);
  if (at == std::string_view::npos || at - p > max) {
    if (s.size() - p > max + m.size()) st = R::Fail;
    else more();
    return;
  }
  body = s.substr(p, at - p);
  p = at + m.size();
}

void Cur::jstring(std::string& decoded) {
  if (!ok()) return;
  if (at_end()) return more();
  if (s[p] != '"') {
    st = R::Fail;
    return;
  }
  JsonBalance b;
  const size_t n = b.consume(s.substr(p));
  if (!b.done) return more();
  const auto j = parse_json(s.substr(p, n));
  if (!j || !j->is_string()) {
    st = R::Fail;
    return;
  }
  decoded = j->get<std::string>();
  p += n;
}

void Cur::jvalue(std::string_view& raw) {
  if (!ok()) return;
  if (at_end()) return more();
  const char c = s[p];
  size_t n = 0;
  if (c == '{' || c == '[' || c == '"') {
    JsonBalance b;
    n = b.consume(s.substr(p));
    if (!b.done) return more();
  } else {
    while (p + n < s.size() && (std::isalnum(static_cast<unsigned char>(s[p + n])) || s[p + n] == '-' ||
                                s[p + n] == '+' || s[p + n] == '.')) {
      ++n;
    }
    if (p + n == s.size() && !final) return more();
    if (n == 0) {
      st = R::Fail;
      return;
    }
  }
  raw = s.substr(p, n);
  p += n;
}

size_t JsonBalance::consume(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') {
        in_str = false;
        if (depth == 0) {
          done = true;
          return i + 1;
        }
      }
    } else if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) {
        done = true;
        return i + 1;
      }
    }
  }
  return s.size();
}

size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t len = b < 0x80 ? 1 : (b >= 0xC2 && b <= 0xDF) ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  uint32_t cp = len == 1 ? b : b & (0x7Fu >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3Fu);
  }
  constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

size_t utf8_complete_prefix(std::string_view s) {
  // At most the last 3 bytes can be the start of an unfinished sequence.
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const auto b = static_cast<unsigned char>(s[s.size() - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return len > back ? s.size() - back : s.size();
  }
  return s.size();
}

void append_json_escaped(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = utf8_sequence(s, i);
      if (len == 0) {
        out += "\\ufffd";  // not UTF-8: JSON text must be
        ++i;
      } else {
        out.append(s.substr(i, len));
        i += len;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
}

std::optional<nlohmann::json> parse_json(std::string_view text) {
  if (json_nesting(text).over()) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

const ToolSpec* find_tool(const std::vector<ToolSpec>& tools, std::string_view name) {
  for (const auto& t : tools) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool arg_is_string(const ToolSpec* tool, std::string_view key) {
  if (tool == nullptr || !tool->parameters.is_object()) return false;
  const auto props = tool->parameters.find("properties");
  if (props == tool->parameters.end() || !props->is_object()) return false;
  const auto prop = props->find(std::string(key));
  if (prop == props->end() || !prop->is_object()) return false;
  const auto type = prop->find("type");
  if (type == prop->end()) return false;
  if (type->is_string()) return type->get<std::string>() == "string";
  if (!type->is_array()) return false;
  bool string = false;
  for (const auto& t : *type) {
    if (!t.is_string()) return false;
    const std::string name = t.get<std::string>();
    if (name == "string") string = true;
    else if (name != "null") return false;
  }
  return string;
}

// ---- KvArgs

void KvArgs::begin(const ToolSpec* tool) {
  tool_ = tool;
  first_ = true;
  in_value_ = false;
  pending_.clear();
}

std::string KvArgs::open() { return "{"; }

std::string KvArgs::key(std::string_view k) {
  std::string out = first_ ? "\"" : ", \"";
  first_ = false;
  append_json_escaped(out, k);
  out += "\": ";
  string_ = arg_is_string(tool_, k);
  in_value_ = true;
  pending_.clear();
  if (string_) out += '"';
  return out;
}

std::string KvArgs::value_chunk(std::string_view v) {
  if (!string_) {
    pending_ += v;
    return {};
  }
  std::string out;
  append_json_escaped(out, v);
  return out;
}

std::string KvArgs::end_value() {
  in_value_ = false;
  if (string_) return "\"";
  size_t b = 0, e = pending_.size();
  while (b < e && is_ws(pending_[b])) ++b;
  while (e > b && is_ws(pending_[e - 1])) --e;
  const std::string_view trimmed = std::string_view(pending_).substr(b, e - b);
  if (auto j = parse_json(trimmed)) return dump_json(*j);
  std::string out = "\"";
  append_json_escaped(out, trimmed);
  out += '"';
  return out;
}

std::string KvArgs::close() { return (in_value_ ? end_value() : std::string()) + "}"; }

}  // namespace strata::toolcall::detail
