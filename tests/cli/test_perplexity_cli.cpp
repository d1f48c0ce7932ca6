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
