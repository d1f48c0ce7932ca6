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
