#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>

namespace strata::tok {

namespace {

// Decodes one codepoint at `pos`; returns false for a malformed sequence (pos unchanged).
bool decode_one(std::string_view s, size_t& pos, uint32_t& out) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  auto cont = [&](size_t k) { return pos + k < s.size() && (static_cast<uint8_t>(s[pos + k]) & 0xC0) == 0x80; };
  auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[pos + k]) & 0x3F); };
  if (!(b0 & 0x80)) {
    out = b0;
    pos += 1;
    return true;
  }
  if (!(b0 & 0x40)) return false;
  if (!(b0 & 0x20)) {
    if (!cont(1)) return false;
    out = ((b0 & 0x1Fu) << 6) | byte(1);
    pos += 2;
    return true;
  }
  if (!(b0 & 0x10)) {
    if (!cont(1) || !cont(2)) return false;
    out = ((b0 & 0x0Fu) << 12) | (byte(1) << 6) | byte(2);
    pos += 3;
    return true;
  }
  if (!(b0 & 0x08)) {
    if (!cont(1) || !cont(2) || !cont(3)) return false;
    out = ((b0 & 0x07u) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3);
    pos += 4;
    return true;
  }
  return false;
}

struct ByteMap {
  std::array<uint32_t, 256> to_cpt{};
  std::array<int16_t, 512> from_cpt{};  // every mapped codepoint is < 512
  ByteMap() {
    from_cpt.fill(-1);
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cpt[b] = printable ? static_cast<uint32_t>(b) : extra++;
      from_cpt[to_cpt[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

std::vector<uint32_t> utf8_decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t c = 0;
    if (decode_one(s, pos, c)) {
      out.push_back(c);
    } else {
      out.push_back(kReplacementChar);
      ++pos;
    }
  }
  return out;
}

void utf8_append(std::string& out, uint32_t c) {
  if (c <= 0x7F) {
    out += static_cast<char>(c);
  } else if (c <= 0x7FF) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c <= 0xFFFF) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | ((c >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string utf8_encode(uint32_t cpt) {
  std::string s;
  utf8_append(s, cpt);
  return s;
}

CharClass char_class(uint32_t cpt) {
  if (cpt > 0x10FFFF) return CharClass::Undefined;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cpt))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return CharClass::Letter;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
      return CharClass::Mark;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return CharClass::Number;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return CharClass::Punctuation;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK: case UTF8PROC_CATEGORY_SO:
      return CharClass::Symbol;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
      return CharClass::Separator;
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
      return CharClass::Control;
    default:
      return CharClass::Undefined;
  }
}

bool is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

uint32_t byte_to_cpt(uint8_t b) { return byte_map().to_cpt[b]; }

int cpt_to_byte(uint32_t cpt) { return cpt < 512 ? byte_map().from_cpt[cpt] : -1; }

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, byte_to_cpt(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace strata::tok
