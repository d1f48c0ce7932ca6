// strata perplexity on the committed trained model (models/strata-moe-tiny) and a held-out text
// beside it: windows as llama-perplexity, a perplexity far below the unigram baseline, and the
// KL-divergence mode against the model's own saved base (KL 0, every top-1 the same).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli_util.h"

using namespace strata::test;

namespace {
const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny";
const std::string kModel = kDir + "/model.gguf";
const std::string kText = kDir + "/traces/heldout-exodus.txt";  // 179 tokens
}  // namespace

TEST(PerplexityCli, TrainedModelAndSelfKl) {
  const std::string base = "/tmp/strata_ppl_base_" + std::to_string(::getpid()) + ".bin";
  const std::string common = " -c 64 -t 2 --cache-type-k f32 --cache-type-v f32 --json";
  const CmdResult a = run_cmd("perplexity -m " + kModel + " -f " + kText + common + " --kl-divergence-base " + base);
  ASSERT_EQ(a.code, 0) << a.err;
  const auto ja = nlohmann::json::parse(last_line(a.out));
  EXPECT_EQ(ja["chunks"].get<int>(), 179 / 64);
  EXPECT_EQ(ja["scored_tokens"].get<int>(), (179 / 64) * (64 - 1 - 32));
  const double ppl = ja["ppl"].get<double>();
  // The unigram baseline on the held-out set is 678.5 (models/strata-moe-tiny/README.md).
  EXPECT_GT(ppl, 1.0);
  EXPECT_LT(ppl, 300.0) << "the trained model should predict held-out scripture far better than token frequencies";

  const CmdResult b = run_cmd("perplexity -m " + kModel + " --kl-divergence " + base + common);
  ASSERT_EQ(b.code, 0) << b.err;
  const auto jb = nlohmann::json::parse(last_line(b.out));
  EXPECT_DOUBLE_EQ(jb["ppl"].get<double>(), ppl);  // the saved tokens, the same engine: the same figure
  const auto& kl = jb["kl_divergence"];
  EXPECT_LT(kl["mean"].get<double>(), 1e-6);
  EXPECT_EQ(kl["top1_agreement"].get<double>(), 1.0);
  EXPECT_NEAR(kl["base_ppl"].get<double>(), ppl, 1e-4 * ppl);

  // A base made with another window size is refused.
  const CmdResult c = run_cmd("perplexity -m " + kModel + " --kl-divergence " + base + " -c 32");
  EXPECT_NE(c.code, 0);
  EXPECT_NE(c.err.find("-c 64"), std::string::npos) << c.err;
  std::remove(base.c_str());
}

// Fewer experts per token (issue 37's --moe-k / --moe-min-mass), priced by the KL mode: the
// model's own k, or a mass of 1, give the base's logits exactly (the same KL figures as a run
// without the options);
// --moe-k 2 of the model's 4 and --moe-min-mass 0.6 give a KL above 0 whose quantiles are ordered
// (median <= p95 <= p99 <= max) and fewer bytes read per token while experts stream; --moe-k past
// the model's k is a clear error.
TEST(PerplexityCli, FewerExpertsArePricedInKlAndReadFewerBytes) {
  const std::string base = "/tmp/strata_ppl_knobs_" + std::to_string(::getpid()) + ".bin";
  const std::string common = " -c 64 -t 2 --json";
  ASSERT_EQ(run_cmd("perplexity -m " + kModel + " -f " + kText + common + " --kl-divergence-base " + base).code, 0);
  const auto kl = [&](const std::string& knobs) {
    const CmdResult r = run_cmd("perplexity -m " + kModel + " --kl-divergence " + base + common + " " + knobs);
    EXPECT_EQ(r.code, 0) << knobs << ": " << r.err;
    return nlohmann::json::parse(last_line(r.out))["kl_divergence"];
  };
  const auto self = kl("");  // the base's own logits again: what identical logits score
  for (const char* same : {"--moe-k 4", "--moe-min-mass 1"}) {
    const auto j = kl(same);
    EXPECT_EQ(j["mean"].get<double>(), self["mean"].get<double>()) << same;
    EXPECT_EQ(j["max"].get<double>(), self["max"].get<double>()) << same;
    EXPECT_EQ(j["top1_agreement"].get<double>(), 1.0) << same;
  }
  for (const char* fewer : {"--moe-k 2", "--moe-min-mass 0.6"}) {
    const auto j = kl(fewer);
    EXPECT_GT(j["mean"].get<double>(), 0.0) << fewer;
    EXPECT_LE(j["median"].get<double>(), j["p95"].get<double>()) << fewer;
    EXPECT_LE(j["p95"].get<double>(), j["p99"].get<double>()) << fewer;
    EXPECT_LE(j["p99"].get<double>(), j["max"].get<double>()) << fewer;
    EXPECT_GE(j["delta_ppl_err"].get<double>(), 0.0) << fewer;
  }
  std::remove(base.c_str());
  // Streaming: bytes of experts read per generated token fall with the experts computed.
  const auto bytes = [&](const std::string& knobs) {
    const CmdResult r = run_cmd("run -m " + kModel + " -f " + kText + " -n 24 --temp 0 -c 256 -t 2 --ram-budget 64M --no-warm-start --json " + knobs);
    EXPECT_EQ(r.code, 0) << knobs << ": " << r.err;
    return nlohmann::json::parse(last_line(r.out))["experts"]["bytes_read"].get<uint64_t>();
  };
  const uint64_t all = bytes(""), two = bytes("--moe-k 2");
  EXPECT_GT(all, 0u);
  EXPECT_LT(two, all);
  const CmdResult bad = run_cmd("perplexity -m " + kModel + " -f " + kText + common + " --moe-k 5");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("chooses 4 experts"), std::string::npos) << bad.err;
}

