#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

namespace strata::jinja {

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::Text: return "text";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'%}'";
    case Tok::Name: return "name";
    case Tok::String: return "string";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::Op: return "operator";
    case Tok::Eof: return "end of template";
  }
  return "?";
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(std::string_view src, const LexOptions& o) : src_(src), opts_(o) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i)
      if (src[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t i = 0;
    bool strip_next = false;  // previous tag ended with '-'
    while (i <= src_.size()) {
      size_t j = find_tag(i);
      std::string text(src_.substr(i, j - i));
      const bool at_line_start = i == 0 || src_[i - 1] == '\n';
      if (strip_next) {
        text.erase(0, std::find_if(text.begin(), text.end(), [](char c) { return !is_space(c); }) - text.begin());
        strip_next = false;
      }
      if (j >= src_.size()) {
        push_text(std::move(text), i);
        break;
      }
      const char kind = src_[j + 1];
      const SourcePos tag_pos = pos(j);
      size_t k = j + 2;
      const bool strip_before = k < src_.size() && src_[k] == '-';
      const bool keep_before = k < src_.size() && src_[k] == '+';
      if (strip_before || keep_before) ++k;
      if (strip_before) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (opts_.lstrip_blocks && kind != '{' && !keep_before) {
        const size_t nl = text.rfind('\n');
        const size_t from = nl == std::string::npos ? 0 : nl + 1;
        if ((nl != std::string::npos || at_line_start) &&
            std::all_of(text.begin() + from, text.end(), [](char c) { return c == ' ' || c == '\t'; }))
          text.erase(from);
      }
      push_text(std::move(text), i);
      bool strip_after = false;
      if (kind == '#') {
        const size_t end = src_.find("#}", k);
        if (end == std::string_view::npos) fail_at(tag_pos, "unclosed comment '{{#' (missing '#}}')");
        strip_after = end > k && src_[end - 1] == '-';
        i = end + 2;
        if (!strip_after) i = trim_newline(i);
      } else {
        i = lex_tag(k, kind == '{', tag_pos, strip_after);
      }
      strip_next = strip_after;
    }
    Token eof;
    eof.kind = Tok::Eof;
    eof.pos = pos(src_.size());
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  SourcePos pos(size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return SourcePos{static_cast<int>(line), static_cast<int>(off - line_starts_[line - 1] + 1)};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  size_t trim_newline(size_t i) const {
    if (!opts_.trim_blocks) return i;
    if (i < src_.size() && src_[i] == '\n') return i + 1;
    if (i + 1 < src_.size() && src_[i] == '\r' && src_[i + 1] == '\n') return i + 2;
    return i;
  }

  void push_text(std::string text, size_t off) {
    if (text.empty()) return;
    Token t;
    t.kind = Tok::Text;
    t.text = std::move(text);
    t.pos = pos(off);
    toks_.push_back(std::move(t));
  }

  void push(Tok kind, std::string text, size_t off) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = pos(off);
    toks_.push_back(std::move(t));
  }

  // Lexes the inside of a {{ }} or {% %} tag starting at `i`; returns the offset after it.
  size_t lex_tag(size_t i, bool is_var, SourcePos tag_pos, bool& strip_after) {
    push(is_var ? Tok::VarBegin : Tok::BlockBegin, is_var ? "{{" : "{%", i - 2);
    toks_.back().pos = tag_pos;
    const size_t first_tok = toks_.size();
    const char close = is_var ? '}' : '%';
    int depth = 0;  // brace depth: '}}' closing a dict literal does not close the tag
    while (true) {
      while (i < src_.size() && is_space(src_[i])) ++i;
      if (i >= src_.size())
        fail_at(tag_pos, "unclosed '{}' (missing '{}')", is_var ? "{{" : "{%", is_var ? "}}" : "%}");
      const char c = src_[i];
      auto closes_at = [&](size_t p) { return depth == 0 && p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}'; };
      if ((c == '-' || c == '+') && closes_at(i + 1)) {
        strip_after = c == '-';
        push(is_var ? Tok::VarEnd : Tok::BlockEnd, "", i);
        i += 3;
        if (!is_var && c == '+') return i;  // '+%}' keeps the newline
        break;
      }
      if (closes_at(i)) {
        push(is_var ? Tok::VarEnd : Tok::BlockEnd, "", i);
        i += 2;
        break;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = i;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        push(Tok::Name, std::string(src_.substr(i, e - i)), i);
        i = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        i = lex_number(i);
      } else if (c == '"' || c == '\'') {
        i = lex_string(i);
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                     "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|"};
        bool matched = false;
        for (const char* op : kOps) {
          const std::string_view o(op);
          if (src_.substr(i, o.size()) == o) {
            if (o == "{") ++depth;
            if (o == "}" && depth > 0) --depth;
            push(Tok::Op, std::string(o), i);
            i += o.size();
            matched = true;
            break;
          }
        }
        if (!matched) fail_at(pos(i), "unexpected character '{}' inside a tag", c);
      }
    }
    // {% raw %} ... {% endraw %}: the body is literal text.
    if (!is_var && toks_.size() == first_tok + 2 && toks_[first_tok].kind == Tok::Name &&
        toks_[first_tok].text == "raw") {
      toks_.resize(first_tok - 1);
      size_t search = i;
      while (true) {
        const size_t t = src_.find("{%", search);
        if (t == std::string_view::npos) fail_at(tag_pos, "unclosed 'raw' block (missing 'endraw')");
        size_t k = t + 2;
        const bool strip_before = k < src_.size() && src_[k] == '-';
        if (strip_before || (k < src_.size() && src_[k] == '+')) ++k;
        while (k < src_.size() && is_space(src_[k])) ++k;
        if (src_.substr(k, 6) != "endraw") { search = t + 2; continue; }
        k += 6;
        while (k < src_.size() && is_space(src_[k])) ++k;
        bool strip = false;
        if (k < src_.size() && src_[k] == '-') { strip = true; ++k; }
        if (src_.substr(k, 2) != "%}") { search = t + 2; continue; }
        std::string body(src_.substr(strip_after ? i : i, t - i));
        if (strip_after) body.erase(0, std::find_if(body.begin(), body.end(), [](char ch) { return !is_space(ch); }) - body.begin());
        if (strip_before) while (!body.empty() && is_space(body.back())) body.pop_back();
        push_text(std::move(body), i);
        strip_after = strip;
        i = k + 2;
        return strip ? i : trim_newline(i);
      }
    }
    return is_var || strip_after ? i : trim_newline(i);
  }

  size_t lex_number(size_t i) {
    size_t e = i;
    bool is_float = false;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        is_float = true;
        e = x;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
    }
    std::string text(src_.substr(i, e - i));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    push(is_float ? Tok::Float : Tok::Int, text, i);
    try {
      if (is_float) toks_.back().fval = std::stod(text);
      else toks_.back().ival = std::stoll(text);
    } catch (const std::exception&) {
      fail_at(pos(i), "invalid number literal '{}'", text);
    }
    return e;
  }

  size_t lex_string(size_t i) {
    const char q = src_[i];
    std::string out;
    size_t e = i + 1;
    while (true) {
      if (e >= src_.size()) fail_at(pos(i), "unterminated string literal");
      const char c = src_[e];
      if (c == q) break;
      if (c == '\\' && e + 1 < src_.size()) {
        const char n = src_[++e];
        switch (n) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '\\': out += '\\'; break;
          case '\'': out += '\''; break;
          case '"': out += '"'; break;
          case '\n': break;  // line continuation
          case 'u':
          case 'x': {
            const size_t len = n == 'u' ? 4 : 2;
            uint32_t cp = 0;
            try {
              cp = static_cast<uint32_t>(std::stoul(std::string(src_.substr(e + 1, len)), nullptr, 16));
            } catch (const std::exception&) {
              fail_at(pos(e - 1), "invalid \\{} escape in string literal", n);
            }
            e += len;
            if (cp < 0x80) out += static_cast<char>(cp);
            else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
            else {
              out += static_cast<char>(0xE0 | (cp >> 12));
              out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
              out += static_cast<char>(0x80 | (cp & 0x3F));
            }
            break;
          }
          default: out += '\\'; out += n; break;  // Python keeps unknown escapes verbatim
        }
        ++e;
        continue;
      }
      out += c;
      ++e;
    }
    push(Tok::String, std::move(out), i);
    return e + 1;
  }

  std::string_view src_;
  LexOptions opts_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex(std::string_view src, const LexOptions& opts) {
  if (!opts.keep_trailing_newline) {
    if (src.size() >= 2 && src.substr(src.size() - 2) == "\r\n") src.remove_suffix(2);
    else if (!src.empty() && src.back() == '\n') src.remove_suffix(1);
  }
  return Lexer(src, opts).run();
}

}  // namespace strata::jinja
