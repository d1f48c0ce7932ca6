#pragma once
// Routing traces: which experts each (token, layer) used, for replaying cache policies.
//
// Strata's own trace format (what `strata run --trace-experts FILE` writes), CSV:
//   # strata expert trace v1
//   # n_layer=32 n_expert=8            (optional; else inferred as max + 1)
//   run,phase,token,layer,experts
//   p0,decode,0,0,5 2                  (experts space-separated, in router (top-k) order)
// One row per routing event, rows in execution order: token by token, layer by layer. `run`
// names an independent sequence (a prompt; each starts with a cold cache), `phase` is prefill
// or decode, `token` the prompt position or decode step.
//
// With the router lookahead on (--lookahead D), the engine also predicts the experts of the next
// D MoE layers from the current hidden state and prefetches them. Such traces have a sixth column,
// `kind`: `route` for the rows above, `predict` for a prediction, written right after the route
// rows of the layer that made it: `layer` is the layer predicted for, `experts` the predicted
// set (for a prompt chunk, the union over its tokens), `token` the first token of its batch.
// `strata cachesim --replay-predictions` replays them as the engine's prefetches.
//
// The reader also takes any CSV with the columns run, phase, token_index (or token), layer and
// expert_0..expert_{k-1}, such as the Mixtral trace in shared/traces (extra columns ignored).
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Limits a trace file must respect (the largest MoE models have ~100 layers and 384 experts per
// layer); beyond them the reader fails with the line, rather than a simulation allocating the
// per-layer expert x expert tables of an absurd shape.
inline constexpr int kMaxTraceLayers = 1024;
inline constexpr int kMaxTraceExperts = 2048;

enum class Phase : uint8_t { prefill, decode };
enum class PhaseFilter : uint8_t { all, prefill, decode };
PhaseFilter parse_phase_filter(std::string_view s);  // "all" | "prefill" | "decode"
bool phase_selected(Phase p, PhaseFilter f);

struct RoutingEvent {
  uint32_t token = 0;
  int32_t layer = 0;
  Phase phase = Phase::decode;
  uint32_t offset = 0;  // into RoutingRun::experts
  uint16_t n = 0;       // experts chosen
  bool predicted = false;  // a lookahead prediction for `layer`, not a router choice
};

struct RoutingRun {
  std::string name;
  std::vector<RoutingEvent> events;  // execution order
  std::vector<int32_t> experts;      // all events' experts, concatenated

  std::span<const int32_t> experts_of(const RoutingEvent& e) const { return {experts.data() + e.offset, e.n}; }
  void add(uint32_t token, int32_t layer, Phase phase, std::span<const int32_t> ex, bool predicted = false);
};

struct RoutingTrace {
  int n_layer = 0;
  int n_expert = 0;
  int top_k = 0;  // the most experts any event chose
  std::vector<RoutingRun> runs;

  size_t n_events() const;
  size_t n_predictions() const;  // events with predicted set
  // Sets n_layer / n_expert / top_k from the events when they are smaller than the data needs.
  void infer_shape();
};

RoutingTrace read_trace(const std::string& path);
RoutingTrace parse_trace(std::istream& in, const std::string& what);
void write_trace(const RoutingTrace& t, std::ostream& out);
void write_trace(const RoutingTrace& t, const std::string& path);

// Synthetic routing: per layer a Zipf popularity over a random permutation of the experts
// (weight of rank r is 1/(r+1)^zipf), temporal locality (each of the k choices reuses one of the
// previous token's experts at that layer with probability `reuse`), optional popularity drift
// (a new permutation every `shift_every` tokens). Deterministic for a seed on every platform.
struct SyntheticOptions {
  int n_layer = 24;
  int n_expert = 64;
  int top_k = 6;
  int tokens = 1000;  // per run
  int runs = 2;
  double zipf = 1.0;
  double reuse = 0.3;
  int shift_every = 0;  // 0: popularity never changes
  uint64_t seed = 1;
};
// Parses "layers=24,experts=64,k=6,tokens=1000,runs=2,zipf=1.0,reuse=0.3,shift=0,seed=1" (any
// subset, over the defaults).
SyntheticOptions parse_synthetic(std::string_view spec);
RoutingTrace make_synthetic(const SyntheticOptions& o);

}  // namespace strata
