// VocabIndex: the byte trie of the vocabulary, built once per model.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "grammar/vocab_trie.h"

namespace strata::grammar {

VocabIndex::VocabIndex(std::vector<std::string> token_bytes, std::vector<int32_t> eog_tokens) : trie_(std::make_unique<Trie>()) {
  Trie& t = *trie_;
  const size_t n = token_bytes.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) throw GrammarError(fmt::format("VocabIndex: bad vocabulary size {}", n));
  t.bytes = std::move(token_bytes);
  t.eog_flag.assign(n, 0);
  for (int32_t e : eog_tokens) {
    if (e < 0 || static_cast<size_t>(e) >= n) throw GrammarError(fmt::format("VocabIndex: EOG token {} outside the vocabulary of {}", e, n));
    if (!t.eog_flag[static_cast<size_t>(e)]) t.eog.push_back(e);
    t.eog_flag[static_cast<size_t>(e)] = 1;
  }
  std::sort(t.eog.begin(), t.eog.end());

  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i)
    if (!t.bytes[i].empty() && !t.eog_flag[i]) ids.push_back(static_cast<int32_t>(i));
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return t.bytes[a] < t.bytes[b]; });

  std::vector<uint32_t> path;  // open nodes, path[d] at depth d + 1
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = t.bytes[static_cast<size_t>(id)];
    size_t common = 0;
    if (prev)
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    while (path.size() > common) {  // close the nodes below the common prefix
      t.nodes[path.back()].end = static_cast<uint32_t>(t.nodes.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      if (d + 1 > (1u << 24)) throw GrammarError(fmt::format("VocabIndex: token {} is longer than 16 MiB", id));
      path.push_back(static_cast<uint32_t>(t.nodes.size()));
      t.nodes.push_back({0, static_cast<uint32_t>(t.toks.size()), static_cast<uint32_t>((d + 1) << 8 | static_cast<uint8_t>(s[d]))});
    }
    t.toks.push_back(id);  // belongs to the last node created (s's node: sorted order)
    t.max_depth = std::max(t.max_depth, static_cast<uint32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    t.nodes[path.back()].end = static_cast<uint32_t>(t.nodes.size());
    path.pop_back();
  }
  t.nodes.push_back({0, static_cast<uint32_t>(t.toks.size()), 0});  // sentinel
}

VocabIndex::~VocabIndex() = default;

int32_t VocabIndex::n_vocab() const { return static_cast<int32_t>(trie_->bytes.size()); }

bool VocabIndex::is_eog(int32_t token) const {
  return token >= 0 && static_cast<size_t>(token) < trie_->eog_flag.size() && trie_->eog_flag[static_cast<size_t>(token)];
}

const std::string& VocabIndex::token_bytes(int32_t token) const { return trie_->bytes.at(static_cast<size_t>(token)); }

}  // namespace strata::grammar

namespace strata::grammar {
namespace {

constexpr size_t kCachedClasses = 8;

bool in_ranges(const std::vector<std::array<uint32_t, 2>>& ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp, [](uint32_t c, const std::array<uint32_t, 2>& r) { return c < r[0]; });
  return it != ranges.begin() && cp <= (it - 1)->at(1);
}

// Every byte of `s` belongs to a well-formed UTF-8 code point inside `ranges` (the matcher's rules:
// no overlong forms, no surrogates, nothing above U+10FFFF).
bool all_inside(const std::string& s, const std::vector<std::array<uint32_t, 2>>& ranges) {
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const size_t len = b < 0x80 ? 1 : (b >= 0xC2 && b <= 0xDF) ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b : b & (0x7Fu >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = cp << 6 | (c & 0x3Fu);
    }
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || !in_ranges(ranges, cp)) return false;
    i += len;
  }
  return true;
}

}  // namespace

std::shared_ptr<const VocabIndex::ClassTokens> VocabIndex::class_tokens(const std::vector<std::array<uint32_t, 2>>& ranges) const {
  Trie& t = *trie_;
  {
    std::lock_guard lock(t.class_mu);
    for (auto it = t.classes.begin(); it != t.classes.end(); ++it)
      if (it->first == ranges) {
        auto r = it->second;
        std::rotate(it, it + 1, t.classes.end());  // most recent last
        return r;
      }
  }
  auto ct = std::make_shared<ClassTokens>();
  ct->inside.assign((t.bytes.size() + 63) / 64, 0);
  for (size_t i = 0; i < t.bytes.size(); ++i) {
    if (t.bytes[i].empty() || t.eog_flag[i]) continue;
    if (all_inside(t.bytes[i], ranges)) {
      ct->inside[i >> 6] |= uint64_t{1} << (i & 63);
      ct->n_inside++;
    } else {
      ct->others.push_back(static_cast<int32_t>(i));
    }
  }
  std::lock_guard lock(t.class_mu);
  if (t.classes.size() >= kCachedClasses) t.classes.erase(t.classes.begin());
  t.classes.emplace_back(ranges, ct);
  return ct;
}

}  // namespace strata::grammar
