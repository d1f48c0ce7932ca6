#include "runtime/ep_plan.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"
#include "experts/warm_stats.h"
#include "model/expert_layout.h"
#include "model/model.h"

namespace strata {

EpPlan plan_expert_parallel(const ExpertLayout& layout, int n_trunk_layers, int ranks, double replicate, const WarmStats* stats) {
  STRATA_CHECK(ranks >= 1, "expert parallelism: {} ranks", ranks);
  STRATA_CHECK(replicate >= 0 && replicate <= 1, "--ep-replicate {}: a fraction from 0 to 1", replicate);
  EpPlan p;
  p.ranks = ranks;
  p.n_layer = std::min(n_trunk_layers, static_cast<int>(layout.layers.size()));
  for (int l = 0; l < p.n_layer; ++l) p.n_expert = std::max(p.n_expert, layout.layers[l].n_expert);
  const size_t cells = static_cast<size_t>(p.n_layer) * p.n_expert;
  p.owner.assign(cells, -1);
  p.replica.assign(cells, 0);
  p.share.assign(cells, 0.0);
  p.bytes.assign(static_cast<size_t>(ranks), 0);
  p.traffic.assign(static_cast<size_t>(ranks), 0.0);
  p.experts.assign(static_cast<size_t>(ranks), 0);
  const bool use_stats = stats && stats->n_expert == p.n_expert && stats->n_layer >= p.n_layer;
  double total = 0;
  std::vector<double> load(static_cast<size_t>(ranks));
  std::vector<int> order;
  p.by_traffic = use_stats;
  for (int l = 0; l < p.n_layer; ++l) {
    const ExpertLayer& el = layout.layers[l];
    const int ne = el.n_expert;
    if (ne == 0) continue;
    uint64_t eb = el.expert_bytes;  // set by ExpertStore; else the parts' strides
    if (eb == 0)
      for (const ExpertPart& part : el.part) eb += part.stride;
    double layer_total = 0;
    std::vector<double> wt(static_cast<size_t>(ne), 1.0);
    if (use_stats)
      for (int e = 0; e < ne; ++e) wt[e] = std::max(0.0, stats->weight[static_cast<size_t>(l) * stats->n_expert + e]);
    for (double w : wt) layer_total += w;
    if (layer_total <= 0) std::fill(wt.begin(), wt.end(), 1.0), layer_total = ne;
    order.resize(static_cast<size_t>(ne));
    for (int e = 0; e < ne; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return wt[a] > wt[b]; });
    const int n_rep = use_stats ? static_cast<int>(std::ceil(replicate * ne - 1e-9)) : 0;
    std::fill(load.begin(), load.end(), 0.0);
    for (int i = 0; i < ne; ++i) {
      const int e = order[i];
      const size_t cell = static_cast<size_t>(l) * p.n_expert + e;
      const double share = wt[e] / layer_total;
      p.share[cell] = share;
      if (i < n_rep) {
        p.replica[cell] = 1;
        p.owner[cell] = 0;
        for (int r = 0; r < ranks; ++r) p.bytes[r] += eb;
        p.traffic[0] += share;
        p.experts[0]++;
        continue;
      }
      int best = 0;
      for (int r = 1; r < ranks; ++r)
        if (load[r] < load[best] || (load[r] == load[best] && p.bytes[r] < p.bytes[best])) best = r;
      p.owner[cell] = static_cast<int16_t>(best);
      load[best] += share;
      p.bytes[best] += eb;
      p.traffic[best] += share;
      p.experts[best]++;
    }
    total += 1;
  }
  if (total > 0)
    for (double& t : p.traffic) t /= total;
  return p;
}

EpPlan plan_for_model(const Model& m, int ranks, double replicate, const std::string& stats_dir) {
  const ExpertLayout lay = expert_layout(m.gguf(), m.config(), m.weights());
  int ne = 0;
  for (const auto& l : lay.layers) ne = std::max(ne, l.n_expert);
  std::optional<WarmStats> ws;
  const std::string dir = stats_dir.empty() ? default_stats_dir() : stats_dir;
  if (!dir.empty()) {
    const uint64_t key = model_identity(m.gguf());
    std::string why;
    ws = load_warm_stats(warm_stats_path(dir, key), key, static_cast<int>(lay.layers.size()), ne, &why);
  }
  return plan_expert_parallel(lay, m.config().n_layer, ranks, replicate, ws ? &*ws : nullptr);
}

std::string EpPlan::describe() const {
  int reps = 0;
  for (uint8_t r : replica) reps += r;
  int moe_layers = 0;
  for (int l = 0; l < n_layer; ++l) moe_layers += owner[static_cast<size_t>(l) * n_expert] >= 0;
  std::string s = fmt::format("expert parallelism: {} ranks, {} MoE layers, plan by {}{}\n", ranks, moe_layers,
                              by_traffic ? "bytes and usage statistics" : "bytes (no usage statistics)",
                              reps ? fmt::format(", {} replicated experts on every rank", reps) : "");
  for (int r = 0; r < ranks; ++r)
    s += fmt::format("  rank {}: {} experts, {}, {:.1f}% of routed traffic{}\n", r, experts[r], format_bytes(bytes[r]), 100.0 * traffic[r],
                     r == 0 ? " (plus dense weights, attention, KV cache, routers)" : "");
  return s;
}

}  // namespace strata
