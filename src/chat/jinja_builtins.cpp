// Filters, tests, methods and globals. Each one checks its argument types and fails
// naming itself and the template position; nothing falls back silently.
#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include "core/json_depth.h"
#include <ctime>

namespace strata::jinja {

const std::string& need_string(const Value& v, const char* what, SourcePos where) {
  if (!v.is_string()) fail_at(where, "{} expects a string, got a {}", what, v.type_name());
  return v.as_string();
}

int64_t need_int(const Value& v, const char* what, SourcePos where) {
  if (!v.is_int() && !v.is_bool()) fail_at(where, "{} expects an integer, got a {}", what, v.type_name());
  return v.as_int();
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  auto strip_me = [&](char c) {
    return chars.is_string() ? chars.as_string().find(c) != std::string::npos : is_ws(c);
  };
  size_t b = 0, e = s.size();
  if (left) while (b < e && strip_me(s[b])) ++b;
  if (right) while (e > b && strip_me(s[e - 1])) --e;
  return s.substr(b, e - b);
}

namespace {

// Simple (1:1) case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other
// code points (CJK, symbols) have no case and pass through, as in Python.
uint32_t upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1u) ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  return c;
}

uint32_t lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1u;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1u) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

// Applies `f(code point, previous was a letter)` over UTF-8 text.
template <typename F>
std::string map_code_points(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  bool prev_letter = false;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (n == 1) {
      out += static_cast<char>(f(c, prev_letter));
      prev_letter = std::isalpha(c) != 0;
      ++i;
      continue;
    }
    if (n != 2 || i + 1 >= s.size()) {  // 3/4-byte sequences (CJK, emoji ...) have no case here
      (void)f(0x10000, prev_letter);    // still counts as a character (capitalize's "first")
      out.append(s, i, n);
      prev_letter = true;
      i += n;
      continue;
    }
    const uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    const uint32_t m = f(cp, prev_letter);
    out += static_cast<char>(0xC0 | (m >> 6));
    out += static_cast<char>(0x80 | (m & 0x3F));
    prev_letter = upper_cp(cp) != cp || lower_cp(cp) != cp;
    i += 2;
  }
  return out;
}

}  // namespace

std::string to_upper(std::string s) { return map_code_points(s, [](uint32_t c, bool) { return upper_cp(c); }); }
std::string to_lower(std::string s) { return map_code_points(s, [](uint32_t c, bool) { return lower_cp(c); }); }

std::string title_case(const std::string& s) {
  return map_code_points(s, [](uint32_t c, bool prev_letter) { return prev_letter ? lower_cp(c) : upper_cp(c); });
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        SourcePos where) {
  if (from.empty()) fail_at(where, "replace() with an empty search string is not supported");
  std::string out;
  size_t i = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t j = s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += to;
    i = j + from.size();
  }
  out.append(s, i, std::string::npos);
  return out;
}

Value split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right, SourcePos where) {
  Array parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Runs of whitespace; leading/trailing whitespace ignored.
    std::vector<std::string> words;
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_ws(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !is_ws(s[j])) ++j;
      words.push_back(s.substr(i, j - i));
      i = j;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1)
      fail_at(where, "split() without a separator and with maxsplit is not supported");
    for (auto& w : words) parts.push_back(Value(std::move(w)));
    return Value(std::move(parts));
  }
  const std::string& d = need_string(sep, "split() separator", where);
  if (d.empty()) fail_at(where, "split(): empty separator");
  std::vector<std::string> out;
  if (!from_right) {
    size_t i = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t j = s.find(d, i);
      if (j == std::string::npos) break;
      out.push_back(s.substr(i, j - i));
      i = j + d.size();
    }
    out.push_back(s.substr(i));
  } else {
    size_t end = s.size();
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      if (end < d.size()) break;
      const size_t j = s.rfind(d, end - d.size());
      if (j == std::string::npos) break;
      out.insert(out.begin(), s.substr(j + d.size(), end - j - d.size()));
      end = j;
    }
    out.insert(out.begin(), s.substr(0, end));
  }
  for (auto& w : out) parts.push_back(Value(std::move(w)));
  return Value(std::move(parts));
}

namespace {

using Fn = Value (*)(const Value&, CallArgs&);

// Attribute lookup used by map/selectattr/sort/join (dotted paths like "function.name").
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('.', i), path.size());
    const std::string key = path.substr(i, j - i);
    if (cur.is_object()) {
      const Value* x = cur.as_object().find(key);
      cur = x ? *x : Value::undefined(path);
    } else if (cur.is_array() && !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit)) {
      cur = get_item(cur, Value(static_cast<int64_t>(std::stoll(key))), {});
    } else {
      return Value::undefined(path);
    }
    i = j + 1;
  }
  return cur;
}

