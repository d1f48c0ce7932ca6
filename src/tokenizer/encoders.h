#pragma once
// The two subword algorithms, applied to one fragment of raw text (special tokens already split off).
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata::tok {

class Vocab;
class PreTokenizer;

// Byte-level BPE: pre-tokenize, map bytes to GPT-2 unicode, merge by rank (lowest first, ties
// leftmost); a leftover symbol that is no token falls back to its single bytes when those are tokens.
void bpe_encode(const Vocab& vocab, const PreTokenizer& pre, std::string_view text, std::vector<int32_t>& out);

// SentencePiece-style: `text` has spaces already escaped as U+2581. Merges the adjacent pair whose
// merged text is the highest-scoring token (ties leftmost); pieces that are no token become
// <0xXX> byte tokens.
void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

}  // namespace strata::tok
