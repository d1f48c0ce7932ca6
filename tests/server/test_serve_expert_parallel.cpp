// strata serve --expert-parallel under mpirun (loopback): the same completions as one process,
// with 1 and 4 slots and four requests at once.
#include <gtest/gtest.h>

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
