#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "tokenizer/encoders.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace strata::tok {

namespace {

constexpr std::string_view kSpmSpace = "\xe2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0;;) {
    const size_t hit = s.find(from, pos);
    out.append(s.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos));
    if (hit == std::string_view::npos) return out;
    out.append(to);
    pos = hit + from.size();
  }
}

// Byte-level BPE token text back to bytes; a codepoint standing for no byte is kept visible.
std::string bpe_token_bytes(const std::string& text) {
  std::string out;
  for (uint32_t c : utf8_decode(text)) {
    const int b = cpt_to_byte(c);
    if (b >= 0) {
      out += static_cast<char>(b);
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (char u : utf8_encode(c)) out += fmt::format("{:02x}", static_cast<uint8_t>(u));
    out += text + "]";
  }
  return out;
}

// llama.cpp's clean_spaces passes over detokenized text (" ?" -> "?", " ' " -> "'", " 's" -> "'s"...),
// kept in its in-place form so that its edge cases match.
void clean_spaces(std::string& t) {
  // first pass: no space before ? ! . ,
  int total1 = static_cast<int>(t.size()), total = total1 ? 1 : 0;
  for (int i = 1; i < total1; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
    t[total++] = x;
  }
  // second pass: " ' " -> "'"
  const int total2 = total;
  total = total ? 1 : 0;
  for (int i = 1; i < total2; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < total2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
      total--;
      t[++i] = '\0';
    }
    t[total++] = x;
  }
  // third pass: " 's" " 'm" " 're" " 've" lose their space
  const int total3 = total;
  total = total ? 1 : 0;
  for (int i = 1; i < total3; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        total--;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
      }
    }
    t[total++] = x;
  }
  t.resize(static_cast<size_t>(total));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufModel& m) { return std::make_unique<Tokenizer>(Vocab::from_gguf(m)); }

Tokenizer::Tokenizer(std::unique_ptr<Vocab> vocab) : vocab_(std::move(vocab)) {
  STRATA_CHECK(vocab_ != nullptr, "Tokenizer: no vocab");
  if (vocab_->type == VocabType::Bpe) pre_ = std::make_unique<PreTokenizer>(find_pretokenizer(vocab_->pre));
  pieces_.resize(vocab_->tokens.size());
  for (int32_t id = 0; id < vocab_->n_tokens(); ++id) {
    const TokenData& t = vocab_->tokens[id];
    if (t.attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      pieces_[id] = t.text;
    } else if (t.attr & kAttrNormal) {
      pieces_[id] = vocab_->type == VocabType::Bpe ? bpe_token_bytes(t.text) : replace_all(t.text, kSpmSpace, " ");
    } else if ((t.attr & kAttrByte) && vocab_->type == VocabType::Spm) {
      pieces_[id] = std::string(1, static_cast<char>(vocab_->token_byte(id)));
    }
  }
}

Tokenizer::~Tokenizer() = default;

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : vocab_->special_tokens) {
    const TokenData& tok = vocab_->tokens[id];
    if (!parse_special && (tok.attr & (kAttrControl | kAttrUnknown))) continue;  // user-defined ones stay
    const std::string_view needle = tok.text;
    next.clear();
    bool changed = false;
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset;
      const size_t end = f.offset + f.length;
      while (true) {
        const size_t hit = text.substr(0, end).find(needle, off);
        if (hit == std::string_view::npos) {
          if (end > off) next.push_back({kNoToken, off, end - off});
          break;
        }
        changed = true;
        size_t left_len = hit - off;
        if (tok.attr & kAttrLstrip)
          while (left_len > 0 && is_ascii_space(text[off + left_len - 1])) --left_len;
        if (left_len > 0) next.push_back({kNoToken, off, left_len});
        next.push_back({id, 0, 0});
        off = hit + needle.size();
        if (off >= end) break;
        if (tok.attr & kAttrRstrip)
          while (off < end && is_ascii_space(text[off])) ++off;
      }
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  const std::vector<Fragment> frags = partition(text, parse_special);
  const Vocab& v = *vocab_;
  if (add_special && v.add_bos) out.push_back(v.special.bos);
  if (v.type == VocabType::Spm) {
    bool prev_special = true;  // the first fragment gets the space prefix too
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      std::string raw = (v.add_space_prefix && prev_special) ? " " : "";
      raw.append(text.substr(f.offset, f.length));
      spm_encode(v, replace_all(raw, " ", kSpmSpace), out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token != kNoToken)
        out.push_back(f.token);
      else
        bpe_encode(v, *pre_, text.substr(f.offset, f.length), out);
    }
  }
  if (add_special && v.add_eos) out.push_back(v.special.eos);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  const TokenData& t = vocab_->token(id);
  if (!special && (t.attr & (kAttrControl | kAttrUnknown))) return {};
  return pieces_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const {
  const Vocab& v = *vocab_;
  size_t begin = 0, end = ids.size();
  bool remove_space = v.add_space_prefix;  // the space the encoder prefixed
  if (remove_special && v.add_bos && end > begin && ids[begin] == v.special.bos) {
    remove_space = false;
    ++begin;
  }
  if (remove_special && v.add_eos && end > begin && ids[end - 1] == v.special.eos) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    std::string piece = token_to_piece(ids[i], unparse_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  if (v.clean_spaces) clean_spaces(out);
  return out;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a sequence that runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte
    const size_t need = (b & 0x80) == 0 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, special_);
  const size_t keep = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, keep);
  pending_.erase(0, keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace strata::tok
