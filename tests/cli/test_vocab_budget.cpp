// Issue 33: the memory plan at a real vocabulary size. A model with Qwen3's 151,936-token
// vocabulary (strata synth) has 600 KB logits rows and tokenizer and grammar tables of megabytes:
// `perplexity` and `serve` plan them (MemoryPlan::logits, vocab, requests) and stay under a
// --ram-budget barely above the plan; the server through hostile requests and a load of 32 clients
// over its five APIs (RSS drift bounded), and inside a memory cgroup equal to its budget.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../server/serve_process.h"
#include "cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

constexpr int kVocab = 151936;  // Qwen3's

// The model, made once per test binary.
const std::string& vocab_model() {
  static const std::string path = [] {
    const std::string p = "/tmp/strata_vocab151k_" + std::to_string(::getpid()) + ".gguf";
    const CmdResult r = run_cmd("synth --preset tiny --vocab " + std::to_string(kVocab) + " --layers 2 --experts 16 --seed 5 --out " + p);
    EXPECT_EQ(r.code, 0) << r.err;
    std::atexit([] { std::remove(("/tmp/strata_vocab151k_" + std::to_string(::getpid()) + ".gguf").c_str()); });
    return p;
  }();
  return path;
}

std::string words_file() {
  const std::string p = "/tmp/strata_vocab151k_" + std::to_string(::getpid()) + ".txt";
  std::ofstream f(p);
  const char* w[] = {"the", "river", "stone", "light", "morning", "walked", "across", "quiet", "fields", "of", "green", "and", "gold"};
  for (int i = 0; i < 4000; ++i) f << w[(i * 7 + i / 13) % 13] << ((i % 17) == 16 ? ".\n" : " ");
  return p;
}

TEST(VocabBudget, PerplexityStaysUnderABudgetBarelyAboveThePlan) {
  const std::string m = vocab_model(), text = words_file();
  const std::string base = "perplexity -m " + m + " -f " + text + " -c 256 -b 64 --chunks 2 -t 2 --json ";
  const CmdResult a = run_cmd(base + "--cache-experts 1");
  ASSERT_EQ(a.code, 0) << a.err;
  const json ja = json::parse(last_line(a.out), nullptr, false);
  ASSERT_TRUE(ja.contains("memory")) << a.out;
  const json& pa = ja["memory"];
  // A pass's 64 rows (and eval_rows' 64), never the window's 256.
  EXPECT_EQ(pa["logits"].get<uint64_t>(), 4ull * kVocab * (64 + 64));
  EXPECT_GT(pa["vocab"].get<uint64_t>(), 1u << 20) << "the tokenizer's tables at 151k tokens";
  const uint64_t budget = pa["planned"].get<uint64_t>() + (1u << 20);
  const CmdResult b = run_cmd(base + "--ram-budget " + std::to_string(budget));
  ASSERT_EQ(b.code, 0) << b.err;
  const json jb = json::parse(last_line(b.out), nullptr, false);
  ASSERT_TRUE(jb.contains("memory")) << b.out;
  EXPECT_TRUE(jb["memory"]["streaming"].get<bool>());
  EXPECT_EQ(jb["ppl"].get<double>(), ja["ppl"].get<double>()) << "the cache size changed the arithmetic";
  const uint64_t peak = jb["memory"]["peak_rss"].get<uint64_t>();
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LE(peak, budget) << "peak RSS over the budget";
#endif
  std::printf("[perplexity 151k] budget %.1f MiB, peak RSS %.1f MiB, logits planned %.1f MiB\n", budget / 1048576.0, peak / 1048576.0,
              pa["logits"].get<uint64_t>() / 1048576.0);
  std::remove(text.c_str());
}

// ---- serve ----------------------------------------------------------------------------------

std::vector<std::string> serve_args(const std::string& budget_opt) {
  // A request memory of its own: the plan and the budget runs agree on it (its default follows the budget).
  std::vector<std::string> a = {"-m", vocab_model(), "--port", "0", "--parallel", "4", "-c", "512", "-t", "2", "--disk-probe", "0", "--request-memory", "16M"};
  std::istringstream ss(budget_opt);
  for (std::string w; ss >> w;) a.push_back(w);
  return a;
}

