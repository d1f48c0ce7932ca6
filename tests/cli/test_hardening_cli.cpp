// Issue 33, bad files and bad options: an I/O error in the GGUF header, NaN weights and an I/O
// queue depth of 0 each end in a clear error (exit 1), never a signal, a hang or garbage output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../model/golden_util.h"
#include "cli_util.h"
#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/model.h"
#include "runtime/engine.h"

using namespace strata::test;

namespace {

std::string fixture(const char* set) { return fixtures_dir() + "/" + set + "/model.gguf"; }

std::string copy_to_tmp(const std::string& from, const char* name) {
  const std::string to = (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name)).string();
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  return to;
}

}  // namespace

// The header is read with pread: an I/O error there names the file and offset (it was a SIGBUS
// on a mapped page, exit 135, no message).
TEST(HardeningCli, IoErrorInTheHeaderIsAClearError) {
  const std::string m = fixture("qwen3moe-q8_0");
  if (!std::filesystem::exists(m)) STRATA_MISSING_FIXTURE(m);
  const std::string env = fmt::format("ASAN_OPTIONS=verify_asan_link_order=0 LD_PRELOAD={} STRATA_EIO_PATH=qwen3moe-q8_0/model.gguf STRATA_EIO_BELOW=65536",
                                      STRATA_EIO_SHIM);
  const CmdResult r = run_cmd_env(env, "run -m " + m + " -p hello -n 1");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("offset"), std::string::npos) << r.err;
  // Past the header the same file loads (the shim is not what fails).
  const CmdResult ok = run_cmd_env(env.substr(0, env.find("STRATA_EIO_BELOW")) + "STRATA_EIO_BELOW=0", "run -m " + m + " -p hello -n 1");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// NaN in a norm weight of layer 1: exit 1 naming layer 1 (it printed NUL bytes and exited 0).
TEST(HardeningCli, NonFiniteWeightsAreAnErrorNamingTheLayer) {
  const std::string src = fixture("qwen3moe-f32");
  if (!std::filesystem::exists(src)) STRATA_MISSING_FIXTURE(src);
  const std::string m = copy_to_tmp(src, "nan.gguf");
  uint64_t at = 0;
  {
    auto g = strata::GgufFile::open(m);
    for (const auto& t : g->tensors)
      if (t.name == "blk.1.attn_norm.weight") at = t.offset;
  }
  ASSERT_GT(at, 0u);
  {
    std::fstream f(m, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::nanf("");
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  const CmdResult r = run_cmd("run -m " + m + " -p hello -n 4");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("not finite"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("of layer 1"), std::string::npos) << r.err;
  // Unchecked, the same run goes on (what the option is for: looking at the bits).
  EXPECT_EQ(run_cmd("run -m " + m + " -p hello -n 1 --no-check-finite").code, 0);
  std::filesystem::remove(m);
}

TEST(HardeningCli, IoDepthZeroIsRefused) {
  const std::string m = fixture("qwen3moe-q8_0");
  if (!std::filesystem::exists(m)) STRATA_MISSING_FIXTURE(m);
  const CmdResult r = run_cmd("run -m " + m + " -p hello -n 1 --cache-experts 4 --io-depth 0");
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.code, 128) << "killed by a signal";
  EXPECT_NE(r.err.find("--io-depth"), std::string::npos) << r.err;
  // The library refuses it too (a caller that bypasses the CLI).
  strata::EngineOptions eo;
  eo.n_ctx = 64;
  eo.tier.cache_experts = 4;
  eo.tier.queue_depth = 0;
  std::string err;
  try {
    strata::Engine e(strata::Model::load(m), eo);
  } catch (const strata::Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("queue depth 0"), std::string::npos) << err;
}
