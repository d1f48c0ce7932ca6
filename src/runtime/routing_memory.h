#pragma once
// Predicted routing for speculative decoding under a memory budget: whether a draft row is cheap to
// verify depends on whether the experts it will route to are in the expert cache already.
//
// SeqRouting remembers, for each position of one sequence's history, its token and the experts
// each MoE layer routed that row to (allocated once for n_ctx positions; n_moe x top-k int16 per
// position). RoutingTap fills it: installed as the model's routing observer and the engine's pass
// listener (chaining those already there), it stages each pass's routes by batch row and, once the
// pass succeeded, commits each tracked sequence's rows at their positions; rows a later pass
// overwrites, or that the sequence was cut back past (rejected drafts), are dropped.
//
// RoutePredictor predicts a pass's rows: a token t after token p routes as the most recent earlier
// position whose token is t and whose previous token is p; failing that, the latest position with
// token t; failing that, unknown. From that, the bytes each draft row adds to the pass: the experts
// predicted for it that no earlier row of the pass (the pending token included) is predicted to
// use and that the cache does not hold now.
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/expert_tier.h"

namespace strata {

class ExpertCache;

// A row's routes: the MoE layers in order, top_k expert ids each (-1 padded).
struct RouteLayout {
  explicit RouteLayout(const ModelConfig& cfg);
  int n_moe() const { return static_cast<int>(moe_layers.size()); }
  int width() const { return n_moe() * top_k; }  // int16 per row
  int moe_index(int layer) const { return layer >= 0 && static_cast<size_t>(layer) < moe_of.size() ? moe_of[static_cast<size_t>(layer)] : -1; }
  std::vector<int> moe_layers;  // [n_moe] layer of each MoE index
  std::vector<int> moe_of;      // [n_layer] MoE index of each layer (-1: dense)
  int top_k = 0;                // the most experts a layer routes a token to
};

class SeqRouting {
 public:
  SeqRouting(const ModelConfig& cfg, int n_ctx);
  const RouteLayout& layout() const { return lay_; }
  int n_moe() const { return lay_.n_moe(); }
  int top_k() const { return lay_.top_k; }
  int width() const { return lay_.width(); }
  int layer_of(int m) const { return lay_.moe_layers[static_cast<size_t>(m)]; }
  int moe_index(int layer) const { return lay_.moe_index(layer); }
  int n_ctx() const { return n_ctx_; }
  int length() const { return n_; }  // positions recorded: 0..length()-1

  // Positions pos0..pos0+n-1 hold tokens[0..n) routed as routes[n, width()] (expert ids, -1: none);
  // drops every position from pos0 on first (pos0 <= length()).
  void commit(int pos0, const int32_t* tokens, int n, const int16_t* routes);
  // Drops positions n and after.
  void truncate(int n);
  int32_t token(int pos) const { return tok_[static_cast<size_t>(pos)]; }
  // [width()]: layer m's experts at m * top_k() (-1 padded).
  std::span<const int16_t> routes(int pos) const {
    return {routes_.data() + static_cast<size_t>(pos) * static_cast<size_t>(width()), static_cast<size_t>(width())};
  }
  // Where token `t` after token `prev` (-1: none known) is predicted to route like: the most recent
  // position q with token t and token prev at q - 1; else the most recent with token t; else -1.
  int source(int32_t t, int32_t prev) const;

