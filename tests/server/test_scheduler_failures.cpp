// A failure fails only the requests it concerns: a request whose sampling fails ends with an
// error while the request decoding beside it in the same passes completes, token for token as
// it would alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <thread>

#include "core/clock.h"

#include "runtime/sampler.h"
#include "server/scheduler.h"
#include "server_util.h"

namespace strata::test {
namespace {

std::shared_ptr<server::GenRequest> request(const std::vector<int32_t>& prompt, std::vector<int32_t>* out, bool fail_at_third) {
  server::GenParams p;
  p.prompt = prompt;
  p.sampling.temp = 0;
  p.max_tokens = 8;
  p.ignore_eos = true;
  auto n = std::make_shared<int>(0);
  p.on_logits = [out, n, fail_at_third](const float* l, int nv) {
    if (fail_at_third && ++*n == 3) throw std::runtime_error("sampling failed for this request");
    if (out) out->push_back(Sampler::argmax(l, nv));
  };
  return std::make_shared<server::GenRequest>(std::move(p));
}

server::GenEvent wait_final(server::GenRequest& r) {
  for (;;)
    for (auto& e : r.wait(60000))
      if (e.final) return e;
}

TEST(SchedulerFailures, OneRequestFailingLeavesItsNeighbourIntact) {
  ASSERT_TRUE(std::filesystem::exists(server_fixture())) << server_fixture() << " is absent";
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(/*n_seq=*/2, 256, &tok);
  const auto a = tok->encode("The capital of France is", true, true);
  const auto b = tok->encode("Once upon a time there", true, true);
  std::vector<int32_t> alone;
  {
    server::Scheduler sched(*eng, *tok, server::SchedulerOptions{});
    auto r = request(b, &alone, false);
    ASSERT_TRUE(sched.submit(r));
    EXPECT_EQ(wait_final(*r).finish, server::Finish::Length);
  }
  ASSERT_EQ(alone.size(), 8u);
  server::Scheduler sched(*eng, *tok, server::SchedulerOptions{});
  std::vector<int32_t> beside;
  auto bad = request(a, nullptr, true);
  auto good = request(b, &beside, false);
  ASSERT_TRUE(sched.submit(bad));
  ASSERT_TRUE(sched.submit(good));
  const server::GenEvent eb = wait_final(*bad);
  EXPECT_EQ(eb.finish, server::Finish::Error);
  EXPECT_NE(eb.error.find("sampling failed"), std::string::npos) << eb.error;
  EXPECT_EQ(wait_final(*good).finish, server::Finish::Length);
  EXPECT_EQ(beside, alone);
  // The figures are published after the step that ended both requests.
  server::SchedulerStats st = sched.stats();
  for (const double end = clock_s() + 60; st.requests_failed + st.requests_done < 2 && clock_s() < end; st = sched.stats()) std::this_thread::yield();
  EXPECT_EQ(st.requests_failed, 1u);
  EXPECT_EQ(st.requests_done, 1u);
}

}  // namespace
}  // namespace strata::test
