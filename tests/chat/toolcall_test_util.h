#pragma once
// Helpers of the tool-call parser tests: tools, expected results, and the split check (a text fed
// whole, split in two at every byte, byte by byte and in random chunks gives the same result).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "chat/toolcall/toolcall.h"

namespace strata::toolcall_test {

using namespace strata::toolcall;

inline std::vector<ToolSpec> tools() {
  return {
      {"get_weather", "Weather of a place",
       nlohmann::json::parse(R"({"type":"object","properties":{"location":{"type":"string"},
         "unit":{"type":"string","enum":["c","f"]}},"required":["location"]})")},
      {"search", "Search the web",
       nlohmann::json::parse(R"({"type":"object","properties":{"query":{"type":"string"},
         "limit":{"type":"integer"},"filters":{"type":"object"}},"required":["query"]})")},
  };
}

inline ParserOptions opts(bool thinking_open = false) {
  ParserOptions o;
  o.tools = tools();
  o.thinking_open = thinking_open;
  return o;
}

inline ToolCall call(int index, std::string name, std::string args) {
  return ToolCall{"call_" + std::to_string(index), std::move(name), std::move(args)};
}

inline std::string describe(const Parsed& p) {
  std::string s = "content=[" + p.content + "] reasoning=[" + p.reasoning + "]";
  for (const auto& c : p.calls) s += " call{" + c.id + " " + c.name + " " + c.arguments + "}";
  return s;
}

inline bool same(const Parsed& a, const Parsed& b) {
  if (a.content != b.content || a.reasoning != b.reasoning || a.calls.size() != b.calls.size()) return false;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    if (a.calls[i].id != b.calls[i].id || a.calls[i].name != b.calls[i].name ||
        a.calls[i].arguments != b.calls[i].arguments) {
      return false;
    }
  }
  return true;
}

// Event order: calls numbered from 0, arguments and end only inside their call, no empty text.
inline void expect_well_formed(const std::vector<Event>& events, const std::string& where) {
  int open = -1, next = 0;
  for (const auto& e : events) {
    switch (e.kind) {
      case Event::Kind::CallStart:
        EXPECT_EQ(open, -1) << where << ": call " << e.index << " starts inside call " << open;
        EXPECT_EQ(e.index, next) << where;
        EXPECT_FALSE(e.id.empty()) << where;
        open = e.index;
        ++next;
        break;
      case Event::Kind::CallArgs:
        EXPECT_EQ(e.index, open) << where << ": arguments outside their call";
        EXPECT_FALSE(e.text.empty()) << where;
        break;
      case Event::Kind::CallEnd:
        EXPECT_EQ(e.index, open) << where;
        open = -1;
        break;
      default: EXPECT_FALSE(e.text.empty()) << where << ": empty text event";
    }
  }
  EXPECT_EQ(open, -1) << where << ": a call was not ended";
}

inline Parsed run_chunks(Format f, const ParserOptions& o, const std::vector<std::string_view>& chunks,
                         const std::string& where) {
  auto p = StreamParser::make(f, o);
  std::vector<Event> events;
  for (const auto c : chunks) p->feed(c, events);
  p->finish(events);
  expect_well_formed(events, where);
  return fold(events);
}

// parse_all(text) == expected, and every split of text folds to the same result (the CallArgs
// fragments of each call then concatenate to its final arguments: the prefix rule).
inline void expect_all_splits(Format f, const ParserOptions& o, std::string_view text, const Parsed& expected) {
  const Parsed whole = parse_all(f, o, text);
  ASSERT_TRUE(same(whole, expected)) << "whole:    " << describe(whole) << "\nexpected: " << describe(expected);
  for (size_t k = 0; k <= text.size(); ++k) {
    const Parsed got = run_chunks(f, o, {text.substr(0, k), text.substr(k)}, "split at " + std::to_string(k));
    ASSERT_TRUE(same(got, whole)) << "split at " << k << ": " << describe(got) << "\nwhole: " << describe(whole);
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  const Parsed by_byte = run_chunks(f, o, bytes, "byte by byte");
  ASSERT_TRUE(same(by_byte, whole)) << "byte by byte: " << describe(by_byte);
  std::mt19937 rng(12345);
  for (int round = 0; round < 20; ++round) {
    std::vector<std::string_view> chunks;
    for (size_t i = 0; i < text.size();) {
      const size_t n = std::min<size_t>(text.size() - i, 1 + rng() % 9);
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    const Parsed got = run_chunks(f, o, chunks, "random chunks " + std::to_string(round));
    ASSERT_TRUE(same(got, whole)) << "random chunks " << round << ": " << describe(got);
  }
}

}  // namespace strata::toolcall_test
