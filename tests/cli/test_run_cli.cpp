// strata run as a machine-readable tool: the flags the golden comparisons and users rely on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <numeric>
#include <thread>

#include "../model/golden_util.h"
#include "cli_util.h"
#include "model/model.h"
#include "runtime/routing_memory.h"

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
  // The generation's CPU seconds (every thread): some, and no more than every core for its wall time.
  const double gen_s = out["timings"]["gen_s"].get<double>(), gen_cpu_s = out["timings"]["gen_cpu_s"].get<double>();
  EXPECT_GT(gen_cpu_s, 0.0);
  EXPECT_LE(gen_cpu_s, gen_s * std::max(1u, std::thread::hardware_concurrency()) + 0.01);
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

namespace {
// The p0 prompt of `set` followed by its first 24 tokens again, as a token file.
std::vector<int> write_repeating_prompt(const std::string& set, const std::string& path) {
  auto j = read_json(fixtures_dir() + "/" + set + "/golden/p0.json");
  auto p = j["prompt_tokens"].get<std::vector<int>>();
  const size_t n = std::min<size_t>(p.size(), 24);
  p.insert(p.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
  std::ofstream f(path);
  for (int t : p) f << t << " ";
  return p;
}
}  // namespace

TEST(RunCli, SpeculativeLookupKeepsGreedyOutputAndReports) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI speculative test)");
  const std::string tf = tmp("spec_tokens.txt");
  write_repeating_prompt(kSet, tf);
  const std::string common = "run -m " + model() + " --tokens-file " + tf + " -n 48 --temp 0 --ignore-eos -c 256 --cache-type-k f32 --cache-type-v f32 --json";
  auto plain = run_cmd(common);
  ASSERT_EQ(plain.code, 0) << plain.err;
  auto spec = run_cmd(common + " --draft lookup --draft-max 4 --draft-fixed");
  ASSERT_EQ(spec.code, 0) << spec.err;
  auto chosen = run_cmd(common + " --draft lookup --draft-max 4");  // the cost model chooses k per pass
  ASSERT_EQ(chosen.code, 0) << chosen.err;
  const auto a = nlohmann::json::parse(last_line(plain.out)), b = nlohmann::json::parse(last_line(spec.out));
  const auto c = nlohmann::json::parse(last_line(chosen.out));
  EXPECT_EQ(b["tokens"], a["tokens"]);
  EXPECT_EQ(c["tokens"], a["tokens"]);
  const auto hist = c["speculative"]["k_hist"].get<std::vector<int>>();
  ASSERT_EQ(hist.size(), 5u);
  EXPECT_EQ(std::accumulate(hist.begin(), hist.end(), 0), c["speculative"]["passes"].get<int>());
  EXPECT_GE(hist[0], 2);  // the cost model's warm-up has two plain passes
  EXPECT_FALSE(a.contains("speculative"));
  const auto& s = b["speculative"];
  EXPECT_GT(s["passes"].get<int>(), 0);
  EXPECT_LT(s["passes"].get<int>(), 48);  // the repeated prompt makes some drafts land (42 passes when written)
  EXPECT_GE(s["proposed"].get<int>(), s["accepted"].get<int>());
  EXPECT_GT(s["accepted"].get<int>(), 0);
  EXPECT_EQ(s["proposed_at"].size(), 4u);
  EXPECT_GT(s["expert_union"].get<int>(), 0);
  EXPECT_GE(s["expert_slots"].get<int>(), s["expert_union"].get<int>());
  for (const char* want : {"[speculative (lookup):", "drafts proposed", "tokens per pass", "acceptance by position:", "experts per pass:",
                           "per generated token", "time: draft", "passes by k: k=0:"})
    EXPECT_NE(spec.err.find(want), std::string::npos) << "missing '" << want << "' in:\n" << spec.err;
  std::remove(tf.c_str());
}

TEST(RunCli, DraftModelOfAnotherVocabularyFails) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI speculative test)");
  const std::string draft = fixtures_dir() + "/llama-dense-q8_0/model.gguf";
  auto r = run_cmd("run -m " + fixtures_dir() + "/kimi-k2-q8_0/model.gguf -md " + draft + " -p hello -n 4 --temp 0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("vocabular"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("llama-dense-q8_0"), std::string::npos) << r.err;
}

// -md: the draft model's weights, KV cache and scratch are in the target's memory plan (as serve
// plans them): a budget the target alone fits in makes the target stream its experts beside a draft.
TEST(RunCli, DraftModelIsInTheMemoryPlan) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI speculative test)");
  const std::string common = "run -m " + fixtures_dir() + "/qwen3moe-q8_0/model.gguf -p hello -n 4 --temp 0 -c 128 -t 2 --json --ram-budget 45M";
  auto plain = run_cmd(common);
  auto with = run_cmd(common + " -md " + fixtures_dir() + "/qwen3-dense-q8_0/model.gguf");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(with.code, 0) << with.err;
  const auto a = nlohmann::json::parse(last_line(plain.out))["memory"], b = nlohmann::json::parse(last_line(with.out))["memory"];
  EXPECT_EQ(a["draft"].get<uint64_t>(), 0u);
  EXPECT_FALSE(a["streaming"].get<bool>()) << a.dump();
  const uint64_t draft = b["draft"].get<uint64_t>();
  EXPECT_GT(draft, 1000000u) << "the draft's weights (1.2 MB file), KV cache and scratch";
  EXPECT_TRUE(b["streaming"].get<bool>()) << b.dump();
  EXPECT_LE(b["dense"].get<uint64_t>() + b["kv"].get<uint64_t>() + b["scratch"].get<uint64_t>() + draft + b["expert_cache"].get<uint64_t>(),
            b["budget"].get<uint64_t>());
}

