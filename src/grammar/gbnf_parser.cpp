// GBNF text -> Grammar. Groups and repetitions become generated rules (x* -> R ::= x R | "",
// x{m,n} -> m copies and n-m nested optionals), literals a run of one-code-point classes. After
// parsing: every referenced rule must be defined, and no rule may reach itself without consuming
// input (left recursion), so expanding a parse stack always terminates.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "grammar/grammar_internal.h"

namespace strata::grammar {
namespace {

struct Sym {
  bool is_ref;
  uint32_t id;  // class id or rule id
};
using Alt = std::vector<Sym>;

struct RuleDef {
  std::string name;   // user name, or owner-N for generated rules
  std::string owner;  // the user rule it was written in (messages)
  std::vector<Alt> alts;
  bool defined = false;
  size_t first_ref = 0;  // text offset of the first reference (undefined-rule messages)
};

using Ranges = std::vector<std::array<uint32_t, 2>>;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  std::shared_ptr<Grammar> run(std::string_view root) {
    skip_space(true);
    while (p_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    if (rules_.empty()) throw GrammarError("grammar has no rules");
    for (const RuleDef& r : rules_)
      if (!r.defined) error(r.first_ref, fmt::format("undefined rule '{}'", r.name));
    const auto it = by_name_.find(std::string(root));
    if (it == by_name_.end() || !rules_[it->second].defined)
      throw GrammarError(fmt::format("root rule '{}' is not defined", root));
    check_left_recursion();
    return flatten(it->second);
  }

 private:
  [[noreturn]] void error(size_t at, const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(s_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    throw GrammarError(fmt::format("grammar {}:{}: {}", line, col, what));
  }

  char peek(size_t ahead = 0) const { return p_ + ahead < s_.size() ? s_[p_ + ahead] : '\0'; }
  bool at_end() const { return p_ >= s_.size(); }

  // Spaces, tabs, carriage returns and # comments; newlines too when newline_ok.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newline_ok && c == '\n')) {
        ++p_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++p_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = p_;
    while (!at_end() && is_name_char(peek())) ++p_;
    if (p_ == start) error(p_, at_end() ? "expected a rule name, found the end" : fmt::format("expected a rule name, found '{}'", peek()));
    return std::string(s_.substr(start, p_ - start));
  }

  uint32_t rule_id(const std::string& name, size_t ref_at) {
    const auto [it, added] = by_name_.emplace(name, static_cast<uint32_t>(rules_.size()));
    if (added) rules_.push_back(RuleDef{name, name, {}, false, ref_at});
    return it->second;
  }

  uint32_t new_rule(std::vector<Alt> alts) {
    const uint32_t id = static_cast<uint32_t>(rules_.size());
    rules_.push_back(RuleDef{fmt::format("{}-{}", owner_, id), owner_, std::move(alts), true, 0});
    return id;
  }

  void budget(size_t n) {
    n_elems_ += n;
    if (n_elems_ > kMaxElements) error(p_, fmt::format("grammar too large: more than {} elements after expanding repetitions", kMaxElements));
  }

  void parse_rule() {
    const size_t start = p_;
    const std::string name = parse_name();
    skip_space(false);
    if (s_.substr(p_, 3) != "::=") error(p_, fmt::format("expected '::=' after rule name '{}'", name));
    p_ += 3;
    skip_space(true);
    owner_ = name;
    std::vector<Alt> alts = parse_alternates(false);
    skip_space(false);
    if (!at_end() && peek() != '\n') error(p_, fmt::format("expected the end of the line after rule '{}', found '{}'", name, peek()));
    const uint32_t id = rule_id(name, start);
    if (rules_[id].defined) error(start, fmt::format("rule '{}' is defined twice", name));
    rules_[id].defined = true;
    rules_[id].alts = std::move(alts);
  }

  std::vector<Alt> parse_alternates(bool nested) {
    std::vector<Alt> alts;
    alts.push_back(parse_sequence(nested));
    while (true) {
      if (peek() == '|') {
        ++p_;
        skip_space(true);
        alts.push_back(parse_sequence(nested));
        continue;
      }
      if (!nested && peek() == '\n') {  // a top-level alternative may continue on the next line with '|'
        const size_t save = p_;
        skip_space(true);
        if (peek() == '|') continue;
        p_ = save;
      }
      break;
    }
    return alts;
  }

  Alt parse_sequence(bool nested) {
    Alt alt;
    size_t unit = SIZE_MAX;  // start of the last element (a literal is one unit) in alt
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        unit = alt.size();
        parse_literal(alt);
      } else if (c == '[') {
        unit = alt.size();
        alt.push_back({false, parse_class()});
        budget(1);
      } else if (c == '.') {
        ++p_;
        unit = alt.size();
        alt.push_back({false, intern_class({{0, kMaxCodePoint}})});
        budget(1);
      } else if (is_name_char(c)) {
        const size_t at = p_;
        unit = alt.size();
        alt.push_back({true, rule_id(parse_name(), at)});
        budget(1);
      } else if (c == '(') {
        const size_t open = p_++;
        if (++depth_ > kMaxNesting) error(open, fmt::format("'(' groups nested deeper than {}", kMaxNesting));
        skip_space(true);
        std::vector<Alt> alts = parse_alternates(true);
        --depth_;
        skip_space(true);
        if (peek() != ')') error(open, "unclosed '('");
        ++p_;
        unit = alt.size();
        alt.push_back({true, new_rule(std::move(alts))});
        budget(2);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (unit == SIZE_MAX) error(p_, fmt::format("'{}' without an element before it", c));
        int min = 0, max = -1;
        if (c == '{') {
          parse_braces(min, max);
        } else {
          ++p_;
          min = c == '+' ? 1 : 0;
          max = c == '?' ? 1 : -1;
        }
        repeat(alt, unit, min, max);
      } else {
        break;
      }
      skip_space(nested);
    }
    return alt;
  }

