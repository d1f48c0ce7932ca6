// Token-level matching: masks over a toy vocabulary (multi-byte tokens, tokens ending inside a code
// point, EOG only when complete) and over the real Qwen3 vocabulary (151669 tokens): JSON text
// tokenized by the model's tokenizer is allowed token by token, random walks over allowed tokens
// end in valid JSON, and the mask agrees with accept() token by token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "../fixture_sets.h"
#include "gguf/gguf_file.h"
#include "grammar_test_util.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;
using strata::grammar::GrammarError;
using strata::grammar::json_object_gbnf;
using strata::grammar::json_schema_to_gbnf;
using strata::grammar::Matcher;
using strata::grammar::parse_gbnf;
using strata::grammar::VocabIndex;

namespace {

namespace fs = std::filesystem;

std::shared_ptr<const VocabIndex> toy_vocab(std::vector<std::string> tokens) {
  tokens.push_back("");  // the last token is EOG
  const int32_t eog = static_cast<int32_t>(tokens.size() - 1);
  return std::make_shared<const VocabIndex>(std::move(tokens), std::vector<int32_t>{eog});
}

std::vector<std::string> texts(const VocabIndex& v, const std::vector<int32_t>& ids) {
  std::vector<std::string> r;
  for (int32_t id : ids) r.push_back(v.is_eog(id) ? "<eog>" : v.token_bytes(id));
  return r;
}

using Strings = std::vector<std::string>;

}  // namespace

TEST(GrammarMatcher, ToyVocabularyMask) {
  const auto v = toy_vocab({"a", "b", "ab", "abc", "c", "ba", "", "cc"});  // token 6: a control token
  Matcher m(parse_gbnf(R"(root ::= "ab" "c"*)"), v);
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"a", "ab", "abc"}));
  EXPECT_FALSE(m.can_end());
  std::vector<float> logits(v->n_vocab(), 1.0f);
  m.apply(logits.data());
  for (int32_t t = 0; t < v->n_vocab(); ++t) EXPECT_EQ(std::isfinite(logits[t]), t == 0 || t == 2 || t == 3) << t;
  EXPECT_FALSE(m.accept(1));  // "b": not allowed, state unchanged
  EXPECT_FALSE(m.accept(6));  // control token
  EXPECT_FALSE(m.accept(8));  // EOG before the end
  EXPECT_TRUE(m.accept(0));
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"b"}));
  EXPECT_TRUE(m.accept(1));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"c", "cc", "<eog>"}));
  EXPECT_TRUE(m.accept(7));
  EXPECT_TRUE(m.accept(8));  // EOG: the end
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accept(4));
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"<eog>"}));
}

TEST(GrammarMatcher, MustEndAndDeadEnd) {
  const auto v = toy_vocab({"x", "y"});
  Matcher m(parse_gbnf(R"(root ::= "x")"), v);
  EXPECT_FALSE(m.must_end());
  EXPECT_TRUE(m.accept(0));
  EXPECT_TRUE(m.must_end());
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"<eog>"}));
  Matcher dead(parse_gbnf(R"(root ::= "z")"), v);  // no token can write z
  std::vector<float> logits(v->n_vocab(), 0.0f);
  EXPECT_THROW(dead.apply(logits.data()), GrammarError);
}

TEST(GrammarMatcher, TokensEndingInsideACodePoint) {
  // é = C3 A9, 中 = E4 B8 AD
  const auto v = toy_vocab({"\xC3", "\xA9", "\xC3\xA9", "\xE4", "\xB8\xAD", "x", "\xA9x", "\xE4\xB8", "\xAD", "\xFF", "\x80"});
  Matcher m(parse_gbnf("root ::= \"\xC3\xA9\" [a-z\xE4\xB8\xAD]+"), v);
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"\xC3", "\xC3\xA9"}));  // not E4: no U+4000.. code point allowed first
  EXPECT_TRUE(m.accept(0));
  EXPECT_FALSE(m.can_end());
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"\xA9", "\xA9x"}));
  EXPECT_TRUE(m.accept(6));
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"\xE4", "x", "\xE4\xB8", "<eog>"}));
  EXPECT_TRUE(m.accept(7));
  EXPECT_FALSE(m.can_end());  // inside a code point: no end
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"\xAD"}));
  EXPECT_TRUE(m.accept(8));
  EXPECT_TRUE(m.can_end());
  // Invalid UTF-8 is never allowed, even by `.`.
  Matcher any(parse_gbnf("root ::= .*"), v);
  const auto allowed = texts(*v, any.allowed_tokens());
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), "\xFF"), 0);
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), "\x80"), 0);
  EXPECT_EQ(std::count(allowed.begin(), allowed.end(), "\xA9"), 0);
}

TEST(GrammarMatcher, AcceptBytesForcedPrefix) {
  const auto v = toy_vocab({"{", "}", "\"", "a", ":", "1", " "});
  Matcher m(parse_gbnf(json_object_gbnf()), v);
  EXPECT_FALSE(m.accept_bytes("{\"a\"::"));  // fails on the second ':', state unchanged
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"{"}));
  EXPECT_TRUE(m.accept_bytes("{\"a\": 1"));
  EXPECT_EQ(texts(*v, m.allowed_tokens()), (Strings{"}", "1", " "}));
}

