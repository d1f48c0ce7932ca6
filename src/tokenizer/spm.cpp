#include <map>
#include <queue>
#include <string>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace strata::tok {

namespace {

struct Symbol {
  int prev = -1, next = -1;
  size_t pos = 0;
  size_t len = 0;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left = 0, right = 0;
  float score = 0;
  size_t len = 0;
};
struct BigramOrder {  // highest score first, then leftmost
  bool operator()(const Bigram& a, const Bigram& b) const { return a.score < b.score || (a.score == b.score && a.left > b.left); }
};

class SpmSession {
 public:
  SpmSession(const Vocab& v, std::string_view text) : vocab_(v), text_(text) {}

  void run(std::vector<int32_t>& out) {
    for (size_t off = 0; off < text_.size();) {
      const size_t len = std::min(text_.size() - off, utf8_len(static_cast<uint8_t>(text_[off])));
      const int idx = static_cast<int>(syms_.size());
      syms_.push_back({idx - 1, off + len == text_.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    for (int i = 1; i < static_cast<int>(syms_.size()); ++i) add_bigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = syms_[b.left];
      Symbol& r = syms_[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms_[r.next].prev = b.left;
      add_bigram(l.prev, b.left);
      add_bigram(b.left, l.next);
    }
    for (int i = syms_.empty() ? -1 : 0; i != -1; i = syms_[i].next) resegment(syms_[i], out);
  }

 private:
  std::string_view text(const Symbol& s) const { return text_.substr(s.pos, s.len); }

  void add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view merged = text_.substr(syms_[left].pos, syms_[left].len + syms_[right].len);
    const int32_t id = vocab_.find(merged);
    if (id == kNoToken) return;
    queue_.push({left, right, vocab_.tokens[id].score, merged.size()});
    rev_merge_[std::string(merged)] = {left, right};
  }

  // A symbol that is no token splits back into the pair that formed it, else into bytes.
  void resegment(const Symbol& s, std::vector<int32_t>& out, int depth = 0) {
    const std::string_view t = text(s);
    if (const int32_t id = vocab_.find(t); id != kNoToken) {
      out.push_back(id);
      return;
    }
    auto it = rev_merge_.find(t);
    if (it == rev_merge_.end() || depth > 64) {
      for (char c : t) out.push_back(vocab_.byte_token(static_cast<uint8_t>(c)));
      return;
    }
    resegment(syms_[it->second.first], out, depth + 1);
    resegment(syms_[it->second.second], out, depth + 1);
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> syms_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
  std::map<std::string, std::pair<int, int>, std::less<>> rev_merge_;
};

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) { SpmSession(vocab, text).run(out); }

}  // namespace strata::tok