std::string many_tools(int n) {
  std::string tools;
  for (int i = 0; i < n; ++i)
    tools += (i ? "," : "") + std::string(R"({"type":"function","function":{"name":"f)") + std::to_string(i) +
             R"(","description":"looks up the weather in a city of the given country and answers in the units asked for",)"
             R"("parameters":{"type":"object","properties":{"city":{"type":"string"},"units":{"type":"string","enum":["c","f"]}}}}})";
  return R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[)" + tools + "]}";
}

std::string deep_tools(int depth) {
  std::string d;
  for (int i = 0; i < depth; ++i) d += R"({"a":)";
  d += "1" + std::string(static_cast<size_t>(depth), '}');
  return R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":)" + d + "}}]}";
}

// One request of each API; returns how many did not answer 200.
int five_apis(httplib::Client& c, int i) {
  const std::string say = "tell me about the river number " + std::to_string(i);
  const std::pair<const char*, std::string> reqs[] = {
      {"/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", say}}}}, {"max_tokens", 4}}.dump()},
      {"/v1/completions", json{{"prompt", say}, {"max_tokens", 4}}.dump()},
      {"/v1/responses", json{{"input", say}, {"max_output_tokens", 4}}.dump()},
      {"/v1/messages", json{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", say}}}}, {"max_tokens", 4}}.dump()},
      {"/api/chat", json{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", say}}}}, {"stream", false}, {"options", {{"num_predict", 4}}}}.dump()},
  };
  int bad = 0;
  for (const auto& [path, body] : reqs) {
    auto r = c.Post(path, body, "application/json");
    if (!r || r->status != 200) ++bad;
  }
  return bad;
}

// 32 clients, each `rounds` times over the five APIs; returns the requests that failed.
int load_round(int port, int rounds) {
  std::atomic<int> bad{0};
  std::vector<std::thread> th;
  for (int k = 0; k < 32; ++k)
    th.emplace_back([&, k] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(300, 0);
      for (int r = 0; r < rounds; ++r) bad += five_apis(c, k * 100 + r);
    });
  for (auto& t : th) t.join();
  return bad.load();
}

// The plan of a server on this model with the smallest expert cache (its floor), from /stats.
json planned_serve() {
  ServeProcess s("vocab_plan", serve_args("--cache-experts 1"));
  EXPECT_TRUE(s.ready()) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  auto r = c.Get("/stats");
  EXPECT_TRUE(r && r->status == 200);
  return r ? json::parse(r->body, nullptr, false)["plan"] : json();
}

TEST(VocabBudget, ServeStaysUnderItsBudgetThroughHostileRequestsAndLoad) {
  const json plan = planned_serve();
  ASSERT_TRUE(plan.contains("planned")) << plan.dump();
  // Four slots' sampling buffers (32 bytes per entry each), the HTTP threads and the request memory.
  EXPECT_GE(plan["requests"].get<uint64_t>(), 4ull * 32 * kVocab);
  EXPECT_GT(plan["vocab"].get<uint64_t>(), 1u << 20) << "tokenizer and grammar index at 151k tokens";
  EXPECT_EQ(plan["logits"].get<uint64_t>(), 4ull * kVocab * (4 + 4)) << "a row per slot, no drafts";
  const uint64_t budget = plan["planned"].get<uint64_t>() + (2u << 20);
  ServeProcess s("vocab_budget", serve_args("--ram-budget " + std::to_string(budget)));
  ASSERT_TRUE(s.ready()) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(300, 0);
  // Hostile: 3000 tools (each handled as a prompt and a grammar), tools nested 100k deep.
  auto r = c.Post("/v1/chat/completions", many_tools(3000), "application/json");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->status == 400 || r->status == 413) << r->status << " " << r->body.substr(0, 200);
  r = c.Post("/v1/chat/completions", deep_tools(100000), "application/json");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->status == 400 || r->status == 413) << r->status << " " << r->body.substr(0, 200);  // 413: past the request memory
  // Constrained decoding: the grammar index's masks over 151k tokens.
  r = c.Post("/v1/chat/completions",
             json{{"messages", {{{"role", "user"}, {"content", "a color"}}}}, {"max_tokens", 6},
                  {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "c"}, {"schema", {{"type", "object"}, {"properties", {{"c", {{"type", "string"}}}}}}}}}}}}
                 .dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body.substr(0, 200);
  // Load: 32 clients over the five APIs; RSS after the first round against after three more.
  EXPECT_EQ(load_round(s.port(), 1), 0);
  const long rss1 = s.status_bytes("VmRSS");
  EXPECT_EQ(load_round(s.port(), 3), 0);
  const long rss2 = s.status_bytes("VmRSS");
  const long peak = s.status_bytes("VmHWM");
  std::printf("[serve 151k] budget %.1f MiB (requests %.1f, vocabulary %.1f, logits %.1f); RSS %.1f -> %.1f MiB over 3 rounds of 160 "
              "requests, peak %.1f MiB\n",
              budget / 1048576.0, plan["requests"].get<uint64_t>() / 1048576.0, plan["vocab"].get<uint64_t>() / 1048576.0,
              plan["logits"].get<uint64_t>() / 1048576.0, rss1 / 1048576.0, rss2 / 1048576.0, peak / 1048576.0);
  EXPECT_LT(rss2 - rss1, 16l << 20) << "RSS drifts under a steady load";
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LE(static_cast<uint64_t>(peak), budget) << "peak RSS over --ram-budget";
#endif
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// A memory cgroup (v1) of `limit` bytes under this process's own, removed at the end.
class MemCgroup {
 public:
  explicit MemCgroup(uint64_t limit) {
    std::ifstream f("/proc/self/cgroup");
    std::string line, own;
    while (std::getline(f, line))
      if (const size_t p = line.find(":memory:"); p != std::string::npos) own = line.substr(p + 8);
    dir_ = "/sys/fs/cgroup/memory" + own + "/strata-test-" + std::to_string(::getpid());
    if (own.empty() || ::mkdir(dir_.c_str(), 0755) != 0) {
      dir_.clear();
      return;
    }
    std::ofstream(dir_ + "/memory.limit_in_bytes") << limit;
    std::ofstream(dir_ + "/memory.swappiness") << 0;
  }
  ~MemCgroup() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool ok() const { return !dir_.empty() && std::filesystem::exists(dir_ + "/cgroup.procs"); }
  // A command prefix that joins the cgroup, then runs the rest in the same process.
  std::vector<std::string> wrapper() const { return {"/bin/sh", "-c", "echo $$ > " + dir_ + "/cgroup.procs && exec \"$0\" \"$@\""}; }
  uint64_t read(const char* file) const {
    std::ifstream f(dir_ + "/" + file);
    uint64_t v = 0;
    f >> v;
    return v;
  }