// Cache-conditional routing (issue 37's --route-cache J[,M]) on the trained model: J = k, or every
// expert resident (no budget), give the run's logits exactly; with experts streamed under a 64M
// budget (115 of 512 cached) J = 1 of 16 candidates has a KL above 0, a route agreement below 1,
// and fewer misses than the plain routing; malformed or out-of-range values are clear errors.
TEST(PerplexityCli, RouteCacheIsPricedInKlAndMissesLess) {
  const std::string base = "/tmp/strata_ppl_route_" + std::to_string(::getpid()) + ".bin";
  // -b 1: token by token, so each routes against the cache a decode step sees (a 64-token pass of
  // a cold 115-expert cache finds nothing resident at its layer).
  const std::string common = " -c 64 -b 1 -t 2 --json --no-warm-start";
  const std::string budget = " --ram-budget 64M";
  ASSERT_EQ(run_cmd("perplexity -m " + kModel + " -f " + kText + common + " --kl-divergence-base " + base).code, 0);
  const auto kl = [&](const std::string& knobs) {
    const CmdResult r = run_cmd("perplexity -m " + kModel + " --kl-divergence " + base + common + " " + knobs);
    EXPECT_EQ(r.code, 0) << knobs << ": " << r.err;
    return nlohmann::json::parse(last_line(r.out))["kl_divergence"];
  };
  const auto self = kl(""), self_streamed = kl(budget);
  const auto same = [](const nlohmann::json& a, const nlohmann::json& b, const std::string& what) {
    EXPECT_EQ(a["mean"].get<double>(), b["mean"].get<double>()) << what;
    EXPECT_EQ(a["max"].get<double>(), b["max"].get<double>()) << what;
    EXPECT_EQ(a["delta_ppl"].get<double>(), b["delta_ppl"].get<double>()) << what;
  };
  same(kl("--route-cache 4" + budget), self_streamed, "J = k");
  same(kl("--route-cache 0,64"), self, "all resident");
  const auto lossy = kl("--route-cache 1,16" + budget);
  EXPECT_GT(lossy["mean"].get<double>(), self_streamed["mean"].get<double>());
  EXPECT_LE(lossy["p99"].get<double>(), lossy["max"].get<double>());
  std::remove(base.c_str());

  const auto run = [&](const std::string& knobs) {
    const CmdResult r = run_cmd("run -m " + kModel + " -f " + kText + " -n 24 --temp 0 -c 256 -t 2 --no-warm-start --json" + budget + " " + knobs);
    EXPECT_EQ(r.code, 0) << knobs << ": " << r.err;
    return nlohmann::json::parse(last_line(r.out));
  };
  const auto plain = run(""), cached = run("--route-cache 1,16");
  EXPECT_FALSE(plain["moe_knobs"].contains("route_cache"));
  const auto& rc = cached["moe_knobs"]["route_cache"];
  EXPECT_EQ(rc["keep"].get<int>(), 1);
  EXPECT_EQ(rc["cands"].get<int>(), 16);
  EXPECT_EQ(rc["slots"].get<uint64_t>() % 4, 0u);  // k = 4 choices per token and layer
  EXPECT_GT(rc["changed"].get<uint64_t>(), 0u);
  EXPECT_LT(rc["route_agreement"].get<double>(), 1.0);
  EXPECT_LT(cached["experts"]["misses"].get<uint64_t>(), plain["experts"]["misses"].get<uint64_t>());
  EXPECT_LT(cached["experts"]["bytes_read"].get<uint64_t>(), plain["experts"]["bytes_read"].get<uint64_t>());

  // bench --json counts every choice: 8 decode steps x 8 layers x k = 4 (prefetch predictions are not counted);
  // M defaults to 2k.
  const CmdResult b = run_cmd("bench -m " + kModel + " -p 0 -n 8 -c 256 -t 2 --disk-probe 0 --json" + budget + " --no-warm-start --route-cache 1");
  ASSERT_EQ(b.code, 0) << b.err;
  const auto brc = nlohmann::json::parse(last_line(b.out))["moe_knobs"]["route_cache"];
  EXPECT_EQ(brc["cands"].get<int>(), 8) << brc.dump();
  EXPECT_EQ(brc["slots"].get<uint64_t>(), 8u * 8 * 4) << brc.dump();
  EXPECT_LE(brc["changed"].get<uint64_t>(), 8u * 8 * 3) << brc.dump();  // J = 1: the first choice never changes

  for (const auto& [bad, msg] : {std::pair{"5", "at most the 4 experts"}, {"1,2", "between the model's k (4)"}, {"1,x", "expected J or J,M"}}) {
    const CmdResult r = run_cmd("perplexity -m " + kModel + " -f " + kText + common + " --route-cache " + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find(msg), std::string::npos) << bad << ": " << r.err;
  }
}
