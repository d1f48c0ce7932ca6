// Issue 34, item 2: logit_bias (OpenAI's {"token id": -100..100}, llama.cpp's [[id, bias]]) is
// applied before sampling: -100 bans a token, +100 makes it the greedy choice; keys that are not
// token ids of this vocabulary and biases out of range are a 400 naming logit_bias.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "server_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

TEST(LogitBias, SamplerBansAndFavoursTokens) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
  SamplerParams p;
  p.temp = 0;  // greedy
  EXPECT_EQ(Sampler(p, 4).sample(logits.data(), {}), 1);
  p.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(Sampler(p, 4).sample(logits.data(), {}), 2) << "a token biased -100 is banned";
  p.logit_bias = {{3, 5.0f}};
  EXPECT_EQ(Sampler(p, 4).sample(logits.data(), {}), 3) << "+5 lifts 0.5 over 3";
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}, {2, -100.0f}};
  p.temp = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p, 4);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(logits.data(), {}), 3) << "banned tokens were drawn";
}

int first_status(TestServer& ts, const json& body, std::string* text = nullptr) {
  auto r = ts.client()->Post("/v1/completions", body.dump(), "application/json");
  if (!r) return 0;
  if (text && r->status == 200) *text = json::parse(r->body)["choices"][0]["text"].get<std::string>();
  return r->status;
}

TEST(LogitBias, ThroughTheServer) {
  SKIP_WITHOUT_SERVER_FIXTURE();
  TestServer ts(server::ServerOptions{}, /*n_seq=*/1, /*n_ctx=*/256);
  const json base = {{"prompt", "The quick brown fox"}, {"max_tokens", 1}, {"temperature", 0}};
  std::string greedy;
  ASSERT_EQ(first_status(ts, base, &greedy), 200);
  ASSERT_FALSE(greedy.empty());
  // Ban every token of the greedy piece: the first token changes.
  json ban = base;
  for (int32_t t : ts.tok->encode(greedy, false, false)) ban["logit_bias"][std::to_string(t)] = -100;
  std::string other;
  ASSERT_EQ(first_status(ts, ban, &other), 200);
  EXPECT_NE(other, greedy) << "a token biased -100 was chosen";
  // +100 on one ordinary token: greedy picks it (llama.cpp's array form).
  int32_t pick = -1;
  for (int32_t t = 300; t < ts.tok->n_vocab() && pick < 0; ++t)
    if (!ts.tok->is_eog(t) && ts.tok->token_to_piece(t, false).size() >= 2) pick = t;
  ASSERT_GE(pick, 0);
  json favour = base;
  favour["logit_bias"] = json::array({json::array({pick, 100})});
  std::string picked;
  ASSERT_EQ(first_status(ts, favour, &picked), 200);
  EXPECT_EQ(picked, ts.tok->token_to_piece(pick, false));
  // Bad values: 400 naming the field.
  for (const json& bad : {json{{"abc", 1}}, json{{"5", 101}}, json{{"5", "x"}}, json{{std::to_string(ts.eng->config().n_vocab), 1}}, json(3)}) {
    json b = base;
    b["logit_bias"] = bad;
    auto r = ts.client()->Post("/v1/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad.dump() << " " << r->body;
    EXPECT_NE(r->body.find("logit_bias"), std::string::npos) << r->body;
  }
}

}  // namespace
}  // namespace strata::test
