#pragma once
// The vocabulary as a byte trie in preorder (VocabIndex::Trie): node i's subtree is [i, end[i]),
// so a walk skips a rejected subtree with one jump. Tokens that decode to no bytes (control
// tokens) are not in it; EOG tokens are listed apart.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace strata::grammar {

struct VocabIndex::Trie {
  std::vector<std::string> bytes;  // [n_vocab]
  std::vector<uint8_t> eog_flag;   // [n_vocab]
  std::vector<int32_t> eog;        // EOG token ids
  // Nodes in preorder; node i is reached from its parent (the nearest earlier node of depth - 1)
  // by its byte. The last node is a sentinel (tok_begin only).
  struct Node {
    uint32_t end;        // one past the last node of the subtree
    uint32_t tok_begin;  // tokens ending here: toks[tok_begin .. next node's tok_begin)
    uint32_t depth_byte; // depth << 8 | byte; depth 1 for children of the root
    uint32_t depth() const { return depth_byte >> 8; }
    uint8_t byte() const { return static_cast<uint8_t>(depth_byte); }
  };
  std::vector<Node> nodes;  // [n_nodes + 1]
  std::vector<int32_t> toks;
  uint32_t max_depth = 0;
  // VocabIndex::class_tokens' cache (most recent last).
  std::mutex class_mu;
  std::vector<std::pair<std::vector<std::array<uint32_t, 2>>, std::shared_ptr<const ClassTokens>>> classes;
};

}  // namespace strata::grammar
