// Issue 37's knobs in `strata serve` on the committed trained model: with --miss-model, /stats
// counts the experts computed from the stand-in and their bytes (as run --json does); with
// --quality-budget, /props moe_knobs shows the budget and the setting it chose.
#include <filesystem>

#include "serve_process.h"
#include "../cli/cli_util.h"

namespace strata::test {
namespace {

using nlohmann::json;

const std::string kKnobsModel = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf";

// A fresh directory `dir` holding the trained model's Q4_0 experts-only copy; its path ("" when quantize failed).
std::string knobs_q4_copy(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string q4 = dir + "/q4.gguf";
  const CmdResult q = run_cmd("quantize --experts-only --type q4_0 -t 2 " + kKnobsModel + " " + q4);
  EXPECT_EQ(q.code, 0) << q.err;
  return q.code == 0 ? q4 : std::string();
}

TEST(ServeKnobs, StatsCountStandInsAndPropsShowTheQualityBudget) {
  const std::string dir = "/tmp/strata_serve_knobs_" + std::to_string(::getpid());
  const std::string q4 = knobs_q4_copy(dir);
  ASSERT_FALSE(q4.empty());
  {
    ServeProcess serve("serve_knobs_standin", {"-m", kKnobsModel, "--port", "0", "-c", "256", "-b", "64", "-t", "1", "--ram-budget", "64M", "--no-warm-start",
                                               "--disk-probe", "0", "--miss-model", q4});
    ASSERT_TRUE(serve.ready()) << serve.log();
    httplib::Client c("127.0.0.1", serve.port());
    auto before = c.Get("/stats");
    ASSERT_TRUE(before);
    EXPECT_TRUE(json::parse(before->body).contains("miss_model")) << before->body;
    auto r = c.Post("/v1/completions", json{{"prompt", "And Moses said unto the people"}, {"max_tokens", 8}, {"ignore_eos", true}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    auto stats = c.Get("/stats");
    ASSERT_TRUE(stats);
    const json mm = json::parse(stats->body)["miss_model"];
    EXPECT_GT(mm["experts"].get<uint64_t>(), 0u) << stats->body;
    EXPECT_GT(mm["bytes"].get<uint64_t>(), 0u) << stats->body;
    EXPECT_EQ(mm["bytes"].get<uint64_t>() % mm["experts"].get<uint64_t>(), 0u) << stats->body;  // every stand-in expert the same size
    auto props = c.Get("/props");
    ASSERT_TRUE(props);
    EXPECT_TRUE(json::parse(props->body)["moe_knobs"]["quality_budget"].is_null()) << props->body;
  }
  // A calibration file of this model with one lossy setting, which a budget of 1 takes.
  const CmdResult cal = run_cmd("calibrate -m " + kKnobsModel + " -f " + std::string(STRATA_SOURCE_DIR) +
                                "/../models/strata-moe-tiny/traces/heldout-exodus.txt -c 64 --chunks 1 -t 2 --ram-budget 64M --settings "
                                "'route-cache=1,16' --json --out " + dir + "/cal.json");
  ASSERT_EQ(cal.code, 0) << cal.err;
  ServeProcess serve("serve_knobs_budget", {"-m", kKnobsModel, "--port", "0", "-c", "256", "-b", "64", "-t", "1", "--ram-budget", "64M", "--disk-probe", "0",
                                            "--quality-budget", "1", "--calibration", dir + "/cal.json"});
  ASSERT_TRUE(serve.ready()) << serve.log();
  httplib::Client c("127.0.0.1", serve.port());
  auto props = c.Get("/props");
  ASSERT_TRUE(props);
  const json knobs = json::parse(props->body)["moe_knobs"];
  EXPECT_EQ(knobs["route_cache"], (json{{"keep", 1}, {"cands", 16}})) << knobs.dump();
  EXPECT_EQ(knobs["quality_budget"]["budget"], 1.0) << knobs.dump();
  EXPECT_EQ(knobs["quality_budget"]["setting"], "route-cache=1,16") << knobs.dump();
  EXPECT_TRUE(knobs["quality_budget"]["applied"].get<bool>()) << knobs.dump();
  EXPECT_NE(serve.log().find("quality budget 1: --route-cache 1,16"), std::string::npos) << serve.log();
  serve.stop();
  std::filesystem::remove_all(dir);
}

// --pp-model in serve: a pass takes the low-bit copy's experts only when every row of it is a prompt
// row of a prompt with at least --pp-min-tokens tokens to evaluate; a short prompt, a prompt whose
// rows the slot kept, and decoding take the model's own (/stats pp_model's count does not move).
TEST(ServeKnobs, PpModelTakesLongPromptPassesOnly) {
  const std::string dir = "/tmp/strata_serve_pp_" + std::to_string(::getpid());
  const std::string q4 = knobs_q4_copy(dir);
  ASSERT_FALSE(q4.empty());
  ServeProcess serve("serve_knobs_pp", {"-m", kKnobsModel, "--port", "0", "-c", "256", "-b", "64", "-t", "1", "--ram-budget", "64M", "--no-warm-start",
                                        "--disk-probe", "0", "--pp-model", q4, "--pp-min-tokens", "32"});
  ASSERT_TRUE(serve.ready()) << serve.log();
  httplib::Client c("127.0.0.1", serve.port());
  auto props = c.Get("/props");
  ASSERT_TRUE(props);
  EXPECT_EQ(json::parse(props->body)["moe_knobs"]["pp_min_tokens"], 32) << props->body;
  const auto taken = [&] {
    auto st = c.Get("/stats");
    EXPECT_TRUE(st);
    return st ? json::parse(st->body)["pp_model"]["experts"].get<uint64_t>() : 0;
  };
  const auto complete = [&](const std::string& prompt, int n) {
    auto r = c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", n}, {"ignore_eos", true}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  };
  EXPECT_EQ(taken(), 0u);
  complete("And Moses said unto the people", 16);  // a short prompt, then decoding
  EXPECT_EQ(taken(), 0u);
  const std::string text = slurp_file(std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/traces/heldout-exodus.txt");
  const std::string long_prompt = text.substr(0, 400);  // about 80 tokens
  complete(long_prompt, 1);
  const uint64_t after_long = taken();
  EXPECT_GT(after_long, 0u);
  complete(long_prompt, 16);  // the slot keeps the prompt's rows: one row to evaluate, then decoding
  EXPECT_EQ(taken(), after_long);
  serve.stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::test
