// `strata serve` takes its API key from --api-key-file or $STRATA_API_KEY (not the command line).
#include <cstdlib>

#include "serve_process.h"

namespace strata::test {
namespace {

int key_status(int port, const std::string& key) {
  httplib::Client c("127.0.0.1", port);
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  auto r = c.Get("/v1/models", h);
  return r ? r->status : -1;
}

TEST(ServeKey, FromAFileOrTheEnvironment) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const std::string file = "/tmp/strata_key_test_" + std::to_string(::getpid());
  std::ofstream(file) << "  file-key-1  \nsecond line ignored\n";
  {
    ServeProcess serve("serve_key_file", {"-m", server_fixture(), "--port", "0", "--parallel", "1", "-c", "256", "-t", "1", "--api-key-file", file});
    ASSERT_TRUE(serve.ready()) << serve.log();
    EXPECT_EQ(key_status(serve.port(), ""), 401);
    EXPECT_EQ(key_status(serve.port(), "second line ignored"), 401);
    EXPECT_EQ(key_status(serve.port(), "file-key-1"), 200);
  }
  ::setenv("STRATA_API_KEY", "env-key-2", 1);
  {
    ServeProcess serve("serve_key_env", {"-m", server_fixture(), "--port", "0", "--parallel", "1", "-c", "256", "-t", "1"});
    ::unsetenv("STRATA_API_KEY");
    ASSERT_TRUE(serve.ready()) << serve.log();
    EXPECT_EQ(key_status(serve.port(), ""), 401);
    EXPECT_EQ(key_status(serve.port(), "env-key-2"), 200);
  }
  ::unsetenv("STRATA_API_KEY");
  std::ofstream(file) << "\n";
  ServeProcess empty("serve_key_empty", {"-m", server_fixture(), "--port", "0", "--api-key-file", file});
  EXPECT_FALSE(empty.ready());
  EXPECT_NE(empty.log().find("no key in the file"), std::string::npos) << empty.log();
  std::remove(file.c_str());
}

}  // namespace
}  // namespace strata::test