 private:
  std::string dir_;
};

TEST(VocabBudget, InACgroupEqualToItsBudget3000ToolsAreRefusedAndTheServerLives) {
  const json plan = planned_serve();
  ASSERT_TRUE(plan.contains("planned")) << plan.dump();
  const uint64_t budget = plan["planned"].get<uint64_t>() + (2u << 20);
  MemCgroup cg(budget);
  ASSERT_TRUE(cg.ok()) << "cannot make a memory cgroup (cgroup v1 memory controller, as root) under /sys/fs/cgroup/memory";
  {
    ServeProcess s("vocab_cgroup", serve_args("--ram-budget " + std::to_string(budget)), cg.wrapper());
    ASSERT_TRUE(s.ready()) << s.log();
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(300, 0);
    const std::string body = many_tools(3000);
    for (int i = 0; i < 3; ++i) {
      auto r = c.Post("/v1/chat/completions", body, "application/json");
      ASSERT_TRUE(r) << "no answer: the server died in its cgroup\n" << s.log();
      EXPECT_TRUE(r->status == 400 || r->status == 413) << r->status;
    }
    EXPECT_EQ(load_round(s.port(), 1), 0);
    auto h = c.Get("/health");
    ASSERT_TRUE(h) << s.log();
    EXPECT_EQ(h->status, 200);
    std::printf("[serve 151k in a cgroup] limit %.1f MiB, cgroup peak %.1f MiB (page cache included), OOM kills %llu\n", budget / 1048576.0,
                cg.read("memory.max_usage_in_bytes") / 1048576.0, static_cast<unsigned long long>(cg.read("memory.failcnt")));
    EXPECT_EQ(s.stop(), 0) << "the server did not end cleanly (killed in its cgroup?)\n" << s.log();
  }
}

}  // namespace
}  // namespace strata::test
