// Jinja interpreter: every construct against outputs of the reference Jinja2 (HF environment:
// trim_blocks, lstrip_blocks, loopcontrols), and clear line:col errors for what is wrong or unsupported.
#include <gtest/gtest.h>

#include "chat/jinja.h"
#include "chat_test_util.h"

namespace {

using strata::jinja::Template;
using strata::jinja::Value;
using json = nlohmann::ordered_json;

std::string render(const std::string& src, const json& ctx = json::object()) {
  return Template::parse(src).render(Value::from_json(ctx));
}

// Renders and returns the error message (empty when rendering succeeded).
std::string error_of(const std::string& src, const json& ctx = json::object()) {
  try {
    render(src, ctx);
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Jinja, ConstructsMatchReferenceJinja2) {
  const json data = json::parse(strata::chat_test::read_data("constructs.json"));
  const json& ctx = data["context"];
  ASSERT_GT(data["cases"].size(), 40u);
  for (const auto& c : data["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    std::string out;
    ASSERT_NO_THROW(out = render(c["template"].get<std::string>(), ctx));
    EXPECT_EQ(out, c["expected"].get<std::string>());
  }
}

TEST(Jinja, WhitespaceControlAndHfDefaults) {
  // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  x\n{% endif %}\n"), "  x\n");
  EXPECT_EQ(render("  {% if true %}y{% endif %}"), "y");
  // Neither applies to {{ }}.
  EXPECT_EQ(render("  {{ 'v' }}\nz"), "  v\nz");
  // Explicit '-' strips all whitespace including newlines on that side.
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c"), "abc");
  // lstrip only when the tag starts the line.
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
  // Options off: text kept verbatim.
  strata::jinja::LexOptions raw;
  raw.trim_blocks = false;
  raw.lstrip_blocks = false;
  raw.keep_trailing_newline = true;
  EXPECT_EQ(Template::parse("  {% if true %}\nx{% endif %}\n", raw).render(Value::object()), "  \nx\n");
  // Like Jinja2, one trailing newline of the source is dropped by default.
  EXPECT_EQ(render("a\n"), "a");
  EXPECT_EQ(render("a\n\n"), "a\n");
}

TEST(Jinja, NamespaceSharedAcrossScopes) {
  EXPECT_EQ(render("{% set ns = namespace(v='a') %}{% for i in range(3) %}{% set ns.v = ns.v ~ i %}{% endfor %}{{ ns.v }}"),
            "a012");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}{% endmacro %}"
                   "{{ bump() }}{{ bump() }}{{ ns.n }}"),
            "2");
}

TEST(Jinja, StrftimeNowAndUndefinedPrinting) {
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
  EXPECT_EQ(render("[{{ nothing }}][{{ nothing.deeper }}][{{ none }}]"), "[][][None]");
}

struct ErrorCase {
  const char* src;
  const char* expected;  // substring of the message, including line:col
};

