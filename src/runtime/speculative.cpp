#include "runtime/speculative.h"

#include <algorithm>

#include "core/error.h"
#include "experts/expert_cache.h"

namespace strata {

// Counts the unique (layer, expert) pairs a pass routes to and which rows routed to each (a bit
// per row).
class SpeculativeDecoder::ExpertCounter final : public RoutingObserver {
 public:
  explicit ExpertCounter(const ModelConfig& cfg) {
    for (const auto& l : cfg.layers) n_expert_ = std::max(n_expert_, l.n_expert);
    rows_.assign(static_cast<size_t>(cfg.n_layer) * static_cast<size_t>(std::max(1, n_expert_)), 0);
  }
  void begin() {
    for (const ExpertKey& k : touched) rows_[index(k)] = 0;
    touched.clear();
    slots = 0;
  }
  void on_route(int layer, int token, const int32_t* ids, int k) override {
    for (int j = 0; j < k; ++j) {
      uint64_t& r = rows_[index({layer, ids[j]})];
      if (r == 0) touched.push_back({layer, ids[j]});
      r |= uint64_t{1} << std::min(token, 63);
    }
    slots += k;
  }
  uint64_t rows(ExpertKey k) const { return rows_[index(k)]; }
  std::vector<ExpertKey> touched;  // unique pairs of this pass, in first-routed order
  int64_t slots = 0;

