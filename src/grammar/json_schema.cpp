// JSON Schema -> GBNF. Every value is generated compact except for whitespace runs bounded by the
// `NAME-ws` rule (nothing, one space, or one newline and at most 16 spaces/tabs), so a model
// cannot loop on whitespace; integers have at most 16 digits, fractions 16, exponents 3 (bounded
// so that every number fits a double).
//
// Objects (as llama.cpp's converter): the `required` properties come first in the order of the
// `required` array, then the optional ones in key order (nlohmann::json keeps keys sorted), each
// optional one present or not. `additionalProperties` absent or false with `properties` given: no
// other key; true or a schema: any further keys (not checked against the declared names) after
// the declared ones. `{"type":"object"}` alone is any object. oneOf is treated as anyOf.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "grammar/grammar.h"

namespace strata::grammar {
namespace {

using nlohmann::json;

const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
      "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "format", "$defs", "definitions",
      // annotations: no effect on the grammar
      "title", "description", "$schema", "$id", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"};
  return k;
}

// The primitive rules (suffix -> body with @ for the name prefix), emitted when used.
const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"ws", R"(( " " | "\n" [ \t]{0,16} )?)"},
      {"boolean", R"("true" | "false")"},
      {"null", R"("null")"},
      // \u escapes: no lone surrogate (JSON parsers reject them), a pair is one char
      {"char", R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" @-hex4 ))"},
      {"hex4", R"([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2})"},
      {"string", R"("\"" @-char* "\"")"},
      {"int-part", R"("0" | [1-9] [0-9]{0,15})"},
      {"integer", R"("-"? @-int-part)"},
      // every number fits a double (JSON parsers reject overflowing ones): exponents up to 307
      // after one integer digit, up to 292 after up to 16
      {"number", R"("-"? ( [0-9] @-frac? ( [eE] ( "-" [0-9]{1,3} | "+"? ( [0-9]{1,2} | [0-2] [0-9]{2} | "30" [0-7] ) ) )? | )"
                 R"([1-9] [0-9]{1,15} @-frac? ( [eE] ( "-" [0-9]{1,3} | "+"? ( [0-9]{1,2} | [01] [0-9]{2} | "2" [0-8] [0-9] | "29" [0-2] ) ) )? ))"},
      {"frac", R"("." [0-9]{1,16})"},
      {"value", R"(@-object | @-array | @-string | @-number | @-boolean | @-null)"},
      {"object", R"("{" @-ws ( @-string @-ws ":" @-ws @-value @-ws ( "," @-ws @-string @-ws ":" @-ws @-value @-ws )* )? "}")"},
      {"array", R"("[" @-ws ( @-value @-ws ( "," @-ws @-value @-ws )* )? "]")"},
      {"date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] ))"},
      {"time", R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
      {"date-time", R"(@-date "T" @-time)"},
      {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
  };
  return p;
}

const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"string", {"char"}}, {"char", {"hex4"}},   {"integer", {"int-part"}}, {"number", {"frac"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"ws", "string", "value"}}, {"array", {"ws", "value"}}, {"date-time", {"date", "time"}},
  };
  return d;
}

std::string gbnf_literal(std::string_view bytes) {
  std::string r = "\"";
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      r += '\\';
      r += ch;
    } else if (c == '\n') {
      r += "\\n";
    } else if (c == '\r') {
      r += "\\r";
    } else if (c == '\t') {
      r += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      r += fmt::format("\\x{:02X}", c);
    } else {
      r += ch;
    }
  }
  return r + "\"";
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string r = "( ";
  for (size_t i = 0; i < alts.size(); ++i) r += (i ? " | " : "") + alts[i];
  return r + " )";
}

std::string pointer_token(const std::string& s) {
  std::string r;
  for (char c : s) r += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return r;
}

class Converter {
 public:
  Converter(const json& root, std::string name) : root_(root), name_(std::move(name)) {
    if (name_.empty() || name_.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != std::string::npos)
      throw GrammarError(fmt::format("bad grammar rule name '{}' (letters, digits, '-' and '_' only)", name_));
  }

  std::string run() {
    const std::string body = visit(root_, "");
    std::string out = fmt::format("{} ::= {}\n", name_, body);
    for (const auto& [n, b] : rules_) out += fmt::format("{} ::= {}\n", n, b);
    for (const auto& [suffix, tmpl] : primitives())
      if (used_.count(suffix)) out += fmt::format("{}-{} ::= {}\n", name_, suffix, with_name(tmpl));
    return out;
  }

