#pragma once
// Built-in filters, tests, methods and globals of the Jinja interpreter (internal header).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace strata::jinja {

// `value | name(args)`; fails naming the filter and position when unknown or misused.
Value apply_filter(const std::string& name, const Value& value, CallArgs& args);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, CallArgs& args);
// `obj.name(args)` for str/list/dict methods; nullopt when `obj` has no such method.
std::optional<Value> call_method(const Value& obj, const std::string& name, CallArgs& args);
// range, namespace, dict, raise_exception, strftime_now (local time).
std::vector<std::pair<std::string, Value>> builtin_globals();
// Python-style item/slice access (negative indices; out of range -> undefined).
Value get_item(const Value& obj, const Value& key, SourcePos where);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, SourcePos where);
// Values a for loop visits: list items, dict keys, string characters.
std::vector<Value> iterate(const Value& v, SourcePos where);


// String helpers shared by filters and methods (Python str semantics, ASCII case mapping).
const std::string& need_string(const Value& v, const char* what, SourcePos where);
int64_t need_int(const Value& v, const char* what, SourcePos where);
bool is_ws(char c);
std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right);
std::string to_upper(std::string s);
std::string to_lower(std::string s);
std::string title_case(const std::string& s);
std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                        SourcePos where);
Value split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right, SourcePos where);

}  // namespace strata::jinja
