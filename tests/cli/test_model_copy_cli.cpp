// --model-copy: copies of the model on other drives (experts/io_multi_drive.cpp, runtime/model_copy.h).
// Two copies on one disk give one copy's output; a copy that differs is refused naming the tensor;
// a drive whose reads fail (the EIO shim) leaves the rotation with a warning and the run goes on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../model/golden_util.h"
#include "cli_util.h"

using namespace strata::test;

namespace {

const std::string kCopySet = "mixtral-q4_k_m";
std::string copy_model() { return fixtures_dir() + "/" + kCopySet + "/model.gguf"; }
std::string copy_tmp(const std::string& name) { return "/tmp/strata_copy_" + std::to_string(::getpid()) + "_" + name; }

std::string copy_slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Streams through a 3-expert cache with pread (the shim sees the reads); returns the JSON line and
// the last prompt row's logits.
struct CopyRun {
  CmdResult r;
  std::string logits;
};
CopyRun copy_run(const std::string& env, const std::string& extra) {
  const std::string lf = copy_tmp("logits.f32");
  CopyRun out;
  out.r = run_cmd_env(env, "run -m " + copy_model() + " -p 'The quick brown fox jumps over the lazy dog.' -n 8 --ignore-eos --temp 0 -t 1 " +
                               "--no-warm-start --cache-experts 3 --io pread --json --logits-out " + lf + extra);
  out.logits = copy_slurp(lf);
  std::remove(lf.c_str());
  return out;
}

nlohmann::json copy_tokens(const CmdResult& r) {
  const auto j = nlohmann::json::parse(last_line(r.out), nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j["tokens"];
}

}  // namespace

TEST(ModelCopyCli, TwoCopiesGiveOneCopysOutput) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (--model-copy)");
  const std::string copy = copy_tmp("copy.gguf");
  std::filesystem::copy_file(copy_model(), copy, std::filesystem::copy_options::overwrite_existing);
  const CopyRun one = copy_run("", ""), two = copy_run("", " --model-copy " + copy);
  std::remove(copy.c_str());
  ASSERT_EQ(one.r.code, 0) << one.r.err;
  ASSERT_EQ(two.r.code, 0) << two.r.err;
  EXPECT_NE(two.r.err.find("I/O: 2 drives: ["), std::string::npos) << two.r.err;
  // Both drives took reads (each read to the one with fewer bytes in flight): "read X, Y" with no 0 B.
  const size_t at = two.r.err.find("drives (--model-copy): read ");
  ASSERT_NE(at, std::string::npos) << two.r.err;
  const std::string line = two.r.err.substr(at, two.r.err.find('\n', at) - at);
  EXPECT_NE(line.find(", "), std::string::npos) << line;
  EXPECT_EQ(line.find(" 0 B"), std::string::npos) << line;
  EXPECT_EQ(copy_tokens(one.r), copy_tokens(two.r));
  EXPECT_FALSE(one.logits.empty());
  EXPECT_TRUE(one.logits == two.logits);
}

TEST(ModelCopyCli, ACopyThatDiffersIsRefusedNamingTheTensor) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (--model-copy)");
  const CmdResult r = run_cmd("run -m " + copy_model() + " -p hi -n 1 --model-copy " + fixtures_dir() + "/mixtral-q8_0/model.gguf");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("is not a copy of"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tensor '"), std::string::npos) << r.err;
}

TEST(ModelCopyCli, AFailingDriveLeavesTheRotation) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (--model-copy)");
  const std::string copy = copy_tmp("bad.gguf");
  std::filesystem::copy_file(copy_model(), copy, std::filesystem::copy_options::overwrite_existing);
  const CopyRun one = copy_run("", "");
  // Every expert byte of the copy (past the first MiB, which holds the header the start-up check reads) fails.
  const CopyRun bad = copy_run(std::string("ASAN_OPTIONS=verify_asan_link_order=0 LD_PRELOAD=") + STRATA_EIO_SHIM + " STRATA_EIO_PATH=" +
                                   std::filesystem::path(copy).filename().string() + " STRATA_EIO_FROM=1048576 STRATA_EIO_BELOW=1099511627776",
                               " --model-copy " + copy);
  std::remove(copy.c_str());
  ASSERT_EQ(bad.r.code, 0) << bad.r.err;
  EXPECT_NE(bad.r.err.find("warning: expert reads from " + copy + " failed"), std::string::npos) << bad.r.err;
  EXPECT_TRUE(one.logits == bad.logits);
  EXPECT_EQ(copy_tokens(one.r), copy_tokens(bad.r));
}

// The disk probe with a copy measures each drive alone and both at once, and the limit figures use
// the latter (two copies on one disk here, so "at once" is about one disk's bandwidth).
TEST(ModelCopyCli, DiskProbeMeasuresEachDriveAndAllAtOnce) {
  if (!have_fixtures()) STRATA_MISSING_FIXTURE(fixtures_dir() + " (--model-copy)");
  const std::string copy = copy_tmp("probe.gguf");
  std::filesystem::copy_file(copy_model(), copy, std::filesystem::copy_options::overwrite_existing);
  const std::string args = "bench -m " + copy_model() + " -p 4 -n 4 -t 1 --no-warm-start --cache-experts 3 --disk-probe 8388608 --json";
  const CmdResult one = run_cmd(args), two = run_cmd(args + " --model-copy " + copy);
  std::remove(copy.c_str());
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(two.code, 0) << two.err;
  const auto a = nlohmann::json::parse(last_line(one.out)), b = nlohmann::json::parse(last_line(two.out));
  EXPECT_GT(a["disk_bw"].get<double>(), 0) << a.dump();
  EXPECT_FALSE(a.contains("disk_drives_bw")) << "one drive: no per-drive figures";
  ASSERT_TRUE(b.contains("disk_drives_bw")) << b.dump();
  ASSERT_EQ(b["disk_drives_bw"].size(), 2u);
  for (const auto& bw : b["disk_drives_bw"]) EXPECT_GT(bw.get<double>(), 0);
  EXPECT_GT(b["disk_bw"].get<double>(), 0);
  EXPECT_NE(two.out.find("2 drives"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("all at once (the limit)"), std::string::npos) << two.out;
}
