// Prompt prefix reuse per slot: a request whose prompt shares a prefix with the prompt the slot ran
// before keeps those KV rows and evaluates only the rest. Its logits must be bitwise those of a
// fresh run (the whole prompt in one pass, then one token per pass), as for BatchedLogits.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "runtime/sampler.h"
#include "server/scheduler.h"
#include "../wait_until.h"
#include "server_util.h"

namespace strata::test {
namespace {

constexpr int kReuseCtx = 256;
constexpr int kReuseGen = 6;

struct Turn {
  std::vector<int32_t> prompt;
  std::vector<std::vector<float>> logits;  // one row per generated token
  std::vector<int32_t> out;                // greedy tokens
};

void run_turn(server::Scheduler& sched, Turn& t, int n_vocab) {
  server::GenParams p;
  p.prompt = t.prompt;
  p.sampling.temp = 0;
  p.max_tokens = kReuseGen;
  p.ignore_eos = true;
  p.on_logits = [&t, n_vocab](const float* l, int n) {
    t.logits.emplace_back(l, l + n);
    t.out.push_back(Sampler::argmax(l, n_vocab));
  };
  auto r = std::make_shared<server::GenRequest>(std::move(p));
  ASSERT_TRUE(sched.submit(r));
  while (!r->done()) r->wait(100);
}

// The reuse counter once the scheduler has counted n_done finished requests.
uint64_t reused_after(server::Scheduler& sched, uint64_t n_done) {
  EXPECT_TRUE(wait_until([&] { return sched.stats().requests_done >= n_done; })) << "request " << n_done << " is not counted as done";
  return sched.stats().prompt_tokens_reused;
}

class PrefixReuse : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixReuse, ::testing::Values("qwen3moe-f32", "qwen3moe-q8_0", "deepseek2-f32", "gpt-oss-f32"));

// Five turns through one scheduler with two slots: 0: first turn. 1: the next turn of that chat
// (turn 0's prompt + its answer + a new message): turn 0's prompt rows are kept, its answer's are
// recomputed. 2: diverges after 5 tokens. 3: the same prompt again (all but the last two tokens
// kept). 4: shorter than the kept prefix. reused[i]: the reuse counter after turn i.
void run_turns(Engine& eng, tok::Tokenizer& tok, std::vector<Turn>& turns, std::vector<uint64_t>& reused) {
  const int nv = eng.config().n_vocab;
  auto enc = [&](const std::string& s, bool bos) { return tok.encode(s, bos, true); };
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  turns.assign(5, Turn{});
  reused.assign(turns.size(), 0);
  server::SchedulerOptions so;
  so.step_tokens = 16;  // the rest of a prompt is chunked too
  server::Scheduler sched(eng, tok, so);
  turns[0].prompt = enc("The quick brown fox jumps over the lazy dog. Tell me what happened next, in detail.", true);
  run_turn(sched, turns[0], nv);
  reused[0] = reused_after(sched, 1);
  turns[1].prompt = cat(cat(turns[0].prompt, turns[0].out), enc(" And then? Keep going, please.", false));
  run_turn(sched, turns[1], nv);
  reused[1] = reused_after(sched, 2);
  turns[2].prompt = cat(std::vector<int32_t>(turns[1].prompt.begin(), turns[1].prompt.begin() + 5), enc(" something else entirely", false));
  run_turn(sched, turns[2], nv);
  reused[2] = reused_after(sched, 3);
  turns[3].prompt = turns[2].prompt;
  run_turn(sched, turns[3], nv);
  reused[3] = reused_after(sched, 4);
  turns[4].prompt = std::vector<int32_t>(turns[2].prompt.begin(), turns[2].prompt.begin() + 4);
  run_turn(sched, turns[4], nv);
  reused[4] = reused_after(sched, 5);
}

// Every turn's logits are bitwise those of a fresh one-slot engine.
void expect_fresh_run_logits(const char* set, const std::vector<Turn>& turns) {
  auto solo = load_fixture_engine(/*n_seq=*/1, kReuseCtx, nullptr, set);
  const int nv = solo->config().n_vocab;
  for (size_t i = 0; i < turns.size(); ++i) {
    const Turn& t = turns[i];
    ASSERT_EQ(t.logits.size(), static_cast<size_t>(kReuseGen)) << "turn " << i;
    std::vector<float> logits;
    solo->eval(0, t.prompt.data(), static_cast<int>(t.prompt.size()), 0, false, logits);
    int pos = static_cast<int>(t.prompt.size());
    for (int s = 0; s < kReuseGen; ++s) {
      ASSERT_EQ(0, std::memcmp(logits.data(), t.logits[s].data(), sizeof(float) * nv)) << set << " turn " << i << " step " << s;
      const int32_t tk = Sampler::argmax(logits.data(), nv);
      solo->eval(0, &tk, 1, pos++, false, logits);
    }
  }
}

TEST_P(PrefixReuse, LogitsEqualFreshRun) {
  const char* set = GetParam();
  if (!std::filesystem::exists(server_fixture(set))) STRATA_MISSING_FIXTURE(server_fixture(set) + " (prefix reuse test)");
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(/*n_seq=*/2, kReuseCtx, &tok, set);
  std::vector<Turn> turns;
  std::vector<uint64_t> reused;
  run_turns(*eng, *tok, turns, reused);
  const size_t n0 = turns[0].prompt.size(), n2 = turns[2].prompt.size();
  EXPECT_EQ(reused[0], 0u);
  EXPECT_EQ(reused[1] - reused[0], n0);
  EXPECT_EQ(reused[2] - reused[1], 5u);
  EXPECT_EQ(reused[3] - reused[2], n2 - 2);
  EXPECT_EQ(reused[4] - reused[3], 2u);
  expect_fresh_run_logits(set, turns);
}

// Qwen3.5 MoE's DeltaNet state cannot be rewound: the same turns reuse nothing, and every slot
// that takes a new prompt starts from a cleared state (logits of a fresh run, bit for bit).
TEST(PrefixReuseNonRewindable, Qwen35MoeReusesNothingAndMatchesFreshRuns) {
  const char* set = "qwen35moe-q8_0";
  if (!std::filesystem::exists(server_fixture(set))) STRATA_MISSING_FIXTURE(server_fixture(set) + " (non-rewindable prefix test)");
  std::unique_ptr<tok::Tokenizer> tok;
  auto eng = load_fixture_engine(/*n_seq=*/2, kReuseCtx, &tok, set);
  ASSERT_FALSE(eng->model().rewindable());
  std::vector<Turn> turns;
  std::vector<uint64_t> reused;
  run_turns(*eng, *tok, turns, reused);
  EXPECT_EQ(reused.back(), 0u);
  expect_fresh_run_logits(set, turns);
}

}  // namespace
}  // namespace strata::test
