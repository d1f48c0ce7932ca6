#pragma once
// Unicode helpers for the tokenizer: lenient UTF-8 decoding (invalid bytes become U+FFFD, as
// llama.cpp does), encoding, llama.cpp-style codepoint categories and the GPT-2 byte<->unicode map.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tok {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of a UTF-8 sequence from its lead byte (1 for stray continuation bytes).
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes `s`; a malformed sequence consumes one byte and yields U+FFFD.
std::vector<uint32_t> utf8_decode(std::string_view s);
void utf8_append(std::string& out, uint32_t cpt);
std::string utf8_encode(uint32_t cpt);

// Coarse categories (one per codepoint), the ones llama.cpp's pre-tokenizer regexes use.
enum class CharClass : uint8_t { Undefined, Number, Letter, Separator, Mark, Punctuation, Symbol, Control };
CharClass char_class(uint32_t cpt);
// Python-style \s: ASCII \t\n\v\f\r and space, U+0085, U+00A0, U+1680, U+2000-200A, U+2028/9,
// U+202F, U+205F, U+3000.
bool is_whitespace(uint32_t cpt);

// GPT-2 byte-level mapping: each byte has a printable codepoint standing for it.
uint32_t byte_to_cpt(uint8_t b);
// Inverse; returns -1 when the codepoint stands for no byte.
int cpt_to_byte(uint32_t cpt);
// UTF-8 of the codepoints standing for each byte of `bytes`.
std::string bytes_to_unicode(std::string_view bytes);

}  // namespace strata::tok