  int parse_int() {
    const size_t start = p_;
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) error(start, fmt::format("repetition count over {}", kMaxRepeat));
      ++p_;
    }
    if (p_ == start) error(p_, "expected a number in '{...}'");
    return static_cast<int>(v);
  }

  void parse_braces(int& min, int& max) {
    const size_t open = p_++;
    skip_space(false);
    min = parse_int();
    skip_space(false);
    max = min;
    if (peek() == ',') {
      ++p_;
      skip_space(false);
      max = peek() == '}' ? -1 : parse_int();
      skip_space(false);
    }
    if (peek() != '}') error(open, "expected '}' to close '{m,n}'");
    ++p_;
    if (max >= 0 && max < min) error(open, fmt::format("repetition {{{},{}}}: the maximum is below the minimum", min, max));
  }

  // Replaces alt[unit..] (x) by x{min,max} (max -1: unbounded).
  void repeat(Alt& alt, size_t unit, int min, int max) {
    const Alt x(alt.begin() + static_cast<std::ptrdiff_t>(unit), alt.end());
    alt.resize(unit);
    const size_t extra = max < 0 ? 1 : static_cast<size_t>(max - min);
    budget(x.size() * (static_cast<size_t>(min) + extra) + 2 * extra);
    for (int i = 0; i < min; ++i) alt.insert(alt.end(), x.begin(), x.end());
    if (max < 0) {
      const uint32_t r = static_cast<uint32_t>(rules_.size());
      Alt loop = x;
      loop.push_back({true, r});
      new_rule({loop, Alt{}});
      alt.push_back({true, r});
      return;
    }
    int32_t inner = -1;  // R_k ::= x R_{k-1} | ""
    for (int k = 0; k < max - min; ++k) {
      Alt once = x;
      if (inner >= 0) once.push_back({true, static_cast<uint32_t>(inner)});
      inner = static_cast<int32_t>(new_rule({once, Alt{}}));
    }
    if (inner >= 0) alt.push_back({true, static_cast<uint32_t>(inner)});
  }

  // One code point of the grammar text (UTF-8).
  uint32_t parse_utf8() {
    const size_t at = p_;
    const unsigned char b = static_cast<unsigned char>(peek());
    const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || p_ + len > s_.size()) error(at, "invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? b : b & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const unsigned char c = static_cast<unsigned char>(s_[p_ + i]);
      if ((c & 0xC0) != 0x80) error(at, "invalid UTF-8 in the grammar");
      cp = (cp << 6) | (c & 0x3F);
    }
    p_ += len;
    return cp;
  }

  uint32_t parse_hex(int digits) {
    const size_t at = p_;
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = hex_value(peek());
      if (h < 0) error(at, fmt::format("expected {} hex digits in an escape", digits));
      v = v * 16 + static_cast<uint32_t>(h);
      ++p_;
    }
    if (v > kMaxCodePoint) error(at, fmt::format("code point U+{:X} out of range", v));
    return v;
  }

  // A character of a literal or class: an escape or one UTF-8 code point.
  uint32_t parse_char() {
    if (at_end()) error(p_, "unexpected end of the grammar");
    if (peek() != '\\') return parse_utf8();
    const size_t at = p_++;
    const char e = peek();
    ++p_;
    switch (e) {
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      case 't': return '\t';
      case 'r': return '\r';
      case 'n': return '\n';
      case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(e);
      default: error(at, e ? fmt::format("unknown escape '\\{}'", e) : std::string("unfinished escape"));
    }
  }

  void parse_literal(Alt& alt) {
    const size_t open = p_++;
    while (true) {
      if (at_end() || peek() == '\n') error(open, "unterminated literal");
      if (peek() == '"') break;
      const uint32_t cp = parse_char();
      alt.push_back({false, intern_class({{cp, cp}})});
      budget(1);
    }
    ++p_;
  }

  uint32_t parse_class() {
    const size_t open = p_++;
    const bool negate = peek() == '^';
    if (negate) ++p_;
    Ranges r;
    while (true) {
      if (at_end() || peek() == '\n') error(open, "unterminated character class");
      if (peek() == ']') break;
      const size_t at = p_;
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        ++p_;
        hi = parse_char();
        if (hi < lo) error(at, fmt::format("character range U+{:04X}-U+{:04X} is reversed", lo, hi));
      }
      r.push_back({lo, hi});
    }
    ++p_;
    if (r.empty() && !negate) error(open, "empty character class");
    return intern_class(normalize(std::move(r), negate));
  }

  static Ranges normalize(Ranges r, bool negate) {
    std::sort(r.begin(), r.end());
    Ranges merged;
    for (const auto& x : r) {
      if (!merged.empty() && x[0] <= merged.back()[1] + 1) {
        merged.back()[1] = std::max(merged.back()[1], x[1]);
      } else {
        merged.push_back(x);
      }
    }
    if (!negate) return merged;
    Ranges out;
    uint32_t next = 0;
    for (const auto& x : merged) {
      if (x[0] > next) out.push_back({next, x[0] - 1});
      next = x[1] + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    return out;
  }

  uint32_t intern_class(const Ranges& r) {
    const auto [it, added] = class_ids_.emplace(r, static_cast<uint32_t>(classes_.size()));
    if (added) {
      CharClass c;
      c.ranges = r;
      for (uint32_t cp = 0; cp < 128; ++cp)
        for (const auto& x : r)
          if (cp >= x[0] && cp <= x[1]) c.ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
      classes_.push_back(std::move(c));
    }
    return it->second;
  }

  std::vector<bool> nullable() const {
    std::vector<bool> n(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (n[r]) continue;
        for (const Alt& a : rules_[r].alts) {
          if (std::all_of(a.begin(), a.end(), [&](const Sym& s) { return s.is_ref && n[s.id]; })) {
            n[r] = changed = true;
            break;
          }
        }
      }
    }
    return n;
  }

  // A rule that can reach itself before consuming input makes expansion loop: refused.
  void check_left_recursion() const {
    const std::vector<bool> null = nullable();
    std::vector<std::vector<uint32_t>> first(rules_.size());  // r -> rules that can start r
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Alt& a : rules_[r].alts)
        for (const Sym& s : a) {
          if (!s.is_ref) break;
          first[r].push_back(s.id);
          if (!null[s.id]) break;
        }
    std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t start = 0; start < rules_.size(); ++start) {
      if (color[start]) continue;
      path.push_back({start, 0});
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == first[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t s = first[r][next++];
        if (color[s] == 1) left_recursion_error(path, s);
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back({s, 0});
        }
      }
    }
  }

  [[noreturn]] void left_recursion_error(const std::vector<std::pair<uint32_t, size_t>>& path, uint32_t back_to) const {
    std::string chain;
    bool on = false;
    for (const auto& [r, unused] : path) {
      on = on || r == back_to;
      if (!on) continue;
      const std::string& owner = rules_[r].owner;
      if (chain.empty() || chain.substr(chain.rfind(' ') + 1) != owner) chain += (chain.empty() ? "" : " -> ") + owner;
    }
    throw GrammarError(fmt::format("left recursion: rule '{}' can reach itself without consuming input ({} -> {})",
                                   rules_[back_to].owner, chain, rules_[back_to].owner));
  }

  std::shared_ptr<Grammar> flatten(uint32_t root) {
    auto g = std::make_shared<Grammar>();
    g->classes = std::move(classes_);
    g->root = root;
    g->rule_alts.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      g->rule_names.push_back(rules_[r].name);
      for (const Alt& a : rules_[r].alts) {
        g->rule_alts[r].push_back(static_cast<uint32_t>(g->elems.size()));
        for (const Sym& s : a) g->elems.push_back({s.is_ref ? Elem::Ref : Elem::Class, s.id});
        g->elems.push_back({Elem::End, 0});
      }
    }
    return g;
  }

  std::string_view s_;
  size_t p_ = 0;
  std::vector<RuleDef> rules_;
  std::unordered_map<std::string, uint32_t> by_name_;
  std::vector<CharClass> classes_;
  std::map<Ranges, uint32_t> class_ids_;
  std::string owner_;
  size_t n_elems_ = 0;
  int depth_ = 0;  // open ( ) groups
};

}  // namespace

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root) { return Parser(text).run(root); }

}  // namespace strata::grammar
