// strata quantize --experts-only and --miss-model on the committed trained model: a Q4_0-experts
// copy is written, priced by the KL mode, and serves as the stand-in of streamed misses (fewer
// bytes read into the expert cache); bad options are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "../model/golden_util.h"
#include "cli_util.h"

using namespace strata::test;

namespace {
const std::string kQuantDir = std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny";
const std::string kQuantModel = kQuantDir + "/model.gguf";
const std::string kQuantText = kQuantDir + "/traces/heldout-exodus.txt";
}  // namespace

TEST(QuantizeCli, ExpertsOnlyStandInIsPricedAndServesMisses) {
  const std::string q4 = "/tmp/strata_quant_cli_" + std::to_string(::getpid()) + ".gguf";
  const CmdResult q = run_cmd("quantize --experts-only --type q4_0 -t 2 " + kQuantModel + " " + q4);
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_NE(q.out.find("24 routed expert tensors as q4_0"), std::string::npos) << q.out;

  const std::string base = "/tmp/strata_quant_base_" + std::to_string(::getpid()) + ".bin";
  const std::string common = " -c 64 -t 2 --json --no-warm-start";
  ASSERT_EQ(run_cmd("perplexity -m " + kQuantModel + " -f " + kQuantText + common + " --kl-divergence-base " + base).code, 0);
  const CmdResult k = run_cmd("perplexity -m " + q4 + " --kl-divergence " + base + common);
  ASSERT_EQ(k.code, 0) << k.err;
  const auto kl = nlohmann::json::parse(last_line(k.out))["kl_divergence"];
  EXPECT_GT(kl["mean"].get<double>(), 0.0);
  EXPECT_LT(kl["mean"].get<double>(), 0.1);  // Q4_0 experts: a small loss
  EXPECT_GT(kl["top1_agreement"].get<double>(), 0.8);
  std::remove(base.c_str());

  const auto run = [&](const std::string& knobs) {
    const CmdResult r = run_cmd("run -m " + kQuantModel + " -f " + kQuantText + " -n 16 --temp 0 -c 256 -t 2 --ram-budget 64M --no-warm-start --json " + knobs);
    EXPECT_EQ(r.code, 0) << knobs << ": " << r.err;
    return nlohmann::json::parse(last_line(r.out));
  };
  const auto plain = run(""), mm = run("--miss-model " + q4);
  EXPECT_FALSE(plain.contains("miss_model"));
  EXPECT_GT(mm["miss_model"]["experts"].get<uint64_t>(), 0u);
  EXPECT_GT(mm["miss_model"]["bytes"].get<uint64_t>(), 0u);
  EXPECT_LT(mm["experts"]["bytes_read"].get<uint64_t>(), plain["experts"]["bytes_read"].get<uint64_t>());
  EXPECT_EQ(mm["miss_model"]["admits"], 0);
  // --miss-admit: the full copy of every stand-in is asked of the expert cache (a prefetch).
  const auto admit = run("--miss-model " + q4 + " --miss-admit");
  EXPECT_GT(admit["miss_model"]["admits"].get<uint64_t>(), 0u);
  EXPECT_EQ(admit["miss_model"]["admits"], admit["miss_model"]["experts"]);
  std::remove(q4.c_str());
}

TEST(QuantizeCli, BadOptionsAreClearErrors) {
  const std::string out = "/tmp/strata_quant_bad_" + std::to_string(::getpid()) + ".gguf";
  const std::pair<std::string, std::string> cases[] = {
      {"quantize --type q4_0 " + kQuantModel + " " + out, "give --experts-only"},
      {"quantize --experts-only --type nope " + kQuantModel + " " + out, "not a ggml type name"},
      {"quantize --experts-only --type iq2_xxs " + kQuantModel + " " + out, "no quantizer"},
      {"quantize --experts-only --type q4_0 /nonexistent.gguf " + out, "/nonexistent.gguf"},
      {"run -m " + kQuantModel + " -p hi -n 1 --miss-model /nonexistent.gguf", "/nonexistent.gguf"},
      {"run -m " + kQuantModel + " -p hi -n 1 --miss-admit", "--miss-admit needs --miss-model"},
  };
  for (const auto& [cmd, msg] : cases) {
    const CmdResult r = run_cmd(cmd);
    EXPECT_NE(r.code, 0) << cmd;
    EXPECT_NE(r.err.find(msg), std::string::npos) << cmd << ": " << r.err;
  }
}

