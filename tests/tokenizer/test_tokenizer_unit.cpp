// Tokenizer unit tests on hand-built vocabularies (SPM, byte-level BPE), the pre-tokenizer
// regexes, streaming detokenization and `strata tokenize`. Expectations are worked out by hand.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace fs = std::filesystem;
using namespace strata;
using namespace strata::tok;

namespace {

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("strata-tok-" + std::to_string(::getpid()) + "-" + name);
}

// A tiny SentencePiece vocab: <unk> <s> </s>, 256 byte tokens, then scored pieces.
//   ids 0..2 specials, 3 + b = <0xBB>, then kSpmPieces in order from 259.
struct Piece {
  const char* text;
  float score;
};
const Piece kSpmPieces[] = {
    {"\xe2\x96\x81", -1.0f},                  // 259 ▁
    {"h", -2.0f},                             // 260
    {"e", -2.0f},                             // 261
    {"l", -2.0f},                             // 262
    {"o", -2.0f},                             // 263
    {"ll", -1.0f},                            // 264
    {"he", -1.5f},                            // 265
    {"llo", -0.5f},                           // 266
    {"hello", -0.2f},                         // 267
    {"\xe2\x96\x81hello", -0.1f},             // 268 ▁hello
    {"a", -2.0f},                             // 269
    {"aa", -1.0f},                            // 270
};
constexpr int32_t kByte0 = 3;
constexpr int32_t kSpace = 259, kH = 260, kL = 262, kO = 263, kLl = 264, kHello = 267, kSpHello = 268, kA = 269, kAa = 270;

GgufWriter spm_writer(bool add_space_prefix) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const auto& p : kSpmPieces) {
    tokens.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(1);
  }
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_f32("tokenizer.ggml.scores", scores);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  if (!add_space_prefix) w.set_bool("tokenizer.ggml.add_space_prefix", false);
  return w;
}

std::unique_ptr<GgufModel> write_spm(const std::string& name, bool add_space_prefix = true) {
  const fs::path p = temp_path(name);
  spm_writer(add_space_prefix).write(p.string());
  auto m = GgufModel::open(p.string());
  fs::remove(p);
  return m;
}

// A tiny byte-level BPE vocab (qwen2 pre-tokenizer): the 256 byte symbols, a few merges, specials.
std::unique_ptr<GgufModel> write_bpe(const std::string& name, const std::string& pre, bool with_bos = true) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(bytes_to_unicode(std::string(1, static_cast<char>(b))));
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "\xc4\xa0 hello", "a a"};
  for (const auto& m : merges) {
    const size_t sp = m.find(' ');
    tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));  // 256.. he ll hell hello Ġhello aa
  }
  tokens.push_back("<|end|>");     // 262 control
  tokens.push_back("<think>");     // 263 user-defined
  tokens.push_back("<|endoftext|>");  // 264 normal in the file; llama.cpp makes it control (EOG by text)
  std::vector<int32_t> types(tokens.size(), 1);
  types[262] = 3;
  types[263] = 4;
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  w.set_array_string("tokenizer.ggml.merges", merges);
  if (with_bos) w.set_u32("tokenizer.ggml.bos_token_id", 262);
  w.set_u32("tokenizer.ggml.eos_token_id", 262);
  const fs::path p = temp_path(name);
  w.write(p.string());
  auto m = GgufModel::open(p.string());
  fs::remove(p);
  return m;
}

using Ids = std::vector<int32_t>;

TEST(TokenizerSpm, DefaultsAndMergesByScore) {
  auto m = write_spm("spm1.gguf");
  auto t = Tokenizer::from_gguf(*m);
  EXPECT_EQ(t->type(), VocabType::Spm);
  EXPECT_EQ(t->bos(), 1);
  EXPECT_EQ(t->eos(), 2);
  EXPECT_EQ(t->unk(), 0);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_TRUE(t->is_eog(2));
  // " hello" -> ▁ h e l l o; ll(-1.0) -> llo(-0.5) -> he(-1.5) -> hello(-0.2) -> ▁hello(-0.1).
  EXPECT_EQ(t->encode("hello", true, true), (Ids{1, kSpHello}));
  EXPECT_EQ(t->encode("hello", false, false), (Ids{kSpHello}));
  // Every space is a ▁ that merges with the word after it: ▁hello ▁hello.
  EXPECT_EQ(t->encode("hello hello", false, false), (Ids{kSpHello, kSpHello}));
  // No "▁h" / "▁l" pieces: "hell lo" -> ▁ he ll ▁ l o.
  EXPECT_EQ(t->encode("hell lo", false, false), (Ids{kSpace, 265, kLl, kSpace, kL, kO}));
  // Equal scores merge leftmost first: "aaa" -> aa a.
  EXPECT_EQ(t->encode("aaa", false, false), (Ids{kSpace, kAa, kA}));
  EXPECT_EQ(t->encode("", true, true), (Ids{1}));
  EXPECT_EQ(t->encode("", false, true), (Ids{}));
}