 private:
  static constexpr int kMaxWalk = 4096;  // earlier occurrences of t tried for the bigram match
  RouteLayout lay_;
  int n_ctx_, n_ = 0;
  std::vector<int32_t> tok_;              // [n_ctx]
  std::vector<int32_t> prev_same_;        // [n_ctx] previous position with the same token (-1: none)
  std::vector<int32_t> last_;             // [n_vocab] latest position of each token (-1: none)
  std::vector<int16_t> routes_;           // [n_ctx, width]
};

// Feeds SeqRoutings from the engine's passes: each tracked sequence's rows go to its memory.
class RoutingTap final : public RoutingObserver, public PassListener {
 public:
  // Adds itself to `eng`'s routing observers and pass listeners.
  explicit RoutingTap(Engine& eng);
  // Sequence `seq`'s rows go to `mem` (nullptr: not tracked); mem must be of the engine's model.
  void track(int seq, SeqRouting* mem);
  ~RoutingTap() override;  // detach() unless done
  // Leaves the engine's observers and listeners; call it while the engine exists when the tap may
  // outlive it.
  void detach();
  RoutingTap(const RoutingTap&) = delete;
  RoutingTap& operator=(const RoutingTap&) = delete;
  void on_route(int layer, int token, const int32_t* ids, int k) override;
  void on_predict(int layer, const int32_t* ids, int n) override;
  void on_pass(Engine& eng, std::span<const SeqInput> inputs) override;

 private:
  Engine& eng_;
  RouteLayout lay_;
  std::vector<SeqRouting*> mem_;  // [n_seq]
  std::vector<int16_t> staged_;  // [n_batch, width] this pass's routes by batch row (-1: none)
  bool attached_ = true;
};

// The routing predicted for the rows of one pass and the bytes each draft row would add.
class RoutePredictor {
 public:
  static constexpr double kUnknown = -1.0;  // a row without a prediction
  RoutePredictor(const ModelConfig& cfg, int max_rows);
  // Row 0: the pending token, after `prev` (the history's last token, -1: none); rows 1..: the drafts.
  void predict(const SeqRouting& mem, int32_t prev, int32_t pending, std::span<const int32_t> drafts);
  int n_rows() const { return n_rows_; }
  int source(int row) const { return src_[static_cast<size_t>(row)]; }  // position predicted from, -1: unknown
  // out[i]: bytes draft row i + 1 adds: its predicted experts that rows 0..i are not predicted to
  // use and `cache` does not hold, at the bytes the cache reads for each (kUnknown: no prediction).
  // Returns the bytes row 0 is predicted to read (kUnknown: no prediction).
  double extra_bytes(const SeqRouting& mem, const ExpertCache& cache, std::span<double> out);
  // Both for a pass of the sequence `mem` records, whose rows the engine holds up to seq_len (later
  // positions, rows of rejected drafts, are dropped first); prev: the token at seq_len - 1. Fills
  // row_bytes[0..drafts.size()) (the rest kUnknown); returns row 0's bytes.
  // The cache is the tier's (kUnknown everywhere while experts are resident).
  double price(SeqRouting& mem, int seq_len, int32_t prev, int32_t pending, std::span<const int32_t> drafts, ExpertTier& tier,
               std::span<double> row_bytes);
  // The bytes of draft rows 0..k-1 when every one has a prediction, else kUnknown.
  static double total(std::span<const double> row_bytes, int k);

 private:
  int n_expert_ = 0, n_rows_ = 0;
  std::vector<int> src_;           // [max_rows]
  std::vector<uint32_t> stamp_;    // [n_layer * n_expert] generation of the last row set that claimed the expert
  uint32_t gen_ = 0;
};

// What predicted routing holds for n_seq sequences of n_ctx positions (a SeqRouting each, a
// RoutingTap's staging for n_batch rows, a RoutePredictor of n_batch + 1 rows): the bytes the
// memory plan counts for it (EngineOptions::routing_memory). 0 for a model without MoE layers.
uint64_t routing_memory_bytes(const ModelConfig& cfg, int n_ctx, int n_batch, int n_seq);

// Per-row comparison of predicted and routed experts: counts experts predicted, routed, and both.
struct RouteMatch {
  int64_t predicted = 0, routed = 0, both = 0;
};
// predicted, routed: [width] rows of a SeqRouting (predicted may be empty: no prediction).
void match_routes(std::span<const int16_t> predicted, std::span<const int16_t> routed, int top_k, RouteMatch& m);

}  // namespace strata