TEST(Jinja, ErrorsNameConstructAndPosition) {
  const ErrorCase cases[] = {
      {"{{ x | frobnicate }}", "at 1:6: unknown filter 'frobnicate'"},
      {"a\nb\n  {{ x|nope(1) }}", "at 3:7: unknown filter 'nope'"},
      {"{{ x is frob }}", "at 1:6: unknown test 'frob'"},
      {"line1\n  {% if x %}\nbody", "at 2:3: unclosed 'if' block (expected '{% endif %}'"},
      {"{% for x in y %}{% if x %}{% endfor %}", "at 1:27: unexpected '{% endfor %}': the innermost open block is 'if' at 1:17"},
      {"{% for x in y %}body", "at 1:1: unclosed 'for' block (expected '{% endfor %}'"},
      {"{% macro m() %}x", "at 1:1: unclosed 'macro' block (expected '{% endmacro %}'"},
      {"{% set x %}x", "unclosed 'set' block (expected '{% endset %}'"},
      {"{% endif %}", "at 1:1: unexpected '{% endif %}' with no matching open block"},
      {"{{ 1 + }}", "at 1:8: syntax error: expected an expression, got '}}'"},
      {"{{ (1 + 2 }}", "at 1:11: syntax error: expected ')'"},
      {"{% if %}{% endif %}", "at 1:7: syntax error: expected an expression"},
      {"{% for in x %}{% endfor %}", "at 1:8: syntax error: expected a loop variable name, got 'in'"},
      {"{{ x ", "at 1:1: unclosed '{{' (missing '}}')"},
      {"ok {% if x", "at 1:4: unclosed '{%' (missing '%}')"},
      {"{# never closed", "at 1:1: unclosed comment"},
      {"{{ 'abc }}", "at 1:4: unterminated string literal"},
      {"{{ x ; y }}", "at 1:6: unexpected character ';' inside a tag"},
      {"{% frobnicate %}", "at 1:1: unknown or unsupported tag 'frobnicate'"},
      {"{% do x %}", "unknown or unsupported tag 'do'"},
      {"{% for x in [1] recursive %}{% endfor %}", "at 1:1: recursive for loops are not supported"},
      {"{% break %}", "at 1:1: 'break' outside of a for loop"},
      {"{{ 'a'.frob() }}", "at 1:7: unknown method 'frob' on a string"},
      {"{{ missing + 1 }}", "at 1:12: 'missing' is undefined (operand of '+')"},
      {"{{ msg.content + 'x' }}", "'msg.content' is undefined"},
      {"{{ nofunc() }}", "at 1:10: 'nofunc' is undefined (unknown function)"},
      {"{{ raise_exception('roles must alternate') }}", "at 1:19: raise_exception: roles must alternate"},
      {"{{ 'a' + 1 }}", "at 1:8: unsupported operand types for '+': string and integer"},
      {"{{ 1 / 0 }}", "division by zero"},
      {"{{ 1 in 5 }}", "argument of type integer is not iterable"},
      {"{% set a, b = [1] %}", "cannot unpack 1 values into 2 names"},
      {"{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute 'y' on a integer"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "macro 'm' takes 1 arguments, got 2"},
      {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "macro 'm' has no parameter named 'b'"},
      {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "macro recursion deeper than"},
      {"{{ [1,2]['a'] }}", "list indices must be integers"},
      {"{{ 5[0] }}", "a integer is not subscriptable"},
      {"{% for x in 5 %}{% endfor %}", "at 1:13: a integer is not iterable"},
      {"{{ x|tojson(bogus=1) }}", "tojson: unknown argument 'bogus'"},
      {"{{ 'a'|abs }}", "filter 'abs' expects a number"},
      {"{{ 3 is divisibleby 0 }}", "division by zero"},
      {"{{ '{:>4}'.format(1) }}", "format specs are not supported"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.src);
    const std::string msg = error_of(c.src, json{{"y", json::array({1})}});
    EXPECT_NE(msg.find("jinja template error at "), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "message was: " << msg;
  }
}

TEST(Jinja, ValueJsonRoundTrip) {
  const json j = json::parse(R"({"b": [1, 2.5, "x", null, true], "a": {"z": {}}})");
  EXPECT_EQ(Value::from_json(j).to_json_value(), j);
  EXPECT_EQ(render("{{ v|tojson }}", json{{"v", j}}), R"({"b": [1, 2.5, "x", null, true], "a": {"z": {}}})");
}

}  // namespace

namespace {

// llama.cpp's `from_json` filter (json.loads), which the DeepSeek-V3.2 template applies to string
// tool-call arguments: key order kept, numbers typed, and anything but a JSON string is an error.
TEST(Jinja, FromJsonParsesAStringAndFailsLoudlyOtherwise) {
  EXPECT_EQ(render(R"({% set a = '{"b": 1, "a": [true, null, 2.5, "x"]}' | from_json %}{% for k, v in a.items() %}{{ k }}={{ v | tojson }};{% endfor %})"),
            R"(b=1;a=[true, null, 2.5, "x"];)");
  EXPECT_EQ(render("{{ ('7' | from_json) + 1 }}"), "8");
  EXPECT_NE(error_of("{{ '{\"a\": ' | from_json }}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{{ 3 | from_json }}").find("expects a string"), std::string::npos);
  EXPECT_NE(error_of("{{ '1' | from_json(2) }}").find("takes no arguments"), std::string::npos);
  EXPECT_NE(error_of("{{ '1' | from_json }}\n{{ x | frobnicate }}").find("2:"), std::string::npos);  // unknown filters name line:col
}

}  // namespace