TEST(TokenizerSpm, ByteFallbackAndDecode) {
  auto m = write_spm("spm2.gguf");
  auto t = Tokenizer::from_gguf(*m);
  // "é" is no piece: its UTF-8 bytes C3 A9 become <0xC3> <0xA9>.
  const Ids ids = t->encode("h\xc3\xa9", false, false);
  EXPECT_EQ(ids, (Ids{kSpace, kH, kByte0 + 0xC3, kByte0 + 0xA9}));
  EXPECT_EQ(t->token_to_piece(kByte0 + 0xC3, false), "\xc3");
  EXPECT_EQ(t->token_to_piece(kSpHello, false), " hello");
  // The prefixed space is removed from the first token when decoding.
  EXPECT_EQ(t->decode(ids, false, false), "h\xc3\xa9");
  // llama.cpp keeps the space when remove_special drops a leading BOS...
  EXPECT_EQ(t->decode({1, kSpHello}, true, false), " hello");
  // ... and strips it from an invisible BOS piece (then the space stays on "▁hello").
  EXPECT_EQ(t->decode({1, kSpHello}, false, false), " hello");
  EXPECT_EQ(t->decode({1, kSpHello}, false, true), "<s> hello");
  EXPECT_EQ(t->token_to_piece(1, false), "");
  EXPECT_EQ(t->token_to_piece(1, true), "<s>");
}

TEST(TokenizerSpm, SpecialTokensAndSpacePrefix) {
  auto m = write_spm("spm3.gguf");
  auto t = Tokenizer::from_gguf(*m);
  // Parsed: <s> is a token, the text after it gets the space prefix again.
  EXPECT_EQ(t->encode("<s>hello", false, true), (Ids{1, kSpHello}));
  // Not parsed: "<", "s", ">" fall back to bytes; "hello" is merged without a space.
  EXPECT_EQ(t->encode("<s>hello", false, false), (Ids{kSpace, kByte0 + '<', kByte0 + 's', kByte0 + '>', kHello}));
  auto m2 = write_spm("spm4.gguf", false);
  auto t2 = Tokenizer::from_gguf(*m2);
  EXPECT_EQ(t2->encode("hello", true, true), (Ids{1, kHello}));
  EXPECT_EQ(t2->encode("ll o", false, false), (Ids{kLl, kSpace, kO}));
  EXPECT_EQ(t2->decode({kLl, kSpace, kO}, false, false), "ll o");
}

TEST(TokenizerBpe, MergesSpecialsAndModes) {
  auto m = write_bpe("bpe1.gguf", "qwen2");
  auto t = Tokenizer::from_gguf(*m);
  EXPECT_EQ(t->type(), VocabType::Bpe);
  EXPECT_FALSE(t->add_bos());
  // "hello hello" -> words "hello", " hello" -> he ll -> hell -> hello ; Ġ+hello.
  EXPECT_EQ(t->encode("hello hello", true, true), (Ids{259, 260}));
  // Unmerged bytes are the byte symbols: "hi" -> h i.
  EXPECT_EQ(t->encode("hi", false, false), (Ids{'h', 'i'}));
  // "<|endoftext|>" is an EOG text: made control, so it is parsed only with parse_special.
  EXPECT_TRUE(t->is_eog(264));
  EXPECT_TRUE(t->is_control(264));
  EXPECT_EQ(t->encode("<|end|>hello", false, true), (Ids{262, 259}));
  const Ids plain = t->encode("<|end|>hello", false, false);
  EXPECT_EQ(plain.size(), 8u);  // < | e n d | > hello
  // User-defined tokens are matched in every mode.
  EXPECT_EQ(t->encode("<think>aa", false, false), (Ids{263, 261}));
  EXPECT_EQ(t->encode("<think>aa", true, true), (Ids{263, 261}));
  EXPECT_EQ(t->decode({263, 261, 262}, false, false), "<think>aa");
  EXPECT_EQ(t->decode({263, 261, 262}, false, true), "<think>aa<|end|>");
  EXPECT_EQ(t->token_to_piece(260, true), " hello");
}

TEST(TokenizerBpe, UnknownPreFailsLoudly) {
  auto m = write_bpe("bpe2.gguf", "no-such-pre");
  try {
    Tokenizer::from_gguf(*m);
    FAIL() << "expected an error for an unknown tokenizer.ggml.pre";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
  }
}

