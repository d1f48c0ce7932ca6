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
  // A template that raises unless the server's --chat-template-kwargs set `flag`, and opens <think>.
  const std::string tmpl = "/tmp/strata_serve_test_" + std::to_string(::getpid()) + ".jinja";
  std::ofstream(tmpl) << "{% if not flag %}{{ raise_exception('no flag') }}{% endif %}"
                         "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n<think>\n";
  std::vector<std::string> args = {STRATA_BINARY, "serve", "-m", model, "--port", "0", "--parallel", "2", "-c", "256", "-t", "1", "--api-key", "k1",
                                   "--chat-template-file", tmpl, "--chat-template-kwargs", R"({"flag": true})", "--reasoning-budget", "2",
                                   "--draft", "lookup", "--draft-max", "3"};
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
                  json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 8}, {"logprobs", true}, {"ignore_eos", true}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const json reply = json::parse(r->body);
  EXPECT_EQ(reply["object"], "chat.completion");
  // --reasoning-budget 2: two tokens of reasoning, then the forced close.
  std::string after;
  for (size_t i = 2; i < reply["choices"][0]["logprobs"]["content"].size(); ++i)
    for (const auto& b : reply["choices"][0]["logprobs"]["content"][i]["bytes"]) after += static_cast<char>(b.get<int>());
  EXPECT_EQ(after.rfind("</think>", 0), 0u) << r->body;
  auto models = c.Get("/v1/models", {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["meta"]["chat_format"], "template-file");
  // --draft lookup --draft-max 3: the defaults requests speculate with.
  auto props = c.Get("/props", {{"Authorization", "Bearer k1"}});
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["default_generation_settings"]["params"]["speculative.n_max"], 3) << props->body;
  auto unauth = c.Get("/v1/models");
  ASSERT_TRUE(unauth);
  EXPECT_EQ(unauth->status, 401);
  ::kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(pid, ::waitpid(pid, &st, 0));
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(log);
  std::remove(log.c_str());
  std::remove(tmpl.c_str());
}

}  // namespace
}  // namespace strata::test
