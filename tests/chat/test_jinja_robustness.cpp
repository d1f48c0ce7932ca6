// Hostile or broken templates must fail with strata::Error (line:col), never crash, hang or
// leak another exception type: randomly mutated real templates (the big families' among them),
// deep nesting, cyclic values,
// integer overflow and runaway sizes.
#include <gtest/gtest.h>

#include <random>

#include "chat/chat_template.h"
#include "chat/jinja.h"
#include "chat_test_util.h"

namespace {

using strata::jinja::Template;
using strata::jinja::Value;
using json = nlohmann::ordered_json;

std::string robust_error_of(const std::string& src) {
  try {
    Template::parse(src).render(Value::object());
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaRobustness, LimitsFailCleanly) {
  const std::string deep_parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(robust_error_of(deep_parens).find("nested deeper than"), std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(robust_error_of(deep_ifs).find("nested deeper than"), std::string::npos);
  EXPECT_NE(robust_error_of("{{ " + std::string(5000, '-') + "1 }}").find("nested deeper than"), std::string::npos);
  // Reference cycles are refused where they would be created (shared values would leak).
  EXPECT_NE(robust_error_of("{% set a = [] %}{% set _ = a.append(a) %}").find("at 1:36: inserting a list into itself"),
            std::string::npos);
  EXPECT_NE(robust_error_of("{% set a = [] %}{% set b = [a] %}{% set _ = a.extend([b]) %}").find("reference cycle"),
            std::string::npos);
  EXPECT_NE(robust_error_of("{% set ns = namespace(x=1) %}{% set ns.me = [ns] %}").find("contain itself"), std::string::npos);
  EXPECT_NE(robust_error_of("{% set d = {} %}{% set _ = d.update(k=d) %}").find("reference cycle"), std::string::npos);
  std::string deep_value = "{% set a = [] %}";  // deep but acyclic nesting still fails cleanly when printed
  for (int i = 0; i < 600; ++i) deep_value += "{% set a = [a] %}";
  EXPECT_NE(robust_error_of(deep_value + "{{ a }}").find("nested deeper than"), std::string::npos);
  EXPECT_NE(robust_error_of(deep_value + "{{ a|tojson }}").find("nested deeper than"), std::string::npos);
  EXPECT_NE(robust_error_of("{{ 2 ** 64 }}").find("integer overflow in '**'"), std::string::npos);
  EXPECT_NE(robust_error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow in '+'"), std::string::npos);
  EXPECT_NE(robust_error_of("{{ 'ab' * 1000000000 }}").find("repetition"), std::string::npos);
  EXPECT_NE(robust_error_of("{{ range(1000000000)|length }}").find("range() of more than"), std::string::npos);
  EXPECT_EQ(robust_error_of("{{ (-1) ** 1000000000000 }}"), "");
  EXPECT_EQ(robust_error_of("{{ 2 ** 62 }}"), "");
}

TEST(JinjaRobustness, MutatedRealTemplatesFailCleanly) {
  const char* files[] = {"qwen3.jinja",        "gpt_oss.jinja",       "deepseek_v3.jinja",      "llama3_1.jinja",
                         "mixtral.jinja",      "glm4_6.jinja",        "glm4_7.jinja",           "minimax_m2.jinja",
                         "qwen3_5.jinja",      "deepseek_v3_1.jinja", "deepseek_v3_2.jinja",    "kimi_k2.jinja",
                         "kimi_k2_instruct.jinja", "kimi_k2_thinking.jinja"};
  const char* snippets[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|", ".",
                            " is ", " not ", " in ", "{% endif %}", "{% endfor %}", "{% endmacro %}", "{% else %}",
                            "**", "[::-1]", "loop.", "ns.", "=", ",", "{% set x = ", "{% for a in b %}", "\\", "0"};
  std::vector<strata::ChatMessage> msgs = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "U2"}};
  strata::ChatTemplateOptions opts;
  opts.now = 0;
  opts.tools = json::parse(R"([{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}])");
  std::mt19937 rng(20261129);
  int ok = 0, failed_cleanly = 0;
  for (const char* file : files) {
    const std::string original = strata::chat_test::read_data(file);
    for (int iter = 0; iter < 250; ++iter) {
      std::string t = original;
      const int n_ops = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < n_ops && !t.empty(); ++k) {
        const size_t pos = rng() % t.size();
        switch (rng() % 4) {
          case 0: t.erase(pos, 1 + rng() % 8); break;
          case 1: t.insert(pos, snippets[rng() % std::size(snippets)]); break;
          case 2: t.resize(pos); break;
          default: t.insert(pos, t.substr(rng() % t.size(), rng() % 40)); break;
        }
      }
      try {
        strata::apply_chat_template(t.empty() ? "x" : t, msgs, opts);
        ++ok;
      } catch (const strata::Error& e) {
        ++failed_cleanly;
        EXPECT_NE(std::string(e.what()).find("jinja"), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "non-strata exception for a mutation of " << file << ": " << e.what() << "\n" << t;
      }
    }
  }
  EXPECT_GT(failed_cleanly, 100);
  EXPECT_GT(ok, 10);
}

}  // namespace