std::vector<std::string> split(const char* pre, const std::string& text) { return PreTokenizer(find_pretokenizer(pre)).split(text); }
using Words = std::vector<std::string>;

TEST(PreTokenizer, Qwen2AndLlama3) {
  EXPECT_EQ(split("qwen2", "Hello, world!"), (Words{"Hello", ",", " world", "!"}));
  EXPECT_EQ(split("qwen2", "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("llama-bpe", "12345"), (Words{"123", "45"}));
  EXPECT_EQ(split("qwen2", "I'm HE'LL"), (Words{"I", "'m", " HE", "'LL"}));
  // \s+(?!\S) leaves the last space to the next word; trailing spaces stay together.
  EXPECT_EQ(split("qwen2", "a   b  "), (Words{"a", "  ", " b", "  "}));
  EXPECT_EQ(split("qwen2", "x\n\n  y"), (Words{"x", "\n\n", " ", " y"}));
  // Non-ASCII letters are letters; NBSP is whitespace.
  EXPECT_EQ(split("qwen2", "caf\xc3\xa9\xc2\xa0ok"), (Words{"caf\xc3\xa9", "\xc2\xa0ok"}));
  EXPECT_EQ(split("qwen2", ""), (Words{}));
}

TEST(PreTokenizer, DeepseekV3) {
  EXPECT_EQ(split("deepseek-v3", "abc\xe4\xb8\xad\xe6\x96\x87" "def 1234"),
            (Words{"abc", "\xe4\xb8\xad\xe6\x96\x87", "def", " ", "123", "4"}));
  // llama.cpp's category collapsing leaves ASCII '~' out of \p{S}: "a~~b" -> a, ~, ~b.
  EXPECT_EQ(split("deepseek-v3", "a~~b"), (Words{"a", "~", "~b"}));
  EXPECT_EQ(split("deepseek-v3", "x.Foo"), (Words{"x", ".Foo"}));
}

TEST(PreTokenizer, Gpt4o) {
  EXPECT_EQ(split("gpt-4o", "HelloWorld don't"), (Words{"Hello", "World", " don't"}));
  EXPECT_EQ(split("gpt-4o", "abc/\n/d"), (Words{"abc", "/\n/", "d"}));
  EXPECT_EQ(split("gpt-4o", "1234567"), (Words{"123", "456", "7"}));
}

TEST(PreTokenizer, Qwen35MarksAreLetters) {
  // "na" U+0308 "ve": qwen2 cuts before the combining mark, qwen35 keeps the word whole.
  EXPECT_EQ(split("qwen35", "na\xcc\x88ve x"), (Words{"na\xcc\x88ve", " x"}));
  EXPECT_EQ(split("qwen2", "na\xcc\x88ve x"), (Words{"na", "\xcc\x88ve", " x"}));
  EXPECT_EQ(split("qwen35", "12"), (Words{"1", "2"}));
}

TEST(PreTokenizer, Glm4AndMinimaxM2) {
  EXPECT_EQ(split("glm4", "It's 12345"), (Words{"It", "'s", " ", "123", "45"}));
  EXPECT_EQ(split("minimax-m2", "HelloWorld 1234"), (Words{"Hello", "World", " ", "123", "4"}));
  EXPECT_FALSE(find_pretokenizer("minimax-m2").clean_spaces);
  EXPECT_TRUE(find_pretokenizer("glm4").no_default_bos);
  // GLM-4 has no default BOS (other BPE vocabs default to id 11); the GGUF key still sets one.
  EXPECT_EQ(Tokenizer::from_gguf(*write_bpe("glm4a.gguf", "glm4", false))->bos(), kNoToken);
  EXPECT_EQ(Tokenizer::from_gguf(*write_bpe("glm4b.gguf", "glm4"))->bos(), 262);
  EXPECT_EQ(Tokenizer::from_gguf(*write_bpe("qwen2a.gguf", "qwen2", false))->bos(), 11);
}

TEST(PreTokenizer, KimiK2) {
  const std::string han = "\xe4\xbd\xa0\xe5\xa5\xbd";  // 你好
  const std::string kana = "\xe3\x81\xae";                // の
  // Han runs stand alone; kana and Latin letters next to them are separate chunks.
  EXPECT_EQ(split("kimi-k2", han + kana + "abc"), (Words{han, kana + "abc"}));
  // A leading space or punctuation mark glues to a Latin word, never to Han.
  EXPECT_EQ(split("kimi-k2", ", " + han + ",World"), (Words{",", " ", han, ",World"}));
  // Contractions after letters, in any case; after Han they are a chunk of their own.
  EXPECT_EQ(split("kimi-k2", "SHE'LL " + han + "'s"), (Words{"SHE'LL", " ", han, "'s"}));
  // Case changes do not split; digits go in threes from the left.
  EXPECT_EQ(split("kimi-k2", "camelCase 1234567"), (Words{"camelCase", " ", "123", "456", "7"}));
  // Whitespace: runs before text keep their last character for the next chunk; CR/LF end a run.
  EXPECT_EQ(split("kimi-k2", "a   b \n\n c  "), (Words{"a", "  ", " b", " \n\n", " c", "  "}));
  // Punctuation runs take one leading space and trailing newlines.
  EXPECT_EQ(split("kimi-k2", "x !?\n"), (Words{"x", " !?\n"}));
  // Edges: lone leading character, trailing apostrophe, empty text, malformed UTF-8.
  EXPECT_EQ(split("kimi-k2", "a'"), (Words{"a", "'"}));
  EXPECT_EQ(split("kimi-k2", "'"), (Words{"'"}));
  EXPECT_EQ(split("kimi-k2", " "), (Words{" "}));
  EXPECT_EQ(split("kimi-k2", ""), (Words{}));
  EXPECT_EQ(split("kimi-k2", "a\xff\xfe"), (Words{"a", "\xef\xbf\xbd\xef\xbf\xbd"}));
  // Random mixes of every class: the chunks are non-empty and add up to the text.
  const uint32_t pool[] = {'a', 'Z', '\'', 's', ' ', '\n', '\r', '\t', '1', '!', 0x4E2D, 0x3042, 0x0301, 0x3000, 0x00A0, 0x2F800, 0x1F642};
  uint32_t state = 12345;
  for (int round = 0; round < 200; ++round) {
    std::string text;
    for (int i = 0; i < round % 23; ++i) {
      state = state * 1103515245u + 12345u;
      utf8_append(text, pool[(state >> 16) % std::size(pool)]);
    }
    std::string joined;
    for (const auto& w : split("kimi-k2", text)) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(PreTokenizer, Gpt2AndDefault) {
  EXPECT_EQ(split("gpt-2", "Hello world's 42!"), (Words{"Hello", " world", "'s", " 42", "!"}));
  EXPECT_NO_THROW(split("default", "Hello, world 1234!"));
  EXPECT_THROW(find_pretokenizer("nope"), Error);
}

TEST(PreTokenizer, MalformedUtf8BecomesReplacementChar) {
  EXPECT_EQ(split("qwen2", "a\xff"), (Words{"a", "\xef\xbf\xbd"}));
  EXPECT_EQ(utf8_decode("\xe4\xb8"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
}

TEST(StreamDecoder, HoldsBackPartialUtf8) {
  auto m = write_spm("spm5.gguf");
  auto t = Tokenizer::from_gguf(*m);
  StreamDecoder d(*t);
  EXPECT_EQ(d.push(kSpHello), " hello");
  EXPECT_EQ(d.push(kByte0 + 0xE4), "");
  EXPECT_EQ(d.push(kByte0 + 0xB8), "");
  EXPECT_EQ(d.push(kByte0 + 0xAD), "\xe4\xb8\xad");
  EXPECT_EQ(d.push(kByte0 + 0xF0), "");
  EXPECT_EQ(d.flush(), "\xf0");
  EXPECT_EQ(d.push(kByte0 + 0xA9), "\xa9");  // a stray continuation byte is passed on
  EXPECT_EQ(utf8_complete_prefix("ab\xc3"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xc3\xa9"), 4u);
}

TEST(TokenizeCli, JsonIds) {
  const fs::path model = temp_path("cli-model.gguf"), text = temp_path("cli-text.txt");
  spm_writer(true).write(model.string());
  {
    std::FILE* f = std::fopen(text.string().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("<s>hello", f);
    std::fclose(f);
  }
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string(STRATA_BINARY) + " tokenize -m " + model.string() + " " + args;
    std::string out;
    if (std::FILE* p = popen(cmd.c_str(), "r")) {
      char buf[256];
      while (std::fgets(buf, sizeof buf, p)) out += buf;
      pclose(p);
    }
    return out;
  };
  EXPECT_EQ(run("-f " + text.string() + " --json"), "{\"ids\": [1, 1, 268]}\n");
  EXPECT_EQ(run("-f " + text.string() + " --json --no-add-special"), "{\"ids\": [1, 268]}\n");
  EXPECT_EQ(run("-p hello --json --no-add-special --no-parse-special"), "{\"ids\": [268]}\n");
  EXPECT_NE(run("-p hello").find("\" hello\""), std::string::npos);
  fs::remove(model);
  fs::remove(text);
}

}  // namespace
