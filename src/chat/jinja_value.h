#pragma once
// The value type of the Jinja interpreter: Python-like semantics over JSON-shaped data.
// Arrays and objects are shared (like Python lists/dicts), so `namespace()` attribute
// assignment is visible to every holder. Objects keep insertion order (Python dicts do).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::jinja {

// 1-based line and column of a template construct; every error names one.
struct SourcePos {
  int line = 1;
  int col = 1;
};

template <typename... Args>
[[noreturn]] void fail_at(SourcePos p, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format("jinja template error at {}:{}: {}", p.line, p.col,
                          fmt::format(f, std::forward<Args>(args)...)));
}

class Value;
struct CallArgs;
using Array = std::vector<Value>;
struct Object;
using Function = std::function<Value(CallArgs&)>;

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Function };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::None; return v; }
  // An undefined value that remembers what was looked up, for error messages.
  static Value undefined(std::string hint) { Value v; v.s_ = std::make_shared<std::string>(std::move(hint)); return v; }
  std::string undefined_hint() const { return s_ ? *s_ : std::string("value"); }
  Value(bool b) : kind_(Kind::Bool), i_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s) : kind_(Kind::String), s_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(jinja::Array a) : kind_(Kind::Array), a_(std::make_shared<jinja::Array>(std::move(a))) {}
  Value(std::shared_ptr<Object> o) : kind_(Kind::Object), o_(std::move(o)) {}
  static Value function(Function f);
  static Value object();                       // empty dict
  static Value from_json(const nlohmann::ordered_json& j);
  nlohmann::ordered_json to_json_value() const;  // functions/undefined -> error

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_function() const { return kind_ == Kind::Function; }
  bool is_iterable() const { return is_array() || is_object() || is_string(); }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == Kind::Float ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const { return *s_; }
  jinja::Array& as_array() const { return *a_; }
  Object& as_object() const { return *o_; }
  const Function& as_function() const { return *fn_; }

  bool truthy() const;
  // Python str(): what {{ }} prints. Containers nested deeper than kMaxDepth (e.g. a list
  // appended to itself) fail instead of recursing without end.
  std::string str(int depth = 0) const;
  std::string repr(int depth = 0) const;  // Python repr(): used inside containers
  const char* type_name() const;
  // Identity of a list/dict (null otherwise), and whether `this` is or contains `container`:
  // mutations check it so that shared_ptr values never form (leaking) reference cycles.
  const void* identity() const { return kind_ == Kind::Array ? static_cast<const void*>(a_.get()) : kind_ == Kind::Object ? static_cast<const void*>(o_.get()) : nullptr; }
  bool reaches(const void* container, int depth = 0) const;

 private:
  Kind kind_ = Kind::Undefined;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<jinja::Array> a_;
  std::shared_ptr<Object> o_;
  std::shared_ptr<Function> fn_;
};

inline constexpr int kMaxDepth = 512;

struct Object {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

// Arguments of a call: positional then keyword, plus the call site for errors.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  SourcePos where;
  // The i-th argument by position or by keyword `name`; `def` when absent.
  Value get(size_t i, std::string_view name, Value def = Value()) const;
  bool has(size_t i, std::string_view name) const;
};

// Python `==` (1 == 1.0, deep on containers, different types unequal).
bool values_equal(const Value& a, const Value& b, int depth = 0);
// Python `<`; fails at `where` for unorderable types. Returns <0, 0, >0.
int values_compare(const Value& a, const Value& b, SourcePos where, int depth = 0);

struct JsonFormat {
  int indent = -1;           // < 0: single line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::string> item_sep;  // Python default: ", ", or "," when indenting
  std::string key_sep = ": ";
};
// Python json.dumps of a value (as HF's `tojson` filter does).
std::string to_json(const Value& v, const JsonFormat& fmt, SourcePos where);
std::string python_float_repr(double d);

// UTF-8 helpers: strings index and count by code point like Python.
std::vector<std::string> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);

}  // namespace strata::jinja
