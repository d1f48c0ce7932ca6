#include "tokenizer/split_custom.h"

#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

struct HanRange {
  uint32_t first, last;
};
constexpr HanRange kHan[] = {
    {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xF900, 0xFAFF},   {0x20000, 0x2A6DF}, {0x2A700, 0x2B73F},
    {0x2B740, 0x2B81F}, {0x2B820, 0x2CEAF}, {0x2CEB0, 0x2EBEF}, {0x2F800, 0x2FA1F},
};

bool is_letter(uint32_t c) { return char_class(c) == CharClass::Letter; }
bool is_number(uint32_t c) { return char_class(c) == CharClass::Number; }
bool is_newline(uint32_t c) { return c == '\r' || c == '\n'; }
bool is_word_letter(uint32_t c) { return is_letter(c) && !is_han(c); }
// Neither whitespace, letter nor number: what a punctuation run is made of.
bool is_other(uint32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }

// Contraction suffix at `p` ('s 't 'm 'd 're 've 'll, any case): its length, 0 if none.
size_t contraction_len(const uint32_t* s, size_t p, size_t n) {
  if (p + 1 >= n || s[p] != '\'') return 0;
  auto lower = [](uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  const uint32_t a = lower(s[p + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (p + 2 >= n) return 0;
  const uint32_t b = lower(s[p + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

bool is_han(uint32_t c) {
  for (const auto& r : kHan)
    if (c >= r.first && c <= r.last) return true;
  return false;
}

// The chunk starting at `pos` is the first rule that applies:
//  1. a run of Han characters;
//  2. a run of non-Han letters, preceded by one optional character that is not CR, LF, a letter or
//     a number (only taken when a non-Han letter follows it), followed by an optional contraction;
//  3. a run of numbers, cut into pieces of three from the left;
//  4. an optional space, then a run of characters that are not whitespace, letters or numbers,
//     then any CR/LF;
//  5. whitespace: up to the last CR/LF of the run if it has one; else, when the run has more than
//     one character and text follows, all but its last character; else the whole run;
//  6. one character.
void split_kimi_k2(const uint32_t* s, size_t n, std::vector<size_t>& out) {
  size_t pos = 0;
  auto emit = [&](size_t end) {
    if (end > pos) out.push_back(end - pos);
    pos = end;
  };
  while (pos < n) {
    const uint32_t c = s[pos];
    size_t p = pos;
    if (is_han(c)) {
      while (p < n && is_han(s[p])) ++p;
      emit(p);
      continue;
    }
    const bool can_lead = !is_newline(c) && !is_letter(c) && !is_number(c);
    if (is_word_letter(c) || (can_lead && p + 1 < n && is_word_letter(s[p + 1]))) {
      if (can_lead) ++p;
      while (p < n && is_word_letter(s[p])) ++p;
      p += contraction_len(s, p, n);
      emit(p);
      continue;
    }
    if (is_number(c)) {
      while (p < n && is_number(s[p])) {
        const size_t group_end = p + 3 < n ? p + 3 : n;
        while (p < group_end && is_number(s[p])) ++p;
        emit(p);
      }
      continue;
    }
    const size_t punct_start = c == ' ' ? p + 1 : p;
    if (punct_start < n && is_other(s[punct_start])) {
      p = punct_start;
      while (p < n && is_other(s[p])) ++p;
      while (p < n && is_newline(s[p])) ++p;
      emit(p);
      continue;
    }
    size_t ws_end = p, last_newline_end = 0;
    while (ws_end < n && is_whitespace(s[ws_end])) {
      if (is_newline(s[ws_end])) last_newline_end = ws_end + 1;
      ++ws_end;
    }
    if (last_newline_end > 0) {
      emit(last_newline_end);
    } else if (ws_end - p > 1 && ws_end < n) {
      emit(ws_end - 1);
    } else if (ws_end > p) {
      emit(ws_end);
    } else {
      emit(p + 1);
    }
  }
}

}  // namespace strata::tok
