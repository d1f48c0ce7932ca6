// strata run as a machine-readable tool: the flags the golden comparisons and users rely on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "../model/golden_util.h"
#include "cli_util.h"

using namespace strata::test;

namespace {
const std::string kSet = "qwen3moe-q8_0";
std::string model() { return fixtures_dir() + "/" + kSet + "/model.gguf"; }
std::string tmp(const std::string& name) { return "/tmp/strata_run_" + std::to_string(::getpid()) + "_" + name; }
}  // namespace

TEST(RunCli, TokensFileGreedyMatchesGolden) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI golden test)");
  auto j = read_json(fixtures_dir() + "/" + kSet + "/golden/p0.json");
  const auto prompt = j["prompt_tokens"].get<std::vector<int>>();
  const std::string tf = tmp("tokens.txt"), lf = tmp("logits.f32");
  {
    std::ofstream f(tf);
    for (int t : prompt) f << t << " ";
  }
  auto r = run_cmd("run -m " + model() + " --tokens-file " + tf +
                   " -n 8 --temp 0 --ignore-eos -c 256 --cache-type-k f32 --cache-type-v f32 --json --top-logits 5 --logits-out " + lf);
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(out["prompt_tokens"].get<std::vector<int>>(), prompt);
  const auto toks = out["tokens"].get<std::vector<int>>();
  ASSERT_EQ(toks.size(), 8u);
  const auto& steps = j["greedy"]["steps"];
  for (size_t s = 0; s < toks.size(); ++s) {
    if (steps[s]["margin"].get<double>() < 1e-2) break;
    EXPECT_EQ(toks[s], steps[s]["token"].get<int>()) << "step " << s;
  }
  ASSERT_EQ(out["prompt_topk"].size(), prompt.size());
  EXPECT_EQ(out["prompt_topk"][0].size(), 5u);
  EXPECT_EQ(out["prompt_topk"].back()[0][0].get<int>(), j["prompt_topk"].back()[0][0].get<int>());
  const auto got = read_f32(lf), ref = read_f32(fixtures_dir() + "/" + kSet + "/golden/p0.last_logits.f32");
  ASSERT_EQ(got.size(), ref.size());
  auto c = compare_logits(got.data(), ref.data(), ref.size());
  EXPECT_GE(c.cosine, 0.999);
  std::remove(tf.c_str());
  std::remove(lf.c_str());
}

TEST(RunCli, PromptFileTokenizesLikeLlamaCpp) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI golden test)");
  auto j = read_json(fixtures_dir() + "/" + kSet + "/golden/p1.json");
  const std::string pf = tmp("prompt.txt");
  {
    std::ofstream f(pf, std::ios::binary);
    f << j["prompt"].get<std::string>();
  }
  auto r = run_cmd("run -m " + model() + " -f " + pf + " -n 2 --temp 0 --json -c 256");
  ASSERT_EQ(r.code, 0) << r.err;
  auto out = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(out["prompt_tokens"], j["tokenize"]["special"]["ids"]);
  std::remove(pf.c_str());
}

TEST(RunCli, ClearErrors) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI error test)");
  const std::string tf = tmp("bad.txt");
  {
    std::ofstream f(tf);
    f << "1 2 999999";
  }
  auto r = run_cmd("run -m " + model() + " --tokens-file " + tf + " -n 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  {
    std::ofstream f(tf);
    for (int i = 0; i < 40; ++i) f << "5 ";
  }
  r = run_cmd("run -m " + model() + " --tokens-file " + tf + " -n 1 -c 16");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
  {
    std::ofstream f(tf);
    f << "12 abc";
  }
  r = run_cmd("run -m " + model() + " --tokens-file " + tf + " -n 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not a token id"), std::string::npos) << r.err;
  r = run_cmd("run -m /nonexistent.gguf -p hi -n 1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  std::remove(tf.c_str());
}

TEST(RunCli, SeededSamplingIsDeterministic) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI test)");
  const std::string args = "run -m " + model() + " -p 'Hello there' -n 12 --temp 0.9 --top-k 40 --top-p 0.9 --seed 42 --ignore-eos --json -c 64";
  auto a = run_cmd(args), b = run_cmd(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(last_line(a.out))["tokens"], nlohmann::json::parse(last_line(b.out))["tokens"]);
}
