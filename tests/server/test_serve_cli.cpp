// `strata serve` as a subprocess: it listens, answers, and exits cleanly on SIGTERM.
#include "serve_process.h"

namespace strata::test {
namespace {

using nlohmann::json;

TEST(ServeCli, ListensAnswersAndStopsOnSigterm) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const std::string model = server_fixture();
  // A template that raises unless the server's --chat-template-kwargs set `flag`, and opens <think>.
  const std::string tmpl = "/tmp/strata_serve_test_" + std::to_string(::getpid()) + ".jinja";
  std::ofstream(tmpl) << "{% if not flag %}{{ raise_exception('no flag') }}{% endif %}"
                         "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n<think>\n";
  ServeProcess serve("serve_test", {"-m", model, "--port", "0", "--parallel", "2", "-c", "256", "-t", "1", "--api-key", "k1", "--chat-template-file", tmpl,
                                    "--chat-template-kwargs", R"({"flag": true})", "--reasoning-budget", "2", "--draft", "lookup", "--draft-max", "3"});
  ASSERT_TRUE(serve.started()) << "cannot start " << STRATA_BINARY;
  ASSERT_TRUE(serve.ready()) << (serve.exited() ? "strata serve exited before answering /health" : "strata serve did not answer /health in time") << ":\n"
                             << serve.log();
  httplib::Client c("127.0.0.1", serve.port());
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
  const int st = serve.stop();
  EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << serve.log();
  std::remove(tmpl.c_str());
}

}  // namespace
}  // namespace strata::test
