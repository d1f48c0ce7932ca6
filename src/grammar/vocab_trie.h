#pragma once
// The vocabulary as a byte trie in preorder (VocabIndex::Trie): node i's subtree is [i, end[i]),
// so a walk skips a rejected subtree with one jump. Tokens that decode to no bytes (control
// tokens) are not in it; EOG tokens are listed apart.
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace strata::grammar {

struct VocabIndex::Trie {
  std::vector<std::string> bytes;  // [n_vocab]
  std::vector<uint8_t> eog_flag;   // [n_vocab]
  std::vector<int32_t> eog;        // EOG token ids
  // Nodes in preorder; node i is reached from its parent (the nearest earlier node of depth - 1)
  // by byte[i].
  std::vector<uint8_t> byte;        // [n_nodes]
  std::vector<uint32_t> depth;      // [n_nodes], 1 for children of the root
  std::vector<uint32_t> end;        // [n_nodes]: one past the last node of the subtree
  std::vector<uint32_t> tok_begin;  // [n_nodes + 1]: tokens ending at node i are toks[tok_begin[i] .. tok_begin[i + 1])
  std::vector<int32_t> toks;
  uint32_t max_depth = 0;
};

}  // namespace strata::grammar