// Predicted routing (--draft lookup while experts stream) remembers every position's experts: the
// memory plan counts those tables (routing_memory_bytes for one sequence of the context), and
// --no-draft-predict, which holds none, plans none.
TEST(RunCli, RoutingMemoryIsInTheMemoryPlan) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI speculative test)");
  const std::string common = "run -m " + model() + " -p hello -n 4 --temp 0 -c 128 -b 64 -t 2 --json --ram-budget 45M --draft lookup";
  auto with = run_cmd(common), without = run_cmd(common + " --no-draft-predict");
  ASSERT_EQ(with.code, 0) << with.err;
  ASSERT_EQ(without.code, 0) << without.err;
  const auto a = nlohmann::json::parse(last_line(with.out))["memory"], b = nlohmann::json::parse(last_line(without.out))["memory"];
  const uint64_t want = strata::routing_memory_bytes(strata::Model::load(model())->config(), 128, 64, 1);
  EXPECT_GT(want, 128u * 2 * 8);
  EXPECT_EQ(a["draft"].get<uint64_t>(), want) << a.dump();
  EXPECT_EQ(b["draft"].get<uint64_t>(), 0u) << b.dump();
  EXPECT_LE(a["expert_cache"].get<uint64_t>(), b["expert_cache"].get<uint64_t>()) << "the tables' bytes come out of the expert cache's";
}

TEST(RunCli, SpeculationIsOffForArchitecturesThatCannotRewind) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI speculative test)");
  auto r = run_cmd("run -m " + fixtures_dir() + "/qwen35moe-q8_0/model.gguf --draft lookup -p hello -n 4 --temp 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("speculative decoding off"), std::string::npos) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(last_line(r.out)).contains("speculative"));
}

// --draft mtp: GLM's NextN block drafts (random weights: few or none accepted), greedy output is
// plain decoding's, the report names the source and gives acceptance by position; --help lists it;
// a file without a NextN block is a clear error.
TEST(RunCli, DraftMtpKeepsGreedyOutputAndFailsClearlyWithoutNextn) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (CLI MTP test)");
  const std::string common = "run -m " + fixtures_dir() + "/glm4moe-q8_0/model.gguf -p 'The quick brown fox' -n 24 --temp 0 --ignore-eos -c 256 --json";
  auto plain = run_cmd(common);
  ASSERT_EQ(plain.code, 0) << plain.err;
  auto mtp = run_cmd(common + " --draft mtp --draft-max 2 --draft-fixed");
  ASSERT_EQ(mtp.code, 0) << mtp.err;
  const auto a = nlohmann::json::parse(last_line(plain.out)), b = nlohmann::json::parse(last_line(mtp.out));
  EXPECT_EQ(b["tokens"], a["tokens"]);
  const auto& s = b["speculative"];
  EXPECT_EQ(s["proposed_at"].size(), 2u);
  // A depth-1 draft every pass but where one token was left to generate (no room for a draft).
  EXPECT_EQ(s["proposed_at"][0].get<int>(), s["passes"].get<int>() - s["k_hist"][0].get<int>());
  EXPECT_LE(s["k_hist"][0].get<int>(), 1);
  EXPECT_GE(s["proposed"].get<int>(), s["accepted"].get<int>());
  for (const char* want : {"[speculative (mtp):", "drafts proposed", "acceptance by position:", "tokens per pass"})
    EXPECT_NE(mtp.err.find(want), std::string::npos) << "missing '" << want << "' in:\n" << mtp.err;
  auto bad = run_cmd("run -m " + model() + " -p hello -n 4 --temp 0 --draft mtp");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("no NextN"), std::string::npos) << bad.err;
  auto help = run_cmd("run --help");
  EXPECT_NE(help.out.find("mtp"), std::string::npos) << help.out;
}

// The trained model streaming its experts (64 MiB budget), lookup drafts on an edit-like prompt:
// the report gives the predicted routing's figures (text and --json speculative.prediction), its
// precision and recall in (0, 1]; --no-draft-predict leaves them out.
TEST(RunCli, SpeculativeReportGivesPredictedRouting) {
  const std::string tiny = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";
  const std::string pf = tmp("edit_prompt.txt");
  {
    std::ofstream f(pf);
    f << "And God said unto Moses, I will be not done, and I will be done, and I will be done, and I will be done, and I will be done.";
  }
  const std::string common = "run -m " + tiny + " -f " + pf + " -n 24 --temp 0 --ignore-eos -c 256 --ram-budget 64M --draft lookup --json";
  auto r = run_cmd(common);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(last_line(r.out));
  ASSERT_TRUE(j["speculative"].contains("prediction")) << r.out;
  const auto& p = j["speculative"]["prediction"];
  for (const char* key : {"precision", "recall"}) {
    EXPECT_GT(p[key].get<double>(), 0.0) << key;
    EXPECT_LE(p[key].get<double>(), 1.0) << key;
  }
  EXPECT_GT(p["rows"].get<int>(), 0);
  EXPECT_LE(p["rows_predicted"].get<int>(), p["rows"].get<int>());
  EXPECT_GE(p["actual_bytes"].get<uint64_t>(), p["actual_extra_bytes"].get<uint64_t>());
  EXPECT_NE(r.err.find("predicted routing: draft rows' experts precision"), std::string::npos) << r.err;
  auto blind = run_cmd(common + " --no-draft-predict");
  ASSERT_EQ(blind.code, 0) << blind.err;
  const auto b = nlohmann::json::parse(last_line(blind.out));
  EXPECT_EQ(b["tokens"], j["tokens"]);
  EXPECT_FALSE(b["speculative"].contains("prediction"));
  std::remove(pf.c_str());
}