 private:
  size_t index(ExpertKey k) const { return static_cast<size_t>(k.layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(k.expert); }
  int n_expert_ = 0;
  std::vector<uint64_t> rows_;  // [n_layer, n_expert] rows (bit i: row i) routed to it in this pass
};

SpeculativeDecoder::SpeculativeDecoder(Engine& eng, int seq, Generator& gen, DraftSource* draft, const SpecOptions& opt)
    : eng_(eng), seq_(seq), gen_(gen), draft_(draft), opt_(opt), cost_(std::max(0, opt.k_max)) {
  cost_.set_k_min(opt.k_min);
  STRATA_CHECK(opt.k_max >= 0 && opt.k_min >= 0, "speculative decoding: draft sizes must be >= 0 (got --draft-max {}, --draft-min {})", opt.k_max,
               opt.k_min);
  STRATA_CHECK(!draft || eng.model().rewindable(),
               "speculative decoding needs to cut rejected drafts back, which architecture {} cannot (its per-sequence state is more than KV rows)",
               eng.config().arch);
  STRATA_CHECK(opt.k_max < 64, "--draft-max {}: at most 63 drafts per pass", opt.k_max);
  STRATA_CHECK(opt.k_max + 1 <= eng.options().n_batch, "--draft-max {} does not fit the batch size {}", opt.k_max, eng.options().n_batch);
  const size_t nv = static_cast<size_t>(eng.config().n_vocab);
  stats_.proposed_at.assign(static_cast<size_t>(opt.k_max), 0);
  stats_.accepted_at.assign(static_cast<size_t>(opt.k_max), 0);
  stats_.k_hist.assign(static_cast<size_t>(opt.k_max) + 1, 0);
  logits_.reserve(nv * static_cast<size_t>(opt.k_max + 1));
  counter_ = std::make_unique<ExpertCounter>(eng.config());
  if (draft && opt.predict_routing && eng.tier().cache() && RouteLayout(eng.config()).n_moe() > 0) {
    mem_ = std::make_unique<SeqRouting>(eng.config(), eng.options().n_ctx);
    tap_ = std::make_unique<RoutingTap>(eng);
    tap_->track(seq, mem_.get());
    pred_ = std::make_unique<RoutePredictor>(eng.config(), opt.k_max + 1);
    row_bytes_.assign(static_cast<size_t>(opt.k_max), SpecCostModel::kUnknownRow);
    stats_.predicting = true;
  }
}

SpeculativeDecoder::~SpeculativeDecoder() = default;

int SpeculativeDecoder::room() const { return eng_.options().n_ctx - static_cast<int>(gen_.history().size()); }

double SpeculativeDecoder::now() const { return opt_.clock ? opt_.clock() : now_s(); }

// Walks the verified rows through the generator: drafts are kept while the chosen token is the
// draft, then the target's own token ends the pass (at the first rejection, or after all k), or
// the generation ends. Returns how many drafts were accepted; `chosen`: the tokens taken.
int SpeculativeDecoder::choose(int k, int& chosen) {
  const size_t nv = static_cast<size_t>(eng_.config().n_vocab);
  int accepted = 0;
  chosen = 0;
  for (int m = 0; m <= k; ++m) {
    const float* row = logits_.data() + static_cast<size_t>(m) * nv;
    const int32_t x = m < k ? d_.tokens[static_cast<size_t>(m)] : -1;
    const float* q = m < k && !d_.q.empty() ? d_.q.data() + static_cast<size_t>(m) * nv : nullptr;
    bool ok = false;
    const bool go_on = gen_.take(row, x, q, ok);
    ++chosen;
    if (m < k) stats_.proposed_at[static_cast<size_t>(m)]++;
    if (!ok) break;
    stats_.accepted_at[static_cast<size_t>(m)]++;
    ++accepted;
    if (!go_on) break;
  }
  return accepted;
}

// Drafts for the next pass and how many of them to verify (0: a plain pass). A cheap source
// (lookup) drafts first and the cost model picks among what it found; a costly one (a model)
// drafts only as many as the cost model asks for, and verifies those its predicted routing says
// are worth it.
int SpeculativeDecoder::draft_tokens(int k_room) {
  d_.clear();
  predicted_ = false;
  if (!draft_ || released_) return 0;
  if (k_room < std::max(1, opt_.k_min)) {  // no room for the fewest drafts worth verifying
    draft_->observe(gen_.history());
    return 0;
  }
  int want = k_room;
  if (opt_.adaptive && draft_->costly()) want = cost_.choose(k_room);
  if (want > 0) draft_->propose(gen_.history(), want, d_);
  else draft_->observe(gen_.history());
  int k = std::min(static_cast<int>(d_.tokens.size()), want);
  const bool predicted = k > 0 && predict_rows(k);
  const std::span<const double> rows(row_bytes_.data(), static_cast<size_t>(predicted ? k : 0));
  // A lookup's drafts cost nothing: the cost model picks among them; a model's were asked for, and
  // their predicted routing may show that fewer are worth verifying.
  if (opt_.adaptive) k = draft_->costly() ? (predicted ? cost_.trim(k, rows) : k) : cost_.choose(k, rows);
  return k < std::max(1, opt_.k_min) ? 0 : k;
}

// The pending token and drafts 0..k-1: the history position each is predicted to route like, and
// the bytes each draft row would add to the pass (row_bytes_), row 0's in row0_bytes_. False when
// off or not streaming now.
bool SpeculativeDecoder::predict_rows(int k) {
  if (!pred_ || !eng_.tier().streaming()) return false;
  const std::vector<int32_t>& h = gen_.history();
  row0_bytes_ = pred_->price(*mem_, eng_.seq_length(seq_), h.size() >= 2 ? h[h.size() - 2] : -1, h.back(),
                             std::span<const int32_t>(d_.tokens.data(), static_cast<size_t>(k)), eng_.tier(), row_bytes_);
  return predicted_ = true;
}

// After a pass of k drafts whose rows the routing memory holds at pos0..pos0+k: each draft row's
// predicted experts against those it routed to, and the bytes the drafts were predicted to add
// against those the pass read for experts only draft rows routed to (pass.extra_read; and
// pass.predicted_extra when every draft row had a prediction, for the cost model's calibration).
void SpeculativeDecoder::score_prediction(int k, int pos0, SpecPass& pass) {
  const ExpertCache* cache = eng_.tier().cache();
  if (!predicted_ || k == 0 || !cache || mem_->length() < pos0 + k + 1) return;
  RoutePredictionStats& ps = stats_.prediction;
  RouteMatch m;
  bool drafts_known = true;
  double extra = 0;
  for (int r = 1; r <= k; ++r) {
    const int src = pred_->source(r);
    match_routes(src >= 0 ? mem_->routes(src) : std::span<const int16_t>{}, mem_->routes(pos0 + r), mem_->top_k(), m);
    ps.rows_predicted += src >= 0;
    drafts_known = drafts_known && src >= 0;
    if (src >= 0) extra += row_bytes_[static_cast<size_t>(r - 1)];
  }
  ps.rows += k;
  ps.experts_predicted += m.predicted;
  ps.experts_routed += m.routed;
  ps.experts_both += m.both;
  for (const ExpertKey& key : counter_->touched)
    if ((counter_->rows(key) & 1) == 0) pass.extra_read += cache->batch_read_bytes(key);
  if (!drafts_known) return;
  pass.predicted_extra = extra;
  if (row0_bytes_ < 0) return;
  ps.passes++;
  ps.bytes += row0_bytes_ + extra;
  ps.actual_bytes += pass.bytes_read;
  ps.extra_bytes += extra;
  ps.actual_extra += pass.extra_read;
}

// The pending token and k drafts through one decode-order pass, every row's logits in logits_.
void SpeculativeDecoder::verify(int k) {
  batch_.assign(1, gen_.last());
  batch_.insert(batch_.end(), d_.tokens.begin(), d_.tokens.begin() + k);
  counter_->begin();
  eng_.model().add_routing_observer(counter_.get());
  const SeqInput in{seq_, batch_.data(), k + 1, Logits::All, /*decode_order=*/true};
  try {
    eng_.forward({&in, 1}, logits_);
  } catch (...) {
    eng_.model().remove_routing_observer(counter_.get());
    throw;
  }
  eng_.model().remove_routing_observer(counter_.get());
}

// Experts that only rejected rows (kept_rows and after) routed to, and that this pass read, go
// to the low-priority end of the cache.
void SpeculativeDecoder::demote_rejected(int kept_rows) {
  ExpertCache* cache = eng_.tier().cache();
  if (!cache || !opt_.demote_rejected) return;
  const uint64_t kept = kept_rows >= 64 ? ~uint64_t{0} : (uint64_t{1} << kept_rows) - 1;
  rejected_.clear();
  for (const ExpertKey& key : counter_->touched)
    if ((counter_->rows(key) & kept) == 0) rejected_.push_back(key);
  if (!rejected_.empty()) stats_.demoted += cache->demote_fresh(rejected_);
}

// A costly draft source the cost model gave up on frees its memory (a draft model's engine), and
// the expert cache gets it.
void SpeculativeDecoder::release_draft() {
  const uint64_t bytes = draft_->release();
  if (bytes == 0) return;
  released_ = true;
  stats_.released_at = stats_.passes;
  stats_.released_bytes = eng_.tier().give_to_cache(bytes);
}

bool SpeculativeDecoder::step() {
  STRATA_CHECK(gen_.active(), "speculative decoding: the generation is over");
  const int h0 = static_cast<int>(gen_.history().size());  // with the pending token
  STRATA_CHECK(eng_.seq_length(seq_) == h0 - 1, "speculative decoding: slot {} holds {} rows, the sequence has {} tokens before the pending one",
               seq_, eng_.seq_length(seq_), h0 - 1);
  STRATA_CHECK(room() >= 0, "speculative decoding: the context ({} positions) is full", eng_.options().n_ctx);
  const double t0 = now();
  const int k = draft_tokens(std::min({opt_.k_max, room(), gen_.remaining() - 1}));
  const double t1 = now();
  const ExpertCacheCounters before = eng_.tier().counters();  // not the cache: a pass may drop it (background load)
  const int pos0 = h0 - 1;                                     // the pending token's position
  verify(k);
  const double t2 = now();
  int chosen = 0;
  const int m = choose(k, chosen);
  for (int i = chosen; i < k; ++i) stats_.proposed_at[static_cast<size_t>(i)]++;  // drafts past the first rejected one
  if (m < k) demote_rejected(m + 1);  // rows 0..m hold the pending token and the accepted drafts
  eng_.truncate(seq_, h0 + m);  // rows of the pending token and the accepted drafts
  SpecPass pass;
  pass.k = k;
  pass.accepted = m;
  pass.deferred_s = k > 0 ? std::min(t1 - t0, draft_->deferred_s()) : 0.0;  // k > 0: drafted by this pass's propose
  pass.deferred_rows = k > 0 ? draft_->deferred_rows() : 0;
  pass.draft_s = t1 - t0 - pass.deferred_s;
  const ExpertCacheCounters after = eng_.tier().counters();
  pass.bytes_read = after.bytes_read - before.bytes_read;
  pass.io_wait_s = after.wait_s - before.wait_s;
  pass.compute_s = std::max(0.0, t2 - t1 - pass.io_wait_s);
  score_prediction(k, pos0, pass);
  cost_.observe(pass);
  if (opt_.adaptive && draft_ && !released_ && draft_->costly() && cost_.given_up(eng_.tier().cache() != nullptr)) release_draft();
  stats_.prediction.calibration = cost_.calibration();
  stats_.cost_plain_s = cost_.pass_seconds(0);
  stats_.cost_row_s = cost_.pass_seconds(1) - stats_.cost_plain_s;
  stats_.passes++;
  stats_.k_hist[k]++;
  stats_.proposed += k;
  stats_.accepted += m;
  stats_.emitted += chosen;
  stats_.expert_union += static_cast<int64_t>(counter_->touched.size());
  stats_.expert_slots += counter_->slots;
  stats_.bytes_read += pass.bytes_read;
  stats_.io_wait_s += pass.io_wait_s;
  stats_.draft_s += t1 - t0;
  stats_.verify_s += t2 - t1;
  return gen_.active();
}

}  // namespace strata