 private:
  std::string with_name(const std::string& tmpl) const {  // '@' in a primitive's body -> name_
    std::string r;
    for (char c : tmpl) r += c == '@' ? name_ : std::string(1, c);
    return r;
  }

  [[noreturn]] static void error(const std::string& what, const std::string& path) {
    throw GrammarError(fmt::format("{} at {}", what, path.empty() ? "/" : path));
  }

  std::string prim(const std::string& suffix) {
    if (used_.insert(suffix).second) {
      const auto d = primitive_deps().find(suffix);
      if (d != primitive_deps().end())
        for (const std::string& dep : d->second) prim(dep);
    }
    return name_ + "-" + suffix;
  }

  std::string add_rule(const std::string& body) {
    const std::string n = fmt::format("{}-{}", name_, ++counter_);
    rules_.emplace_back(n, body);
    return n;
  }

  static size_t count(const json& s, const char* key, const std::string& path) {
    const json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) error(fmt::format("'{}' must be a non-negative integer", key), path);
    if (v.get<int64_t>() > kMaxRepeat) error(fmt::format("'{}' over {} is not supported", key, kMaxRepeat), path);
    return static_cast<size_t>(v.get<int64_t>());
  }

  std::string visit(const json& s, const std::string& path) {
    struct Nest {  // subschemas nest at most kMaxNesting deep (this walk recurses)
      int& d;
      ~Nest() { --d; }
    } nest{++depth_};
    if (depth_ > kMaxNesting) error(fmt::format("subschemas nested deeper than {}", kMaxNesting), path.substr(0, 200));
    if (s.is_boolean()) {
      if (!s.get<bool>()) error("schema 'false' matches nothing", path);
      return prim("value");
    }
    if (!s.is_object()) error("a schema must be an object or a boolean", path);
    for (const auto& [k, v] : s.items())
      if (!known_keywords().count(k)) error(fmt::format("unsupported JSON Schema keyword '{}'", k), path);
    if (s.contains("$ref")) return ref(s.at("$ref"), path);
    if (s.contains("const")) return gbnf_literal(s.at("const").dump());
    if (s.contains("enum")) {
      const json& e = s.at("enum");
      if (!e.is_array() || e.empty()) error("'enum' must be a non-empty array", path);
      std::vector<std::string> alts;
      for (const json& v : e) alts.push_back(gbnf_literal(v.dump()));
      return alternatives(alts);
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      const json& a = s.at(k);
      if (!a.is_array() || a.empty()) error(fmt::format("'{}' must be a non-empty array", k), path);
      std::vector<std::string> alts;
      for (size_t i = 0; i < a.size(); ++i) alts.push_back(visit(a[i], fmt::format("{}/{}/{}", path, k, i)));
      return add_rule(alternatives(alts));
    }
    if (s.contains("allOf")) return visit(merge_all_of(s, path), path);
    if (s.contains("type")) {
      const json& t = s.at("type");
      if (t.is_string()) return typed(s, t.get<std::string>(), path);
      if (!t.is_array() || t.empty()) error("'type' must be a string or a non-empty array", path);
      std::vector<std::string> alts;
      for (const json& x : t) {
        if (!x.is_string()) error("'type' must be a string or a non-empty array of strings", path);
        alts.push_back(typed(s, x.get<std::string>(), path));
      }
      return add_rule(alternatives(alts));
    }
    if (s.contains("properties") || s.contains("additionalProperties")) return typed(s, "object", path);
    if (s.contains("items") || s.contains("prefixItems")) return typed(s, "array", path);
    return prim("value");
  }

  std::string typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    if (type == "string") return string(s, path);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return prim(type);
    error(fmt::format("unsupported JSON Schema type '{}'", type), path + "/type");
  }

  std::string ref(const json& r, const std::string& path) {
    if (!r.is_string()) error("'$ref' must be a string", path);
    const std::string target = r.get<std::string>();
    if (target == "#") return name_;
    const auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) return it->second;
    std::string key;
    for (const char* prefix : {"#/$defs/", "#/definitions/"})
      if (target.rfind(prefix, 0) == 0) key = prefix;
    if (key.empty()) error(fmt::format("unsupported '$ref' '{}' (only #, #/$defs/NAME and #/definitions/NAME)", target), path);
    const std::string def = target.substr(key.size());
    const std::string section = key == "#/$defs/" ? "$defs" : "definitions";
    if (!root_.is_object() || !root_.contains(section) || !root_.at(section).is_object() || !root_.at(section).contains(def))
      error(fmt::format("'$ref' '{}' does not resolve", target), path);
    const std::string n = fmt::format("{}-ref{}", name_, ++counter_);
    ref_rules_[target] = n;  // before visiting: recursive schemas refer to the rule by name
    const size_t slot = rules_.size();
    rules_.emplace_back(n, "");
    const std::string body = visit(root_.at(section).at(def), "/" + section + "/" + pointer_token(def));
    rules_[slot].second = body;
    return n;
  }

  json merge_all_of(const json& s, const std::string& path) {
    const json& a = s.at("allOf");
    if (!a.is_array() || a.empty()) error("'allOf' must be a non-empty array", path);
    json merged = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string p = fmt::format("{}/allOf/{}", path, i);
      json sub = a[i];
      for (int hops = 0; sub.is_object() && sub.contains("$ref"); ++hops) {
        const std::string t = sub.at("$ref").is_string() ? sub.at("$ref").get<std::string>() : "";
        const json* target = nullptr;
        for (const char* section : {"$defs", "definitions"}) {
          const std::string prefix = fmt::format("#/{}/", section);
          if (hops < 16 && t.rfind(prefix, 0) == 0 && root_.contains(section) && root_.at(section).is_object() &&
              root_.at(section).contains(t.substr(prefix.size())))
            target = &root_.at(section).at(t.substr(prefix.size()));
        }
        if (!target) error(fmt::format("'allOf' with an unresolved '$ref' '{}'", t), p);
        sub = *target;
      }
      if (!sub.is_object() || (sub.contains("type") && sub.at("type") != "object"))
        error("'allOf' is supported only over object schemas", p);
      for (const auto& [k, v] : sub.items()) {
        if (k == "properties" && v.is_object()) {
          merged["properties"].update(v);
        } else if (k == "required" && v.is_array()) {
          for (const json& r : v) merged["required"].push_back(r);
        } else if (k == "additionalProperties") {
          merged[k] = v;
        } else if (k != "type" && (!known_keywords().count(k) || k == "items" || k == "enum" || k == "const" || k == "anyOf" ||
                                   k == "oneOf" || k == "allOf" || k == "prefixItems")) {
          error(fmt::format("'allOf' member with keyword '{}' is not supported", k), p);
        }
      }
    }
    return merged;
  }

  std::string object(const json& s, const std::string& path) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s.at("properties") : empty;
    if (!props.is_object()) error("'properties' must be an object", path);
    const json add = s.contains("additionalProperties") ? s.at("additionalProperties") : json();
    if (!add.is_null() && !add.is_boolean() && !add.is_object()) error("'additionalProperties' must be a boolean or a schema", path);
    if (props.empty() && (add.is_null() || add == true)) return prim("object");

    std::vector<std::string> required;
    if (s.contains("required")) {
      const json& r = s.at("required");
      if (!r.is_array()) error("'required' must be an array", path);
      for (const json& x : r) {
        if (!x.is_string()) error("'required' must be an array of strings", path);
        if (!props.contains(x.get<std::string>())) error(fmt::format("required property '{}' is not in 'properties'", x.get<std::string>()), path);
        if (std::find(required.begin(), required.end(), x.get<std::string>()) == required.end()) required.push_back(x.get<std::string>());
      }
    }
    const std::string ws = prim("ws");
    auto kv = [&](const std::string& key, const std::string& value) {
      return fmt::format("{} {} \":\" {} {} {}", gbnf_literal(json(key).dump()), ws, ws, value, ws);
    };
    std::vector<std::string> req_kv, opt_kv;
    for (const std::string& k : required) req_kv.push_back(kv(k, visit(props.at(k), path + "/properties/" + pointer_token(k))));
    for (const auto& [k, v] : props.items())
      if (std::find(required.begin(), required.end(), k) == required.end())
        opt_kv.push_back(add_rule(kv(k, visit(v, path + "/properties/" + pointer_token(k)))));

    // rest: a non-empty, in-order selection of the optional properties, then additional ones.
    std::string rest;
    if (!add.is_null() && add != false) {
      const std::string value = add == true ? prim("value") : visit(add, path + "/additionalProperties");
      const std::string one = add_rule(fmt::format("{} {} \":\" {} {} {}", prim("string"), ws, ws, value, ws));
      rest = add_rule(fmt::format("{} ( \",\" {} {} )*", one, ws, one));
    }
    for (auto it = opt_kv.rbegin(); it != opt_kv.rend(); ++it)
      rest = add_rule(rest.empty() ? *it : fmt::format("{} ( \",\" {} {} )? | {}", *it, ws, rest, rest));

    std::string body = fmt::format("\"{{\" {} ", ws);
    for (size_t i = 0; i < req_kv.size(); ++i) body += (i ? fmt::format("\",\" {} ", ws) : "") + req_kv[i] + " ";
    if (!rest.empty()) body += req_kv.empty() ? fmt::format("{}? ", rest) : fmt::format("( \",\" {} {} )? ", ws, rest);
    return add_rule(body + "\"}\"");
  }

  std::string array(const json& s, const std::string& path) {
    const std::string ws = prim("ws");
    if (s.contains("prefixItems")) {
      const json& p = s.at("prefixItems");
      if (!p.is_array() || p.empty()) error("'prefixItems' must be a non-empty array", path);
      if (s.contains("items") && s.at("items") != false) error("'items' beside 'prefixItems' is not supported (only false)", path);
      std::string body = fmt::format("\"[\" {} ", ws);
      for (size_t i = 0; i < p.size(); ++i)
        body += (i ? fmt::format("\",\" {} ", ws) : "") + visit(p[i], fmt::format("{}/prefixItems/{}", path, i)) + " " + ws + " ";
      return add_rule(body + "\"]\"");
    }
    const std::string item = s.contains("items") ? visit(s.at("items"), path + "/items") : prim("value");
    const size_t min = s.contains("minItems") ? count(s, "minItems", path) : 0;
    const bool bounded = s.contains("maxItems");
    const size_t max = bounded ? count(s, "maxItems", path) : 0;
    if (bounded && max < min) error("'maxItems' is below 'minItems'", path);
    if (bounded && max == 0) return add_rule(fmt::format("\"[\" {} \"]\"", ws));
    const std::string more = bounded ? fmt::format("{{{},{}}}", min ? min - 1 : 0, max - 1) : min > 1 ? fmt::format("{{{},}}", min - 1) : "*";
    const std::string list = fmt::format("{} {} ( \",\" {} {} {} ){}", item, ws, ws, item, ws, more);
    return add_rule(fmt::format("\"[\" {} {} \"]\"", ws, min ? list : "( " + list + " )?"));
  }

  std::string string(const json& s, const std::string& path) {
    if (s.contains("format")) {
      const json& f = s.at("format");
      static const std::set<std::string> kFormats = {"date", "time", "date-time", "uuid"};
      if (!f.is_string() || !kFormats.count(f.get<std::string>()))
        error(fmt::format("unsupported JSON Schema format {} (supported: date, time, date-time, uuid)", f.dump()), path + "/format");
      return add_rule(fmt::format("\"\\\"\" {} \"\\\"\"", prim(f.get<std::string>())));
    }
    if (!s.contains("minLength") && !s.contains("maxLength")) return prim("string");
    const size_t min = s.contains("minLength") ? count(s, "minLength", path) : 0;
    if (s.contains("maxLength") && count(s, "maxLength", path) < min) error("'maxLength' is below 'minLength'", path);
    const std::string rep = s.contains("maxLength") ? fmt::format("{{{},{}}}", min, count(s, "maxLength", path)) : fmt::format("{{{},}}", min);
    return add_rule(fmt::format("\"\\\"\" {}{} \"\\\"\"", prim("char"), rep));
  }

  const json& root_;
  std::string name_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_;
  std::map<std::string, std::string> ref_rules_;
  int counter_ = 0;
  int depth_ = 0;  // visit() calls open
};

}  // namespace

std::string json_schema_rules(const nlohmann::json& schema, const std::string& name) { return Converter(schema, name).run(); }

std::string json_schema_to_gbnf(const nlohmann::json& schema) { return json_schema_rules(schema, "root"); }

std::string json_object_gbnf() { return json_schema_to_gbnf(nlohmann::json{{"type", "object"}}); }

}  // namespace strata::grammar
