#include "model/upload_choice.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

PpUpload parse_pp_upload(std::string_view s) {
  if (s == "auto") return PpUpload::automatic;
  if (s == "always") return PpUpload::always;
  if (s == "off") return PpUpload::off;
  fail("--vram-pp '{}': expected auto, always or off", s);
}

namespace {
void follow(double& rate, double measured) {
  if (measured > 0) rate = 0.75 * rate + 0.25 * measured;
}
}  // namespace

void UploadRates::observe_bus(uint64_t bytes, double s) {
  if (s > 0 && bytes > 0) follow(bus_Bps, static_cast<double>(bytes) / s);
}
void UploadRates::observe_cpu(uint64_t row_bytes, double s) {
  if (s > 0 && row_bytes > 0) follow(cpu_row_Bps, static_cast<double>(row_bytes) / s);
}
void UploadRates::observe_gpu(uint64_t row_bytes, double s) {
  if (s > 0 && row_bytes > 0) follow(gpu_row_Bps, static_cast<double>(row_bytes) / s);
}

double cpu_cost_s(const UploadRates& r, const ExpertWork& w) {
  const double b = static_cast<double>(w.bytes);
  return std::max(b / r.cpu_read_Bps, w.rows * b / r.cpu_row_Bps);
}

double gpu_cost_s(const UploadRates& r, const ExpertWork& w) {
  const double b = static_cast<double>(w.bytes);
  return b / r.bus_Bps + std::max(b / r.gpu_read_Bps, w.rows * b / r.gpu_row_Bps);
}

int choose_uploads(const UploadRates& r, std::span<const ExpertWork> experts, std::span<uint8_t> upload) {
  STRATA_CHECK(upload.size() >= experts.size(), "choose_uploads: {} flags for {} experts", upload.size(), experts.size());
  int n = 0;
  for (size_t i = 0; i < experts.size(); ++i) {
    upload[i] = experts[i].rows > 0 && gpu_cost_s(r, experts[i]) < cpu_cost_s(r, experts[i]);
    n += upload[i];
  }
  return n;
}

}  // namespace strata