namespace {

struct Qwen {
  std::unique_ptr<strata::tok::Tokenizer> tok;
  std::shared_ptr<const VocabIndex> vocab;
};

// The Qwen3 vocabulary as a VocabIndex, or nullptr when the fixture is missing.
const Qwen* qwen() {
  static const Qwen q = [] {
    const char* e = std::getenv("STRATA_FIXTURES");
    const fs::path path = fs::path(e && *e ? e : STRATA_FIXTURES_DIR) / "tokenizer-qwen3" / "vocab.gguf";
    Qwen r;
    if (!fs::exists(path)) return r;
    auto model = strata::GgufModel::open(path.string());
    r.tok = strata::tok::Tokenizer::from_gguf(*model);
    std::vector<std::string> bytes;
    std::vector<int32_t> eog;
    for (int32_t id = 0; id < r.tok->n_vocab(); ++id) {
      bytes.push_back(r.tok->is_control(id) ? std::string() : r.tok->token_to_piece(id, false));
      if (r.tok->is_eog(id)) eog.push_back(id);
    }
    r.vocab = std::make_shared<const VocabIndex>(std::move(bytes), std::move(eog));
    return r;
  }();
  return q.vocab ? &q : nullptr;
}

const json kSchema = {{"type", "object"},
                      {"properties",
                       {{"name", {{"type", "string"}, {"maxLength", 12}}},
                        {"count", {{"type", "integer"}}},
                        {"color", {{"enum", {"red", "green", "blue"}}}},
                        {"tags", {{"type", "array"}, {"maxItems", 3}, {"items", {{"type", "string"}, {"maxLength", 5}}}}},
                        {"ok", {{"type", "boolean"}}}}},
                      {"required", {"name", "count", "color"}}};

}  // namespace

TEST(GrammarMatcher, Qwen3TokenizedJsonIsAllowedTokenByToken) {
  const Qwen* q = qwen();
  if (!q) STRATA_MISSING_FIXTURE("tokenizer-qwen3/vocab.gguf");
  ASSERT_EQ(q->vocab->n_vocab(), 151669);
  const std::string text = "{\"name\": \"caf\xC3\xA9 \xE4\xB8\xAD\", \"count\": -42, \"color\": \"green\", \"tags\": [\"a\", \"bc\"]}";
  for (const auto& g : {parse_gbnf(json_object_gbnf()), parse_gbnf(json_schema_to_gbnf(kSchema))}) {
    Matcher m(g, q->vocab);
    const std::vector<int32_t> ids = q->tok->encode(text, false, false);
    ASSERT_GT(ids.size(), 10u);
    for (int32_t id : ids) {
      const std::vector<int32_t> allowed = m.allowed_tokens();
      EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), id)) << "token " << id << " '" << q->vocab->token_bytes(id) << "'";
      ASSERT_TRUE(m.accept(id));
    }
    EXPECT_TRUE(m.can_end());
    const std::vector<int32_t> allowed = m.allowed_tokens();
    EXPECT_TRUE(std::binary_search(allowed.begin(), allowed.end(), q->tok->eos()));
  }
}

TEST(GrammarMatcher, Qwen3RandomWalksEndInValidJson) {
  const Qwen* q = qwen();
  if (!q) STRATA_MISSING_FIXTURE("tokenizer-qwen3/vocab.gguf");
  const auto g = parse_gbnf(json_schema_to_gbnf(kSchema));
  std::mt19937 rng(11);
  for (int walk = 0; walk < 6; ++walk) {
    Matcher m(g, q->vocab);
    std::string text;
    bool ended = false;
    for (int step = 0; step < 400 && !ended; ++step) {
      std::vector<float> logits(static_cast<size_t>(q->vocab->n_vocab()), 0.0f);
      m.apply(logits.data());
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < q->vocab->n_vocab(); ++t)
        if (std::isfinite(logits[static_cast<size_t>(t)])) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty());
      EXPECT_EQ(allowed, m.allowed_tokens());
      if (m.can_end()) {  // the end is among them; take it with probability 1/3
        ASSERT_TRUE(std::binary_search(allowed.begin(), allowed.end(), q->tok->eos()));
        if (m.must_end() || rng() % 3 == 0) {
          ASSERT_TRUE(m.accept(q->tok->eos()));
          ended = true;
          break;
        }
      }
      int32_t t;
      do t = allowed[rng() % allowed.size()];
      while (q->vocab->is_eog(t));
      ASSERT_TRUE(m.accept(t)) << t;
      text += q->vocab->token_bytes(t);
    }
    ASSERT_TRUE(ended) << text;
    const json v = json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << text;
    EXPECT_TRUE(v.is_object() && v.contains("name") && v.contains("count") && v.contains("color")) << text;
    EXPECT_TRUE(v["count"].is_number_integer()) << text;
    EXPECT_TRUE(v["color"] == "red" || v["color"] == "green" || v["color"] == "blue") << text;
    EXPECT_LE(v.value("tags", json::array()).size(), 3u) << text;
    for (const auto& [k, unused] : v.items()) EXPECT_TRUE(kSchema["properties"].contains(k)) << text;
  }
}

