// The web page in a real browser: `strata serve` (a subprocess) on the trained tiny model with a
// RAM budget below its size (experts stream), and tests/server/openai_e2e/webui_e2e.mjs driving
// Debian's chromium through puppeteer-core: streamed text, the expert panel's figures changing,
// the heat map drawing, stop. Screenshots: <build>/test-artifacts/webui/. Needs chromium, node and
// node_modules/puppeteer-core (scripts/setup-npm.sh); without them it skips loudly, or fails
// where fixtures are required (CI, STRATA_REQUIRE_FIXTURES).
#include "serve_process.h"

namespace strata::test {
namespace {

namespace fs = std::filesystem;

TEST(WebUiBrowser, ChatStreamsAndTheExpertPanelMoves) {
  const fs::path model = fs::path(STRATA_SOURCE_DIR).parent_path() / "models" / "strata-moe-tiny" / "model.gguf";
  const fs::path dir = fs::path(STRATA_TEST_DATA_DIR).parent_path() / "server" / "openai_e2e";
  const std::string chromium = "/usr/bin/chromium";
  if (!fs::exists(model)) STRATA_MISSING_FIXTURE(model.string() + " (the trained tiny model, committed with the repository)");
  if (!fs::exists(chromium)) STRATA_MISSING_FIXTURE(chromium + " (Debian package chromium: the web page's browser test)");
  if (std::system("node --version > /dev/null 2>&1") != 0) STRATA_MISSING_FIXTURE("node (not installed: the web page's browser test)");
  if (!fs::exists(dir / "node_modules" / "puppeteer-core"))
    STRATA_MISSING_FIXTURE((dir / "node_modules" / "puppeteer-core").string() + " (run scripts/setup-npm.sh: the web page's browser test)");
  // 96M: below the model's 106 MiB, so routed experts stream through the cache; serve's fixed plan at
  // -c 2048 (KV, scratch, request memory) is ~78 MiB, above the 64M that `make demo`'s `run` uses.
  ServeProcess serve("webui_test", {"-m", model.string(), "--port", "0", "--parallel", "1", "-c", "2048", "-t", "2", "--ram-budget", "96M", "--disk-probe", "16M"});
  ASSERT_TRUE(serve.started()) << "cannot start " << STRATA_BINARY;
  ASSERT_TRUE(serve.ready()) << "strata serve did not come up:\n" << serve.log();
  const fs::path artifacts = fs::path(STRATA_BINARY).parent_path().parent_path() / "test-artifacts" / "webui";
  fs::remove_all(artifacts);
  const std::string cmd = "cd '" + dir.string() + "' && STRATA_URL=http://127.0.0.1:" + std::to_string(serve.port()) + " STRATA_ARTIFACTS='" +
                          artifacts.string() + "' STRATA_CHROMIUM=" + chromium + " node webui_e2e.mjs 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\nserver log:\n" << serve.log();
  for (const char* shot : {"1-loaded.png", "2-streaming.png", "3-stopped.png"}) EXPECT_TRUE(fs::exists(artifacts / shot)) << shot;
}

// `strata serve --no-webui`: no page at / (404 with an error object); /props says so.
TEST(WebUiBrowser, NoWebuiFlagTurnsThePageOff) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  ServeProcess serve("webui_test", {"-m", server_fixture(), "--port", "0", "--parallel", "1", "-c", "256", "-t", "1", "--no-webui"});
  ASSERT_TRUE(serve.started()) << "cannot start " << STRATA_BINARY;
  ASSERT_TRUE(serve.ready()) << "strata serve did not come up:\n" << serve.log();
  httplib::Client c("127.0.0.1", serve.port());
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 404);
  EXPECT_EQ(nlohmann::json::parse(page->body)["error"]["code"], "not_found");
  auto props = c.Get("/props");
  ASSERT_TRUE(props);
  EXPECT_EQ(nlohmann::json::parse(props->body)["webui"], false);
}

}  // namespace
}  // namespace strata::test
