// End to end with the official `openai` npm client (tests/server/openai_e2e/e2e.mjs) against an
// in-process server. Needs node and tests/server/openai_e2e/node_modules (scripts/setup-npm.sh,
// run by `make test-release`); without them it skips loudly, or fails where fixtures are
// required (CI, STRATA_REQUIRE_FIXTURES).
#include <cstdlib>
#include <filesystem>

#include "server_util.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;

TEST(ServerOpenAiE2E, OfficialNodeClient) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR).parent_path() / "server" / "openai_e2e";
  if (std::system("node --version > /dev/null 2>&1") != 0) STRATA_MISSING_FIXTURE("node (not installed: the openai npm end-to-end test)");
  if (!fs::exists(dir / "node_modules" / "openai"))
    STRATA_MISSING_FIXTURE((dir / "node_modules" / "openai").string() + " (run scripts/setup-npm.sh: the openai npm end-to-end test)");
  server::ServerOptions so;
  so.api_key = "e2e-key";
  so.strict_model = true;  // e2e.mjs checks the 404 of an unknown model
  TestServer ts(so, /*n_seq=*/2, /*n_ctx=*/256);
  const std::string cmd = "cd '" + dir.string() + "' && STRATA_BASE_URL=http://127.0.0.1:" + std::to_string(ts.port) +
                          "/v1 STRATA_API_KEY=e2e-key STRATA_MODEL=" + ts.srv->model_id() + " node e2e.mjs 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
}

// Tools, streamed tool calls and json_schema through the openai client, and a two-step tool loop
// through the ai SDK (tests/server/openai_e2e/tools_e2e.mjs). A larger context: the generic tool
// prompt goes into the system message.
TEST(ServerOpenAiE2E, ToolsThroughOpenAiClientAndAiSdk) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR).parent_path() / "server" / "openai_e2e";
  if (std::system("node --version > /dev/null 2>&1") != 0) STRATA_MISSING_FIXTURE("node (not installed: the npm end-to-end tests)");
  for (const char* pkg : {"openai", "ai", "@ai-sdk/openai-compatible", "zod"})
    if (!fs::exists(dir / "node_modules" / pkg))
      STRATA_MISSING_FIXTURE((dir / "node_modules" / pkg).string() + " (run scripts/setup-npm.sh: the npm end-to-end tests)");
  server::ServerOptions so;
  so.api_key = "e2e-key";
  TestServer ts(so, /*n_seq=*/2, /*n_ctx=*/2048);
  const std::string cmd = "cd '" + dir.string() + "' && STRATA_BASE_URL=http://127.0.0.1:" + std::to_string(ts.port) +
                          "/v1 STRATA_API_KEY=e2e-key STRATA_MODEL=" + ts.srv->model_id() + " node tools_e2e.mjs 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
}

// The other wire formats through their official clients (anthropic_e2e.mjs, responses_e2e.mjs,
// ollama_e2e.mjs, agents_e2e.mjs): one server, any model name accepted (the default).
class ServerWireE2E : public ::testing::TestWithParam<const char*> {};

TEST_P(ServerWireE2E, OfficialClient) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR).parent_path() / "server" / "openai_e2e";
  if (std::system("node --version > /dev/null 2>&1") != 0) STRATA_MISSING_FIXTURE("node (not installed: the npm end-to-end tests)");
  const std::string script = GetParam();
  const char* pkg = script == "anthropic_e2e.mjs" ? "@anthropic-ai/sdk" : script == "ollama_e2e.mjs" ? "ollama" : script == "agents_e2e.mjs" ? "@openai/agents" : "openai";
  if (!fs::exists(dir / "node_modules" / pkg))
    STRATA_MISSING_FIXTURE((dir / "node_modules" / pkg).string() + " (run scripts/setup-npm.sh: the npm end-to-end tests)");
  server::ServerOptions so;
  so.api_key = "e2e-key";
  TestServer ts(so, /*n_seq=*/2, /*n_ctx=*/2048);
  const std::string url = "http://127.0.0.1:" + std::to_string(ts.port);
  const std::string cmd = "cd '" + dir.string() + "' && STRATA_URL=" + url + " STRATA_BASE_URL=" + url + "/v1 STRATA_API_KEY=e2e-key node " + script + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
}

INSTANTIATE_TEST_SUITE_P(Clients, ServerWireE2E, ::testing::Values("anthropic_e2e.mjs", "responses_e2e.mjs", "ollama_e2e.mjs", "agents_e2e.mjs"),
                         [](const auto& info) { return std::string(info.param).substr(0, std::string(info.param).find('_')); });

}  // namespace
}  // namespace strata::test
