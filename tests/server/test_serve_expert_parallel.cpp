// strata serve --expert-parallel under mpirun (loopback): the same completions as one process,
// with 1 and 4 slots and four requests at once.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <regex>
#include <sstream>
#include <thread>

#include "serve_process.h"

#ifdef STRATA_MPIEXEC
using namespace strata::test;


TEST(ServeExpertParallel, SameCompletionsAsOneProcess) {
  if (!have_server_fixture()) STRATA_MISSING_FIXTURE(server_fixture() + " (serve --expert-parallel)");
  for (const char* slots : {"1", "4"}) {
    const std::vector<std::string> args = {"-m", server_fixture("deepseek2-q4_k_m"), "--port", "0", "--parallel", slots, "-c", "128", "-t", "1"};
    std::vector<std::string> ep_args = args;
    ep_args.insert(ep_args.end(), {"--expert-parallel", "--ep-timeout", "60"});
    ServeProcess one("serve_ep_one", args);
    ASSERT_TRUE(one.ready()) << one.log();
    const auto a = four_completion_texts(one);
    one.stop();
    ServeProcess ep("serve_ep_two", ep_args, {STRATA_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2"});
    ASSERT_TRUE(ep.ready()) << ep.log();
    const auto b = four_completion_texts(ep);
    ep.stop();
    for (int i = 0; i < 4; ++i) {
      EXPECT_NE(a[i], "(failed)");
      EXPECT_FALSE(a[i].empty());
      EXPECT_EQ(a[i], b[i]) << "slots " << slots << ", request " << i;
    }
    EXPECT_NE(ep.log().find("expert parallelism: 2 ranks"), std::string::npos) << ep.log();
  }
}
#endif

#ifdef STRATA_MPIEXEC
// A rank that stops answering mid-request: the client gets an error naming the rank and
// --ep-timeout (not a cut connection, not a short completion presented as complete), and the job
// ends by itself.
TEST(ServeExpertParallel, StalledRankFailsTheRequestWithTheReasonAndEndsTheJob) {
  if (!have_server_fixture()) STRATA_MISSING_FIXTURE(server_fixture() + " (serve --expert-parallel)");
  ::setenv("STRATA_EP_FAULT", "stall:1:3", 1);  // rank 1 answers 3 MoE-layer jobs, then nothing
  ServeProcess ep("serve_ep_stall", {"-m", server_fixture("deepseek2-q4_k_m"), "--port", "0", "-c", "128", "-t", "1", "--expert-parallel", "--ep-timeout", "2"},
                  {STRATA_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2"});
  ::unsetenv("STRATA_EP_FAULT");
  ASSERT_TRUE(ep.ready()) << ep.log();
  httplib::Client c("127.0.0.1", ep.port());
  c.set_read_timeout(60);
  const nlohmann::json req = {{"prompt", "The quick brown fox"}, {"max_tokens", 32}, {"temperature", 0}};
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r) << "no answer:\n" << ep.log();
  EXPECT_GE(r->status, 500) << r->body;
  EXPECT_NE(r->body.find("rank 1 did not answer MoE layer"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("--ep-timeout"), std::string::npos) << r->body;
  const int st = ep.reap();
  ASSERT_NE(st, -1) << "the job did not end:\n" << ep.log();
  EXPECT_FALSE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << ep.log();
  EXPECT_NE(ep.log().find("ending the job"), std::string::npos) << ep.log();
}
#endif

#ifdef STRATA_MPIEXEC
namespace {

// Prometheus text exposition: every line a HELP, a TYPE, or a sample `name{label="v",...} value` of a
// family whose TYPE came before, no series twice. Returns the samples (series -> value); adds a
// failure naming the first bad line.
std::map<std::string, double> parse_prometheus(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)"), type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge))");
  static const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? (-?[0-9.eE+-]+|NaN|[+-]Inf))");
  std::map<std::string, double> out;
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, m, help)) continue;
    if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(typed.insert(m[1]).second) << "a second TYPE line: " << line;
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not Prometheus text: '" << line << "'";
      continue;
    }
    EXPECT_TRUE(typed.count(m[1])) << "a sample before its TYPE: " << line;
    const std::string series = std::string(m[1]) + std::string(m[2]);
    EXPECT_TRUE(out.emplace(series, std::stod(m[4])).second) << "series twice: " << line;
  }
  return out;
}

}  // namespace

// While it serves, rank 0 knows each rank's figures (every answer carries the rank's counters):
// /metrics has strata_ep_rank_*{rank="r"}, /stats has "expert_parallel". Rank 1 streams (a cache
// of 3 experts), so it reads bytes.
TEST(ServeExpertParallel, MetricsAndStatsShowEachRankWhileServing) {
  if (!have_server_fixture()) STRATA_MISSING_FIXTURE(server_fixture() + " (serve --expert-parallel)");
  ServeProcess ep("serve_ep_metrics",
                  {"-m", server_fixture("deepseek2-q4_k_m"), "--port", "0", "-c", "128", "-t", "1", "--cache-experts", "3", "--expert-parallel",
                   "--ep-timeout", "60"},
                  {STRATA_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2"});
  ASSERT_TRUE(ep.ready()) << ep.log();
  for (const std::string& t : four_completion_texts(ep)) EXPECT_NE(t, "(failed)");
  httplib::Client c("127.0.0.1", ep.port());
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r && r->status == 200) << ep.log();
  const std::map<std::string, double> m = parse_prometheus(r->body);
  auto at = [&](const std::string& series) {
    const auto it = m.find(series);
    EXPECT_NE(it, m.end()) << series << " missing:\n" << r->body;
    return it == m.end() ? -1.0 : it->second;
  };
  const double jobs1 = at("strata_ep_rank_jobs_total{rank=\"1\"}");
  EXPECT_GT(jobs1, 0);
  EXPECT_GT(at("strata_ep_rank_pairs_total{rank=\"1\"}"), 0);
  EXPECT_GT(at("strata_ep_rank_bytes_read_total{rank=\"1\"}"), 0);
  EXPECT_GT(at("strata_ep_rank_misses_total{rank=\"1\"}"), 0);
  EXPECT_GE(at("strata_ep_rank_hits_total{rank=\"1\"}"), 0);
  EXPECT_GE(at("strata_ep_rank_compute_seconds_total{rank=\"1\"}"), 0);
  EXPECT_EQ(at("strata_ep_rank_jobs_total{rank=\"0\"}"), jobs1) << "rank 0 sent as many jobs as rank 1 answered";
  auto s = c.Get("/stats");
  ASSERT_TRUE(s && s->status == 200) << ep.log();
  const auto j = nlohmann::json::parse(s->body);
  ASSERT_TRUE(j.contains("expert_parallel")) << j.dump();
  EXPECT_EQ(j["expert_parallel"]["ranks"], 2);
  EXPECT_EQ(j["expert_parallel"]["per_rank"][1]["jobs"].get<double>(), jobs1);  // nothing ran in between
  ep.stop();
}
#endif
