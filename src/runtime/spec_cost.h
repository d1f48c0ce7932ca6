#pragma once
// The cost model of speculative decoding: before each pass, how many drafts (k, 0 = a plain pass)
// maximize the expected tokens per second. Every figure is measured online from the passes run:
//   expected tokens(k) = 1 + sum_{i<k} prod_{j<=i} a_j, a_j the acceptance at draft position j
//                        given the drafts before it were accepted (decayed counts, half a
//                        pseudo-count: 1/2 at position 0, a_{j-1} after);
//   seconds(k) = k * draft time per drafted token
//              + compute(k+1 rows)          (c0 + c1 * k: c0 the plain passes' compute time, c1 the
//                                             extra time per draft row of passes with drafts, each
//                                             against c0 as it was then: a plain pass that grows
//                                             slower with the context does not make rows look cheaper)
//              + bytes(k+1 rows) / bandwidth (bytes read per pass b0 + b1 * k, fitted likewise:
//                                             the cache as it is now, the routing of the recent
//                                             passes; bandwidth = bytes read / time blocked on
//                                             reads, over recent passes).
// With a prediction of the bytes each draft row adds (its experts' routing predicted from the
// history, less what the cache holds: runtime/routing_memory.h), the byte term of a row is that
// prediction times a calibration (the ratio of actual to predicted draft bytes over recent passes
// with drafts, an EWMA of each, clamped to [1/4, 4]); a row without a prediction keeps the fitted
// bytes per row.
// Each draft row (compute + bytes) costs at least 1/16 of a plain pass.
// Figures are running means (exponentially weighted after the first 8 passes); once a time has two
// observations, a pass counts at most twice its estimate (a pass another process stalled). A k > 0 is chosen
// only when its rate beats a plain pass's by more than `margin`. Warm-up: plain, one draft,
// plain, one draft (so no single noisy pass sets a fit, and a costly draft source or costly rows
// are not paid k_max times before anything is known; deeper positions start from the first's
// acceptance); while it keeps choosing 0 it still probes with one draft after 8, 16, 32, ... plain
// passes (up to 1024), so it notices when drafts start to land: a rejected probe doubles the gap,
// and so does any probe after which not even drafts that are always accepted would pay while no
// pass reads experts (then the costs are compute alone and steady); an accepted one halves it, or
// brings it back to 8 when drafts then pay. Probing stays within 1% of the time: a probe's loss
// is its draft rows less their expected tokens, plus a draft model's catch-up on every token since
// its last drafts (seconds per row measured on its catch-ups), so a draft whose catch-up costs more
// per token than 1% of a plain pass is not probed while that holds (its drafts turned off stay off).
// While drafts pay, every 17th pass is plain all the same (weighted 1/2 in the plain passes' fits):
// the rows' cost is measured against the plain pass of its time, which drifts (the context grows,
// the machine's load changes) and is not seen while every pass drafts.
// Drafts that resume after n plain passes must save that catch-up of n tokens within min(n, 25)
// passes (25: the memory of the acceptance figures, as far as they can be trusted to look ahead).
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace strata {

struct SpecPass {
  int k = 0;                // drafts verified (rows = k + 1)
  int accepted = 0;         // drafts accepted (0..k)
  double draft_s = 0;       // time spent drafting them
  double deferred_s = 0;    // drafting time spent catching up on tokens of earlier plain passes (DraftSource::deferred_s; not in draft_s)
  double deferred_rows = 0; // the rows of that catch-up (DraftSource::deferred_rows)
  double compute_s = 0;     // the verify pass minus its I/O wait
  double io_wait_s = 0;     // blocked on expert reads
  uint64_t bytes_read = 0;  // expert bytes read by the pass
  // Predicted routing: the bytes the k drafts were predicted to add (every row predicted; < 0: no
  // prediction) and the bytes the pass read for experts that only draft rows routed to.
  double predicted_extra = -1;
  uint64_t extra_read = 0;
};

class SpecCostModel {
 public:
  explicit SpecCostModel(int k_max, double margin = 0.02);
  // k for the next pass, in 0..k_avail (k_avail <= k_max: drafts that can be had now).
  int choose(int k_avail);
  // The same with the bytes predicted for each draft row: row_bytes[i] for draft row i + 1 (the
  // bytes its experts add to the pass), kUnknownRow (or past the end) where there is no prediction.
  int choose(int k_avail, std::span<const double> row_bytes);
  // A costly source (a draft model) drafts the k choose() asked for before their routing can be
  // predicted: once it is (row_bytes as for choose), the most of them worth verifying (the best
  // rate among 0..k), or k during the warm-up and for a probe (they verify what they drafted). No
  // state changes.
  int trim(int k, std::span<const double> row_bytes) const;
  void observe(const SpecPass& p);

  static constexpr double kUnknownRow = -1.0;
  double expected_tokens(int k) const;  // per pass of k drafts
  double pass_seconds(int k) const;     // estimated
  double pass_seconds(int k, std::span<const double> row_bytes) const;
  double calibration() const;           // actual / predicted draft bytes (1 before any pass with both)
  double acceptance(int i) const;       // a_i
  int k_max() const { return k_max_; }
  // The fewest drafts a pass with drafts may verify (--draft-min; clamped to 1..k_max): warm-up
  // and probes verify this many, and no k below it is chosen (fewer would be thrown away).
  void set_k_min(int k) { k_min_ = std::clamp(k, 1, std::max(1, k_max_)); }
  bool fitted() const { return n_plain_ >= 2 && n_multi_ >= 2; }
  // A costly draft source may be let go (its memory freed): the last kGiveUp passes were plain and
  // no probe fits the budget (cost_gap). memory_waits: the expert cache would use that memory (the
  // target streams), so every pass it is held costs reads: kGiveUpStreaming plain passes do.
  bool given_up(bool memory_waits = false) const {
    return fitted() && plain_streak_ >= (memory_waits ? kGiveUpStreaming : kGiveUp) && cost_gap() == kNoProbe;
  }
  // A new sequence on the same engine (a server slot's next request): the cost fits (compute and
  // bytes per row, draft time, bandwidth: the machine's and the model's) are kept, so no warm-up
  // passes are repeated; acceptance by position becomes a prior worth one pass (it belongs to the
  // text, but a slot's requests tend to be alike) and the probe gap is capped at 32 passes.
  void new_sequence();

 private:
  static constexpr double kDecay = 0.96;  // per observation: counts halve over ~17 observations
  static constexpr double kHorizon = 1 / (1 - kDecay);  // passes the acceptance figures look ahead (their memory)
  static constexpr double kAlpha = 0.125; // EWMA weight of a new pass in the cost fits
  static constexpr int kProbeGap = 8, kMaxProbeGap = 1024, kNewSequenceProbeGap = 32;
  static constexpr int kNoProbe = 1 << 30;  // cost_gap when no gap keeps probing within budget
  static constexpr int kGiveUp = 16, kGiveUpStreaming = 4;
  static constexpr int kRefreshGap = 16;     // passes with drafts in a row before a plain one
  static constexpr double kRefreshAlpha = 0.5;  // EWMA weight of that plain pass (its figures are stale)
  static constexpr double kProbeBudget = 0.01;  // the most probes may cost, as a share of plain passes' time
  static constexpr double kMinCalibration = 0.25, kMaxCalibration = 4.0;
  int best_k(int k_avail, std::span<const double> row_bytes = {}) const;  // the k of the best rate at today's fits (0: plain)
  double saved(int k, std::span<const double> row_bytes) const;
  bool could_pay() const;  // some k beats a plain pass at acceptance 1 (fitted bytes per row)
  int cost_gap() const;    // the fewest plain passes per probe that keep probing within kProbeBudget (kNoProbe: none)
  int k_max_, k_min_ = 1;
  double margin_;
  std::vector<double> acc_, seen_;  // [k_max] decayed accepted / reached counts per position
  double c0_ = 0, b0_ = 0;             // plain passes: compute seconds, bytes read
  double row_c_ = 0, row_b_ = 0;       // passes with drafts: compute seconds, bytes read per draft row beyond the plain pass's at the time
  double wait_ = 0, bytes_ = 0;               // EWMA per pass with reads: seconds blocked, bytes read
  double draft_tok_s_ = 0;                    // EWMA draft seconds per drafted token
  double catch_up_row_s_ = 0;                 // EWMA seconds per row of a draft source's catch-up (deferred_s / deferred_rows)
  int64_t n_catch_up_ = 0;
  double pred_ = 0, actual_ = 0;              // EWMA per predicted pass with drafts: predicted, actual draft bytes
  int64_t n_plain_ = 0, n_multi_ = 0, n_draft_ = 0, n_io_ = 0, n_pred_ = 0;
  int plain_streak_ = 0, draft_streak_ = 0, probe_gap_ = kProbeGap;
  bool probing_ = false, refreshing_ = false;
};

}  // namespace strata
