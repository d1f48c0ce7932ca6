#pragma once
// /metrics in the Prometheus text exposition format (written by hand: no client library).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/expert_parallel.h"
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

// What /metrics says of the server itself.
struct ServerState {
  bool ready = false;     // the model is loaded
  bool draining = false;  // SIGTERM: finishing what is in flight, refusing new requests
  std::string replica;    // --replica: a label on every sample ("": none)
};

// ep: --expert-parallel's per-rank figures so far (ExpertParallel::live), as strata_ep_rank_*{rank="r"};
// nullptr: none.
std::string render_metrics(const SchedulerStats* s, const RequestCounters& requests, const ServerState& state,
                           const std::vector<EpRankStats>* ep = nullptr);
// `text` (Prometheus exposition) with label name="value" added to every sample line.
std::string add_label(const std::string& text, const std::string& name, const std::string& value);

}  // namespace strata::server
