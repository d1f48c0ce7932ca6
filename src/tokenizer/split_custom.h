#pragma once
// Pre-tokenizer splits that llama.cpp hand-codes instead of running a regex. Each one cuts one
// piece of text (codepoints) into consecutive chunks and appends the chunk lengths to `out`; the
// lengths always add up to the piece's length, whatever the input.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::tok {

using CustomSplitFn = void (*)(const uint32_t* cpts, size_t n, std::vector<size_t>& out);

// Kimi K2 (tokenizer.ggml.pre "kimi-k2"): Han runs, non-Han letter words with an optional leading
// non-letter and contraction, digits in threes, punctuation runs, whitespace (see the rules in
// split_custom.cpp).
void split_kimi_k2(const uint32_t* cpts, size_t n, std::vector<size_t>& out);

// Han ideographs as Kimi K2's splitter counts them (CJK unified, extensions A-F and beyond,
// compatibility ideographs and their supplement).
bool is_han(uint32_t cpt);

}  // namespace strata::tok
