#pragma once
// How deep JSON text nests, found by one scan before it is parsed. Every walk over a parsed value
// (dump, JSON Schema -> GBNF, template values) recurses, so text from outside (request bodies,
// tool-call arguments, template strings, model output) is refused past kMaxJsonDepth where it
// enters, never on a deep stack later.
#include <cstddef>
#include <string>
#include <string_view>

namespace strata {

// Arrays and objects, the outermost counting 1. Real tool schemas nest ~10 levels; a request
// wraps them in ~5 more (tools[].function.parameters).
inline constexpr size_t kMaxJsonDepth = 64;

struct JsonNesting {
  size_t depth = 0;        // deepest nesting seen (the scan stops one past `limit`)
  size_t over_at = std::string::npos;  // byte offset where `limit` was first exceeded
  std::string top_key;     // the top-level object key whose value was being scanned there
  bool over() const { return over_at != std::string::npos; }
};

// Scans any text (valid JSON or not: strings and escapes are skipped, nothing else is checked).
JsonNesting json_nesting(std::string_view text, size_t limit = kMaxJsonDepth);

}  // namespace strata
