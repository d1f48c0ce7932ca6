#pragma once
// Constrained decoding: GBNF grammars (llama.cpp's dialect), JSON Schema -> GBNF, and a per-token
// vocabulary mask.
//
//   auto g = parse_gbnf(json_schema_to_gbnf(schema));        // once per request (or cached)
//   auto vocab = std::make_shared<VocabIndex>(bytes, eog);   // once per model
//   Matcher m(g, vocab);
//   m.apply(logits);  sample;  m.accept(token);  ...         // per step
//
// A Grammar is immutable and may be shared by threads; a VocabIndex too. A Matcher belongs to one
// request (not thread-safe). Matching runs over Unicode code points of UTF-8 text; a token may end
// inside a code point (its partial bytes are carried to the next token).
//
// Limits (never unbounded memory): at most kMaxStacks parse stacks at once (a more ambiguous
// grammar throws GrammarError from the matcher), parse stacks deeper than kMaxStackDepth are
// dropped (nesting beyond it is not allowed), at most kMaxElements grammar elements after
// expanding repetitions, repetition counts up to kMaxRepeat, ( ) groups and JSON-Schema
// subschemas nested at most kMaxNesting deep (every walk over them is recursive).
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace strata::grammar {

inline constexpr size_t kMaxStacks = 1024;
inline constexpr size_t kMaxStackDepth = 2048;
inline constexpr size_t kMaxElements = 1u << 20;
inline constexpr int kMaxRepeat = 10000;
inline constexpr int kMaxNesting = 256;

// The message names line:col of the grammar text, or the JSON-Schema path and keyword
// ("unsupported JSON Schema keyword 'patternProperties' at /properties/x").
struct GrammarError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Grammar;  // compiled, immutable, shareable across threads

// llama.cpp's GBNF dialect: rules `name ::= ...`, "literals" with escapes, [char classes] incl.
// negation and ranges, ( ) groups, | alternatives, * + ? and {m}, {m,}, {m,n}, # comments, `.` any
// char. Undefined rule / left recursion / bad syntax -> GrammarError.
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

// A whole grammar with root rule `root` (GrammarError for unsupported keywords).
std::string json_schema_to_gbnf(const nlohmann::json& schema);
// Rules defining `name` (and helpers named `name-...`) to embed in a larger grammar.
std::string json_schema_rules(const nlohmann::json& schema, const std::string& name);
// response_format {"type":"json_object"}: any JSON object.
std::string json_object_gbnf();

// Built once per model, shared by all matchers.
class VocabIndex {
 public:
  // token_bytes[id]: the raw bytes the token decodes to ("" for control tokens, which the grammar
  // never allows except EOG at the end).
  VocabIndex(std::vector<std::string> token_bytes, std::vector<int32_t> eog_tokens);
  ~VocabIndex();
  VocabIndex(const VocabIndex&) = delete;
  VocabIndex& operator=(const VocabIndex&) = delete;

  int32_t n_vocab() const;
  bool is_eog(int32_t token) const;
  const std::string& token_bytes(int32_t token) const;

  struct Trie;
  const Trie& trie() const { return *trie_; }

  // The tokens whose bytes are whole UTF-8 code points all inside `ranges` (sorted, disjoint,
  // inclusive; EOG and empty tokens never), as a bitmap, and every other non-empty non-EOG token.
  // Computed once per class and kept (a few classes, thread-safe): the matcher answers a state that
  // loops on a class (inside a JSON string: any char but " \ and controls) with the bitmap plus a
  // walk of the others only.
  struct ClassTokens {
    std::vector<uint64_t> inside;  // [ceil(n_vocab / 64)]
    size_t n_inside = 0;
    std::vector<int32_t> others;
  };
  std::shared_ptr<const ClassTokens> class_tokens(const std::vector<std::array<uint32_t, 2>>& ranges) const;

 private:
  std::unique_ptr<Trie> trie_;
};

// One per request; not thread-safe.
class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabIndex> vocab);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  // logits[n_vocab]: -INFINITY for every token the grammar does not allow next; EOG allowed iff
  // the grammar can end here. Throws GrammarError when no token at all is allowed (a dead end).
  void apply(float* logits) const;
  // Advance; false (state unchanged) if not allowed. An EOG token is allowed iff can_end(), after
  // it only EOG is.
  bool accept(int32_t token);
  // Advance over text (e.g. a forced prefix); false (state unchanged) if not allowed.
  bool accept_bytes(std::string_view bytes);
  // The text so far is a complete sentence of the grammar.
  bool can_end() const;
  // Nothing but the end is possible.
  bool must_end() const;

  // The tokens apply() allows, ascending (EOG included when allowed). For tests and tools.
  std::vector<int32_t> allowed_tokens() const;
  // Off: every mask is computed by the plain vocabulary walk (no class bitmaps, no shared masks).
  // For tests comparing the fast paths with it; results are the same either way.
  void set_fast_masks(bool on);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::grammar
