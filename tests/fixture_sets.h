#pragma once
// Which golden sets the suite expects, which ones are known not to load yet, and what a test
// does when a fixture is missing.
//
// - A missing fixture (folder, set or file) skips loudly on a developer machine and FAILS when
//   fixtures are required: environment STRATA_REQUIRE_FIXTURES or CI set to anything but ""/0/false
//   (.ci/run exports STRATA_REQUIRE_FIXTURES=1).
// - Every set in the fixtures folder is tested. A set in kUnsupportedSets gets a test asserting
//   that it still fails to load with the error recorded here; when the issue named in its entry
//   adds support, that test fails: remove the entry, and the set's real golden check runs.
//   Any other set that does not load fails.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace strata::test {

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  const std::string_view s(v);
  return !s.empty() && s != "0" && s != "false" && s != "no";
}

// True where a missing fixture must fail instead of skip.
inline bool fixtures_required() { return env_flag("STRATA_REQUIRE_FIXTURES") || env_flag("CI"); }

// Use in a test body (returns from it): fails when fixtures are required, else skips loudly.
#define STRATA_MISSING_FIXTURE(what)                                                                                            \
  do {                                                                                                                          \
    const std::string strata_missing_what_ = (what);                                                                            \
    if (::strata::test::fixtures_required())                                                                                    \
      GTEST_FAIL() << "missing fixture: " << strata_missing_what_ << " (fixtures are required here: CI or STRATA_REQUIRE_FIXTURES is set)"; \
    std::fprintf(stderr, "\n*** WARNING: missing fixture: %s: SKIPPED (STRATA_REQUIRE_FIXTURES=1 makes this a failure) ***\n\n",    \
                 strata_missing_what_.c_str());                                                                                 \
    GTEST_SKIP() << "missing fixture: " << strata_missing_what_;                                                               \
  } while (0)

// Model sets (model.gguf + golden/) that load and run their golden check today.
inline constexpr const char* kExpectedModelSets[] = {
    "deepseek2-f32", "deepseek2-kvb-q8_0", "deepseek2-q4_0",  "deepseek2-q4_k_m", "deepseek2-q6_k",   "deepseek2-q8_0",   "deepseek32-q4_k_m", "deepseek32-q8_0", "deepseek4-f32",     "deepseek4-q4_k_m",
    "deepseek4-q8_0", "gpt-oss-f32",    "gpt-oss-mxfp4_moe", "gpt-oss-q4_0",    "gpt-oss-q4_k_m",   "gpt-oss-q6_k",      "gpt-oss-q8_0",
    "glm4moe-q4_k_m", "glm4moe-q8_0", "kimi-k2-q8_0", "minimax-m2-q4_k_m", "minimax-m2-q8_0",   "mixtral-f32",    "mixtral-q4_0",     "mixtral-q4_k_m",   "mixtral-q6_k",     "mixtral-q8_0",      "qwen3moe-f32",
    "deepseek2-iq2_xs", "deepseek2-iq3_xxs", "qwen3moe-iq1_s", "qwen3moe-iq2_xxs", "qwen3moe-iq4_xs", "qwen3moe-q2_k", "qwen3moe-q4_0",    "qwen3moe-q4_k_m",  "qwen3moe-q6_k",    "qwen3moe-q8_0",
    "qwen35moe-q4_k_m", "qwen35moe-q8_0",
    "llama-dense-f32", "llama-dense-q8_0", "qwen3-dense-f32", "qwen3-dense-q4_k_m", "qwen3-dense-q8_0",
};

// Tokenizer-only sets (vocab.gguf + golden/tokens.json) whose tokenizer loads today.
inline constexpr const char* kExpectedTokenizerSets[] = {"tokenizer-deepseek-v3", "tokenizer-kimi-k2", "tokenizer-qwen3"};

// What does not load yet, and the error that says so. `model_error`: substring of the error of
// Model::load (nullptr: the model loads). `tokenizer_error`: substring of the error of
// Tokenizer::from_gguf on the set's GGUF (nullptr: the tokenizer loads).
struct UnsupportedSet {
  const char* name;
  const char* issue;  // the issue that adds support
  const char* model_error;
  const char* tokenizer_error;
};

// Empty today (std::array: a C array cannot be empty); an entry reads {"set", "#issue", "error", nullptr}.
inline constexpr std::array<UnsupportedSet, 0> kUnsupportedSets{};

inline const UnsupportedSet* unsupported_set(std::string_view name) {
  for (const auto& u : kUnsupportedSets)
    if (name == u.name) return &u;
  return nullptr;
}
inline bool model_unsupported(std::string_view name) {
  const UnsupportedSet* u = unsupported_set(name);
  return u && u->model_error;
}
inline bool tokenizer_unsupported(std::string_view name) {
  const UnsupportedSet* u = unsupported_set(name);
  return u && u->tokenizer_error;
}

// Runs `load` (which must throw) and checks the error names what is unsupported. Use in a test body.
template <typename F>
void expect_still_unsupported(const UnsupportedSet& u, const char* what, const char* want, F&& load) {
  try {
    load();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
        << u.name << ": " << what << " fails, but not with the recorded error.\n  recorded: ..." << want << "...\n  got:      " << e.what();
    std::printf("[%-22s] known unsupported (%s): %s\n", u.name, u.issue, e.what());
    return;
  }
  ADD_FAILURE() << u.name << ": the " << what << " now loads. Support has landed (issue " << u.issue
                << "): remove its entry from kUnsupportedSets in tests/fixture_sets.h so that its golden check runs"
                << " (and add it to the expected sets).";
}

}  // namespace strata::test
