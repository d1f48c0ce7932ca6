#pragma once
// Speculative decoding: a draft source proposes up to k tokens, the target verifies the pending
// token and the k drafts in one pass (Engine::forward, every row in the decode order, so each
// row's logits are bit for bit those of plain decoding), and the accepted prefix plus one token
// chosen by the target are emitted. Greedy: a draft is accepted iff it is the token plain
// decoding picks there, so the output is token for token plain decoding's. Sampling: the
// speculative-sampling rule (accept x with min(1, p(x)/q(x)), else draw from normalize(max(0, p - q))),
// so every token has the target sampler's distribution.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "experts/cache_policy.h"
#include "runtime/draft.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/routing_memory.h"
#include "runtime/sampler.h"
#include "runtime/spec_cost.h"

namespace strata {

struct SpecOptions {
  int k_max = 4;  // drafts per pass at most
  int k_min = 1;  // fewer drafts than this: a plain decoding pass (k = 0)
  // true: SpecCostModel chooses k per pass (0..k_max, 0 = plain) from measured costs and
  // acceptance; false: every pass verifies all the drafts it gets (up to k_max).
  bool adaptive = false;
  // Experts read by a pass only for rows that were rejected enter the cache at low priority
  // (evicted first).
  bool demote_rejected = true;
  // Streaming experts with the cost model on: predict each draft row's experts from the history's
  // routing (runtime/routing_memory.h) and give the cost model the bytes each row would add. The
  // prompt's routing is remembered only when the decoder exists before the prompt's passes.
  bool predict_routing = true;
  // The clock drafting and passes are timed by, for the cost model (null: the steady clock); tests
  // inject one so that its decisions do not depend on the machine's speed.
  std::function<double()> clock;
};

// Predicted routing against what the passes did (passes with drafts while the prediction was on).
struct RoutePredictionStats {
  int64_t passes = 0;            // passes with drafts whose every row had a prediction
  double bytes = 0;              // their predicted bytes read: row 0's experts the cache lacked + the drafts' extra
  uint64_t actual_bytes = 0;     // the bytes they read
  double extra_bytes = 0;        // the drafts' part of `bytes`
  uint64_t actual_extra = 0;     // bytes they read for experts that only draft rows routed to
  int64_t rows = 0, rows_predicted = 0;  // draft rows verified; of them, with a prediction
  int64_t experts_predicted = 0, experts_routed = 0, experts_both = 0;  // (row, layer, expert) triples over those rows
  double calibration = 1;        // the cost model's actual / predicted draft bytes
  double precision() const { return experts_predicted ? static_cast<double>(experts_both) / static_cast<double>(experts_predicted) : 0.0; }
  double recall() const { return experts_routed ? static_cast<double>(experts_both) / static_cast<double>(experts_routed) : 0.0; }
};

struct SpecStats {
  int64_t passes = 0, proposed = 0, accepted = 0;
  int64_t emitted = 0;  // tokens chosen by its passes: the accepted drafts and the target's token
  std::vector<int64_t> proposed_at, accepted_at;  // [k_max] drafts proposed / accepted at each position
  int64_t expert_union = 0;   // unique (layer, expert) pairs per pass, summed over passes
  int64_t expert_slots = 0;   // routed (token, layer, slot) triples, summed: (k+1) * top-k * MoE layers per pass
  double draft_s = 0, verify_s = 0, io_wait_s = 0;
  uint64_t bytes_read = 0;    // expert bytes read during verification passes
  std::vector<int64_t> k_hist;  // [k_max + 1] passes that verified k drafts
  int64_t demoted = 0;        // experts read only for rejected rows, put at the cache's low priority
  double cost_plain_s = 0, cost_row_s = 0;  // the cost model's latest estimates: a plain pass, each draft row more
  bool predicting = false;    // the decoder predicted draft rows' routing (SpecOptions::predict_routing, streaming)
  RoutePredictionStats prediction;
  // A draft model the cost model gave up on (SpecCostModel::given_up) freed its memory: at pass
  // released_at (-1: never), giving released_bytes to the expert cache.
  int64_t released_at = -1;
  uint64_t released_bytes = 0;
};

class SpeculativeDecoder {
 public:
  // Verifies the drafts for `gen`'s sequence `seq` (draft may be nullptr: plain passes through the
  // same loop); the engine's architecture must be rewindable. Construct it before the prompt's
  // passes so that their routing is remembered (predict_routing).
  SpeculativeDecoder(Engine& eng, int seq, Generator& gen, DraftSource* draft, const SpecOptions& opt);
  ~SpeculativeDecoder();
  // One verification pass of the generator's last token (chosen, not yet evaluated) and the
  // drafts: the generator takes each row's token (accepted drafts, then the target's own) and
  // decides the end; rejected rows are cut back. Returns whether the generation goes on.
  bool step();
  const SpecStats& stats() const { return stats_; }
  const SpecCostModel& cost_model() const { return cost_; }

 private:
  class ExpertCounter;
  int room() const;
  double now() const;
  int choose(int k, int& chosen);
  int draft_tokens(int k_room);
  void verify(int k);
  void demote_rejected(int kept_rows);
  bool predict_rows(int k);
  void score_prediction(int k, int pos0, SpecPass& pass);
  void release_draft();

  Engine& eng_;
  int seq_;
  Generator& gen_;
  DraftSource* draft_;
  bool released_ = false;  // the draft source freed its memory (release_draft): no more drafts
  SpecOptions opt_;
  SpecStats stats_;
  std::vector<int32_t> batch_;
  Draft d_;
  std::vector<float> logits_;  // [k+1, n_vocab]
  std::unique_ptr<ExpertCounter> counter_;
  SpecCostModel cost_;
  std::vector<ExpertKey> rejected_;
  // Predicted routing (null when off): the sequence's routing by position, the tap that records it,
  // the prediction of this pass's rows and the bytes each draft row adds ([k_max]).
  std::unique_ptr<SeqRouting> mem_;
  std::unique_ptr<RoutingTap> tap_;
  std::unique_ptr<RoutePredictor> pred_;
  std::vector<double> row_bytes_;
  double row0_bytes_ = -1;
  bool predicted_ = false;  // this pass's rows were predicted
};

}  // namespace strata