// --pp-model: a prompt shorter than --pp-min-tokens runs as without it (the same text, nothing from
// the low-bit file); a long one takes its missed experts from the file during the prompt only (the
// count does not grow with the tokens decoded); perplexity prices it on the tokens that follow a
// context evaluated that way; a file of other shapes is refused naming the option (serve:
// ServeKnobs.PpModelTakesLongPromptPassesOnly).
TEST(QuantizeCli, PpModelTakesLongPromptsOnlyAndIsPriced) {
  const std::string q4 = "/tmp/strata_pp_cli_" + std::to_string(::getpid()) + ".gguf";
  ASSERT_EQ(run_cmd("quantize --experts-only --type q4_0 -t 2 " + kQuantModel + " " + q4).code, 0);
  const auto run = [&](const std::string& knobs, int n) {
    const CmdResult r = run_cmd("run -m " + kQuantModel + " -f " + kQuantText + " -n " + std::to_string(n) +
                                " --temp 0 -c 256 -t 2 --ram-budget 64M --no-warm-start --json " + knobs);
    EXPECT_EQ(r.code, 0) << knobs << ": " << r.err;
    return std::make_pair(r.out, nlohmann::json::parse(last_line(r.out)));
  };
  const auto plain = run("", 16);
  const auto short_prompt = run("--pp-model " + q4 + " --pp-min-tokens 100000", 16);
  EXPECT_EQ(short_prompt.second["pp_model"]["experts"], 0);
  EXPECT_EQ(short_prompt.second["text"], plain.second["text"]) << "a prompt below --pp-min-tokens is evaluated as without it";
  const auto long1 = run("--pp-model " + q4 + " --pp-min-tokens 8", 1), long16 = run("--pp-model " + q4 + " --pp-min-tokens 8", 16);
  EXPECT_GT(long1.second["pp_model"]["experts"].get<uint64_t>(), 0u);
  EXPECT_EQ(long16.second["pp_model"]["experts"], long1.second["pp_model"]["experts"]) << "decoding took experts from the low-bit file";
  EXPECT_FALSE(long16.second["text"].get<std::string>().empty());

  const std::string base = "/tmp/strata_pp_base_" + std::to_string(::getpid()) + ".bin";
  const std::string common = " -c 64 -t 2 --json --no-warm-start --ram-budget 64M";  // streaming: misses to take
  ASSERT_EQ(run_cmd("perplexity -m " + kQuantModel + " -f " + kQuantText + common + " --kl-divergence-base " + base).code, 0);
  const auto kl = [&](const std::string& knobs) {
    const CmdResult k = run_cmd("perplexity -m " + kQuantModel + " --kl-divergence " + base + common + " " + knobs);
    EXPECT_EQ(k.code, 0) << k.err;
    return nlohmann::json::parse(last_line(k.out));
  };
  const auto none = kl(""), off = kl("--pp-model " + q4 + " --pp-min-tokens 64"), on = kl("--pp-model " + q4 + " --pp-min-tokens 16");
  EXPECT_EQ(off["kl_divergence"], none["kl_divergence"]) << "a context shorter than --pp-min-tokens: as without --pp-model";
  EXPECT_LT(none["kl_divergence"]["mean"].get<double>(), 1e-6);
  EXPECT_GT(on["kl_divergence"]["mean"].get<double>(), 100 * none["kl_divergence"]["mean"].get<double>() + 1e-7) << "the low-bit context costs something";
  EXPECT_LT(on["kl_divergence"]["mean"].get<double>(), 0.05);
  EXPECT_GT(on["pp_model"]["experts"].get<uint64_t>(), 0u);
  std::remove(base.c_str());

  const std::string other = fixtures_dir() + "/qwen3moe-f32/model.gguf";
  const CmdResult bad = run_cmd("run -m " + kQuantModel + " -p hi -n 1 --pp-model " + other);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--pp-model " + other), std::string::npos) << bad.err;
  std::remove(q4.c_str());
}
