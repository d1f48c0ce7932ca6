#include <queue>
#include <string>

#include "tokenizer/encoders.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace strata::tok {

namespace {

struct Symbol {
  int prev = -1, next = -1;
  size_t pos = 0;  // byte offset in the word
  size_t len = 0;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left = 0, right = 0;
  int32_t rank = 0;
  size_t len = 0;  // bytes of the merged text, to spot stale entries
};
struct BigramOrder {  // lowest rank first, then leftmost
  bool operator()(const Bigram& a, const Bigram& b) const { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); }
};

class WordMerger {
 public:
  WordMerger(const Vocab& v, const std::string& w) : vocab_(v), word_(w) {}

  void run(std::vector<std::string_view>& pieces) {
    if (vocab_.ignore_merges && vocab_.find(word_) != kNoToken) {
      pieces.push_back(word_);
      return;
    }
    for (size_t off = 0; off < word_.size();) {
      const size_t len = std::min(word_.size() - off, utf8_len(static_cast<uint8_t>(word_[off])));
      const int idx = static_cast<int>(syms_.size());
      syms_.push_back({idx - 1, off + len == word_.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    for (int i = 1; i < static_cast<int>(syms_.size()); ++i) add_bigram(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& l = syms_[b.left];
      Symbol& r = syms_[b.right];
      if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms_[r.next].prev = b.left;
      add_bigram(l.prev, b.left);
      add_bigram(b.left, l.next);
    }
    for (const Symbol& s : syms_)
      if (s.len > 0) pieces.push_back(text(s));
  }

 private:
  std::string_view text(const Symbol& s) const { return std::string_view(word_).substr(s.pos, s.len); }
  void add_bigram(int left, int right) {
    if (left < 0 || right < 0) return;
    const int32_t rank = vocab_.merge_rank(text(syms_[left]), text(syms_[right]));
    if (rank < 0) return;
    queue_.push({left, right, rank, syms_[left].len + syms_[right].len});
  }

  const Vocab& vocab_;
  const std::string& word_;
  std::vector<Symbol> syms_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

void bpe_encode(const Vocab& vocab, const PreTokenizer& pre, std::string_view text, std::vector<int32_t>& out) {
  std::vector<std::string_view> pieces;
  for (const std::string& raw_word : pre.split(text)) {
    const std::string word = bytes_to_unicode(raw_word);
    pieces.clear();
    WordMerger(vocab, word).run(pieces);
    for (std::string_view p : pieces) {
      if (const int32_t id = vocab.find(p); id != kNoToken) {
        out.push_back(id);
        continue;
      }
      // No such token: each single byte of the piece that is a token (others are dropped).
      for (char c : p)
        if (const int32_t id = vocab.find(std::string_view(&c, 1)); id != kNoToken) out.push_back(id);
    }
  }
}

}  // namespace strata::tok
