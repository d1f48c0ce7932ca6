// JSON Schema -> GBNF: each supported keyword with texts that must and must not match, random
// sentences of the compiled grammar checked by nlohmann's parser and a small validator, and the
// errors for what is not supported.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>

#include "grammar_test_util.h"

using nlohmann::json;
using strata::grammar::GrammarError;
using strata::grammar::json_object_gbnf;
using strata::grammar::json_schema_rules;
using strata::grammar::json_schema_to_gbnf;
using strata::grammar::Matcher;
using strata::grammar::parse_gbnf;
using strata::grammar::test::byte_vocab;
using strata::grammar::test::kByteEog;
using strata::grammar::test::matches;

namespace {

auto compile(const json& schema) { return parse_gbnf(json_schema_to_gbnf(schema)); }

std::string schema_error(const json& schema) {
  try {
    compile(schema);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

size_t schema_code_points(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// The subset of JSON Schema the converter supports; false with a reason in `why`.
bool valid(const json& v, const json& s, const json& root, std::string& why) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    if (r == "#") return valid(v, root, root, why);
    const std::string section = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return valid(v, root[section][r.substr(r.find('/', 2) + 1)], root, why);
  }
  if (s.contains("const") && v != s["const"]) return why = "const", false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return why = "enum", false;
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      for (const json& sub : s[k])
        if (std::string w; valid(v, sub, root, w)) return true;
      return why = k, false;
    }
  if (s.contains("allOf")) {
    for (const json& sub : s["allOf"])
      if (!valid(v, sub, root, why)) return false;
  }
  if (s.contains("type")) {
    const json types = s["type"].is_array() ? s["type"] : json::array({s["type"]});
    bool any = false;
    for (const json& t : types) {
      const std::string n = t;
      any = any || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) || (n == "string" && v.is_string()) ||
            (n == "integer" && v.is_number_integer()) || (n == "number" && v.is_number()) || (n == "boolean" && v.is_boolean()) ||
            (n == "null" && v.is_null());
    }
    if (!any) return why = "type " + s["type"].dump() + " of " + v.dump(), false;
  }
  if (v.is_object()) {
    const json props = s.value("properties", json::object());
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return why = "required " + r.dump(), false;
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!valid(x, props[k], root, why)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!valid(x, s["additionalProperties"], root, why)) return why = "additional " + k, false;
      } else if (!props.empty()) {
        return why = "unexpected key " + k, false;
      }
    }
  }
  if (v.is_array()) {
    if (v.size() < s.value("minItems", size_t{0}) || v.size() > s.value("maxItems", SIZE_MAX)) return why = "item count", false;
    if (s.contains("prefixItems")) {
      if (v.size() != s["prefixItems"].size()) return why = "tuple size", false;
      for (size_t i = 0; i < v.size(); ++i)
        if (!valid(v[i], s["prefixItems"][i], root, why)) return false;
    }
    if (s.contains("items"))
      for (const json& x : v)
        if (!valid(x, s["items"], root, why)) return false;
  }
  if (v.is_string()) {
    const std::string str = v;
    if (schema_code_points(str) < s.value("minLength", size_t{0}) || schema_code_points(str) > s.value("maxLength", SIZE_MAX)) return why = "length", false;
    const std::string f = s.value("format", "");
    static const std::regex date(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"), time(R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"),
        uuid(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
    if (f == "date" && !std::regex_match(str, date)) return why = "date", false;
    if (f == "time" && !std::regex_match(str, time)) return why = "time", false;
    if (f == "uuid" && !std::regex_match(str, uuid)) return why = "uuid", false;
    if (f == "date-time") {
      const size_t t = str.find('T');
      if (t == std::string::npos || !std::regex_match(str.substr(0, t), date) || !std::regex_match(str.substr(t + 1), time)) return why = "date-time", false;
    }
  }
  return true;
}

// A random sentence of the grammar over the byte vocabulary: each step picks any allowed byte,
// or the end (EOG) with probability 1/4 once it is allowed.
std::string random_sentence(Matcher& m, std::mt19937& rng, int max_steps) {
  std::string text;
  for (int step = 0; step < max_steps; ++step) {
    const std::vector<int32_t> allowed = m.allowed_tokens();
    EXPECT_FALSE(allowed.empty());
    const bool eog = allowed.back() == kByteEog;
    if (eog && (allowed.size() == 1 || rng() % 4 == 0)) {
      EXPECT_TRUE(m.accept(kByteEog));
      return text;
    }
    const int32_t t = allowed[rng() % (allowed.size() - (eog ? 1 : 0))];
    EXPECT_TRUE(m.accept(t));
    text += static_cast<char>(t);
  }
  ADD_FAILURE() << "no end after " << max_steps << " bytes: " << text;
  return text;
}

