#pragma once
// Text <-> token ids from GGUF metadata alone, matching llama.cpp's llama_tokenize /
// llama_token_to_piece / llama_detokenize token for token and byte for byte.
//
//   auto tok = Tokenizer::from_gguf(model);
//   auto ids = tok->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
//   std::string text = tok->decode(ids, /*remove_special=*/false, /*unparse_special=*/false);
//
// Special tokens (control, user-defined, unknown) are found in the raw text before
// pre-tokenization, longest text first; with parse_special=false only user-defined ones are.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace strata {
class GgufModel;
}

namespace strata::tok {

class PreTokenizer;

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_gguf(const GgufModel& m);
  explicit Tokenizer(std::unique_ptr<Vocab> vocab);
  ~Tokenizer();

  // add_special: BOS/EOS as the vocab's add_bos/add_eos say. parse_special: control tokens in
  // the text become their ids (otherwise they are tokenized as plain text).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // The bytes of one token; control/unknown tokens are empty unless `special`.
  std::string token_to_piece(int32_t id, bool special) const;
  // remove_special: drop a leading BOS / trailing EOS the vocab adds. unparse_special: render
  // control tokens as their text.
  std::string decode(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const;

  int32_t n_vocab() const { return vocab_->n_tokens(); }
  VocabType type() const { return vocab_->type; }
  int32_t bos() const { return vocab_->special.bos; }
  int32_t eos() const { return vocab_->special.eos; }
  int32_t eot() const { return vocab_->special.eot; }
  int32_t pad() const { return vocab_->special.pad; }
  int32_t unk() const { return vocab_->special.unk; }
  bool add_bos() const { return vocab_->add_bos; }
  bool add_eos() const { return vocab_->add_eos; }
  bool is_eog(int32_t id) const { return vocab_->eog.count(id) != 0; }
  bool is_control(int32_t id) const { return vocab_->valid(id) && (vocab_->tokens[id].attr & kAttrControl); }
  const std::string& token_text(int32_t id) const { return vocab_->token(id).text; }
  const Vocab& vocab() const { return *vocab_; }

 private:
  struct Fragment {
    int32_t token = kNoToken;  // a special token, or raw text [offset, offset + length)
    size_t offset = 0, length = 0;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<PreTokenizer> pre_;  // BPE only
  std::vector<std::string> pieces_;    // token_to_piece(id, special=true), cached
};

// Incremental detokenization for streaming: holds back the bytes of a UTF-8 sequence that a later
// token completes, so every chunk returned is whole characters.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool special = false) : tok_(tok), special_(special) {}
  // Appends the token's piece; returns the text now complete (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is held back (an incomplete sequence at the end of the stream) and resets.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

// Length of the longest prefix of `s` that does not end inside an incomplete UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace strata::tok
