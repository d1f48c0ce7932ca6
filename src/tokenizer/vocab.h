#pragma once
// Tokenizer vocabulary read from GGUF metadata (tokenizer.ggml.*), with llama.cpp's defaults when
// keys are absent and its by-text detection of end-of-turn / fill-in-the-middle tokens.
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata {
class GgufModel;
}

namespace strata::tok {

inline constexpr int32_t kNoToken = -1;

enum class VocabType { Spm, Bpe };  // tokenizer.ggml.model "llama" / "gpt2"
const char* vocab_type_name(VocabType t);

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// Token attributes (bit set), as llama.cpp derives them from the token type.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,  // strip whitespace left of the token when matching it in text
  kAttrRstrip = 1u << 8,  // ... and right of it
};

struct TokenData {
  std::string text;  // as stored (byte-level BPE: GPT-2 unicode form; SPM: spaces as U+2581)
  float score = 0;
  uint32_t attr = kAttrNormal;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct SpecialIds {
  int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken, sep = kNoToken,
          pad = kNoToken, mask = kNoToken;
  int32_t fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken, fim_pad = kNoToken, fim_rep = kNoToken,
          fim_sep = kNoToken;
};

class Vocab {
 public:
  // Reads tokenizer.ggml.* from the model; throws strata::Error on missing or inconsistent data,
  // an unsupported tokenizer.ggml.model or an unknown tokenizer.ggml.pre.
  static std::unique_ptr<Vocab> from_gguf(const GgufModel& m);

  VocabType type = VocabType::Bpe;
  std::string pre;  // tokenizer.ggml.pre (BPE)
  std::vector<TokenData> tokens;
  SpecialIds special;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: prefix text with a space (tokenizer.ggml.add_space_prefix)
  bool clean_spaces = true;       // detokenize cleans " ," " 's" ...
  bool ignore_merges = false;     // BPE: whole-token words skip merging
  std::set<int32_t> eog;          // end-of-generation tokens
  // Tokens matched in raw text before pre-tokenization (control, user-defined, unknown),
  // longest text first.
  std::vector<int32_t> special_tokens;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
  const TokenData& token(int32_t id) const;
  // The id of a token text; kNoToken when absent (duplicates: the last one wins, as llama.cpp).
  int32_t find(std::string_view text) const;
  // BPE merge rank of (left, right); -1 when they do not merge.
  int32_t merge_rank(std::string_view left, std::string_view right) const;
  // SPM byte-fallback token for a byte (<0xXX>, else the byte itself); throws if neither exists.
  int32_t byte_token(uint8_t b) const;
  // SPM: the byte a BYTE token (<0xXX>) stands for.
  uint8_t token_byte(int32_t id) const;

 private:
  StringMap token_to_id_;
  StringMap merge_ranks_;  // "left right"
  void finish_specials(const GgufModel& m);
};

}  // namespace strata::tok
