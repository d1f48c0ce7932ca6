// End to end with the official `openai` npm client (tests/server/openai_e2e/e2e.mjs) against an
// in-process server. Runs only when node and tests/server/openai_e2e/node_modules exist
// (scripts/setup-npm.sh installs them); skips loudly otherwise.
#include <cstdlib>
#include <filesystem>

#include "server_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;

TEST(ServerOpenAiE2E, OfficialNodeClient) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR).parent_path() / "server" / "openai_e2e";
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    std::fprintf(stderr, "\n*** WARNING: node is not installed: the openai npm end-to-end test is SKIPPED ***\n\n");
    GTEST_SKIP() << "node not found";
  }
  if (!fs::exists(dir / "node_modules" / "openai")) {
    std::fprintf(stderr, "\n*** WARNING: %s/node_modules/openai is absent (run scripts/setup-npm.sh): the openai npm end-to-end test is SKIPPED ***\n\n",
                 dir.c_str());
    GTEST_SKIP() << "run scripts/setup-npm.sh";
  }
  server::ServerOptions so;
  so.api_key = "e2e-key";
  TestServer ts(so, /*n_seq=*/2, /*n_ctx=*/256);
  const std::string cmd = "cd '" + dir.string() + "' && STRATA_BASE_URL=http://127.0.0.1:" + std::to_string(ts.port) +
                          "/v1 STRATA_API_KEY=e2e-key STRATA_MODEL=" + ts.srv->model_id() + " node e2e.mjs 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
}

}  // namespace
}  // namespace strata::test
