// The fixtures folder holds what the suite expects (tests/fixture_sets.h): every expected set
// is there, every set there is either expected or listed as not supported yet (with the issue
// that adds it), and a missing folder fails where fixtures are required (CI).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include "golden_util.h"

using namespace strata::test;
namespace fs = std::filesystem;

namespace {

bool is_model_set(const fs::path& d) { return fs::exists(d / "model.gguf") && fs::is_directory(d / "golden"); }
bool is_tokenizer_set(const fs::path& d) { return fs::exists(d / "vocab.gguf") && fs::exists(d / "golden" / "tokens.json"); }

#define NEED_FIXTURES_FOLDER()                                                                  \
  if (!have_fixtures()) STRATA_MISSING_FIXTURE("fixtures folder " + fixtures_dir() + " (every golden test)")

}  // namespace

TEST(FixtureSets, FolderPresent) {
  NEED_FIXTURES_FOLDER();
  EXPECT_FALSE(model_sets().empty()) << fixtures_dir() << " holds no model set";
}

TEST(FixtureSets, ExpectedSetsPresent) {
  NEED_FIXTURES_FOLDER();
  const fs::path root = fixtures_dir();
  for (const char* s : kExpectedModelSets) EXPECT_TRUE(is_model_set(root / s)) << "expected model set " << s << " (model.gguf + golden/) is missing";
  for (const char* s : kExpectedTokenizerSets)
    EXPECT_TRUE(is_tokenizer_set(root / s)) << "expected tokenizer set " << s << " (vocab.gguf + golden/tokens.json) is missing";
  for (const auto& u : kUnsupportedSets)
    EXPECT_TRUE(is_model_set(root / u.name) || is_tokenizer_set(root / u.name))
        << u.name << " is listed as unsupported (" << u.issue << ") but is not in the fixtures folder: drop the stale entry";
}

TEST(FixtureSets, EverySetIsExpectedOrKnownUnsupported) {
  NEED_FIXTURES_FOLDER();
  std::set<std::string> known;
  for (const char* s : kExpectedModelSets) known.insert(s);
  for (const char* s : kExpectedTokenizerSets) known.insert(s);
  int n = 0;
  for (const auto& e : fs::directory_iterator(fixtures_dir())) {
    if (!is_model_set(e.path()) && !is_tokenizer_set(e.path())) continue;
    const std::string name = e.path().filename().string();
    ++n;
    EXPECT_TRUE(known.count(name) || unsupported_set(name))
        << "new fixture set " << name << ": add it to kExpectedModelSets / kExpectedTokenizerSets, or to kUnsupportedSets with the issue that adds it";
  }
  EXPECT_GT(n, 0);
}

TEST(FixtureSets, ListsAreConsistent) {
  std::set<std::string> seen;
  for (const char* s : kExpectedModelSets) EXPECT_TRUE(seen.insert(s).second) << s << " listed twice";
  for (const char* s : kExpectedTokenizerSets) EXPECT_TRUE(seen.insert(s).second) << s << " listed twice";
  std::set<std::string> unsupported;
  for (const auto& u : kUnsupportedSets) {
    EXPECT_TRUE(unsupported.insert(u.name).second) << u.name << " listed twice";
    EXPECT_TRUE(u.model_error || u.tokenizer_error) << u.name << ": an unsupported entry must record the error it expects";
    const std::string issue = u.issue ? u.issue : "";
    EXPECT_TRUE(issue == "#14" || issue == "#15" || issue == "#19") << u.name << ": issue '" << issue << "'";
    // A set whose model does not load cannot be an expected model set (its tokenizer may be checked).
    if (u.model_error) {
      EXPECT_EQ(std::count_if(std::begin(kExpectedModelSets), std::end(kExpectedModelSets), [&](const char* s) { return u.name == std::string(s); }), 0)
          << u.name;
    }
  }
}