void check_random_sentences(const json& schema, int n) {
  const auto g = compile(schema);
  std::mt19937 rng(7);
  for (int i = 0; i < n; ++i) {
    Matcher m(g, byte_vocab());
    const std::string text = random_sentence(m, rng, 20000);
    const json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "not JSON: " << text;
    std::string why;
    EXPECT_TRUE(valid(v, schema, schema, why)) << why << ": " << text;
  }
}

}  // namespace

TEST(JsonSchema, Primitives) {
  const auto b = compile({{"type", "boolean"}}), n = compile({{"type", "null"}}), i = compile({{"type", "integer"}}),
             x = compile({{"type", "number"}}), s = compile({{"type", "string"}});
  EXPECT_TRUE(matches(b, "true") && matches(b, "false"));
  EXPECT_FALSE(matches(b, "True") || matches(b, "1"));
  EXPECT_TRUE(matches(n, "null"));
  for (const char* ok : {"0", "-7", "1234567890123456"}) EXPECT_TRUE(matches(i, ok)) << ok;
  for (const char* bad : {"01", "1.5", "+1", "-", "12345678901234567"}) EXPECT_FALSE(matches(i, bad)) << bad;
  for (const char* ok : {"0", "-0.5", "3.25e-7", "1E+300", "42"}) EXPECT_TRUE(matches(x, ok)) << ok;
  for (const char* bad : {".5", "1.", "1e", "--1", "0x1"}) EXPECT_FALSE(matches(x, bad)) << bad;
  // Every number fits a double (JSON parsers reject one that overflows).
  for (const char* ok : {"9.9999999999999999e307", "1234567890123456.5e292", "1e-999", "-7E+0"}) EXPECT_TRUE(matches(x, ok)) << ok;
  for (const char* bad : {"1e308", "12e293", "1e999", "1234567890123456e300"}) EXPECT_FALSE(matches(x, bad)) << bad;
  // \u escapes: a surrogate pair is one character, a lone surrogate is no JSON a parser takes.
  EXPECT_TRUE(matches(s, R"("\uD83D\uDE00\ud7ff\uE000")"));
  for (const char* bad : {R"("\uD800")", R"("\uDC00")", R"("\uD83D\u0041")"}) EXPECT_FALSE(matches(s, bad)) << bad;
  for (const char* ok : {R"("")", R"("a b")", R"("\"\\\/\b\f\n\r\t\u00E9")", "\"\xC3\xA9\xE4\xB8\xAD\""}) EXPECT_TRUE(matches(s, ok)) << ok;
  for (const char* bad : {R"(")", R"("\x")", "\"a\nb\"", R"("\u12")", R"('a')"}) EXPECT_FALSE(matches(s, bad)) << bad;
}

