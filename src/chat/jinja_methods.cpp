// Python methods on str / list / dict, subscripts, slices and iteration.
#include <algorithm>

#include "chat/jinja_builtins.h"

namespace strata::jinja {
namespace {

bool prefix_match(const std::string& s, const Value& arg, bool suffix, SourcePos where) {
  auto one = [&](const Value& p) {
    const std::string& x = need_string(p, suffix ? "endswith()" : "startswith()", where);
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (arg.is_array()) return std::any_of(arg.as_array().begin(), arg.as_array().end(), one);
  return one(arg);
}

// Python str.format with positional `{}` / `{0}` and keyword `{name}` fields.
std::string str_format(const std::string& f, CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') { out += '{'; ++i; continue; }
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') { out += '}'; ++i; continue; }
    if (c != '{') { out += c; continue; }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) fail_at(a.where, "format(): unmatched '{{'");
    const std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) fail_at(a.where, "format(): format specs are not supported");
    Value v;
    if (field.empty()) v = a.get(auto_idx++, "\x01");
    else if (std::all_of(field.begin(), field.end(), ::isdigit)) v = a.get(static_cast<size_t>(std::stoul(field)), "\x01");
    else v = a.get(SIZE_MAX, field);
    if (v.is_undefined()) fail_at(a.where, "format(): no argument for field '{{{}}}'", field);
    out += v.str();
    i = close;
  }
  return out;
}

