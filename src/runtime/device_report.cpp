#include "runtime/device_report.h"

#include <algorithm>

namespace strata {

nlohmann::json device_experts_json(const DeviceExpertStats& e, double tokens) {
  if (e.slots == 0) return nullptr;
  const double nt = std::max(1.0, tokens);
  return {{"tiers", e.tiers},
          {"slots", e.slots},
          {"slot_bytes", e.slot_bytes},
          {"resident", e.resident},
          {"vram_hits", e.vram_hits},
          {"cpu", e.cpu},
          {"vram_hit_rate", e.hit_rate()},
          {"uploads", e.uploads},
          {"upload_bytes", e.upload_bytes},
          {"uploads_per_token", static_cast<double>(e.uploads) / nt},
          {"upload_bytes_per_token", static_cast<double>(e.upload_bytes) / nt},
          {"evictions", e.evictions},
          {"gpu_rows", e.gpu_rows},
          {"prompt_uploads", e.pp_uploads},
          {"prompt_upload_bytes", e.pp_upload_bytes},
          {"upload_s", e.upload_s}};
}

nlohmann::json device_report_json(const LayerExecutor& ex, double tokens, double wall_s) {
  const DeviceStats d = ex.stats();
  const DeviceMemory m = ex.device_memory();
  const double nt = std::max(1.0, tokens);
  return {{"device", ex.name()},
          {"gpu_layers", ex.n_layers()},
          {"vram_used", m.used},
          {"vram_peak", m.peak},
          {"vram_budget", m.budget},
          {"passes", d.passes},
          {"bus_up_per_token", static_cast<double>(d.bytes_up) / nt},
          {"bus_down_per_token", static_cast<double>(d.bytes_down) / nt},
          {"gpu_s", d.gpu_s},
          {"gpu_timestamps", d.timestamps},
          {"gpu_share", wall_s > 0 ? std::min(1.0, d.gpu_s / wall_s) : 0.0},
          {"cpu_s", d.cpu_s},
          {"bus_s", d.bus_s},
          {"executor_s", d.run_s},
          {"experts", device_experts_json(d.experts, tokens)}};
}

}  // namespace strata
