// `strata gpu` and --gpu on a model command: what each choice does with no Vulkan loader, with a
// loader but no device, and on lavapipe. Nothing crashes; auto falls back to the CPU with one
// line; vulkan fails at start with the reason; a run with --gpu auto gives the CPU's tokens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "../fixture_sets.h"
#include "../server/serve_process.h"
#include "cli_util.h"

namespace strata::test {
namespace {

const char* const kNoLoader = "STRATA_VULKAN_LOADER=/nonexistent/libvulkan.so.1";
const char* const kNoDevice = "VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json";

std::string gpu_tiny_model() { return std::string(STRATA_SOURCE_DIR) + "/../models/strata-moe-tiny/model.gguf"; }

TEST(GpuCli, NoLoaderAutoRunsOnTheCpuVulkanFailsClearly) {
  auto list = run_cmd_env(kNoLoader, "gpu --gpu auto");
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_NE(list.out.find("no Vulkan loader"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("running on the CPU"), std::string::npos) << list.out;
  auto v = run_cmd_env(kNoLoader, "gpu --gpu vulkan");
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.err.find("--gpu vulkan: no Vulkan loader"), std::string::npos) << v.err;
  const std::string run = "run -m " + gpu_tiny_model() + " -p 'In the beginning' -n 3 --temp 0 -c 64";
  auto r = run_cmd_env(kNoLoader, run + " --gpu vulkan");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no Vulkan loader"), std::string::npos) << r.err;
}

TEST(GpuCli, NoDeviceAutoRunsOnTheCpuVulkanFailsClearly) {
  auto a = run_cmd_env(kNoDevice, "gpu --gpu auto");
  EXPECT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("no Vulkan device"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("running on the CPU"), std::string::npos) << a.out;
  auto v = run_cmd_env(kNoDevice, "gpu --gpu vulkan:0");
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.err.find("no Vulkan device"), std::string::npos) << v.err;
}

// On this machine's device (lavapipe where there is no GPU): auto runs on the CPU with one line
// and the tokens of a run without --gpu; vulkan opens the device and stops at load for an
// architecture the Vulkan executor does not run (deepseek4: hyper-connections), naming it, and runs
// deepseek2 with its MLA attention on the CPU, saying so.
TEST(GpuCli, ModelCommandsWithGpuOptions) {
  const std::string run = "run -m " + gpu_tiny_model() + " -p 'In the beginning' -n 6 --temp 0 -c 64";
  auto base = run_cmd(run);
  ASSERT_EQ(base.code, 0) << base.err;
  auto a = run_cmd(run + " --gpu auto");
  ASSERT_EQ(a.code, 0) << a.err;
  const auto text = [](const std::string& out) { return out.substr(0, out.find("\n[prompt")); };  // less the timing line
  EXPECT_FALSE(text(base.out).empty());
  EXPECT_EQ(text(a.out), text(base.out));
  EXPECT_NE(a.err.find("gpu auto: "), std::string::npos) << a.err;
  const std::string hc = std::string(STRATA_FIXTURES_DIR) + "/deepseek4-q8_0/model.gguf";
  if (!std::filesystem::exists(hc)) STRATA_MISSING_FIXTURE(hc);
  auto v = run_cmd("run -m " + hc + " -p 'In the beginning' -n 3 --temp 0 -c 64 --gpu vulkan");
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.err.find("deepseek4 uses hyper-connections"), std::string::npos) << v.err;
  const std::string mla = std::string(STRATA_FIXTURES_DIR) + "/deepseek2-q8_0/model.gguf";
  if (!std::filesystem::exists(mla)) STRATA_MISSING_FIXTURE(mla);
  auto m = run_cmd("run -m " + mla + " -p 'In the beginning' -n 3 --temp 0 -c 64 --gpu vulkan --json");
  EXPECT_EQ(m.code, 0) << m.err;
  EXPECT_NE(m.err.find("on the CPU: attention of layers 0-"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("(MLA attention)"), std::string::npos) << m.err;
  EXPECT_NE(m.err.find("generation gpu: vulkan: "), std::string::npos) << m.err;
  const size_t brace = m.out.rfind("{\"");
  ASSERT_NE(brace, std::string::npos) << m.out;
  const auto j = nlohmann::json::parse(m.out.substr(m.out.rfind('\n', brace) == std::string::npos ? 0 : m.out.rfind('\n', brace) + 1));
  ASSERT_TRUE(j.contains("gpu")) << m.out;
  EXPECT_GT(j["gpu"]["prompt"]["bus_up_per_token"].get<double>(), 0.0);
  EXPECT_GT(j["gpu"]["generation"]["bus_down_per_token"].get<double>(), 0.0);
  EXPECT_EQ(j["gpu"]["generation"]["gpu_layers"].get<int>(), j["vram"]["n_layer"].get<int>());
  auto bad = run_cmd(run + " --gpu cuda");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--gpu: 'cuda'"), std::string::npos) << bad.err;
}

// A dense qwen3 golden model: --gpu vulkan runs its layers on the device and writes the CPU's
// greedy text (the tiny random model's margins are wide: the tolerances never flip a token here).
TEST(GpuCli, DenseModelRunsOnTheDeviceWithTheCpusText) {
  const std::string m = std::string(STRATA_FIXTURES_DIR) + "/qwen3-dense-q8_0/model.gguf";
  if (!std::filesystem::exists(m)) STRATA_MISSING_FIXTURE(m);
  const std::string run = "run -m " + m + " -p 'Hello world, this is' -n 12 --temp 0 -c 128";
  auto cpu = run_cmd(run);
  auto gpu = run_cmd(run + " --gpu vulkan");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  EXPECT_NE(gpu.err.find("runs the layers"), std::string::npos) << gpu.err;
  const auto text = [](const std::string& out) { return out.substr(0, out.find("\n[prompt")); };
  EXPECT_FALSE(text(cpu.out).empty());
  EXPECT_EQ(text(gpu.out), text(cpu.out));
}

// The trained demo model (qwen3moe): --gpu vulkan runs attention, norms and routers on the device
// and the routed experts on the CPU, resident or streamed through a small expert cache
// (--ram-budget 64M: a cache of 79 of its 512 experts), and writes the CPU's greedy text for 16 tokens.
TEST(GpuCli, MoeDemoModelRunsOnTheDeviceWithTheCpusText) {
  const std::string run = "run -m " + gpu_tiny_model() + " -p 'And God said unto Moses,' -n 16 --temp 0 -c 128 --no-warm-start";
  auto cpu = run_cmd(run);
  auto gpu = run_cmd(run + " --gpu vulkan");
  auto streamed = run_cmd(run + " --gpu vulkan --ram-budget 64M");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  ASSERT_EQ(streamed.code, 0) << streamed.err;
  EXPECT_NE(gpu.err.find("runs the layers"), std::string::npos) << gpu.err;
  EXPECT_NE(streamed.err.find("runs the layers"), std::string::npos) << streamed.err;
  EXPECT_NE(streamed.err.find("+ expert cache"), std::string::npos) << "the experts should stream: " << streamed.err;
  const auto text = [](const std::string& out) { return out.substr(0, out.find("\n[prompt")); };
  EXPECT_GT(text(cpu.out).size(), 40u) << cpu.out;
  EXPECT_EQ(text(gpu.out), text(cpu.out));
  EXPECT_EQ(text(streamed.out), text(cpu.out));
}

std::string last_json_line(const std::string& out) {
  const size_t e = out.find_last_not_of('\n');
  const size_t b = out.rfind('\n', e);
  return out.substr(b == std::string::npos ? 0 : b + 1, e == std::string::npos ? 0 : e - (b == std::string::npos ? 0 : b + 1) + 1);
}

// --vram-budget on the demo model (8 layers): `inspect` plans without a device; a budget that holds
// the scratch, layers 0..3 and half of layer 4 puts layers 0..3 on the device (inspect says so,
// and the run does), `run --json` reports the plan and the device's count of what it held, which
// stays within the budget, and the greedy text is the CPU's. A budget below one layer fails at
// start for --gpu vulkan, naming the budget; a malformed one names the option.
TEST(GpuCli, VramBudgetPlacesTheLeadingLayersAndRunReportsIt) {
  const std::string m = gpu_tiny_model();
  auto plan = run_cmd("inspect " + m + " --vram-budget 1G -c 128 --json");
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto pj = nlohmann::json::parse(plan.out)["vram_budget"];
  ASSERT_EQ(pj["n_layer"].get<int>(), 8) << pj.dump();
  EXPECT_EQ(pj["gpu_layers"].get<int>(), 8);
  uint64_t budget = pj["scratch"].get<uint64_t>();
  for (int l = 0; l < 4; ++l) budget += pj["layers"][l]["weights"].get<uint64_t>() + pj["layers"][l]["kv"].get<uint64_t>();
  budget += (pj["layers"][4]["weights"].get<uint64_t>() + pj["layers"][4]["kv"].get<uint64_t>()) / 2;
  const std::string b = std::to_string(budget);

  auto text = run_cmd("inspect " + m + " --vram-budget " + b + " -c 128");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("4 of 8 layers on the GPU (layers 0..3)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("on the CPU   layers 4..7"), std::string::npos) << text.out;

  const std::string run = "run -m " + m + " -p 'And God said unto Moses,' -n 16 --temp 0 -c 128 --no-warm-start";
  auto cpu = run_cmd(run + " --json");
  auto gpu = run_cmd(run + " --json --gpu vulkan --vram-budget " + b);
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  ASSERT_EQ(gpu.code, 0) << gpu.err;
  EXPECT_NE(gpu.err.find("runs layers 0..3 of 8"), std::string::npos) << gpu.err;
  const auto cj = nlohmann::json::parse(last_json_line(cpu.out));
  const auto gj = nlohmann::json::parse(last_json_line(gpu.out));
  EXPECT_FALSE(cj.contains("vram"));
  ASSERT_TRUE(gj.contains("vram")) << gj.dump();
  const auto& v = gj["vram"];
  EXPECT_EQ(v["budget"].get<uint64_t>(), budget);
  EXPECT_EQ(v["gpu_layers"].get<int>(), 4);
  EXPECT_FALSE(v["device"].get<std::string>().empty());
  EXPECT_GT(v["used"].get<uint64_t>(), 0u);
  EXPECT_LE(v["peak"].get<uint64_t>(), budget);
  EXPECT_LE(v["used"].get<uint64_t>(), v["planned"].get<uint64_t>());
  EXPECT_EQ(v["kv_type_k"], "f16");
  EXPECT_EQ(gj["text"], cj["text"]);
  EXPECT_NE(gpu.err.find(", 4 layers]"), std::string::npos) << "the figures line names the device and its layers: " << gpu.err;

  auto none = run_cmd(run + " --gpu vulkan --vram-budget 64K");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("--vram-budget 64.00 KiB holds no layer"), std::string::npos) << none.err;
  auto bad = run_cmd(run + " --gpu vulkan --vram-budget lots");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--vram-budget: invalid byte size 'lots'"), std::string::npos) << bad.err;
}

// The expert tiers through the CLI on the demo model, streaming under --ram-budget 64M with 16 MiB of
// routed experts in VRAM: the start-up line names the slots and the tiers, `run --json` reports the
// VRAM tier (exclusive, hits, uploads), the greedy text is the CPU's; a second run with the first
// run's usage statistics fills VRAM first; malformed options name themselves.
TEST(GpuCli, VramExpertTiersStreamReportAndWarmStart) {
  const std::string stats = (std::filesystem::temp_directory_path() / ("strata_vram_warm_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(stats);
  const std::string run = "run -m " + gpu_tiny_model() + " -p 'And God said unto Moses,' -n 24 --temp 0 -c 128 --json --ram-budget 64M";
  auto cpu = run_cmd(run + " --no-warm-start");
  auto first = run_cmd(run + " --gpu vulkan --vram-experts 16M --stats-dir " + stats);
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_NE(first.err.find("routed experts in VRAM"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("exclusive"), std::string::npos) << first.err;
  const auto cj = nlohmann::json::parse(last_json_line(cpu.out));
  const auto gj = nlohmann::json::parse(last_json_line(first.out));
  EXPECT_EQ(gj["text"], cj["text"]);
  const auto& x = gj["gpu"]["generation"]["experts"];
  ASSERT_TRUE(x.is_object()) << gj["gpu"].dump();
  EXPECT_EQ(x["tiers"], "exclusive");
  EXPECT_GT(x["slots"].get<int>(), 0);
  EXPECT_GT(x["vram_hits"].get<uint64_t>(), 0u);
  EXPECT_GT(x["uploads"].get<uint64_t>(), 0u);
  EXPECT_LE(x["resident"].get<int>(), x["slots"].get<int>());
  auto second = run_cmd(run + " --gpu vulkan --vram-experts 16M --stats-dir " + stats);
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_NE(second.err.find("routed experts into VRAM first"), std::string::npos) << second.err;
  EXPECT_EQ(nlohmann::json::parse(last_json_line(second.out))["text"], cj["text"]);
  std::filesystem::remove_all(stats);
  for (const std::string bad : {"--vram-experts lots", "--tiers sideways", "--vram-pp sometimes", "--vram-upload 0"}) {
    auto r = run_cmd(run + " --no-warm-start --gpu vulkan " + bad);
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find(bad.substr(0, bad.find(' '))), std::string::npos) << bad << ": " << r.err;
  }
}

// --cache-type-k/-v choose the device's KV cache too: with f32 and with q8_0 (f16 is the default,
// above) the demo model writes the CPU's greedy text with the same cache type, and run --json
// reports the device's type.
TEST(GpuCli, KvCacheTypesOnTheDevice) {
  for (const std::string t : {"f32", "q8_0"}) {
    SCOPED_TRACE(t);
    const std::string run = "run -m " + gpu_tiny_model() + " -p 'And God said unto Moses,' -n 12 --temp 0 -c 128 --no-warm-start --json " +
                            "--cache-type-k " + t + " --cache-type-v " + t;
    auto cpu = run_cmd(run);
    auto gpu = run_cmd(run + " --gpu vulkan");
    ASSERT_EQ(cpu.code, 0) << cpu.err;
    ASSERT_EQ(gpu.code, 0) << gpu.err;
    const auto cj = nlohmann::json::parse(last_json_line(cpu.out));
    const auto gj = nlohmann::json::parse(last_json_line(gpu.out));
    EXPECT_EQ(gj["vram"]["kv_type_k"], t);
    EXPECT_EQ(gj["vram"]["kv_type_v"], t);
    EXPECT_EQ(gj["vram"]["gpu_layers"].get<int>(), 8);
    EXPECT_EQ(gj["text"], cj["text"]);
  }
}

// The server's /props: the device, the layers on it and the device memory the executor held under
// --vram-budget; null without --gpu.
TEST(GpuCli, ServerPropsShowTheDeviceAndVram) {
  const std::string m = gpu_tiny_model();
  ServeProcess s("gpu_props", {"-m", m, "--port", "0", "--parallel", "2", "-c", "128", "-t", "1", "--gpu", "vulkan", "--vram-budget", "6M"});
  ASSERT_TRUE(s.started() && s.ready()) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  auto props = c.Get("/props");
  ASSERT_TRUE(props);
  const auto g = nlohmann::json::parse(props->body)["gpu"];
  ASSERT_TRUE(g.is_object()) << props->body;
  EXPECT_FALSE(g["device"].get<std::string>().empty());
  EXPECT_EQ(g["n_layer"].get<int>(), 8);
  EXPECT_GT(g["gpu_layers"].get<int>(), 0);
  EXPECT_LT(g["gpu_layers"].get<int>(), 8) << "6 MiB should not hold every layer with two slots";
  EXPECT_EQ(g["vram_budget"].get<uint64_t>(), 6u << 20);
  EXPECT_GT(g["vram_used"].get<uint64_t>(), 0u);
  EXPECT_LE(g["vram_used"].get<uint64_t>(), g["vram_planned"].get<uint64_t>());
  EXPECT_LE(g["vram_planned"].get<uint64_t>(), 6u << 20);
  s.stop();
  ServeProcess cpu("gpu_props_cpu", {"-m", m, "--port", "0", "--parallel", "1", "-c", "128", "-t", "1"});
  ASSERT_TRUE(cpu.started() && cpu.ready()) << cpu.log();
  httplib::Client cc("127.0.0.1", cpu.port());
  auto cp = cc.Get("/props");
  ASSERT_TRUE(cp);
  EXPECT_TRUE(nlohmann::json::parse(cp->body)["gpu"].is_null()) << cp->body;
}

// A device lost mid-run (fault injection: STRATA_VK_LOSE_AT_SUBMIT=N makes the device's Nth
// submission report VK_ERROR_DEVICE_LOST): `run` stops with the reason and exit status 1; the server
// fails the request in flight with it, then answers /health and every new request 503 naming it,
// and still stops on SIGTERM. Nothing crashes or hangs.
TEST(GpuCli, LostDeviceFailsRequestsClearly) {
  const std::string m = gpu_tiny_model();
  auto r = run_cmd_env("STRATA_VK_LOSE_AT_SUBMIT=40", "run -m " + m + " -p 'In the beginning' -n 16 --temp 0 -c 64 --gpu vulkan");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("the device was lost"), std::string::npos) << r.err;
  ::setenv("STRATA_VK_LOSE_AT_SUBMIT", "40", 1);
  ServeProcess s("gpu_lost", {"-m", m, "--port", "0", "--parallel", "2", "-c", "128", "-t", "1", "--gpu", "vulkan"});
  ::unsetenv("STRATA_VK_LOSE_AT_SUBMIT");
  ASSERT_TRUE(s.started() && s.ready()) << s.log();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(120);
  const std::string body = R"({"prompt":"In the beginning","max_tokens":48,"temperature":0})";
  auto a = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(a) << s.log();
  EXPECT_GE(a->status, 500) << a->body;
  EXPECT_NE(a->body.find("the device was lost"), std::string::npos) << a->body;
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_NE(h->body.find("the device was lost"), std::string::npos) << h->body;
  auto b = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 503) << b->body;
  EXPECT_NE(b->body.find("device_lost"), std::string::npos) << b->body;
  const int st = s.stop();
  EXPECT_TRUE(WIFEXITED(st)) << "status " << st << "\n" << s.log();
}

TEST(GpuCli, CheckRunsEveryKernelWithinItsBound) {
  auto r = run_cmd("gpu --check --rows 24 --cols 512 --tokens 2 --pipeline-cache none --json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_GE(j["check"].size(), 18u);  // 14 weight types and 4 row ops
  for (const auto& c : j["check"]) EXPECT_LT(c["nmse_cpu"].get<double>(), c["threshold"].get<double>()) << c.dump();
  EXPECT_GT(j["transfer"]["upload_gbs"].get<double>(), 0.0);
  EXPECT_FALSE(j["devices"].empty());
}

}  // namespace
}  // namespace strata::test
