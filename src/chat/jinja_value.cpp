#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace strata::jinja {

Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::object() { return Value(std::make_shared<Object>()); }

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      jinja::Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(from_json(e));
      return Value(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      auto o = std::make_shared<Object>();
      for (const auto& [k, e] : j.items()) o->items.emplace_back(k, from_json(e));
      return Value(std::move(o));
    }
    default: throw Error("jinja: unsupported JSON value type (binary/discarded)");
  }
}

nlohmann::ordered_json Value::to_json_value() const {
  switch (kind_) {  // (values built from JSON are acyclic; templates cannot reach this)
    case Kind::None: return nullptr;
    case Kind::Bool: return as_bool();
    case Kind::Int: return i_;
    case Kind::Float: return f_;
    case Kind::String: return *s_;
    case Kind::Array: {
      auto j = nlohmann::ordered_json::array();
      for (const auto& e : *a_) j.push_back(e.to_json_value());
      return j;
    }
    case Kind::Object: {
      auto j = nlohmann::ordered_json::object();
      for (const auto& [k, e] : o_->items) j[k] = e.to_json_value();
      return j;
    }
    default: throw Error(fmt::format("jinja: cannot convert {} to JSON", type_name()));
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool:
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0.0;
    case Kind::String: return !s_->empty();
    case Kind::Array: return !a_->empty();
    case Kind::Object: return !o_->items.empty();
    case Kind::Function: return true;
  }
  return false;
}

bool Value::reaches(const void* container, int depth) const {
  if (!container || depth > kMaxDepth) return depth > kMaxDepth;
  if (identity() == container) return true;
  if (kind_ == Kind::Array)
    for (const auto& e : *a_)
      if (e.reaches(container, depth + 1)) return true;
  if (kind_ == Kind::Object)
    for (const auto& [k, e] : o_->items)
      if (e.reaches(container, depth + 1)) return true;
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "none";
    case Kind::Bool: return "boolean";
    case Kind::Int: return "integer";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::Array: return "list";
    case Kind::Object: return "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

static std::string repr_string(const std::string& s) {
  // Python picks single quotes unless the string holds ' and no ".
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  out += q;
  return out;
}

static void check_depth(int depth) {
  if (depth > kMaxDepth) throw Error(fmt::format("jinja: value nested deeper than {} levels (cyclic list/dict?)", kMaxDepth));
}

std::string Value::repr(int depth) const {
  if (kind_ == Kind::String) return repr_string(*s_);
  return str(depth);
}

std::string Value::str(int depth) const {
  check_depth(depth);
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return i_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return python_float_repr(f_);
    case Kind::String: return *s_;
    case Kind::Array: {
      std::string out = "[";
      for (size_t i = 0; i < a_->size(); ++i) out += (i ? ", " : "") + (*a_)[i].repr(depth + 1);
      return out + "]";
    }
    case Kind::Object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : o_->items) {
        out += (first ? "" : ", ") + repr_string(k) + ": " + v.repr(depth + 1);
        first = false;
      }
      return out + "}";
    }
    case Kind::Function: return "<function>";
  }
  return "";
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) { old = std::move(v); return; }
  items.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t i, std::string_view name, Value def) const {
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  if (i < pos.size()) return pos[i];
  return def;
}

bool CallArgs::has(size_t i, std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return true;
  return i < pos.size();
}

bool values_equal(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  check_depth(depth);
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::String: return a.as_string() == b.as_string();
    case K::Array: {
      const auto &x = a.as_array(), &y = b.as_array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case K::Object: {
      const auto &x = a.as_object().items, &y = b.as_object().items;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = b.as_object().find(k);
        if (!w || !values_equal(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case K::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

int values_compare(const Value& a, const Value& b, SourcePos where, int depth) {
  check_depth(depth);
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string());
  if (a.is_array() && b.is_array()) {
    const auto &x = a.as_array(), &y = b.as_array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      int c = values_compare(x[i], y[i], where, depth + 1);
      if (c != 0) return c;
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail_at(where, "cannot compare {} with {}", a.type_name(), b.type_name());
}

// ---- JSON (Python json.dumps) ----

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) { out += fmt::format("\\u{:04x}", c); continue; }
    if (c < 0x80 || !ensure_ascii) { out += static_cast<char>(c); continue; }
    // Decode one UTF-8 sequence and escape it (surrogate pairs above the BMP).
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    uint32_t cp = n == 3 ? (c & 0x07) : n == 2 ? (c & 0x0F) : (c & 0x1F);
    for (int k = 0; k < n && i + 1 < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, const JsonFormat& f, int depth, SourcePos where) {
  if (depth > kMaxDepth) fail_at(where, "tojson: value nested deeper than {} levels (cyclic list/dict?)", kMaxDepth);
  auto newline = [&](int d) {
    if (f.indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(f.indent * d), ' ');
  };
  // With indent, Python's default item separator drops the trailing space.
  const std::string item_sep = f.item_sep ? *f.item_sep : (f.indent >= 0 ? "," : ", ");
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float_repr(d);
      return;
    }
    case Value::Kind::String: json_string(out, v.as_string(), f.ensure_ascii); return;
    case Value::Kind::Array: {
      const auto& a = v.as_array();
      if (a.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_dump(out, a[i], f, depth + 1, where);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Object: {
      auto items = v.as_object().items;
      if (items.empty()) { out += "{}"; return; }
      if (f.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i].first, f.ensure_ascii);
        out += f.key_sep;
        json_dump(out, items[i].second, f, depth + 1, where);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: fail_at(where, "tojson: cannot serialize a value of type {}", v.type_name());
  }
}

std::string to_json(const Value& v, const JsonFormat& f, SourcePos where) {
  std::string out;
  json_dump(out, v, f, 0, where);
  return out;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace strata::jinja
