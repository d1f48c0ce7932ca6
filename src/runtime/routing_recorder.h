#pragma once
// Records the routing of every MoE layer for every token (strata run --trace-experts) and the
// layer x expert selection counts (--heatmap: an SVG picture and a CSV beside it).
#include <cstdint>
#include <string>
#include <vector>

#include "experts/routing_trace.h"
#include "model/model.h"

namespace strata {

class RoutingRecorder final : public RoutingObserver {
 public:
  RoutingRecorder(int n_layer, int n_expert, std::string run_name);
  // Tokens of the next forward pass are numbered from pos0 (prompt position, or decode step).
  void begin(uint32_t pos0, Phase phase) {
    pos0_ = pos0;
    phase_ = phase;
  }
  void on_route(int layer, int token, const int32_t* ids, int k) override;
  void on_predict(int layer, const int32_t* ids, int n) override;

  const RoutingTrace& trace() const { return trace_; }
  uint64_t count(int layer, int expert) const { return counts_[static_cast<size_t>(layer) * n_expert_ + expert]; }
  void write_trace(const std::string& path) const;
  // SVG heat map (rows = layers, columns = experts) and `<path minus .svg>.csv`.
  void write_heatmap(const std::string& svg_path) const;

 private:
  int n_layer_, n_expert_;
  RoutingTrace trace_;
  std::vector<uint64_t> counts_;  // [n_layer * n_expert]
  uint32_t pos0_ = 0;
  Phase phase_ = Phase::decode;
};

}  // namespace strata
