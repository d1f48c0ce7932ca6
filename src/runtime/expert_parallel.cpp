// Expert parallelism over Open MPI: the plan-independent parts (formula, polling, report) and,
// with STRATA_MPI, the transport (runtime/ep_mpi.cpp).
#include "runtime/expert_parallel.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <thread>

#include "core/error.h"
#include "core/units.h"

namespace strata {

EpShardBuffers ep_shard_buffers(int n_batch, int k_max, int n_embd) {
  const size_t n = static_cast<size_t>(std::max(n_batch, 1)), pairs = n * static_cast<size_t>(std::max(k_max, 1)), d = static_cast<size_t>(n_embd);
  EpShardBuffers b;
  b.job_bytes = kEpJobHeaderBytes + 4 * (n + 4 * pairs) + 4 * n * d;
  b.reply_bytes = 4 * pairs * d + sizeof(EpReplyTail);
  return b;
}

EpFormula ep_formula(const EpPlan& plan, const std::vector<int>& k_used, int n_embd, bool usage) {
  EpFormula f;
  const double hdr = static_cast<double>(kEpJobHeaderBytes + sizeof(EpReplyTail));  // the job header (ep_mpi.cpp's JobHeader) and the answer's counters
  const bool shares = usage && plan.share.size() == plan.owner.size();  // else every expert counts the same
  std::vector<int> own(static_cast<size_t>(plan.ranks));
  std::vector<double> mass(static_cast<size_t>(plan.ranks));
  for (int l = 0; l < plan.n_layer; ++l) {
    int ne = 0;
    std::fill(own.begin(), own.end(), 0);
    std::fill(mass.begin(), mass.end(), 0.0);
    for (int e = 0; e < plan.n_expert; ++e) {
      const int o = plan.owner_of(l, e);
      if (o < 0) continue;
      ++ne;
      own[static_cast<size_t>(o)]++;
      if (shares) mass[static_cast<size_t>(o)] += plan.share_of(l, e);
    }
    const int k = l < static_cast<int>(k_used.size()) ? k_used[l] : 0;
    if (ne == 0 || k == 0) continue;
    for (int r = 1; r < plan.ranks; ++r) {
      const double s = shares ? mass[static_cast<size_t>(r)] : static_cast<double>(own[static_cast<size_t>(r)]) / ne;
      double none = 1.0;  // uniform: C(ne - m, k) / C(ne, k); usage: its approximation above
      for (int i = 0; i < k && i < ne; ++i) none *= std::clamp(1.0 - s / (1.0 - static_cast<double>(i) / ne), 0.0, 1.0);
      const double p = 1.0 - none, pairs = static_cast<double>(k) * s;
      f.bytes += p * (hdr + 4 + 4.0 * n_embd) + pairs * (16 + 4.0 * n_embd);
      f.round_trips += p;
    }
  }
  return f;
}

bool poll_until(const std::function<bool()>& done, double deadline, const std::function<double()>& clock) {
  for (int spins = 0;; ++spins) {
    if (done()) return true;
    if (clock() > deadline) return done();
    // A few polls back to back (an answer from the next socket or machine lands within
    // microseconds), then short sleeps so that ranks sharing the cores get them.
    if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(spins > 2000 ? 200 : 20));
  }
}

std::string EpReport::describe() const {
  std::string s = fmt::format("expert parallelism: {} ranks\n", ranks);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const EpRankStats& x = per_rank[r];
    const uint64_t acc = x.hits + x.misses;
    s += fmt::format("  rank {}: {} {} MoE-layer jobs ({} rows){}; hit rate {}, read {}; compute {:.3f} s, I/O wait {:.3f} s", r, r ? "served" : "sent",
                     x.jobs, x.pairs, r ? "" : " to other ranks", acc ? fmt::format("{:.1f}%", 100.0 * x.hits / acc) : "n/a (resident)", format_bytes(x.bytes_read), x.compute_s,
                     x.io_wait_s);
    if (r == 0) s += fmt::format(", network wait {:.3f} s", x.net_wait_s);
    s += fmt::format("; memory: dense {}, KV cache {}, expert cache {} (budget {}), peak RSS {}\n", format_bytes(x.dense), format_bytes(x.kv),
                     format_bytes(x.expert_cache), x.budget ? format_bytes(x.budget) : "none", format_bytes(x.peak_rss));
  }
  s += fmt::format("  network: {} in {} round trips", format_bytes(net_bytes), round_trips);
  if (decode_tokens)
    s += fmt::format("; decoding {:.0f} bytes and {:.1f} round trips per token (formula, uniform routing: {:.0f} bytes, {:.1f}{})",
                     static_cast<double>(decode_bytes) / decode_tokens, static_cast<double>(decode_round_trips) / decode_tokens, formula_bytes,
                     formula_round_trips,
                     usage_formula ? fmt::format("; from the usage statistics: {:.0f} bytes, {:.1f}", usage_bytes, usage_round_trips) : "");
  return s + "\n";
}

#ifndef STRATA_MPI
bool expert_parallel_available() { return false; }
int expert_parallel_rank() { fail("--expert-parallel: this strata was built without Open MPI (install libopenmpi-dev and rebuild)"); }
std::unique_ptr<ExpertParallel> ExpertParallel::start(Engine&, const EpOptions&) {
  fail("--expert-parallel: this strata was built without Open MPI (install libopenmpi-dev and rebuild)");
}
#endif

}  // namespace strata
