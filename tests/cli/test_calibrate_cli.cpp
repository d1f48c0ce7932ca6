// strata calibrate and --quality-budget (issue 37 item 5) on the committed trained model and its
// held-out Exodus text: the calibration file lands beside the warm-start statistics with the base
// at KL 0 and the route cache reading fewer bytes; a budget picks the setting with the fewest bytes
// within it (and changes the logits), a budget of 0 the base (the knobs-off logits); explicit knobs
// with a budget are refused; a missing, truncated, foreign-model or garbage file gives a warning and
// the knobs-off logits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"

using namespace strata::test;

namespace {
const std::string kCalDir = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny";
const std::string kCalModel = kCalDir + "/model.gguf";
const std::string kCalText = kCalDir + "/traces/heldout-exodus.txt";  // 179 tokens

std::string calib_slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

TEST(CalibrateCli, WritesTheFileAndTheBudgetPicksFromIt) {
  const std::string dir = "/tmp/strata_calib_cli_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  // One window of 64 tokens, token by token (the default -b 1), under a 64M budget.
  const std::string common = " -m " + kCalModel + " -c 64 -t 2 --ram-budget 64M --stats-dir " + dir;
  const CmdResult cal = run_cmd("calibrate" + common + " -f " + kCalText + " --chunks 1 --json --settings 'route-cache=1,16;moe-min-mass=0.8'");
  ASSERT_EQ(cal.code, 0) << cal.err;
  const auto j = nlohmann::json::parse(last_line(cal.out));
  const std::string path = j["path"].get<std::string>();
  EXPECT_EQ(path.rfind(dir + "/experts-", 0), 0u) << path;
  EXPECT_TRUE(path.ends_with(".calib.json")) << path;
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(nlohmann::json::parse(calib_slurp(path))["settings"], j["settings"]);
  EXPECT_EQ(j["scored_tokens"].get<int>(), 64 - 1 - 32);
  EXPECT_EQ(j["ram_budget"].get<uint64_t>(), 64ull << 20);
  const auto& s = j["settings"];
  ASSERT_EQ(s.size(), 3u) << s.dump();
  EXPECT_EQ(s[0]["name"], "off");
  EXPECT_EQ(s[0]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(s[0]["top1"].get<double>(), 1.0);
  EXPECT_EQ(s[1]["name"], "route-cache=1,16");
  EXPECT_GT(s[1]["mean_kl"].get<double>(), 0.0);
  EXPECT_GT(s[0]["bytes_per_token"].get<double>(), 0.0);
  EXPECT_LT(s[1]["bytes_per_token"].get<double>(), s[0]["bytes_per_token"].get<double>());
  EXPECT_EQ(s[2]["name"], "moe-min-mass=0.8");

  // The runs the budget is tried on: perplexity over the same windows, its mean NLL to the last bit.
  const std::string ppl = "perplexity" + common + " -f " + kCalText + " -b 1 --chunks 1 --no-warm-start --json";
  const auto nll = [&](const std::string& extra, std::string* err = nullptr) {
    const CmdResult r = run_cmd(ppl + extra);
    EXPECT_EQ(r.code, 0) << extra << ": " << r.err;
    if (err) *err = r.err;
    return nlohmann::json::parse(last_line(r.out));
  };
  const double plain = nll("")["nll"].get<double>();
  // Above every setting's KL: the fewest bytes per token.
  size_t fewest = 0;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i]["bytes_per_token"].get<double>() < s[fewest]["bytes_per_token"].get<double>()) fewest = i;
  std::string err;
  const auto lossy = nll(" --quality-budget 1", &err);
  const auto& q = lossy["moe_knobs"]["quality_budget"];
  EXPECT_EQ(q["setting"], s[fewest]["name"]) << q.dump();
  EXPECT_EQ(q["expected_mean_kl"], s[fewest]["mean_kl"]) << q.dump();
  EXPECT_NE(err.find("quality budget 1: --"), std::string::npos) << err;
  EXPECT_NE(lossy["nll"].get<double>(), plain);
  // 0: only the base fits, the knobs stay off.
  const auto zero = nll(" --quality-budget 0", &err);
  EXPECT_EQ(zero["moe_knobs"]["quality_budget"]["setting"], "off");
  EXPECT_EQ(zero["nll"].get<double>(), plain);
  EXPECT_NE(err.find("knobs off"), std::string::npos) << err;

