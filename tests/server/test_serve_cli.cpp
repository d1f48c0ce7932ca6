// `strata serve` as a subprocess: it listens, answers, and exits cleanly on SIGTERM.
#include "serve_process.h"
#include "../cli/cli_util.h"
#include "core/units.h"
#include "model/model.h"
#include "runtime/routing_memory.h"

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

// -md: the draft model's slots draft for the server's (speculation tokens counted in /metrics); a
// draft of another vocabulary stops the server at start with an error naming both files.
TEST(ServeCli, DraftModelDraftsAndAnotherVocabularyIsAnErrorAtStart) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  const std::string draft = server_fixture("qwen3-dense-q8_0"), other = server_fixture("kimi-k2-q8_0");
  ServeProcess serve("serve_md_test", {"-m", server_fixture(), "-md", draft, "--port", "0", "--parallel", "2", "-c", "256", "-t", "1", "--draft-fixed"});
  ASSERT_TRUE(serve.started()) << "cannot start " << STRATA_BINARY;
  ASSERT_TRUE(serve.ready()) << serve.log();
  httplib::Client c("127.0.0.1", serve.port());
  auto r = c.Post("/v1/completions", json{{"prompt", "The quick brown fox"}, {"max_tokens", 16}, {"ignore_eos", true}, {"temperature", 0}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  const size_t at = m->body.find("\nstrata_draft_tokens_total ");
  ASSERT_NE(at, std::string::npos) << m->body;
  EXPECT_GT(std::stod(m->body.substr(at + 27)), 0) << m->body;
  const int st = serve.stop();
  EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << serve.log();

  const CmdResult bad = run_cmd("serve -m " + other + " -md " + draft + " --port 0 -c 256 -t 1");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("error:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find(draft), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find(other), std::string::npos) << bad.err;
  const CmdResult no_md = run_cmd("serve -m " + server_fixture() + " --draft model --port 0 -c 256 -t 1");
  EXPECT_NE(no_md.code, 0);
  EXPECT_NE(no_md.err.find("-md FILE"), std::string::npos) << no_md.err;
}

// --draft lookup under a budget: each slot's routing memory (for predicted routing, used while
// experts stream) is in the memory plan, as drafting bytes, exactly routing_memory_bytes for the
// server's slots. The lossy routing knobs given at start are in /props, the route cache's choices in /stats.
TEST(ServeCli, LookupRoutingMemoryIsInTheMemoryPlan) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  ServeProcess serve("serve_route_mem_test", {"-m", server_fixture(), "--draft", "lookup", "--port", "0", "--parallel", "2", "-c", "256", "-b", "64",
                                               "-t", "1", "--ram-budget", "64M", "--route-cache", "1,6", "--moe-min-mass", "0.9"});
  ASSERT_TRUE(serve.started()) << "cannot start " << STRATA_BINARY;
  ASSERT_TRUE(serve.ready()) << serve.log();
  httplib::Client c("127.0.0.1", serve.port());
  auto props = c.Get("/props");
  ASSERT_TRUE(props);
  const json tier = json::parse(props->body)["expert_tier"];
  const uint64_t want = routing_memory_bytes(Model::load(server_fixture())->config(), 256, 64, 2);
  EXPECT_NE(tier["plan"].get<std::string>().find("drafting " + format_bytes(want)), std::string::npos) << tier.dump();
  // Issue 37's knobs are the server's (every request routes with them), reported as given.
  const json knobs = json::parse(props->body)["moe_knobs"];
  EXPECT_EQ(knobs["route_cache"], (json{{"keep", 1}, {"cands", 6}})) << knobs.dump();
  EXPECT_FLOAT_EQ(knobs["min_mass"].get<float>(), 0.9f) << knobs.dump();
  EXPECT_EQ(knobs["k"], 0) << knobs.dump();
  // /stats counts the route cache's choices: 4 generated tokens routed at least k = 3 experts in each of the layers.
  auto r = c.Post("/v1/completions", json{{"prompt", "hello"}, {"max_tokens", 4}, {"ignore_eos", true}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto stats = c.Get("/stats");
  ASSERT_TRUE(stats);
  const json rc = json::parse(stats->body)["route_cache"];
  EXPECT_GE(rc["slots"].get<uint64_t>(), 4u * 3) << stats->body;
  EXPECT_EQ(rc["slots"].get<uint64_t>() % 3, 0u) << stats->body;
  EXPECT_LE(rc["route_agreement"].get<double>(), 1.0) << stats->body;
  const int st = serve.stop();
  EXPECT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0) << serve.log();
}

}  // namespace

// Issue 34, item 7: a second server on a port another one listens on fails at start, naming it
// (no SO_REUSEPORT: the kernel would split connections between the two).
TEST(ServeCli, ASecondServerOnABusyPortFailsWithAddressInUse) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  ServeProcess first("serve_busy_first", {"-m", server_fixture(), "--port", "0", "-c", "256", "-t", "1", "--disk-probe", "0"});
  ASSERT_TRUE(first.ready()) << first.log();
  const CmdResult second = run_cmd("serve -m " + server_fixture() + " --port " + std::to_string(first.port()) + " -c 256 -t 1 --disk-probe 0");
  EXPECT_NE(second.code, 0);
  EXPECT_NE(second.err.find("address in use"), std::string::npos) << second.err;
}

}  // namespace strata::test