TEST(JsonSchema, ObjectsRequiredOptionalAdditional) {
  const json schema = {{"type", "object"},
                       {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}}}, {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}}}}},
                       {"required", {"name"}}};
  const auto g = compile(schema);
  for (const char* ok : {R"({"name":"x"})", R"({ "name" : "x" , "age" : 3 })", R"({"name":"x","tags":["a"]})", R"({"name":"x","age":3,"tags":[]})",
                         "{\n  \"name\": \"x\",\n  \"age\": 3\n}"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {R"({})", R"({"age":3})", R"({"name":"x","name":"y"})", R"({"name":"x","other":1})", R"({"name":1})",
                          R"({"name":"x","tags":["a"],"age":3})" /* optional ones in key order */, R"({"name":"x",})"})
    EXPECT_FALSE(matches(g, bad)) << bad;
  // Required properties come in the order of `required`.
  const auto ordered = compile({{"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}}}, {"required", {"b", "a"}}});
  EXPECT_TRUE(matches(ordered, R"({"b":1,"a":2})"));
  EXPECT_FALSE(matches(ordered, R"({"a":2,"b":1})"));
  // additionalProperties: true or a schema allows further keys after the declared ones.
  const auto more = compile({{"properties", {{"a", {{"type", "integer"}}}}}, {"additionalProperties", {{"type", "boolean"}}}});
  EXPECT_TRUE(matches(more, R"({"a":1,"x":true,"y":false})"));
  EXPECT_TRUE(matches(more, R"({"x":true})"));
  EXPECT_TRUE(matches(more, R"({})"));
  EXPECT_FALSE(matches(more, R"({"a":1,"x":2})"));
  const auto closed = compile({{"properties", {{"a", {{"type", "integer"}}}}}, {"additionalProperties", false}});
  EXPECT_TRUE(matches(closed, R"({})"));
  EXPECT_FALSE(matches(closed, R"({"b":1})"));
  const auto any = compile({{"type", "object"}});
  EXPECT_TRUE(matches(any, R"({"k":[1,{"z":null}],"j":"v"})"));
  EXPECT_FALSE(matches(any, R"([1])"));
  const auto obj = parse_gbnf(json_object_gbnf());
  EXPECT_TRUE(matches(obj, R"({"a": {"b": [true, -1.5e3, "s"]}})"));
  EXPECT_FALSE(matches(obj, R"("a")"));
  EXPECT_FALSE(matches(obj, R"({"a": 1} )"));  // nothing after the object
}

TEST(JsonSchema, ArraysEnumConstAnyOfRefs) {
  const auto a = compile({{"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 1}, {"maxItems", 3}});
  for (const char* ok : {"[1]", "[1, 2]", "[ 1 , 2 , 3 ]"}) EXPECT_TRUE(matches(a, ok)) << ok;
  for (const char* bad : {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"}) EXPECT_FALSE(matches(a, bad)) << bad;
  const auto min2 = compile({{"items", {{"type", "boolean"}}}, {"minItems", 2}});
  EXPECT_FALSE(matches(min2, "[true]"));
  EXPECT_TRUE(matches(min2, "[true,false,true,true]"));
  const auto tuple = compile({{"prefixItems", {{{"type", "integer"}}, {{"type", "string"}}}}});
  EXPECT_TRUE(matches(tuple, R"([1, "a"])"));
  EXPECT_FALSE(matches(tuple, R"([1])"));
  const auto e = compile({{"enum", {"red", 2, nullptr, json::array({1})}}});
  for (const char* ok : {R"("red")", "2", "null", "[1]"}) EXPECT_TRUE(matches(e, ok)) << ok;
  for (const char* bad : {R"("blue")", "3", "[2]"}) EXPECT_FALSE(matches(e, bad)) << bad;
  const auto c = compile({{"const", {{"k", "v"}}}});
  EXPECT_TRUE(matches(c, R"({"k":"v"})"));
  EXPECT_FALSE(matches(c, R"({"k":"w"})"));
  const auto u = compile({{"anyOf", {{{"type", "integer"}}, {{"type", "string"}, {"maxLength", 2}}}}});
  EXPECT_TRUE(matches(u, "5") && matches(u, R"("ab")"));
  EXPECT_FALSE(matches(u, R"("abc")") || matches(u, "true"));
  const auto t = compile({{"type", {"string", "null"}}});
  EXPECT_TRUE(matches(t, "null") && matches(t, R"("x")"));
  EXPECT_FALSE(matches(t, "1"));
  const json tree = {{"$defs", {{"node", {{"type", "object"}, {"properties", {{"v", {{"type", "integer"}}}, {"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/node"}}}}}}}, {"required", {"v"}}}}}},
                     {"$ref", "#/$defs/node"}};
  const auto r = compile(tree);
  EXPECT_TRUE(matches(r, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]})"));
  EXPECT_FALSE(matches(r, R"({"v":1,"kids":[{"w":2}]})"));
  const auto d = compile({{"definitions", {{"n", {{"type", "integer"}}}}}, {"type", "array"}, {"items", {{"$ref", "#/definitions/n"}}}});
  EXPECT_TRUE(matches(d, "[1,2]"));
  const auto all = compile({{"allOf", {{{"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}}, {{"properties", {{"b", {{"type", "string"}}}}}}}}});
  EXPECT_TRUE(matches(all, R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(matches(all, R"({"a":1})"));
  EXPECT_FALSE(matches(all, R"({"b":"x"})"));
}

TEST(JsonSchema, StringLengthsAndFormats) {
  const auto s = compile({{"type", "string"}, {"minLength", 2}, {"maxLength", 3}});
  EXPECT_TRUE(matches(s, R"("ab")") && matches(s, "\"\xC3\xA9\xC3\xA9\xC3\xA9\""));
  EXPECT_FALSE(matches(s, R"("a")") || matches(s, R"("abcd")"));
  const auto date = compile({{"type", "string"}, {"format", "date"}}), time = compile({{"type", "string"}, {"format", "time"}}),
             dt = compile({{"type", "string"}, {"format", "date-time"}}), uuid = compile({{"type", "string"}, {"format", "uuid"}});
  EXPECT_TRUE(matches(date, R"("2024-02-29")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")") || matches(date, R"("24-01-01")"));
  EXPECT_TRUE(matches(time, R"("23:59:60Z")") == false);
  EXPECT_TRUE(matches(time, R"("23:59:59Z")") && matches(time, R"("08:00:00.123+02:00")"));
  EXPECT_TRUE(matches(dt, R"("2024-01-02T03:04:05Z")"));
  EXPECT_FALSE(matches(dt, R"("2024-01-02 03:04:05Z")"));
  EXPECT_TRUE(matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(matches(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const auto g = compile({{"type", "array"}, {"items", {{"type", "integer"}}}});
  EXPECT_TRUE(matches(g, "[\n                1]"));
  EXPECT_FALSE(matches(g, "[\n                 1]"));  // 17 spaces after the newline
  EXPECT_FALSE(matches(g, "[  1]"));
  EXPECT_FALSE(matches(g, "[\n\n1]"));
}

TEST(JsonSchema, UnsupportedKeywordsNameKeywordAndPath) {
  const std::pair<json, const char*> cases[] = {
      {{{"properties", {{"x", {{"type", "object"}, {"patternProperties", {{"^a", {}}}}}}}}}, "unsupported JSON Schema keyword 'patternProperties' at /properties/x"},
      {{{"type", "string"}, {"pattern", "^a+$"}}, "unsupported JSON Schema keyword 'pattern' at /"},
      {{{"not", {{"type", "string"}}}}, "unsupported JSON Schema keyword 'not' at /"},
      {{{"if", json::object()}, {"then", json::object()}}, "unsupported JSON Schema keyword 'if' at /"},
      {{{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}}, "unsupported JSON Schema keyword 'minimum' at /items"},
      {{{"anyOf", {{{"type", "integer"}}, {{"uniqueItems", true}}}}}, "unsupported JSON Schema keyword 'uniqueItems' at /anyOf/1"},
      {{{"type", "string"}, {"format", "uri"}}, "unsupported JSON Schema format \"uri\" (supported: date, time, date-time, uuid) at /format"},
      {{{"type", "strin"}}, "unsupported JSON Schema type 'strin' at /type"},
      {{{"$ref", "https://example.com/s.json"}}, "unsupported '$ref' 'https://example.com/s.json'"},
      {{{"$ref", "#/$defs/missing"}}, "'$ref' '#/$defs/missing' does not resolve at /"},
      {{{"properties", {{"a", true}}}, {"required", {"b"}}}, "required property 'b' is not in 'properties' at /"},
      {{{"type", "array"}, {"minItems", 3}, {"maxItems", 2}}, "'maxItems' is below 'minItems' at /"},
      {{{"type", "string"}, {"maxLength", 100000}}, "'maxLength' over 10000 is not supported at /"},
      {{{"enum", json::array()}}, "'enum' must be a non-empty array at /"},
      {json(false), "schema 'false' matches nothing at /"},
      {json(3), "a schema must be an object or a boolean at /"},
      {{{"allOf", {{{"type", "string"}}}}}, "'allOf' is supported only over object schemas at /allOf/0"},
  };
  for (const auto& [schema, want] : cases) EXPECT_NE(schema_error(schema).find(want), std::string::npos) << schema.dump() << "\n got: " << schema_error(schema);
  EXPECT_THROW(json_schema_rules({{"type", "integer"}}, "bad name"), GrammarError);
}

TEST(JsonSchema, EmbeddedRulesUseTheirName) {
  const std::string rules = json_schema_rules({{"type", "object"}, {"properties", {{"q", {{"type", "string"}}}}}}, "args");
  const auto g = parse_gbnf("root ::= \"call:\" args\n" + rules);
  EXPECT_TRUE(matches(g, R"(call:{"q":"x"})"));
  EXPECT_FALSE(matches(g, R"({"q":"x"})"));
  EXPECT_EQ(rules.find("root"), std::string::npos);
}

TEST(JsonSchema, RandomSentencesAreValidJson) {
  const json nested = json::parse(R"({
    "type": "object",
    "properties": {
      "id": {"type": "integer"},
      "kind": {"enum": ["a", "b", "c"]},
      "when": {"type": "string", "format": "date-time"},
      "score": {"type": ["number", "null"]},
      "items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"n": {"type": "string", "maxLength": 6}, "ok": {"type": "boolean"}}, "required": ["n"]}}
    },
    "required": ["id", "kind", "items"]})");
  check_random_sentences(nested, 40);
  check_random_sentences(json::parse(R"({"type": "array", "minItems": 2, "maxItems": 4,
    "items": {"anyOf": [{"type": "integer"}, {"const": "x"}, {"type": "string", "format": "uuid"}]}})"), 40);
}

// Subschemas nest at most kMaxNesting deep (the converter recurses): deeper is an error naming
// the limit, never a stack overflow (a value built in memory, not parsed, has no depth check).
TEST(JsonSchema, DeepNestingIsAnErrorNotACrash) {
  json s = {{"type", "string"}};
  for (int i = 0; i < 2000; ++i) s = json{{"type", "array"}, {"items", std::move(s)}};
  const std::string err = schema_error(s);
  EXPECT_NE(err.find("nested deeper than " + std::to_string(strata::grammar::kMaxNesting)), std::string::npos) << err.substr(0, 300);
  json ok = {{"type", "string"}};
  for (int i = 0; i < 100; ++i) ok = json{{"type", "array"}, {"items", std::move(ok)}};
  EXPECT_EQ(schema_error(ok), "(no error)");
}
