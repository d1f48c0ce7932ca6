#pragma once
// The compiled grammar (shared by gbnf_parser.cpp and matcher.cpp): a flat element array in which
// every alternative of every rule is a run of elements ended by End. A parse position is an index
// into it; a parse stack is a chain of positions (top = the next element to match).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace strata::grammar {

struct Elem {
  enum Kind : uint8_t { Class, Ref, End };
  Kind kind;
  uint32_t arg;  // Class: index into Grammar::classes; Ref: rule id
};

// A set of code points: sorted, disjoint, non-adjacent ranges (negation is resolved at parse time).
struct CharClass {
  std::vector<std::array<uint32_t, 2>> ranges;  // [lo, hi] inclusive
  std::array<uint64_t, 2> ascii{};              // bitmap of the code points < 128

  bool contains(uint32_t cp) const {
    if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
    for (const auto& r : ranges) {
      if (cp < r[0]) return false;
      if (cp <= r[1]) return true;
    }
    return false;
  }
  // Some code point in [lo, hi] is in the class.
  bool intersects(uint32_t lo, uint32_t hi) const {
    for (const auto& r : ranges)
      if (r[0] <= hi && lo <= r[1]) return true;
    return false;
  }
};

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

class Grammar {
 public:
  std::vector<Elem> elems;
  std::vector<CharClass> classes;
  std::vector<std::vector<uint32_t>> rule_alts;  // rule id -> start positions of its alternatives
  std::vector<std::string> rule_names;           // for messages (generated rules: "parent-N")
  uint32_t root = 0;
};

}  // namespace strata::grammar
