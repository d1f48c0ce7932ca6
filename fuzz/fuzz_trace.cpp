// libFuzzer target for routing traces (strata cachesim's input): parse_trace on arbitrary bytes
// must either return a trace or throw strata::Error. A parsed trace of modest shape is then
// replayed through the default policy and Belady (with its predictions replayed, and per layer),
// and written back and re-read unchanged. Nothing else: no crash, no other exception, no
// unbounded memory or time.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"
#include "experts/cache_sim.h"
#include "experts/routing_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::stringstream in(std::string(reinterpret_cast<const char*>(data), size));
  strata::RoutingTrace t;
  try {
    t = strata::parse_trace(in, "fuzz.csv");
  } catch (const strata::Error&) {
    return 0;
  }
  std::stringstream out;
  strata::write_trace(t, out);
  const strata::RoutingTrace u = strata::parse_trace(out, "round trip");
  if (u.n_events() != t.n_events() || u.n_predictions() != t.n_predictions()) __builtin_trap();
  // The predictive policy keeps n_layer x n_expert^2 floats: replay only modest shapes.
  if (t.n_layer <= 0 || t.n_expert <= 0 || uint64_t(t.n_layer) * t.n_expert * t.n_expert > (1u << 20)) return 0;
  const strata::CacheShape shape = strata::trace_shape(t);
  for (bool per_layer : {false, true}) {
    strata::SimOptions o;
    o.phase = strata::PhaseFilter::all;
    o.budget.per_layer = per_layer;
    o.budget.bytes = std::max<uint64_t>(1, shape.size() / 3);
    o.replay_predictions = per_layer;
    const auto steps = strata::count_steps(t, o.phase);
    const auto a = strata::simulate(t, shape, o, "default");
    const auto b = strata::simulate(t, shape, o, "belady");
    if (a.accesses != steps.accesses || b.accesses != steps.accesses || a.hits > a.accesses) __builtin_trap();
  }
  return 0;
}
