// GBNF: parse errors (each with its message and place) and whole-string matching of every construct.
#include <gtest/gtest.h>

#include <string>

#include "grammar_test_util.h"

using strata::grammar::GrammarError;
using strata::grammar::Matcher;
using strata::grammar::parse_gbnf;
using strata::grammar::test::byte_vocab;
using strata::grammar::test::matches;

namespace {

std::string parse_error(std::string_view text, std::string_view root = "root") {
  try {
    parse_gbnf(text, root);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Gbnf, ParseErrorsNameWhatAndWhere) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "grammar has no rules"},
      {"# only a comment\n", "grammar has no rules"},
      {"root ::= foo", "grammar 1:10: undefined rule 'foo'"},
      {"root ::= \"a\"\nb ::= c", "grammar 2:7: undefined rule 'c'"},
      {"root ::= \"abc", "grammar 1:10: unterminated literal"},
      {"root ::= \"ab\nc\"", "grammar 1:10: unterminated literal"},
      {"root ::= [abc", "grammar 1:10: unterminated character class"},
      {"root ::= []", "grammar 1:10: empty character class"},
      {"root ::= [z-a]", "grammar 1:11: character range U+007A-U+0061 is reversed"},
      {"root ::= (\"a\"", "grammar 1:10: unclosed '('"},
      {"root \"x\"", "grammar 1:6: expected '::=' after rule name 'root'"},
      {"root ::= \"a\" )", "grammar 1:14: expected the end of the line after rule 'root', found ')'"},
      {"::= \"a\"", "grammar 1:1: expected a rule name, found ':'"},
      {"root ::= * \"a\"", "grammar 1:10: '*' without an element before it"},
      {"root ::= \"a\"{3,1}", "grammar 1:13: repetition {3,1}: the maximum is below the minimum"},
      {"root ::= \"a\"{2", "grammar 1:13: expected '}' to close '{m,n}'"},
      {"root ::= \"a\"{x}", "grammar 1:14: expected a number in '{...}'"},
      {"root ::= \"a\"{20000}", "grammar 1:14: repetition count over 10000"},
      {"root ::= \"\\q\"", "grammar 1:11: unknown escape '\\q'"},
      {"root ::= \"\\x4\"", "grammar 1:13: expected 2 hex digits in an escape"},
      {"root ::= \"\\U00110000\"", "grammar 1:13: code point U+110000 out of range"},
      {"root ::= \"\xC3\"", "grammar 1:11: invalid UTF-8 in the grammar"},
      {"root ::= \"a\"\nroot ::= \"b\"", "grammar 2:1: rule 'root' is defined twice"},
      {"x ::= \"a\"", "root rule 'root' is not defined"},
      {"root ::= a\na ::= a \"x\"", "left recursion: rule 'a' can reach itself without consuming input (a -> a)"},
      {"root ::= b \"x\"\nb ::= c\nc ::= \"\" | b \"y\"", "left recursion: rule 'b' can reach itself without consuming input (b -> c -> b)"},
      {"root ::= (\"a\"?)*", "left recursion: rule 'root'"},
      {"root ::= (\"a\"{1000}){2000}{1000}", "grammar too large"},
  };
  for (const auto& [text, want] : cases) EXPECT_NE(parse_error(text).find(want), std::string::npos) << text << "\n got: " << parse_error(text);
  EXPECT_EQ(parse_error("start ::= \"a\"", "start"), "(no error)");
  EXPECT_NE(parse_error("start ::= \"a\"", "other").find("root rule 'other' is not defined"), std::string::npos);
}

TEST(Gbnf, Literals) {
  EXPECT_TRUE(matches(R"(root ::= "abc")", "abc"));
  EXPECT_FALSE(matches(R"(root ::= "abc")", "ab"));
  EXPECT_FALSE(matches(R"(root ::= "abc")", "abcd"));
  EXPECT_FALSE(matches(R"(root ::= "abc")", "abd"));
  EXPECT_TRUE(matches(R"(root ::= "a" "b"  "c")", "abc"));
  EXPECT_TRUE(matches(R"(root ::= "\n\t\r\\\"\x41\u00e9\U0001F600\[\]")", "\n\t\r\\\"A\xC3\xA9\xF0\x9F\x98\x80[]"));
  EXPECT_TRUE(matches("root ::= \"\xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\"", "\xC3\xA9t\xC3\xA9 \xE4\xB8\xAD"));
  EXPECT_TRUE(matches(R"(root ::= "")", ""));
  EXPECT_FALSE(matches(R"(root ::= "")", "a"));
}

TEST(Gbnf, CharacterClasses) {
  const auto g = parse_gbnf(R"(root ::= [a-cx] [^0-9\n] [\]\-] [\u00e0-\u00ff])");
  EXPECT_TRUE(matches(g, "aZ]\xC3\xA0"));
  EXPECT_TRUE(matches(g, "x\xE4\xB8\xAD-\xC3\xBF"));
  EXPECT_FALSE(matches(g, "dZ]\xC3\xA0"));   // d not in [a-cx]
  EXPECT_FALSE(matches(g, "a5]\xC3\xA0"));   // negated digit
  EXPECT_FALSE(matches(g, "a\n]\xC3\xA0"));  // negated newline
  EXPECT_FALSE(matches(g, "aZa\xC3\xA0"));
  EXPECT_FALSE(matches(g, "aZ]\xC3\x9F"));   // U+00DF below the range
  EXPECT_TRUE(matches(R"(root ::= [-a])", "-"));
  EXPECT_TRUE(matches(R"(root ::= [a-])", "-"));
  EXPECT_TRUE(matches(R"(root ::= .)", "\xF0\x9F\x98\x80"));
  EXPECT_TRUE(matches(R"(root ::= .)", "\n"));
  EXPECT_FALSE(matches(R"(root ::= .)", "ab"));
  EXPECT_FALSE(matches(R"(root ::= .)", "\xC3"));        // incomplete code point
  EXPECT_FALSE(matches(R"(root ::= .)", "\xC0\x80"));    // overlong
  EXPECT_FALSE(matches(R"(root ::= .)", "\xED\xA0\x80"));  // surrogate
  EXPECT_FALSE(matches(R"(root ::= .)", "\x80"));
}

