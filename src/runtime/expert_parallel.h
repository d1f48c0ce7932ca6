#pragma once
// Expert parallelism over Open MPI (issue 38): `mpirun -n R strata run|bench|perplexity
// --expert-parallel`. Rank 0 runs the whole model (dense weights, attention, KV cache, routers,
// sampling) and computes its own shard of each MoE layer's routed experts; every other rank opens
// its own copy of the file with its own expert tier and serves requests for its shard:
//   per MoE layer, rank 0 sends each rank that has work one message (the token rows routed to its
//   experts, the (token, slot, expert) pairs and their gate weights), computes its own experts while
//   the others do, and receives one message back per rank: each pair's weighted row, which it writes
//   into its slot. The slots are summed in selection order, so the output is bit for bit that of one
//   process (the remote ranks compute with the same code: Model::run_routed).
// Start-up: every rank's tensor table must equal rank 0's (the first differing tensor is named).
// Faults: a rank that does not answer within --ep-timeout seconds ends the job with an error naming
// it (MPI_Abort); waits poll a deadline on an injectable clock, never block without one.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/ep_plan.h"

namespace strata {

class Engine;

struct EpOptions {
  double timeout_s = 60;  // --ep-timeout: longest wait for a rank's answer (and for the start-up check)
  double replicate = 0;   // --ep-replicate: fraction of each layer's hottest experts on every rank
  // serve: a rank silent past the timeout fails the pass (ExpertOffload::lost names it; the server
  // fails the requests in flight, then ends the job: abort_job) instead of ending the job at once.
  bool fail_passes = false;
};

// What one rank did (gathered by rank 0 at the end; sent as raw bytes, so plain fields only).
struct EpRankStats {
  uint64_t hits = 0, misses = 0, bytes_read = 0;  // its expert tier (0 when its experts are resident)
  uint64_t jobs = 0, pairs = 0;                   // MoE-layer messages served (rank 0: sent), (token, slot) rows computed remotely
  double compute_s = 0;                           // rank 0: forward passes less network waits; others: in Model::run_routed
  double io_wait_s = 0;                           // waiting for expert reads
  double net_wait_s = 0;                          // rank 0: waiting for answers after its own experts were done
  // Its memory plan (runtime/expert_tier.h; a shard server's has no dense weights and no KV cache)
  // and its peak resident set (VmHWM) when it reported.
  uint64_t budget = 0, dense = 0, kv = 0, scratch = 0, expert_cache = 0, peak_rss = 0;
};

// The counters a shard server appends to every answer (its running totals once the job is done):
// rank 0 knows each rank's figures while it serves (ExpertParallel::live), not only at stop.
struct EpReplyTail {
  uint64_t hits = 0, misses = 0, bytes_read = 0, jobs = 0, pairs = 0;
  double compute_s = 0;
};
static_assert(sizeof(EpReplyTail) == 48 && sizeof(EpReplyTail) % sizeof(float) == 0);

struct EpReport {
  int ranks = 1;
  std::vector<EpRankStats> per_rank;
  uint64_t net_bytes = 0, round_trips = 0;  // every pass (bytes both ways)
  // Passes of one token (decoding) apart: tokens, bytes and round trips, and the formula's figures
  // per token (ep_formula).
  uint64_t decode_tokens = 0, decode_bytes = 0, decode_round_trips = 0;
  double formula_bytes = 0, formula_round_trips = 0;
  // The same from the usage statistics the plan was made with (ep_formula's usage form); only when
  // it was (EpPlan::by_traffic).
  bool usage_formula = false;
  double usage_bytes = 0, usage_round_trips = 0;
  std::string describe() const;
};

// A job message's fixed header (ep_mpi.cpp's JobHeader).
inline constexpr size_t kEpJobHeaderBytes = 24;

// What a shard server holds to take jobs of up to n_batch tokens and answer them (every token row,
// k_max pairs per token): its job message and its answer, reserved once at start (they never grow
// for such jobs) and counted in its memory plan (MemoryPlan::requests).
struct EpShardBuffers {
  size_t job_bytes = 0, reply_bytes = 0;
  uint64_t total() const { return job_bytes + reply_bytes; }
};
EpShardBuffers ep_shard_buffers(int n_batch, int k_max, int n_embd);

// Network bytes and round trips per decoded token that the protocol costs under uniform routing:
// per MoE layer and remote rank r owning m of the layer's n routed experts (k chosen per token),
// P(r is chosen) = 1 - C(n - m, k) / C(n, k), E[pairs] = k m / n; bytes = P (header + tail + 4 +
// 4 d) + E[pairs] (16 + 4 d) (the job header and the answer's counters (EpReplyTail), the token row
// out, a (token, slot, expert, weight) quad per pair out, each pair's row back); round trips = sum of P.
// usage: each expert's share of its layer's choices instead (EpPlan::share, from the statistics):
// with S the shares of r's experts summed, E[pairs] = k S, and P(r is not chosen) is approximated
// as k draws without replacement in proportion to the shares, where each earlier draw took the
// average share 1/n from the others: prod_{i<k} (1 - S / (1 - i/n)). With uniform shares (S = m/n)
// that product is C(n - m, k) / C(n, k): the uniform formula exactly; a rank holding hot experts
// gets more pairs and round trips than its expert count alone says, one holding cold ones fewer.
struct EpFormula {
  double bytes = 0, round_trips = 0;
};
EpFormula ep_formula(const EpPlan& plan, const std::vector<int>& k_used, int n_embd, bool usage = false);

// Waits until done() or until clock() passes `deadline`, calling done() between short pauses;
// false on the deadline. The one wait of the protocol (injectable clock for tests).
bool poll_until(const std::function<bool()>& done, double deadline, const std::function<double()>& clock);

class ExpertParallel {
 public:
  // Joins the MPI job (MPI_Init), checks that every rank holds the same model, and on rank 0 plans
  // the shards and routes the engine's MoE layers through them. Throws when built without Open MPI.
  static std::unique_ptr<ExpertParallel> start(Engine& eng, const EpOptions& o);
  virtual ~ExpertParallel() = default;

  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  bool root() const { return rank() == 0; }
  virtual const EpPlan& plan() const = 0;
  // Ranks other than 0: serve rank 0's requests until it stops them; returns the exit status.
  virtual int serve() = 0;
  // Rank 0, any thread: each rank's figures so far ([ranks]; others' as of their latest answer:
  // tier counters, jobs, pairs, compute seconds; rank 0's: jobs and pairs sent, network wait, tier).
  virtual std::vector<EpRankStats> live() const = 0;
  // Rank 0: stops the other ranks and gathers their figures. After it (or without it, at
  // destruction) the process has left the job.
  virtual EpReport stop() = 0;
  // Ends the whole job now (MPI_Abort) after printing `why`: the other ranks may be gone or stuck.
  [[noreturn]] virtual void abort_job(const std::string& why) = 0;
};

// Whether this build has Open MPI (CMake STRATA_MPI).
bool expert_parallel_available();
// This process's rank in the MPI job (joining it: MPI_Init), before ExpertParallel::start: the
// server opens its HTTP port on rank 0 only. Throws when built without Open MPI.
int expert_parallel_rank();

}  // namespace strata
