#include "runtime/pass_routing.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

PassRouting::PassRouting(int n_layer, int n_expert, size_t reserve_routes) : n_layer_(std::max(0, n_layer)), n_expert_(std::max(1, n_expert)) {
  head_.assign(static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_), -1);
  row_.reserve(reserve_routes);
  next_.reserve(reserve_routes);
  touched_.reserve(head_.size());
}

void PassRouting::begin() {
  for (const ExpertKey& k : touched_) head_[index(k)] = -1;
  touched_.clear();
  row_.clear();
  next_.clear();
}

void PassRouting::on_route(int layer, int token, const int32_t* ids, int k) {
  if (layer >= 0 && layer < n_layer_) {
    for (int j = 0; j < k; ++j) {
      if (ids[j] < 0 || ids[j] >= n_expert_) continue;
      const ExpertKey key{layer, ids[j]};
      int32_t& h = head_[index(key)];
      if (h < 0) touched_.push_back(key);
      row_.push_back(token);
      next_.push_back(h);
      h = static_cast<int32_t>(row_.size() - 1);
    }
  }
}

void PassRouting::on_predict(int, const int32_t*, int) {}

PassSplit attribute_drafts(const PassRouting& pr, std::span<const int> row_owner, std::span<const uint64_t> read, uint64_t total_read,
                           std::span<DraftShare> out, std::vector<int>& seen) {
  STRATA_CHECK(read.size() == pr.touched().size(), "pass split: {} read figures for {} experts", read.size(), pr.touched().size());
  for (DraftShare& d : out) d = DraftShare{};
  seen.assign(out.size(), -1);
  PassSplit split;
  split.experts = pr.touched().size();
  uint64_t draft_bytes = 0;
  for (size_t i = 0; i < pr.touched().size(); ++i) {
    bool common = false;
    int owners = 0;
    const int stamp = static_cast<int>(i);
    pr.for_rows(i, [&](int row) {
      const int o = row >= 0 && static_cast<size_t>(row) < row_owner.size() ? row_owner[static_cast<size_t>(row)] : -1;
      if (o < 0 || static_cast<size_t>(o) >= out.size()) {
        common = true;
      } else if (seen[static_cast<size_t>(o)] != stamp) {
        seen[static_cast<size_t>(o)] = stamp;
        ++owners;
      }
    });
    if (common || owners == 0) {
      split.common_experts += 1;
      continue;
    }
    // Draft rows only: shared equally among the owners that routed to it (bytes rounded down; the
    // remainder stays common).
    const uint64_t each = read[i] / static_cast<uint64_t>(owners);
    for (size_t o = 0; o < out.size(); ++o) {
      if (seen[o] != stamp) continue;
      out[o].bytes += each;
      out[o].experts += 1.0 / owners;
      draft_bytes += each;
    }
  }
  split.common_bytes = total_read > draft_bytes ? total_read - draft_bytes : 0;
  return split;
}

void rejected_only(const PassRouting& pr, std::span<const uint8_t> row_rejected, std::vector<ExpertKey>& out) {
  out.clear();
  for (size_t i = 0; i < pr.touched().size(); ++i) {
    bool all = true;
    pr.for_rows(i, [&](int row) { all = all && row >= 0 && static_cast<size_t>(row) < row_rejected.size() && row_rejected[static_cast<size_t>(row)]; });
    if (all) out.push_back(pr.touched()[i]);
  }
}

}  // namespace strata
