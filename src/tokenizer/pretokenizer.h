#pragma once
// Byte-level BPE pre-tokenizer: splits text into words with the regex list llama.cpp uses for the
// vocab's tokenizer.ggml.pre. Matching reproduces llama.cpp's semantics exactly:
//  - a regex that uses \p{N} \p{L} \p{P} \p{M} \p{S} runs (PCRE2, byte mode) over a "collapsed"
//    text holding one byte per codepoint: ASCII as is, other whitespace as \v, other codepoints as a
//    byte standing for their category (its quirks included: ASCII '~' is not \p{S});
//  - any other regex runs (PCRE2, UTF mode) over the codepoints with non-ASCII whitespace as \v;
//  - each regex splits the pieces left by the previous one; unmatched gaps become pieces too;
//  - a few pre-tokenizers (kimi-k2) are hand-coded splits instead (split_custom.h).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/split_custom.h"

namespace strata::tok {

// What a tokenizer.ggml.pre name implies besides its regexes (llama.cpp's per-pre defaults).
struct PreTokenizerSpec {
  std::vector<std::string> names;    // tokenizer.ggml.pre values that select it
  std::vector<std::string> regexes;  // applied in order
  bool ignore_merges = false;        // a word that is a whole token is emitted without merging
  bool clean_spaces = true;          // detokenize removes " ," " ." " 's" ... (llama.cpp clean_spaces)
  bool add_bos = false;              // default for tokenizer.ggml.add_bos_token
  bool no_default_bos = false;       // no BOS id unless tokenizer.ggml.bos_token_id names one
  CustomSplitFn custom = nullptr;    // a hand-coded split applied before the regexes
};

// The spec for a pre name ("" selects "default"); throws strata::Error for an unknown name.
const PreTokenizerSpec& find_pretokenizer(std::string_view pre_name);
// Names accepted by find_pretokenizer, comma separated (for error messages).
std::string known_pretokenizers();

class PreTokenizer {
 public:
  explicit PreTokenizer(const PreTokenizerSpec& spec);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Words of `text` as UTF-8 (malformed input bytes come back as U+FFFD), in order.
  std::vector<std::string> split(std::string_view text) const;
  const PreTokenizerSpec& spec() const { return spec_; }

 private:
  struct Rule;
  const PreTokenizerSpec& spec_;
  std::vector<std::unique_ptr<Rule>> rules_;
  bool any_collapsed_ = false;
  bool any_wide_ = false;
};

// The collapsed form of a regex (exposed for tests); returns false when it uses no category.
bool collapse_regex(std::string_view regex, std::string& out);

}  // namespace strata::tok