Value f_length(const Value& v, CallArgs& a) {
  if (v.is_string()) return Value(static_cast<int64_t>(utf8_length(v.as_string())));
  if (v.is_array()) return Value(static_cast<int64_t>(v.as_array().size()));
  if (v.is_object()) return Value(static_cast<int64_t>(v.as_object().items.size()));
  if (v.is_undefined()) return Value(0);
  fail_at(a.where, "filter 'length': a {} has no length", v.type_name());
}

Value f_tojson(const Value& v, CallArgs& a) {
  JsonFormat f;
  const Value indent = a.get(0, "indent");
  if (indent.is_int()) f.indent = static_cast<int>(indent.as_int());
  else if (!indent.is_undefined() && !indent.is_none()) fail_at(a.where, "tojson: indent must be an integer");
  f.ensure_ascii = a.get(99, "ensure_ascii", Value(false)).truthy();
  f.sort_keys = a.get(99, "sort_keys", Value(false)).truthy();
  const Value seps = a.get(99, "separators");
  if (seps.is_array() && seps.as_array().size() == 2 && seps.as_array()[0].is_string() && seps.as_array()[1].is_string()) {
    f.item_sep = seps.as_array()[0].as_string();
    f.key_sep = seps.as_array()[1].as_string();
  } else if (!seps.is_undefined() && !seps.is_none()) {
    fail_at(a.where, "tojson: separators must be a pair of strings");
  }
  for (const auto& [k, x] : a.kw)
    if (k != "indent" && k != "ensure_ascii" && k != "sort_keys" && k != "separators")
      fail_at(a.where, "tojson: unknown argument '{}'", k);
  return Value(to_json(v, f, a.where));
}

