// `strata serve` as a subprocess: it listens, answers, and exits cleanly on SIGTERM.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "../wait_until.h"
#include "server_util.h"

extern char** environ;

namespace strata::test {
namespace {

using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ServeCli, ListensAnswersAndStopsOnSigterm) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const std::string log = "/tmp/strata_serve_test_" + std::to_string(::getpid()) + ".log";
  const std::string model = server_fixture();
  std::vector<std::string> args = {STRATA_BINARY, "serve", "-m", model, "--port", "0", "--parallel", "2", "-c", "256", "-t", "1", "--api-key", "k1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  ASSERT_EQ(0, posix_spawn(&pid, STRATA_BINARY, &fa, nullptr, argv.data(), environ));
  posix_spawn_file_actions_destroy(&fa);
  // Wait until it answers /health (or exits early).
  int port = 0, early_status = 0;
  bool exited = false;
  const bool ready = wait_until([&] {
    if (::waitpid(pid, &early_status, WNOHANG) == pid) return exited = true;
    std::smatch m;
    const std::string text = slurp(log);
    static const std::regex re("listening on http://127\\.0\\.0\\.1:(\\d+)");
    if (port == 0 && std::regex_search(text, m, re)) port = std::stoi(m[1]);
    if (!port) return false;
    httplib::Client c("127.0.0.1", port);
    auto h = c.Get("/health");
    return h && h->status == 200;
  });
  if (!ready || exited) {
    if (!exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    FAIL() << (exited ? "strata serve exited before answering /health" : "strata serve did not answer /health within 60 s") << ":\n" << slurp(log);
  }
  httplib::Client c("127.0.0.1", port);
  auto r = c.Post("/v1/chat/completions", {{"Authorization", "Bearer k1"}},
                  json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["object"], "chat.completion");
  auto unauth = c.Get("/v1/models");
  ASSERT_TRUE(unauth);
  EXPECT_EQ(unauth->status, 401);
  ::kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(pid, ::waitpid(pid, &st, 0));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(log);
  std::remove(log.c_str());
}

}  // namespace
}  // namespace strata::test
