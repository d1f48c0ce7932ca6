#pragma once
// The replay loop shared by the cache simulators (cache_sim.cpp, tier_sim.cpp).
#include <algorithm>
#include <span>
#include <vector>

#include "experts/routing_trace.h"

namespace strata {

// Calls on_token(clock) at every step and on_event(layer, experts, predicted) per selected event
// (see the replay semantics in cache_sim.h). Prediction rows never advance the clock. A prompt
// chunk recorded by the engine is layer-major (all its tokens' rows for a layer, then the next
// layer): its rows for one layer are merged into one event, the union of their experts in order
// of first use, as the engine fetches each once for the chunk; a new chunk starts when the layer
// goes down. Token-major prefill rows (one token at a time) are one step per token as in decode.
template <typename OnRun, typename OnToken, typename OnEvent>
void replay_trace(const RoutingTrace& t, PhaseFilter f, OnRun&& on_run, OnToken&& on_token, OnEvent&& on_event) {
  uint64_t clock = 0;
  std::vector<int32_t> merged;
  int merged_layer = -1;
  auto flush = [&] {
    if (merged_layer >= 0) on_event(merged_layer, std::span<const int32_t>(merged), false);
    merged.clear();
    merged_layer = -1;
  };
  for (const auto& r : t.runs) {
    on_run();
    bool first = true;
    uint32_t tok = 0;
    int layer = 0;
    Phase ph = Phase::decode;
    for (const auto& e : r.events) {
      if (!phase_selected(e.phase, f)) continue;
      if (e.predicted) {
        flush();
        on_event(e.layer, r.experts_of(e), true);
        continue;
      }
      const bool step = first || e.phase != ph || (e.phase == Phase::prefill ? e.layer < layer : e.token != tok);
      // Same layer, same prompt step, another token: part of the chunk's event for that layer.
      const bool merge = !step && e.phase == Phase::prefill && e.layer == layer && e.token != tok;
      if (!merge) flush();
      if (step) on_token(++clock);
      first = false;
      tok = e.token;
      layer = e.layer;
      ph = e.phase;
      merged_layer = e.layer;
      for (int32_t x : r.experts_of(e))
        if (std::find(merged.begin(), merged.end(), x) == merged.end()) merged.push_back(x);
    }
    flush();
  }
}

}  // namespace strata