// llama.cpp's extension (the DeepSeek-V3.2 template parses string tool-call arguments with it):
// json.loads of a string; anything else, or text that is not JSON, is an error.
Value f_from_json(const Value& v, CallArgs& a) {
  if (!v.is_string()) fail_at(a.where, "filter 'from_json' expects a string, got a {}", v.type_name());
  if (!a.pos.empty() || !a.kw.empty()) fail_at(a.where, "from_json takes no arguments");
  if (json_nesting(v.as_string()).over()) fail_at(a.where, "from_json: the string nests deeper than {} levels", kMaxJsonDepth);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(v.as_string(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail_at(a.where, "from_json: the string is not valid JSON: {}", v.as_string().substr(0, 80));
  return Value::from_json(j);
}

Value f_default(const Value& v, CallArgs& a) {
  const bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
  return v;
}

Value f_join(const Value& v, CallArgs& a) {
  const Value sep = a.get(0, "d", Value(""));
  const Value attr = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& x : iterate(v, a.where)) {
    if (!first) out += sep.str();
    out += attr.is_string() ? attr_path(x, attr.as_string()).str() : x.str();
    first = false;
  }
  return Value(std::move(out));
}

Value f_first(const Value& v, CallArgs& a) {
  auto items = iterate(v, a.where);
  return items.empty() ? Value::undefined("first of empty sequence") : items.front();
}
Value f_last(const Value& v, CallArgs& a) {
  auto items = iterate(v, a.where);
  return items.empty() ? Value::undefined("last of empty sequence") : items.back();
}
Value f_list(const Value& v, CallArgs& a) { return Value(Array(iterate(v, a.where))); }
Value f_string(const Value& v, CallArgs&) { return Value(v.str()); }
Value f_safe(const Value& v, CallArgs&) { return v; }
Value f_upper(const Value& v, CallArgs&) { return Value(to_upper(v.str())); }
Value f_lower(const Value& v, CallArgs&) { return Value(to_lower(v.str())); }
Value f_trim(const Value& v, CallArgs& a) { return Value(strip_chars(v.str(), a.get(0, "chars"), true, true)); }
Value f_title(const Value& v, CallArgs&) { return Value(title_case(v.str())); }
Value f_capitalize(const Value& v, CallArgs&) {
  bool first = true;
  return Value(map_code_points(v.str(), [&](uint32_t c, bool) {
    const uint32_t m = first ? upper_cp(c) : lower_cp(c);
    first = false;
    return m;
  }));
}
Value f_replace(const Value& v, CallArgs& a) {
  const Value count = a.get(2, "count");
  return Value(replace_all(v.str(), need_string(a.get(0, "old"), "replace()", a.where),
                           a.get(1, "new").str(), count.is_int() ? count.as_int() : -1, a.where));
}

Value f_int(const Value& v, CallArgs& a) {
  const Value def = a.get(0, "default", Value(0));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(static_cast<int64_t>(v.as_double()));
  if (v.is_string()) {
    try {
      size_t n = 0;
      const std::string s = strip_chars(v.as_string(), Value(), true, true);
      const double d = std::stod(s, &n);
      if (n == s.size()) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return def;
}

Value f_float(const Value& v, CallArgs& a) {
  const Value def = a.get(0, "default", Value(0.0));
  if (v.is_number() || v.is_bool()) return Value(v.as_double());
  if (v.is_string()) {
    try {
      size_t n = 0;
      const std::string s = strip_chars(v.as_string(), Value(), true, true);
      const double d = std::stod(s, &n);
      if (n == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return def;
}

Value f_abs(const Value& v, CallArgs& a) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  fail_at(a.where, "filter 'abs' expects a number, got a {}", v.type_name());
}

Value f_round(const Value& v, CallArgs& a) {
  if (!v.is_number() && !v.is_bool()) fail_at(a.where, "filter 'round' expects a number, got a {}", v.type_name());
  const int64_t prec = need_int(a.get(0, "precision", Value(0)), "round precision", a.where);
  const std::string method = a.get(1, "method", Value("common")).str();
  const double scale = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_double() * scale;
  double r;
  if (method == "common") r = std::nearbyint(x);  // Python round(): ties to even
  else if (method == "floor") r = std::floor(x);
  else if (method == "ceil") r = std::ceil(x);
  else fail_at(a.where, "filter 'round': unknown method '{}'", method);
  return Value(r / scale);
}

Value f_items(const Value& v, CallArgs& a) {
  if (v.is_undefined()) return Value(Array{});
  if (!v.is_object()) fail_at(a.where, "filter 'items' expects a dict, got a {}", v.type_name());
  Array out;
  for (const auto& [k, x] : v.as_object().items) out.push_back(Value(Array{Value(k), x}));
  return Value(std::move(out));
}

Value f_unique(const Value& v, CallArgs& a) {
  Array out;
  const Value attr = a.get(1, "attribute");
  for (const auto& x : iterate(v, a.where)) {
    const Value key = attr.is_string() ? attr_path(x, attr.as_string()) : x;
    bool seen = false;
    for (const auto& y : out) seen = seen || values_equal(attr.is_string() ? attr_path(y, attr.as_string()) : y, key);
    if (!seen) out.push_back(x);
  }
  return Value(std::move(out));
}

Value f_reverse(const Value& v, CallArgs& a) {
  if (v.is_string()) {
    auto cs = utf8_chars(v.as_string());
    std::string s;
    for (auto it = cs.rbegin(); it != cs.rend(); ++it) s += *it;
    return Value(std::move(s));
  }
  auto items = iterate(v, a.where);
  std::reverse(items.begin(), items.end());
  return Value(Array(std::move(items)));
}

Value f_sort(const Value& v, CallArgs& a) {
  auto items = iterate(v, a.where);
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const Value attr = a.get(2, "attribute");
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = attr.is_string() ? attr_path(x, attr.as_string()) : x;
    const Value ky = attr.is_string() ? attr_path(y, attr.as_string()) : y;
    const int c = values_compare(kx, ky, a.where);
    return reverse ? c > 0 : c < 0;
  });
  return Value(Array(std::move(items)));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  Value items = f_items(v, a);
  CallArgs none;
  none.where = a.where;
  auto& arr = items.as_array();
  std::stable_sort(arr.begin(), arr.end(), [&](const Value& x, const Value& y) {
    return values_compare(x.as_array()[0], y.as_array()[0], a.where) < 0;
  });
  return items;
}

Value f_sum(const Value& v, CallArgs& a) {
  const Value attr = a.get(0, "attribute");
  Value total = a.get(1, "start", Value(0));
  for (const auto& x : iterate(v, a.where)) {
    const Value y = attr.is_string() ? attr_path(x, attr.as_string()) : x;
    if (!(y.is_number() || y.is_bool()) || !(total.is_number() || total.is_bool()))
      fail_at(a.where, "filter 'sum' expects numbers, got a {}", y.type_name());
    total = total.is_float() || y.is_float() ? Value(total.as_double() + y.as_double()) : Value(total.as_int() + y.as_int());
  }
  return total;
}

Value f_minmax(const Value& v, CallArgs& a, bool want_max) {
  auto items = iterate(v, a.where);
  if (items.empty()) return Value::undefined("min/max of empty sequence");
  Value best = items[0];
  for (const auto& x : items) {
    const int c = values_compare(x, best, a.where);
    if (want_max ? c > 0 : c < 0) best = x;
  }
  return best;
}
Value f_min(const Value& v, CallArgs& a) { return f_minmax(v, a, false); }
Value f_max(const Value& v, CallArgs& a) { return f_minmax(v, a, true); }

Value f_indent(const Value& v, CallArgs& a) {
  const Value w = a.get(0, "width", Value(4));
  const std::string pad = w.is_string() ? w.as_string() : std::string(static_cast<size_t>(need_int(w, "indent width", a.where)), ' ');
  const bool first = a.get(1, "first", Value(false)).truthy();
  const bool blank = a.get(2, "blank", Value(false)).truthy();
  const std::string s = v.str();
  std::string out;
  size_t i = 0;
  bool line_start = true, is_first = true;
  while (i <= s.size()) {
    const size_t j = std::min(s.find('\n', i), s.size());
    const std::string line = s.substr(i, j - i);
    if (line_start && (is_first ? first : true) && (blank || !line.empty())) out += pad;
    out += line;
    if (j < s.size()) out += '\n';
    is_first = false;
    i = j + 1;
  }
  return Value(std::move(out));
}

Value f_escape(const Value& v, CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs& a) {
  return Value(static_cast<int64_t>(split(v.str(), Value(), -1, false, a.where).as_array().size()));
}

// selectattr/rejectattr/select/reject: `attr_mode` reads an attribute first.
Value select_impl(const Value& v, CallArgs& a, bool attr_mode, bool keep_when) {
  size_t i = 0;
  std::string attr;
  if (attr_mode) {
    if (a.pos.empty()) fail_at(a.where, "selectattr/rejectattr need an attribute name");
    attr = need_string(a.pos[0], "selectattr attribute", a.where);
    i = 1;
  }
  std::string test;
  if (i < a.pos.size()) test = need_string(a.pos[i], "select test name", a.where);
  CallArgs targs;
  targs.where = a.where;
  for (size_t k = i + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
  Array out;
  for (const auto& x : iterate(v, a.where)) {
    const Value y = attr_mode ? attr_path(x, attr) : x;
    const bool ok = test.empty() ? y.truthy() : apply_test(test, y, targs);
    if (ok == keep_when) out.push_back(x);
  }
  return Value(std::move(out));
}
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }
Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }

Value f_map(const Value& v, CallArgs& a) {
  Array out;
  const Value attr = a.get(99, "attribute");
  if (attr.is_string()) {
    const Value def = a.get(99, "default");
    for (const auto& x : iterate(v, a.where)) {
      Value y = attr_path(x, attr.as_string());
      out.push_back(y.is_undefined() && !def.is_undefined() ? def : y);
    }
    return Value(std::move(out));
  }
  if (a.pos.empty()) fail_at(a.where, "filter 'map' needs attribute= or a filter name");
  const std::string filter = need_string(a.pos[0], "map filter name", a.where);
  CallArgs fargs;
  fargs.where = a.where;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const auto& x : iterate(v, a.where)) out.push_back(apply_filter(filter, x, fargs));
  return Value(std::move(out));
}

Value f_format(const Value& v, CallArgs& a) {
  // printf-style with %s / %d / %%, the subset chat templates use.
  const std::string& fmtstr = need_string(v, "filter 'format'", a.where);
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < fmtstr.size(); ++i) {
    if (fmtstr[i] != '%' || i + 1 >= fmtstr.size()) { out += fmtstr[i]; continue; }
    const char c = fmtstr[++i];
    if (c == '%') { out += '%'; continue; }
    if (c != 's' && c != 'd') fail_at(a.where, "filter 'format': unsupported conversion '%{}'", c);
    if (n >= a.pos.size()) fail_at(a.where, "filter 'format': not enough arguments");
    out += c == 'd' ? std::to_string(need_int(a.pos[n++], "format %d", a.where)) : a.pos[n++].str();
  }
  return Value(std::move(out));
}

