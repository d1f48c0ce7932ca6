// Property checks on the fixture vocabularies: byte-level BPE loses nothing, so for any valid
// UTF-8 text decode(encode(text)) == text (vocabs without clean_spaces), streaming pieces add up
// to the same text, and plain mode never yields a control token.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "../fixture_sets.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace fs = std::filesystem;
using strata::tok::StreamDecoder;
using strata::tok::Tokenizer;

namespace {

std::string roundtrip_fixtures_dir() {
  if (const char* e = std::getenv("STRATA_FIXTURES"); e && *e) return e;
  return STRATA_FIXTURES_DIR;
}

// Random text from a mix of scripts, digits, punctuation, whitespace runs and emoji.
std::string random_text(std::mt19937& rng) {
  static const std::vector<uint32_t> kPool = {
      'a', 'b', 'Z', 'e', ' ', ' ', ' ', '\n', '\t', '\r', '0', '7', '\'', 's', '.', ',', '!', '~', '<', '|', '>', '/',
      0xE9, 0xA0, 0x301, 0x4E2D, 0x6587, 0x3042, 0x30AB, 0xAC00, 0x0410, 0x05D0, 0x0627, 0x1F600, 0x1F44D, 0x200B, 0x2581,
      0xFF5C, 0x10FFFD, 0x7F, 0x1};
  std::uniform_int_distribution<size_t> pick(0, kPool.size() - 1), len(0, 40);
  std::string s;
  const size_t n = len(rng);
  for (size_t i = 0; i < n; ++i) strata::tok::utf8_append(s, kPool[pick(rng)]);
  return s;
}

void check_vocab(const fs::path& gguf, int n_texts) {
  if (!fs::exists(gguf)) STRATA_MISSING_FIXTURE(gguf.string() + " (tokenizer round trip)");
  auto model = strata::GgufModel::open(gguf.string());
  auto tok = Tokenizer::from_gguf(*model);
  const bool exact_roundtrip = !tok->vocab().clean_spaces;
  std::mt19937 rng(1234);
  int failures = 0;
  for (int i = 0; i < n_texts && failures < 5; ++i) {
    const std::string text = random_text(rng);
    const auto ids = tok->encode(text, false, false);
    for (int32_t id : ids)
      if (tok->is_control(id)) {
        ADD_FAILURE() << gguf << ": control token " << id << " from plain text";
        ++failures;
      }
    const std::string back = tok->decode(ids, false, false);
    if (exact_roundtrip && back != text) {
      ADD_FAILURE() << gguf << ": round trip of text #" << i << " differs";
      ++failures;
    }
    StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = sd.push(id);
      EXPECT_EQ(strata::tok::utf8_complete_prefix(chunk), chunk.size());
      streamed += chunk;
    }
    streamed += sd.flush();
    if (exact_roundtrip && streamed != text) {
      ADD_FAILURE() << gguf << ": streamed text #" << i << " differs";
      ++failures;
    }
  }
}

TEST(TokenizerRoundTrip, Qwen3Vocab) { check_vocab(fs::path(roundtrip_fixtures_dir()) / "tokenizer-qwen3" / "vocab.gguf", 400); }
TEST(TokenizerRoundTrip, DeepseekV3Vocab) { check_vocab(fs::path(roundtrip_fixtures_dir()) / "tokenizer-deepseek-v3" / "vocab.gguf", 400); }
TEST(TokenizerRoundTrip, GptOssTinyVocab) { check_vocab(fs::path(roundtrip_fixtures_dir()) / "gpt-oss-f32" / "model.gguf", 400); }
TEST(TokenizerRoundTrip, MixtralTinyVocab) { check_vocab(fs::path(roundtrip_fixtures_dir()) / "mixtral-f32" / "model.gguf", 200); }

}  // namespace
