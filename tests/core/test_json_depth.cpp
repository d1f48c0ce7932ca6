// core/json_depth.h: the nesting scan that guards every recursive walk over JSON from outside.
#include <gtest/gtest.h>

#include <string>

#include "core/json_depth.h"

using namespace strata;

namespace {
std::string nested(size_t depth, const std::string& open = "[", const std::string& close = "]") {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += open;
  for (size_t i = 0; i < depth; ++i) s += close;
  return s;
}
}  // namespace

TEST(JsonDepth, CountsArraysAndObjects) {
  EXPECT_EQ(json_nesting("1").depth, 0u);
  EXPECT_EQ(json_nesting("[]").depth, 1u);
  EXPECT_EQ(json_nesting(R"({"a": [1, {"b": [[]]}]})").depth, 5u);
  EXPECT_EQ(json_nesting(nested(64)).depth, 64u);
  EXPECT_FALSE(json_nesting(nested(kMaxJsonDepth)).over());
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_EQ(json_nesting(R"(["[[[[", "\"[[[", "\\", "]]]"])").depth, 1u);
  EXPECT_FALSE(json_nesting("\"" + nested(100000) + "\"").over());
}

TEST(JsonDepth, StopsPastTheLimitAndNamesTheTopLevelKey) {
  const std::string body = R"({"model": "x", "tools": [{"function": {"parameters": )" + nested(100000, "{\"a\":", "}") + "}}]}";
  const JsonNesting n = json_nesting(body);
  ASSERT_TRUE(n.over());
  EXPECT_EQ(n.depth, kMaxJsonDepth + 1);
  EXPECT_EQ(n.top_key, "tools");
  EXPECT_LT(n.over_at, body.size());
  EXPECT_EQ(body[n.over_at], '{');
}
