#pragma once
// What a device executor's passes cost, as JSON: the one shape `strata run/bench --json` ("gpu"),
// the server's /stats ("gpu") and the web panel read. Per-token figures divide by `tokens`; shares
// by `wall_s` (the caller's wall time for those tokens).
#include <nlohmann/json.hpp>

#include "model/executor.h"

namespace strata {

nlohmann::json device_report_json(const LayerExecutor& ex, double tokens, double wall_s);
// The VRAM expert cache's part of it ("experts"; null without one).
nlohmann::json device_experts_json(const DeviceExpertStats& e, double tokens);

}  // namespace strata
