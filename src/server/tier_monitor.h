#pragma once
// The expert tier seen live, for /stats and the web page's panel. The engine thread feeds it
// (routing choices through the model's RoutingObserver, the cache counters after every pass);
// HTTP threads read snapshots. Figures: hit rate, bytes read per token, read bandwidth against
// the disk's measured ceiling and the fraction of that physical limit, prefetch precision and
// recall, tokens/s, over the whole run and over a recent window; and the layer x expert heat map
// (routing choices, decayed with a half-life in tokens). Resident experts: routing heat and
// tokens/s only. With --gpu: the device, its memory, bytes over the bus per token each way and the
// device's busy share of the passes.
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "experts/expert_cache.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace strata::server {

struct TierMonitorOptions {
  double disk_bw = 0;            // bytes/s measured at start (0: not measured); --model-copy: every drive at once
  std::vector<double> disk_drives_bw;  // --model-copy: each drive alone (empty: one drive)
  uint64_t disk_probe_bytes = 0; // what the measurement read
  double window_s = 5;           // the recent window
  double half_life_tokens = 64;  // heat decay
};

class TierMonitor final : public RoutingObserver {
 public:
  TierMonitor(Engine& eng, const TierMonitorOptions& opt);

  // Engine thread.
  void on_route(int layer, int token, const int32_t* ids, int k) override;
  void on_step(int tokens, int generated, double t0, double t1);

  // Any thread. `now`: now_s().
  nlohmann::json snapshot(double now) const;
  uint64_t steps() const;
  // Waits until a pass after `seen` or `timeout_ms` or close(); false once closed.
  bool wait(uint64_t seen, int timeout_ms) const;
  // Waits `ms` or until close(); false once closed.
  bool pause(int ms) const;
  void close();

 private:
  struct Sample {  // one pass
    double t0 = 0, t1 = 0;
    int tokens = 0, generated = 0;
    ExpertCacheCounters c;  // what the pass read
  };
  nlohmann::json totals_json() const;
  nlohmann::json recent_json(double now) const;
  nlohmann::json heat_json() const;

  Engine& eng_;
  const TierMonitorOptions opt_;
  bool streaming_;  // under mu_ (engine thread writes): experts stream (false once a background load ended)
  int n_layer_ = 0, n_expert_ = 0;
  std::vector<int> moe_layers_;
  std::vector<uint32_t> pass_counts_;  // engine thread: this pass's choices [layer * n_expert]
  ExpertCacheCounters last_;           // engine thread: the cache's counters after the previous pass

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool closed_ = false;
  uint64_t steps_ = 0;
  uint64_t tokens_ = 0, generated_ = 0;
  double busy_s_ = 0;
  ExpertCacheCounters total_;
  std::deque<Sample> recent_;  // passes of the last window_s (plus the one before, the base)
  std::vector<float> heat_;    // [layer * n_expert]
  nlohmann::json gpu_;         // the device's figures after the last pass (null without --gpu)
};

}  // namespace strata::server