  // Explicit knobs with a budget: refused, naming them.
  const CmdResult both = run_cmd(ppl + " --quality-budget 0.01 --route-cache 2,8");
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("not with --route-cache 2,8"), std::string::npos) << both.err;

  const CmdResult alone = run_cmd(ppl + " --calibration " + path);
  EXPECT_NE(alone.code, 0);
  EXPECT_NE(alone.err.find("give --quality-budget KL too"), std::string::npos) << alone.err;

  // Files that cannot be used: a warning, and the knobs-off logits.
  const std::string text = calib_slurp(path);
  std::string foreign = text;
  const std::string key = j["model_key"].get<std::string>();
  foreign.replace(foreign.find(key), key.size(), key == "0123456789abcdef" ? "fedcba9876543210" : "0123456789abcdef");
  const std::pair<std::string, std::string> bad[] = {
      {text.substr(0, text.size() / 2), "truncated"}, {foreign, "another model"}, {std::string("\x7f" "ELF garbage\x01\xff", 15), "not a calibration file"}};
  for (const auto& [content, why] : bad) {
    const std::string f = dir + "/bad.calib.json";
    std::ofstream(f, std::ios::binary | std::ios::trunc) << content;
    const auto r = nll(" --quality-budget 1 --calibration " + f, &err);
    EXPECT_EQ(r["nll"].get<double>(), plain) << why;
    EXPECT_NE(err.find("warning: --quality-budget 1: " + f + ": "), std::string::npos) << err;
    EXPECT_NE(err.find(why), std::string::npos) << err;
    EXPECT_NE(err.find("running lossless (knobs off)"), std::string::npos) << err;
    EXPECT_FALSE(r["moe_knobs"]["quality_budget"]["applied"].get<bool>());
  }
  const auto none = nll(" --quality-budget 1 --calibration " + dir + "/none.json", &err);
  EXPECT_EQ(none["nll"].get<double>(), plain);
  EXPECT_NE(err.find("no calibration file"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}

// calibrate --miss-model FILE prices the stand-in's settings (its bytes counted); a budget that
// picks one attaches the stand-in the file names; without that file its settings are passed over.
TEST(CalibrateCli, StandInSettingsArePricedAndTheBudgetAttachesTheStandIn) {
  const std::string dir = "/tmp/strata_calib_si_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string q4 = dir + "/q4.gguf";
  ASSERT_EQ(run_cmd("quantize --experts-only --type q4_0 -t 2 " + kCalModel + " " + q4).code, 0);
  const std::string common = " -m " + kCalModel + " -c 64 -t 2 --ram-budget 64M";
  const CmdResult cal = run_cmd("calibrate" + common + " -f " + kCalText + " --chunks 1 --json --settings 'miss-model' --miss-model " + q4 +
                                " --out " + dir + "/cal.json");
  ASSERT_EQ(cal.code, 0) << cal.err;
  const auto j = nlohmann::json::parse(last_line(cal.out));
  EXPECT_EQ(j["miss_model"], std::filesystem::absolute(q4).string());
  const auto& s = j["settings"];
  ASSERT_EQ(s.size(), 2u) << s.dump();
  EXPECT_EQ(s[1]["name"], "miss-model");
  EXPECT_GT(s[1]["mean_kl"].get<double>(), 0.0);
  EXPECT_GT(s[1]["standin_bytes_per_token"].get<double>(), 0.0);
  EXPECT_EQ(s[0]["standin_bytes_per_token"].get<double>(), 0.0);
  EXPECT_LT(s[1]["bytes_per_token"].get<double>(), s[0]["bytes_per_token"].get<double>());

  const std::string ppl = "perplexity" + common + " -f " + kCalText + " -b 1 --chunks 1 --no-warm-start --json --calibration " + dir + "/cal.json";
  const CmdResult plain = run_cmd(ppl + " --quality-budget 0");
  ASSERT_EQ(plain.code, 0) << plain.err;
  const CmdResult with = run_cmd(ppl + " --quality-budget 1");
  ASSERT_EQ(with.code, 0) << with.err;
  const auto w = nlohmann::json::parse(last_line(with.out)), p = nlohmann::json::parse(last_line(plain.out));
  EXPECT_EQ(w["moe_knobs"]["quality_budget"]["setting"], "miss-model") << w.dump();
  EXPECT_EQ(w["moe_knobs"]["quality_budget"]["miss_model"], std::filesystem::absolute(q4).string());
  EXPECT_GT(w["miss_model"]["experts"].get<uint64_t>(), 0u) << "the stand-in computed misses";
  EXPECT_NE(w["nll"].get<double>(), p["nll"].get<double>());
  EXPECT_NE(with.err.find("--miss-model " + std::filesystem::absolute(q4).string()), std::string::npos) << with.err;

  std::filesystem::remove(q4);  // the stand-in is gone: its setting is passed over, the knobs stay off
  const CmdResult gone = run_cmd(ppl + " --quality-budget 1");
  ASSERT_EQ(gone.code, 0) << gone.err;
  const auto g = nlohmann::json::parse(last_line(gone.out));
  EXPECT_EQ(g["moe_knobs"]["quality_budget"]["setting"], "off") << g.dump();
  EXPECT_EQ(g["nll"].get<double>(), p["nll"].get<double>());
  EXPECT_NE(gone.err.find("passed over"), std::string::npos) << gone.err;

  const CmdResult orphan = run_cmd("calibrate" + common + " -f " + kCalText + " --chunks 1 --settings 'miss-model' --out " + dir + "/x.json");
  EXPECT_NE(orphan.code, 0);
  EXPECT_NE(orphan.err.find("give --miss-model FILE"), std::string::npos) << orphan.err;
  std::filesystem::remove_all(dir);
}

TEST(CalibrateCli, BadSettingsAreClearErrors) {
  const std::string common = "calibrate -m " + kCalModel + " -f " + kCalText + " --out /tmp/strata_calib_never.json";
  for (const auto& [args, msg] : {std::pair{" -c 64 --settings 'route-cache=5,8'", "route-cache J = 5"}, {" -c 64 --settings 'warp=1'", "unknown knob"},
                                  {" -c 64 --route-cache 2,8", "sets the knobs itself"}, {" -c 1024", "need at least one window"}}) {
    const CmdResult r = run_cmd(common + args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(msg), std::string::npos) << args << ": " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists("/tmp/strata_calib_never.json"));
}
