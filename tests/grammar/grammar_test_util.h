#pragma once
// Helpers for the grammar tests: a byte vocabulary (token b = the byte b, token 256 = EOG) and
// whole-string matching.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace strata::grammar::test {

inline constexpr int32_t kByteEog = 256;

inline std::shared_ptr<const VocabIndex> byte_vocab() {
  static const std::shared_ptr<const VocabIndex> v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    bytes.push_back("");
    return std::make_shared<const VocabIndex>(std::move(bytes), std::vector<int32_t>{kByteEog});
  }();
  return v;
}

// The whole text is a sentence of the grammar.
inline bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, byte_vocab());
  return m.accept_bytes(text) && m.can_end();
}

inline bool matches(std::string_view gbnf, std::string_view text) { return matches(parse_gbnf(gbnf), text); }

// The text is a prefix of some sentence.
inline bool prefix_ok(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, byte_vocab());
  return m.accept_bytes(text);
}

}  // namespace strata::grammar::test