struct NamedFilter { const char* name; Fn fn; };
const NamedFilter kFilters[] = {
    {"abs", f_abs},           {"capitalize", f_capitalize}, {"count", f_length},       {"d", f_default},
    {"default", f_default},   {"dictsort", f_dictsort},     {"e", f_escape},           {"escape", f_escape},
    {"first", f_first},       {"float", f_float},           {"from_json", f_from_json}, {"format", f_format},      {"indent", f_indent},
    {"int", f_int},           {"items", f_items},           {"join", f_join},          {"last", f_last},
    {"length", f_length},     {"list", f_list},             {"lower", f_lower},        {"map", f_map},
    {"max", f_max},           {"min", f_min},               {"reject", f_reject},      {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse},       {"round", f_round},        {"safe", f_safe},
    {"select", f_select},     {"selectattr", f_selectattr}, {"sort", f_sort},          {"string", f_string},
    {"sum", f_sum},           {"title", f_title},           {"tojson", f_tojson},      {"trim", f_trim},
    {"unique", f_unique},     {"upper", f_upper},           {"wordcount", f_wordcount},
};

}  // namespace

Value apply_filter(const std::string& name, const Value& value, CallArgs& args) {
  for (const auto& f : kFilters)
    if (name == f.name) return f.fn(value, args);
  fail_at(args.where, "unknown filter '{}'", name);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  auto arg = [&]() -> Value {
    if (a.pos.empty()) fail_at(a.where, "test '{}' needs an argument", name);
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_object();
  if (name == "iterable" || name == "sequence") return v.is_iterable();
  if (name == "callable") return v.is_function();
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return values_equal(v, arg());
  if (name == "ne" || name == "!=") return !values_equal(v, arg());
  if (name == "lt" || name == "lessthan") return values_compare(v, arg(), a.where) < 0;
  if (name == "le") return values_compare(v, arg(), a.where) <= 0;
  if (name == "gt" || name == "greaterthan") return values_compare(v, arg(), a.where) > 0;
  if (name == "ge") return values_compare(v, arg(), a.where) >= 0;
  if (name == "lower") return v.is_string() && to_lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && to_upper(v.as_string()) == v.as_string();
  if (name == "in") {
    const Value c = arg();
    if (c.is_string()) return v.is_string() && c.as_string().find(v.as_string()) != std::string::npos;
    if (c.is_object()) return v.is_string() && c.as_object().find(v.as_string()) != nullptr;
    if (c.is_array()) return std::any_of(c.as_array().begin(), c.as_array().end(), [&](const Value& x) { return values_equal(v, x); });
    fail_at(a.where, "test 'in' needs a container, got a {}", c.type_name());
  }
  if (name == "divisibleby" || name == "odd" || name == "even") {
    const int64_t x = need_int(v, fmt::format("test '{}'", name).c_str(), a.where);
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    const int64_t d = need_int(arg(), "test 'divisibleby'", a.where);
    if (d == 0) fail_at(a.where, "test 'divisibleby': division by zero");
    return x % d == 0;
  }
  fail_at(a.where, "unknown test '{}'", name);
}

std::vector<std::pair<std::string, Value>> builtin_globals() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::function([](CallArgs& a) -> Value {
    if (a.pos.empty() || a.pos.size() > 3) fail_at(a.where, "range() takes 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) stop = need_int(a.pos[0], "range()", a.where);
    else {
      start = need_int(a.pos[0], "range()", a.where);
      stop = need_int(a.pos[1], "range()", a.where);
      if (a.pos.size() == 3) step = need_int(a.pos[2], "range()", a.where);
    }
    if (step == 0) fail_at(a.where, "range() step must not be zero");
    const double count = (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
    if (count > 1e7) fail_at(a.where, "range() of more than 10 million items");
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value(i));
    return Value(std::move(out));
  }));
  auto make_dict = [](CallArgs& a) -> Value {
    Value o = Value::object();
    for (const auto& p : a.pos) {
      if (!p.is_object()) fail_at(a.where, "namespace()/dict() positional argument must be a dict");
      for (const auto& [k, v] : p.as_object().items) o.as_object().set(k, v);
    }
    for (const auto& [k, v] : a.kw) o.as_object().set(k, v);
    return o;
  };
  g.emplace_back("namespace", Value::function(make_dict));
  g.emplace_back("dict", Value::function(make_dict));
  g.emplace_back("raise_exception", Value::function([](CallArgs& a) -> Value {
    fail_at(a.where, "raise_exception: {}", a.pos.empty() ? std::string("(no message)") : a.pos[0].str());
  }));
  g.emplace_back("strftime_now", Value::function([](CallArgs& a) -> Value {
    const std::string f = need_string(a.get(0, "format"), "strftime_now()", a.where);
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), f.c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  return g;
}

}  // namespace strata::jinja
