#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

// Regexes as llama.cpp writes them (the collapsing below depends on their exact spelling).
const char* const kRegexQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* const kRegexLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kRegexGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen3.5: the Qwen2 split with combining marks counted as letters.
const char* const kRegexQwen35 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kRegexGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
// DeepSeek V3: digits in groups of up to three, CJK/kana runs, then words and punctuation.
const char* const kRegexDeepseek3Digits = "\\p{N}{1,3}";
const char* const kRegexDeepseek3Cjk = "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+";  // [一-龥぀-ゟ゠-ヿ]+
const char* const kRegexDeepseek3Words =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|"
    "\\s+(?!\\S)|\\s+";

const std::vector<PreTokenizerSpec>& specs() {
  static const std::vector<PreTokenizerSpec> kSpecs = {
      {{"default", ""}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kRegexGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, true, false},
      {{"gpt-2", "phi-2"}, {kRegexGpt2}, false, true, false},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {kRegexLlama3}, true, true, true},
      {{"qwen2", "deepseek-r1-qwen"}, {kRegexQwen2}, false, false, false},
      {{"deepseek-v3"}, {kRegexDeepseek3Digits, kRegexDeepseek3Cjk, kRegexDeepseek3Words}, false, false, false},
      {{"gpt-4o", "llama4"}, {kRegexGpt4o}, false, false, false},
      // GLM-4: the llama3 split, without llama3's merge skipping; no default BOS.
      {.names = {"glm4", "chatglm-bpe"}, .regexes = {kRegexLlama3}, .no_default_bos = true},
      {.names = {"minimax-m2"}, .regexes = {kRegexGpt4o}, .clean_spaces = false},
      {.names = {"qwen35"}, .regexes = {kRegexQwen35}, .clean_spaces = false},
      {.names = {"kimi-k2"}, .regexes = {}, .clean_spaces = false, .custom = split_kimi_k2},
  };
  return kSpecs;
}

// Byte standing for a non-ASCII codepoint of each category in the collapsed text.
constexpr char kCollapsedNumber = '\xD1';
constexpr char kCollapsedLetter = '\xD2';
constexpr char kCollapsedPunct = '\xD3';
constexpr char kCollapsedMark = '\xD4';
constexpr char kCollapsedSymbol = '\xD5';
constexpr char kCollapsedOther = '\xD0';
constexpr char kCollapsedSpace = '\x0B';

char collapse_cpt(uint32_t c) {
  if (c < 128) return static_cast<char>(c);
  if (is_whitespace(c)) return kCollapsedSpace;
  switch (char_class(c)) {
    case CharClass::Number: return kCollapsedNumber;
    case CharClass::Letter: return kCollapsedLetter;
    case CharClass::Punctuation: return kCollapsedPunct;
    case CharClass::Mark: return kCollapsedMark;
    case CharClass::Symbol: return kCollapsedSymbol;
    default: return kCollapsedOther;
  }
}

