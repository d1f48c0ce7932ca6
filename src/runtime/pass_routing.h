#pragma once
// Which rows of one pass routed to each expert, and from it who a pass's expert reads are for.
// The server's per-slot speculation shares one pass among slots: each slot's cost model must see
// the bytes and compute its own draft rows added, not the whole pass's, and the experts that only
// rejected draft rows needed should not push useful ones out of the cache.
//
// PassRouting is a RoutingObserver installed around Engine::forward (it passes every call on to
// the observer that was there). After the pass, with an owner per row (-1: a row the pass has in
// any case: a pending token, a prompt row; else the owner, e.g. the slot, whose draft it is):
//   attribute_drafts: an expert only draft rows routed to is that owner's (shared equally when
//     several owners' drafts routed to it): its bytes read in the pass and one unit of its compute;
//     every other expert is the pass's own (common) cost.
//   rejected_only: the experts whose every row was a rejected draft.
#include <cstdint>
#include <span>
#include <vector>

#include "experts/cache_policy.h"
#include "model/model.h"

namespace strata {

class PassRouting final : public RoutingObserver {
 public:
  // n_layer, n_expert: the grid (routes outside it are not counted).
  PassRouting(int n_layer, int n_expert, size_t reserve_routes = 0);
  // Before a pass: forgets the previous one.
  void begin();
  void on_route(int layer, int token, const int32_t* ids, int k) override;
  void on_predict(int layer, const int32_t* ids, int n) override;

  // Unique experts of the pass, in first-routed order.
  const std::vector<ExpertKey>& touched() const { return touched_; }
  // Calls f(row) for every row that routed to the expert touched()[i] (once per row).
  template <class F>
  void for_rows(size_t i, F&& f) const {
    for (int32_t at = head_[index(touched_[i])]; at >= 0; at = next_[static_cast<size_t>(at)]) f(row_[static_cast<size_t>(at)]);
  }

 private:
  size_t index(ExpertKey k) const { return static_cast<size_t>(k.layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(k.expert); }
  int n_layer_, n_expert_;
  std::vector<int32_t> head_;       // [n_layer * n_expert] latest route of the expert in this pass, -1: none
  std::vector<int32_t> row_, next_; // per route: its row, the expert's previous route (-1: none)
  std::vector<ExpertKey> touched_;
};

// What one owner's draft rows added to a pass.
struct DraftShare {
  uint64_t bytes = 0;   // expert bytes read for experts only its draft rows routed to
  double experts = 0;   // such experts (shared ones split equally)
};

struct PassSplit {
  uint64_t common_bytes = 0;  // bytes read for experts a common row routed to (or none: prefetch, warm-up)
  double common_experts = 0;  // experts a common row routed to
  size_t experts = 0;         // unique experts of the pass
};

// row_owner[r]: the owner (0..out.size()) of row r's draft, -1 for a common row. read[i]: bytes
// the pass read for touched()[i] (0: it was in memory). `total_read`: all the pass read.
// out[o] is set for every owner; `seen` is [out.size()] scratch.
PassSplit attribute_drafts(const PassRouting& pr, std::span<const int> row_owner, std::span<const uint64_t> read, uint64_t total_read,
                           std::span<DraftShare> out, std::vector<int>& seen);

// The experts of the pass whose every row has row_rejected[r] != 0 (into `out`, cleared first).
void rejected_only(const PassRouting& pr, std::span<const uint8_t> row_rejected, std::vector<ExpertKey>& out);

}  // namespace strata
