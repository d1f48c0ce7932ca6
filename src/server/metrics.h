#pragma once
// /metrics in the Prometheus text exposition format (written by hand: no client library).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "server/scheduler.h"

namespace strata::server {

// HTTP requests by endpoint and status code.
class RequestCounters {
 public:
  void add(const std::string& endpoint, int status);
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> n_;
};

std::string render_metrics(const SchedulerStats* s, const RequestCounters& requests, bool ready);

}  // namespace strata::server