struct CategoryClass {
  char name;
  char collapsed;
  const char* ascii;  // ASCII members, as class-body regex text
};
// ASCII members as llama.cpp lists them ('~' is missing from the symbols there, kept so).
constexpr CategoryClass kCategories[] = {
    {'N', kCollapsedNumber, "0-9"},
    {'L', kCollapsedLetter, "A-Za-z"},
    {'P', kCollapsedPunct, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {'M', kCollapsedMark, ""},
    {'S', kCollapsedSymbol, "\\$\\+<->^`\\|"},
};

const CategoryClass* category_at(std::string_view re, size_t i) {
  // Same bounds as llama.cpp: a category needs at least one regex character after it.
  if (re[i] != '\\' || i + 4 >= re.size() || re[i + 1] != 'p' || re[i + 2] != '{' || re[i + 4] != '}') return nullptr;
  for (const auto& c : kCategories)
    if (c.name == re[i + 3]) return &c;
  return nullptr;
}

struct MatchScratch {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
    if (ctx) {  // long runs of spaces backtrack once per character: no artificial ceiling
      pcre2_set_match_limit(ctx, UINT32_MAX);
      pcre2_set_depth_limit(ctx, UINT32_MAX);
    }
  }
  ~MatchScratch() {
    if (stack) pcre2_jit_stack_free(stack);
    if (ctx) pcre2_match_context_free(ctx);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

// Rewrites that keep the matches of a collapsed regex but spare PCRE2 a backtracking frame per
// repetition: "a letter that is not a-z" spelled as lookahead + class (gpt-4o) is one class here.
void simplify_collapsed(std::string& pattern) {
  const std::string letter = std::string("(?=[") + kCollapsedLetter + "A-Za-z])";
  const std::pair<std::string, std::string> kRewrites[] = {
      {"(" + letter + "([^a-z]))", std::string("[") + kCollapsedLetter + "A-Z]"},
      {"(" + letter + "([^A-Z]))", std::string("[") + kCollapsedLetter + "a-z]"},
  };
  for (const auto& [from, to] : kRewrites)
    for (size_t pos = 0; (pos = pattern.find(from, pos)) != std::string::npos; pos += to.size()) pattern.replace(pos, from.size(), to);
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

bool collapse_regex(std::string_view re, std::string& out) {
  bool uses_category = false;
  for (size_t i = 0; i < re.size(); ++i)
    if (category_at(re, i)) uses_category = true;
  if (!uses_category) return false;
  out.clear();
  bool inside = false;  // inside [...]; classes do not nest
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
      out += '[';
      inside = true;
      continue;
    }
    if (inside && re[i] == ']' && re[i - 1] != '\\') {
      out += ']';
      inside = false;
      continue;
    }
    if (const CategoryClass* c = category_at(re, i)) {
      if (!inside) out += '[';
      out += c->collapsed;
      out += c->ascii;
      if (!inside) out += ']';
      i += 4;
      continue;
    }
    out += re[i];
  }
  return true;
}

const PreTokenizerSpec& find_pretokenizer(std::string_view pre_name) {
  for (const auto& s : specs())
    if (std::find(s.names.begin(), s.names.end(), pre_name) != s.names.end()) return s;
  fail("unknown tokenizer.ggml.pre '{}' (known: {})", pre_name, known_pretokenizers());
}

std::string known_pretokenizers() {
  std::string out;
  for (const auto& s : specs())
    for (const auto& n : s.names)
      if (!n.empty()) {
        if (!out.empty()) out += ", ";
        out += n;
      }
  return out;
}

struct PreTokenizer::Rule {
  std::string source;
  bool collapsed = false;  // matched over the collapsed text, else over UTF-8 codepoints
  pcre2_code* code = nullptr;
  ~Rule() {
    if (code) pcre2_code_free(code);
  }
};

PreTokenizer::PreTokenizer(const PreTokenizerSpec& spec) : spec_(spec) {
  for (const auto& re : spec.regexes) {
    auto rule = std::make_unique<Rule>();
    rule->source = re;
    std::string pattern;
    rule->collapsed = collapse_regex(re, pattern);
    uint32_t options = 0;
    if (!rule->collapsed) {
      pattern = re;
      options = PCRE2_UTF;  // \s \w stay ASCII, as std::wregex's in llama.cpp
    }
    if (rule->collapsed) simplify_collapsed(pattern);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    rule->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_off, nullptr);
    if (!rule->code) fail("pre-tokenizer regex '{}' does not compile at {}: {}", re, err_off, pcre2_message(err));
    pcre2_jit_compile(rule->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    any_collapsed_ |= rule->collapsed;
    any_wide_ |= !rule->collapsed;
    rules_.push_back(std::move(rule));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cpts = utf8_decode(text);
  const size_t n = cpts.size();

  std::string collapsed;
  if (any_collapsed_) {
    collapsed.resize(n);
    for (size_t i = 0; i < n; ++i) collapsed[i] = collapse_cpt(cpts[i]);
  }
  std::string wide;                 // UTF-8 of the codepoints, non-ASCII whitespace as \v
  std::vector<size_t> wide_offset;  // [n + 1] byte offset of each codepoint in `wide`
  if (any_wide_) {
    wide_offset.resize(n + 1);
    for (size_t i = 0; i < n; ++i) {
      wide_offset[i] = wide.size();
      uint32_t c = cpts[i];
      if (c > 0x7F && is_whitespace(c)) c = 0x0B;
      if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = kReplacementChar;
      utf8_append(wide, c);
    }
    wide_offset[n] = wide.size();
  }
  auto cpt_index = [&](size_t byte_off) {
    return static_cast<size_t>(std::lower_bound(wide_offset.begin(), wide_offset.end(), byte_off) - wide_offset.begin());
  };

  MatchScratch& ms = scratch();
  std::vector<size_t> pieces{n};  // lengths in codepoints
  if (n == 0) pieces.clear();
  if (spec_.custom && n > 0) {
    std::vector<size_t> next;
    spec_.custom(cpts.data(), n, next);
    pieces = std::move(next);
  }
  for (const auto& rule : rules_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(rule->code, nullptr);
    std::vector<size_t> next;
    next.reserve(pieces.size());
    size_t start = 0;  // codepoint index of the current piece
    for (size_t len : pieces) {
      // The piece is the whole subject: lookaheads do not see past it (as std::regex_iterator).
      const char* subject = rule->collapsed ? collapsed.data() + start : wide.data() + wide_offset[start];
      const size_t subject_len = rule->collapsed ? len : wide_offset[start + len] - wide_offset[start];
      auto to_cpt = [&](size_t off) { return rule->collapsed ? off : cpt_index(wide_offset[start] + off) - start; };
      size_t pos = 0;        // search position (subject units)
      size_t last_end = 0;   // end of the previous match (codepoints)
      while (pos <= subject_len) {
        const int rc = pcre2_match(rule->code, reinterpret_cast<PCRE2_SPTR>(subject), subject_len, pos, 0, md, ms.ctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) fail("pre-tokenizer regex '{}' failed: {}", rule->source, pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms_cpt = to_cpt(ov[0]), me_cpt = to_cpt(ov[1]);
        if (ms_cpt > last_end) next.push_back(ms_cpt - last_end);
        if (me_cpt > ms_cpt) next.push_back(me_cpt - ms_cpt);
        last_end = me_cpt;
        if (ov[1] > ov[0]) {
          pos = ov[1];
        } else {  // empty match: step one codepoint
          pos = ov[1] + 1;
          while (!rule->collapsed && pos < subject_len && (static_cast<uint8_t>(subject[pos]) & 0xC0) == 0x80) ++pos;
        }
      }
      if (last_end < len) next.push_back(len - last_end);
      start += len;
    }
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    std::string w;
    for (size_t i = start; i < start + len; ++i) utf8_append(w, cpts[i]);
    words.push_back(std::move(w));
    start += len;
  }
  return words;
}

}  // namespace strata::tok
