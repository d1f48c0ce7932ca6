// strata gpu: the Vulkan devices this machine offers, which one --gpu picks, and (--check) each
// GPU kernel against the CPU on random data, with the transfer rates.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/units.h"
#include "gpu/device.h"
#include "gpu/self_check.h"

namespace strata::cli {

namespace {
struct GpuArgs {
  std::string gpu = "vulkan";
  bool check = false, json = false;
  int64_t rows = 256, cols = 4096;
  int tokens = 1;
  std::string pipeline_cache;
};

int run_gpu(const GpuArgs& a) {
  std::string why;
  const auto devices = gpu::Device::enumerate(&why);
  nlohmann::json j;
  j["devices"] = nlohmann::json::array();
  if (!a.json) {
    if (devices.empty()) std::printf("no Vulkan devices: %s\n", why.c_str());
    for (const auto& d : devices) std::printf("%s\n", d.summary().c_str());
  }
  for (const auto& d : devices)
    j["devices"].push_back({{"index", d.index}, {"name", d.name}, {"type", d.type_name()}, {"driver", d.driver},
                            {"device_local_bytes", d.device_local_bytes}, {"max_storage_range", d.max_storage_range},
                            {"subgroup_size", d.subgroup_size}, {"shared_memory", d.shared_memory}, {"fp16", d.fp16},
                            {"int8", d.int8}, {"int_dot", d.int_dot}, {"transfer_queue", d.transfer_queue},
                            {"host_cached", d.host_cached}, {"missing", d.missing}});
  if (devices.empty()) j["why"] = why;
  gpu::DeviceOptions opt;
  opt.pipeline_cache = a.pipeline_cache;
  gpu::GpuSelection sel = gpu::select_gpu(gpu::parse_gpu_option(a.gpu), opt);
  if (!sel.device) {
    if (a.json) {
      j["selected"] = nullptr;
      j["note"] = sel.note.empty() ? "--gpu none" : sel.note;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("--gpu %s: %s\n", a.gpu.c_str(), sel.note.empty() ? "the CPU" : sel.note.c_str());
    }
    return 0;
  }
  gpu::Device& dev = *sel.device;
  j["selected"] = dev.info().index;
  j["pipeline_cache"] = {{"path", dev.pipeline_cache_path()}, {"loaded_bytes", dev.pipeline_cache_loaded()}};
  if (!a.json)
    std::printf("--gpu %s: %s\npipeline cache: %s (%s loaded)\n", a.gpu.c_str(), dev.info().summary().c_str(),
                dev.pipeline_cache_path().empty() ? "none" : dev.pipeline_cache_path().c_str(),
                format_bytes(dev.pipeline_cache_loaded()).c_str());
  if (!a.check) {
    if (a.json) std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const auto tr = gpu::transfer_rates(dev, 64ull << 20);
  const auto res = gpu::self_check(dev, a.rows, a.cols, a.tokens);
  bool ok = true;
  j["transfer"] = {{"bytes", tr.bytes}, {"upload_gbs", tr.upload_gbs}, {"download_gbs", tr.download_gbs}};
  j["check"] = nlohmann::json::array();
  if (!a.json) std::printf("transfer %s: upload %.2f GB/s, readback %.2f GB/s\n%-34s %12s %12s %10s %9s\n", format_bytes(tr.bytes).c_str(),
                           tr.upload_gbs, tr.download_gbs, "op", "nmse exact", "nmse cpu", "bound", "gpu ms");
  for (const auto& r : res) {
    ok = ok && r.ok;
    j["check"].push_back({{"op", r.op}, {"nmse_exact", r.nmse_exact}, {"nmse_cpu", r.nmse_cpu}, {"threshold", r.threshold}, {"gpu_ms", r.gpu_ms},
                          {"ok", r.ok}});
    if (!a.json)
      std::printf("%-34s %12.3e %12.3e %10.0e %9.3f%s\n", r.op.c_str(), r.nmse_exact, r.nmse_cpu, r.threshold, r.gpu_ms, r.ok ? "" : "  FAIL");
  }
  j["ok"] = ok;
  if (a.json) std::printf("%s\n", j.dump(2).c_str());
  return ok ? 0 : 1;
}
}  // namespace

Command add_gpu(CLI::App& app) {
  auto* sub = app.add_subcommand("gpu", "List the Vulkan devices, show which one --gpu picks; --check runs each GPU kernel against the CPU");
  static GpuArgs a;
  sub->add_option("--gpu", a.gpu, "Device: auto (a discrete GPU, else none), none, vulkan (the best device, lavapipe included), vulkan:N");
  sub->add_flag("--check", a.check, "Run every GPU kernel on random data against the CPU and print the normalized errors and transfer rates");
  sub->add_option("--rows", a.rows, "--check: weight rows")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--cols", a.cols, "--check: values per row (rounded down to 256)")->check(CLI::Range(256, 1 << 20));
  sub->add_option("--tokens", a.tokens, "--check: activation rows")->check(CLI::Range(1, 512));
  sub->add_option("--pipeline-cache", a.pipeline_cache, "Pipeline cache file (default: $XDG_CACHE_HOME/strata/vulkan-VENDOR-DEVICE.bin; none: off)");
  sub->add_flag("--json", a.json, "JSON output");
  return {sub, [] { return run_gpu(a); }};
}

}  // namespace strata::cli