std::optional<Value> string_method(const std::string& s, const std::string& name, CallArgs& a) {
  const SourcePos w = a.where;
  if (name == "startswith" || name == "endswith") return Value(prefix_match(s, a.get(0, "prefix"), name == "endswith", w));
  if (name == "strip") return Value(strip_chars(s, a.get(0, "chars"), true, true));
  if (name == "lstrip") return Value(strip_chars(s, a.get(0, "chars"), true, false));
  if (name == "rstrip") return Value(strip_chars(s, a.get(0, "chars"), false, true));
  if (name == "upper") return Value(to_upper(s));
  if (name == "lower") return Value(to_lower(s));
  if (name == "title") return Value(title_case(s));
  if (name == "capitalize") return apply_filter("capitalize", Value(s), a);
  if (name == "split" || name == "rsplit") {
    const Value maxsplit = a.get(1, "maxsplit", Value(-1));
    return split(s, a.get(0, "sep", Value::none()), need_int(maxsplit, "split() maxsplit", w), name == "rsplit", w);
  }
  if (name == "replace") {
    const Value count = a.get(2, "count", Value(-1));
    return Value(replace_all(s, need_string(a.get(0, "old"), "replace()", w), need_string(a.get(1, "new"), "replace()", w),
                             need_int(count, "replace() count", w), w));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    const std::string& sub = need_string(a.get(0, "sub"), "str.find()", w);
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index") fail_at(w, "str.index(): substring not found");
      return Value(-1);
    }
    return Value(static_cast<int64_t>(utf8_length(s.substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& x : iterate(a.get(0, "iterable"), w)) {
      if (!first) out += s;
      out += need_string(x, "str.join() item", w);
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(str_format(s, a));
  auto all_of = [&](int (*pred)(int)) {
    return Value(!s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; }));
  };
  if (name == "isdigit") return all_of(::isdigit);
  if (name == "isalpha") return all_of(::isalpha);
  if (name == "isalnum") return all_of(::isalnum);
  if (name == "isspace") return all_of(::isspace);
  if (name == "islower") return Value(s != to_upper(s) && s == to_lower(s));
  if (name == "isupper") return Value(s != to_lower(s) && s == to_upper(s));
  return std::nullopt;
}

void check_no_cycle(const Value& container, const Value& v, SourcePos where) {
  if (v.reaches(container.identity())) fail_at(where, "inserting a {} into itself (reference cycle)", container.type_name());
}

std::optional<Value> list_method(const Value& self, Array& arr, const std::string& name, CallArgs& a) {
  if (name == "append") {
    check_no_cycle(self, a.get(0, "item"), a.where);
    arr.push_back(a.get(0, "item"));
    return Value::none();
  }
  if (name == "extend") {
    for (const auto& x : iterate(a.get(0, "iterable"), a.where)) {
      check_no_cycle(self, x, a.where);
      arr.push_back(x);
    }
    return Value::none();
  }
  if (name == "pop") {
    if (arr.empty()) fail_at(a.where, "pop from empty list");
    int64_t i = need_int(a.get(0, "index", Value(-1)), "list.pop()", a.where);
    if (i < 0) i += static_cast<int64_t>(arr.size());
    if (i < 0 || i >= static_cast<int64_t>(arr.size())) fail_at(a.where, "list.pop(): index out of range");
    Value v = arr[static_cast<size_t>(i)];
    arr.erase(arr.begin() + i);
    return v;
  }
  if (name == "index" || name == "count") {
    const Value x = a.get(0, "value");
    int64_t n = 0;
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!values_equal(arr[i], x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") fail_at(a.where, "list.index(): value not in list");
    return Value(n);
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& self, Object& o, const std::string& name, CallArgs& a) {
  if (name == "items") {
    Array out;
    for (const auto& [k, v] : o.items) out.push_back(Value(Array{Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "keys" || name == "values") {
    Array out;
    for (const auto& [k, v] : o.items) out.push_back(name == "keys" ? Value(k) : v);
    return Value(std::move(out));
  }
  if (name == "get") {
    const Value key = a.get(0, "key");
    const Value* v = key.is_string() ? o.find(key.as_string()) : nullptr;
    return v ? *v : a.get(1, "default", Value::none());
  }
  if (name == "update") {
    const Value other = a.get(0, "other");
    if (other.is_object())
      for (const auto& [k, v] : other.as_object().items) { check_no_cycle(self, v, a.where); o.set(k, v); }
    for (const auto& [k, v] : a.kw) { check_no_cycle(self, v, a.where); o.set(k, v); }
    return Value::none();
  }
  return std::nullopt;
}

// Python slice bounds for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, SourcePos w) {
  const int64_t st = step.is_none() ? 1 : need_int(step, "slice step", w);
  if (st == 0) fail_at(w, "slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = need_int(v, "slice index", w);
    if (i < 0) i += n;
    if (st > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = norm(start, st > 0 ? 0 : n - 1);
  const int64_t e = norm(stop, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  return idx;
}

}  // namespace

std::optional<Value> call_method(const Value& obj, const std::string& name, CallArgs& args) {
  if (obj.is_string()) return string_method(obj.as_string(), name, args);
  if (obj.is_array()) return list_method(obj, obj.as_array(), name, args);
  if (obj.is_object()) return dict_method(obj, obj.as_object(), name, args);
  return std::nullopt;
}

Value get_item(const Value& obj, const Value& key, SourcePos where) {
  if (obj.is_object()) {
    if (!key.is_string()) return Value::undefined("dict item");
    const Value* v = obj.as_object().find(key.as_string());
    return v ? *v : Value::undefined(key.as_string());
  }
  if (obj.is_array() || obj.is_string()) {
    if (!key.is_int() && !key.is_bool()) fail_at(where, "{} indices must be integers, got a {}", obj.type_name(), key.type_name());
    int64_t i = key.as_int();
    if (obj.is_array()) {
      const int64_t n = static_cast<int64_t>(obj.as_array().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("list index out of range");
      return obj.as_array()[static_cast<size_t>(i)];
    }
    auto cs = utf8_chars(obj.as_string());
    const int64_t n = static_cast<int64_t>(cs.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined("string index out of range");
    return Value(cs[static_cast<size_t>(i)]);
  }
  if (obj.is_undefined()) return Value::undefined("item of undefined");
  fail_at(where, "a {} is not subscriptable", obj.type_name());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, SourcePos where) {
  if (obj.is_array()) {
    const auto& a = obj.as_array();
    Array out;
    for (int64_t i : slice_indices(static_cast<int64_t>(a.size()), start, stop, step, where)) out.push_back(a[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  if (obj.is_string()) {
    auto cs = utf8_chars(obj.as_string());
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(cs.size()), start, stop, step, where)) out += cs[static_cast<size_t>(i)];
    return Value(std::move(out));
  }
  fail_at(where, "cannot slice a {}", obj.type_name());
}

std::vector<Value> iterate(const Value& v, SourcePos where) {
  if (v.is_array()) return v.as_array();
  if (v.is_object()) {
    std::vector<Value> keys;
    for (const auto& [k, x] : v.as_object().items) keys.push_back(Value(k));
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> out;
    for (auto& c : utf8_chars(v.as_string())) out.push_back(Value(std::move(c)));
    return out;
  }
  if (v.is_undefined()) return {};
  fail_at(where, "a {} is not iterable", v.type_name());
}

}  // namespace strata::jinja