TEST(GrammarMatcher, Qwen3MaskAgreesWithAccept) {
  const Qwen* q = qwen();
  if (!q) STRATA_MISSING_FIXTURE("tokenizer-qwen3/vocab.gguf");
  const auto g = parse_gbnf(json_schema_to_gbnf(kSchema));
  const std::string prefixes[] = {"", "{", "{\"name\": \"ab", "{\"name\":\"x\",\"count\":1", "{\"name\":\"x\",\"count\":1,\"color\":\"r"};
  std::mt19937 rng(3);
  for (const std::string& prefix : prefixes) {
    Matcher m(g, q->vocab);
    ASSERT_TRUE(m.accept_bytes(prefix));
    const std::vector<int32_t> allowed = m.allowed_tokens();
    // Every allowed token is accepted; random tokens are accepted iff allowed.
    std::vector<int32_t> probe(allowed.begin(), allowed.begin() + static_cast<long>(std::min<size_t>(allowed.size(), 50)));
    for (int i = 0; i < 300; ++i) probe.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(q->vocab->n_vocab())));
    for (int32_t t : probe) {
      Matcher fresh(g, q->vocab);
      ASSERT_TRUE(fresh.accept_bytes(prefix));
      EXPECT_EQ(fresh.accept(t), std::binary_search(allowed.begin(), allowed.end(), t)) << "prefix '" << prefix << "' token " << t;
    }
  }
}

TEST(GrammarMatcher, CachesRestartWithoutChangingResults) {
  // Every position of x{0,9000} is its own state: past 4096 states the matcher restarts its caches
  // (between calls, keeping the current stacks); results must not change.
  const auto g = parse_gbnf(R"(root ::= "<" [a-z]{0,9000} ">")");
  Matcher m(g, strata::grammar::test::byte_vocab());
  ASSERT_TRUE(m.accept_bytes("<"));
  for (int i = 0; i < 9000; ++i) {
    if (i % 1000 == 999) {
      EXPECT_EQ(m.allowed_tokens().size(), 27u) << i;  // a-z and >
    }
    ASSERT_TRUE(m.accept('a' + i % 26)) << i;
  }
  EXPECT_FALSE(m.accept('a'));
  EXPECT_EQ(m.allowed_tokens(), (std::vector<int32_t>{'>'}));
  EXPECT_TRUE(m.accept('>'));
  EXPECT_TRUE(m.must_end());
}

// The class-bitmap fast path (VocabIndex::class_tokens) gives exactly the trie walk's mask: random
// walks over json_object, a nested schema, free text and forced tool calls on the Qwen3 vocabulary,
// comparing both masks at every step.
TEST(GrammarMatcher, Qwen3FastMasksEqualTheTrieWalk) {
  const Qwen* q = qwen();
  if (!q) STRATA_MISSING_FIXTURE("tokenizer-qwen3/vocab.gguf");
  const json nested = json::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"object",
      "properties":{"s":{"type":"string"},"e":{"enum":["x","y z"]},"n":{"type":"number"}},"required":["s"]}},
      "t":{"type":"string","maxLength":6},"u":{"anyOf":[{"type":"string"},{"type":"integer"}]}},"required":["a","t"]})");
  const std::string grammars[] = {json_object_gbnf(), json_schema_to_gbnf(kSchema), json_schema_to_gbnf(nested),
                                  R"(root ::= [^\n]* "\n")", R"(root ::= "<tool_call>\n" ( "{\"q\": \"" [^"<]* "\"}" ) "\n</tool_call>")"};
  std::mt19937 rng(5);
  int fast_steps = 0;
  for (const std::string& text : grammars) {
    const auto g = parse_gbnf(text);
    for (int walk = 0; walk < 2; ++walk) {
      Matcher fast(g, q->vocab), slow(g, q->vocab);
      slow.set_fast_masks(false);
      for (int step = 0; step < 40; ++step) {
        const std::vector<int32_t> a = fast.allowed_tokens(), b = slow.allowed_tokens();
        ASSERT_EQ(a, b) << text << " step " << step;
        fast_steps += a.size() > 100000;
        std::vector<int32_t> pick;
        for (int32_t t : a)
          if (!q->vocab->is_eog(t)) pick.push_back(t);
        if (pick.empty() || (fast.can_end() && rng() % 8 == 0)) break;
        // Half the time a token that leaves the string (a quote, a newline), to walk the whole grammar.
        int32_t t = pick[rng() % pick.size()];
        for (int k = 0; k < 40 && rng() % 2; ++k) {
          const int32_t u = pick[rng() % pick.size()];
          if (q->vocab->token_bytes(u).find_first_of("\"\n]}") != std::string::npos) {
            t = u;
            break;
          }
        }
        ASSERT_TRUE(fast.accept(t));
        ASSERT_TRUE(slow.accept(t));
      }
    }
  }
  EXPECT_GT(fast_steps, 10);  // the walks did reach states that allow most of the vocabulary
}