TEST(Gbnf, GroupsAlternativesAndRules) {
  const auto g = parse_gbnf(R"(
# a comment line
root ::= greeting ( " " name )? "!"   # trailing comment
greeting ::= "hi" | "hello"
  | "hey"
name ::= (
    "bob" |
    "alice"
  )
)");
  for (const char* ok : {"hi!", "hello bob!", "hey alice!", "hi alice!"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"hi", "hello  bob!", "hey carol!", "ho!", "hi bob"}) EXPECT_FALSE(matches(g, bad)) << bad;
  EXPECT_TRUE(matches("root ::= \"a\" | ", ""));  // an empty alternative
  EXPECT_TRUE(matches("root ::= \"a\" | ", "a"));
}

TEST(Gbnf, Repetitions) {
  EXPECT_TRUE(matches(R"(root ::= "a"*)", ""));
  EXPECT_TRUE(matches(R"(root ::= "a"*)", "aaaa"));
  EXPECT_FALSE(matches(R"(root ::= "a"+)", ""));
  EXPECT_TRUE(matches(R"(root ::= "a"+)", "aaa"));
  EXPECT_TRUE(matches(R"(root ::= "ab"+)", "ababab"));  // a literal repeats whole
  EXPECT_FALSE(matches(R"(root ::= "ab"+)", "abb"));
  EXPECT_TRUE(matches(R"(root ::= "a"? "b")", "b"));
  EXPECT_TRUE(matches(R"(root ::= "a"? "b")", "ab"));
  EXPECT_FALSE(matches(R"(root ::= "a"? "b")", "aab"));
  for (int n = 0; n <= 6; ++n) {
    const std::string s(static_cast<size_t>(n), 'x');
    EXPECT_EQ(matches(R"(root ::= "x"{3})", s), n == 3) << n;
    EXPECT_EQ(matches(R"(root ::= "x"{2,})", s), n >= 2) << n;
    EXPECT_EQ(matches(R"(root ::= "x"{2,4})", s), n >= 2 && n <= 4) << n;
    EXPECT_EQ(matches(R"(root ::= "x"{0,1})", s), n <= 1) << n;
    EXPECT_EQ(matches(R"(root ::= ("x" "x"){1,2})", s), n == 2 || n == 4) << n;
    EXPECT_EQ(matches(R"(root ::= [x]{ 1 , 3 })", s), n >= 1 && n <= 3) << n;
  }
}

TEST(Gbnf, RecursionNestsAndTailCallsStayFlat) {
  const auto g = parse_gbnf(R"g(root ::= "(" root ")" root | "")g");
  EXPECT_TRUE(matches(g, "(()(()))()"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_FALSE(matches(g, "())"));
  EXPECT_TRUE(matches(g, std::string(1000, '(') + std::string(1000, ')')));
  // Nesting beyond kMaxStackDepth is not allowed (the stack is dropped), never unbounded.
  Matcher m(g, byte_vocab());
  EXPECT_FALSE(m.accept_bytes(std::string(strata::grammar::kMaxStackDepth + 10, '(')));
  // A right-recursive loop keeps no frame per character: a million characters match.
  EXPECT_TRUE(matches(R"(root ::= [a-z]*)", std::string(1000000, 'q')));
}

TEST(Gbnf, TooAmbiguousGrammarThrows) {
  // After n x's the parse could be at any nesting depth 0..n: n stacks at once.
  const auto g = parse_gbnf(R"(root ::= ( "x" | "x" root "y" )*)");
  EXPECT_TRUE(matches(g, "xxxyy"));
  Matcher m(g, byte_vocab());
  try {
    m.accept_bytes(std::string(2000, 'x'));
    FAIL() << "no error";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("grammar too ambiguous: more than 1024 parse stacks"), std::string::npos) << e.what();
  }
}

TEST(Gbnf, JsonGrammarFromTheDialectDocs) {
  const auto g = parse_gbnf(R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
)");
  EXPECT_TRUE(matches(g, R"({"a": [1, 2.5, -3e+7, true, null, "x\"y\u00e9"], "b": {}})"));
  EXPECT_FALSE(matches(g, R"({"a": [1, 2.5,]})"));
  EXPECT_FALSE(matches(g, R"({"a" 1})"));
  EXPECT_FALSE(matches(g, R"([1])"));
}

// Groups nest at most kMaxNesting deep (the parser recurses into them): 50k '(' is an error, not a
// stack overflow.
TEST(Gbnf, DeepGroupNestingIsAnErrorNotACrash) {
  const int limit = strata::grammar::kMaxNesting;
  EXPECT_EQ(parse_error("root ::= " + std::string(limit, '(') + "\"a\"" + std::string(limit, ')')), "(no error)");
  const std::string deep = "root ::= " + std::string(50000, '(') + "\"a\"" + std::string(50000, ')');
  EXPECT_NE(parse_error(deep).find("nested deeper than " + std::to_string(limit)), std::string::npos) << parse_error(deep);
}
