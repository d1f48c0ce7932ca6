// `strata --help` lists exactly the architectures the engine runs, and each of them has a golden
// set the suite expects to pass (so the list claims nothing the suite does not check).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "../fixture_sets.h"
#include "../model/golden_util.h"
#include "cli_util.h"
#include "gguf/gguf_file.h"
#include "model/model.h"

namespace strata::test {
namespace {

TEST(HelpCli, ListsExactlyTheArchitecturesThatPassTheGoldenSuite) {
  const CmdResult r = run_cmd("--help");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string key = "Architectures (GGUF general.architecture): ";
  const size_t at = r.out.find(key);
  ASSERT_NE(at, std::string::npos) << r.out;
  std::set<std::string> listed;
  std::string line = r.out.substr(at + key.size(), r.out.find('\n', at) - at - key.size());
  for (size_t p = 0; p <= line.size();) {
    const size_t e = std::min(line.find(", ", p), line.size());
    listed.insert(line.substr(p, e - p));
    p = e + 2;
  }
  const auto archs = supported_archs();
  EXPECT_EQ(listed, std::set<std::string>(archs.begin(), archs.end()));
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (architectures vs golden sets)");
  std::set<std::string> covered;
  for (const char* set : kExpectedModelSets) {
    const std::string path = fixtures_dir() + "/" + set + "/model.gguf";
    if (std::filesystem::exists(path)) covered.insert(GgufModel::open(path)->architecture());
  }
  for (const auto& a : archs) EXPECT_TRUE(covered.count(a)) << a << " is listed but no expected golden set runs it";
}

}  // namespace
}  // namespace strata::test
