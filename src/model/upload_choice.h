#pragma once
// Prompt processing by cost (issue 36): for each routed expert of a batch that is not in VRAM,
// computing it on the CPU from RAM or uploading it to the device and computing it there. A fixed
// batch-size threshold (llama.cpp copies an expert whenever a batch has >= 32 rows) is right on one
// machine and wrong on the next; here each expert is priced from measured rates:
//
//   cpu  = max(bytes / cpu_read_Bps, rows * bytes / cpu_row_Bps)
//   gpu  = bytes / bus_Bps + max(bytes / gpu_read_Bps, rows * bytes / gpu_row_Bps)
//
// (a product reads the weights once and does work in proportion to rows x weights; *_row_Bps is
// that work per second, measured as rows x weight bytes over time). An expert goes up when its gpu
// cost is lower. The rates start from conservative priors and follow what the passes measure
// (UploadRates::observe_*), so the choice adapts to the bus and both devices.
#include <cstdint>
#include <span>
#include <string_view>

namespace strata {

// Prompt processing: experts not in VRAM that a pass of several tokens routes rows to may be
// uploaded for that pass and computed on the device. automatic: by the costs below; always: every
// one (tests); off: never.
enum class PpUpload : uint8_t { automatic, always, off };
PpUpload parse_pp_upload(std::string_view s);  // "auto", "always", "off"; throws naming the choices

struct UploadRates {
  double bus_Bps = 8e9;        // host -> device
  double cpu_read_Bps = 20e9;  // the CPU streaming weights from RAM
  double cpu_row_Bps = 40e9;   // rows x weight bytes per second on the CPU
  double gpu_read_Bps = 200e9;
  double gpu_row_Bps = 2e12;
  // Moving averages of measured figures (weight 1/4 for the new one); non-positive ones are ignored.
  void observe_bus(uint64_t bytes, double s);
  void observe_cpu(uint64_t row_bytes, double s);  // rows x weight bytes computed in s
  void observe_gpu(uint64_t row_bytes, double s);
};

struct ExpertWork {
  uint64_t bytes = 0;  // the expert's weights
  int rows = 0;        // (token) rows routed to it in the batch
};

double cpu_cost_s(const UploadRates& r, const ExpertWork& w);
double gpu_cost_s(const UploadRates& r, const ExpertWork& w);  // upload included
// upload[i] = 1 when experts[i] costs less uploaded and computed on the device; returns how many.
int choose_uploads(const UploadRates& r, std::span<const ExpertWork> experts, std::span<uint8_t> upload);

}  // namespace strata
