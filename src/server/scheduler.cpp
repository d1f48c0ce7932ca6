#include "server/scheduler.h"

#include "model/executor.h"
#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/speculative.h"
#include "runtime/text_stream.h"
#include "server/prompt_score.h"

namespace strata::server {

namespace {

GenEvent final_event(Finish f, int prompt_tokens, int completion_tokens, int cached_tokens, std::string error) {
  GenEvent e;
  e.final = true;
  e.finish = f;
  e.prompt_tokens = prompt_tokens;
  e.completion_tokens = completion_tokens;
  e.cached_tokens = cached_tokens;
  e.error = std::move(error);
  return e;
}

}  // namespace

// ---------------------------------------------------------------- EventSignal

void EventSignal::notify() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++count_;
  }
  cv_.notify_all();
}

uint64_t EventSignal::count() const {
  std::lock_guard<std::mutex> lk(mu_);
  return count_;
}

void EventSignal::wait(uint64_t seen, int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return count_ != seen; });
}

// ---------------------------------------------------------------- GenRequest

std::vector<GenEvent> GenRequest::wait(int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty(); });
  std::vector<GenEvent> out(std::make_move_iterator(q_.begin()), std::make_move_iterator(q_.end()));
  q_.clear();
  return out;
}

bool GenRequest::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}

void GenRequest::push(GenEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_) return;
    if (e.final) done_ = true;
    // Coalesce text that the HTTP side has not picked up yet.
    if (!e.final && !q_.empty() && !q_.back().final) {
      q_.back().text += e.text;
      for (auto& p : e.probs) q_.back().probs.push_back(std::move(p));
    } else {
      q_.push_back(std::move(e));
    }
  }
  cv_.notify_all();
  if (params.signal) params.signal->notify();
}

// ---------------------------------------------------------------- Scheduler

// A request's generation state in one of the engine's sequence slots (same index).
struct Scheduler::Slot {
  int id = 0;
  std::shared_ptr<GenRequest> req;  // null: free
  int n_prompt_done = 0;            // prompt tokens whose rows are in the slot's KV cache
  int n_reused = 0;                 // of those, rows kept from the slot's previous request
  bool decoding = false;
  int32_t next = -1;                // token fed in the next pass when decoding
  bool started = false;             // start() ran for req
  std::unique_ptr<Generator> gen;   // sampling, stop rules, grammar, reasoning budget, logprobs
  double t_start = 0, t_prompt = 0;  // now_s() when admitted, when the prompt's last pass ended (GenEvent timings)
  // Speculation: this request's settings (draft_max 0: none), the drafts of the pass being run and
  // how many of them it verifies, its tokens (next, then the k drafts), sampling scratch.
  int draft_max = 0, draft_min = 1;
  Draft draft;
  int want = 0;  // drafts asked for this pass
  int k = 0;
  std::vector<int32_t> batch;
  int64_t n_drafted = 0, n_accepted = 0;  // over all the slot's requests
  std::unique_ptr<SpecCostModel> cost;    // SchedulerOptions::draft_adaptive: chooses k per pass
  double draft_s = 0;                     // drafting time for the running pass
  double deferred_s = 0, deferred_rows = 0;  // its share of the drafter's catch-up (SlotDrafter::deferred_s, deferred_rows)
  int row0 = 0;                           // the running pass's first row of this slot
  uint64_t draft_bytes = 0;               // expert bytes read for its draft rows alone, over all its requests
  std::vector<double> row_bytes;          // [draft_max] predicted bytes of each draft row (draft_predict)
  double predicted_extra = -1;            // of the running pass's k drafts (< 0: not every row predicted)
};

Scheduler::Scheduler(Engine& eng, const tok::Tokenizer& tok, const SchedulerOptions& opt) : eng_(eng), tok_(tok), opt_(opt) {
  drafter_ = opt_.slot_draft ? opt_.slot_draft : opt_.draft ? std::make_shared<SharedSlotDrafter>(opt_.draft) : nullptr;
  STRATA_CHECK(opt_.step_tokens >= 2, "step token cap must be at least 2 (got {})", opt_.step_tokens);
  STRATA_CHECK(opt_.draft_max >= 0 && opt_.draft_min >= 0, "draft sizes must be >= 0 (got --draft-max {}, --draft-min {})", opt_.draft_max,
               opt_.draft_min);
  STRATA_CHECK(eng_.n_seq() <= eng_.options().n_batch, "{} slots need a batch size of at least {} (got {})", eng_.n_seq(), eng_.n_seq(),
               eng_.options().n_batch);
  for (int i = 0; i < eng_.n_seq(); ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
    slots_.back()->gen = std::make_unique<Generator>(&tok_, eng_.config().n_vocab, opt_.vocab);
  }
  if (opt_.draft) {
    const ModelConfig& cfg = eng_.config();
    int n_expert = 0, top = 1;
    for (const auto& l : cfg.layers) n_expert = std::max(n_expert, l.n_expert), top = std::max(top, l.n_expert_used);
    const size_t routes = static_cast<size_t>(eng_.options().n_batch) * static_cast<size_t>(top) * static_cast<size_t>(cfg.n_layer);
    if (n_expert > 0) routing_ = std::make_unique<PassRouting>(cfg.n_layer, n_expert, routes);
    shares_.resize(slots_.size());
    seen_.reserve(slots_.size());
    // A costly source drafts after the cost model chose: nothing to predict then.
    if (opt_.draft_predict && opt_.draft_adaptive && !drafter_->costly() && eng_.tier().streaming() && RouteLayout(cfg).n_moe() > 0) {
      for (size_t i = 0; i < slots_.size(); ++i) route_mem_.push_back(std::make_unique<SeqRouting>(cfg, eng_.options().n_ctx));
      route_tap_ = std::make_unique<RoutingTap>(eng_);
      for (size_t i = 0; i < slots_.size(); ++i) route_tap_->track(static_cast<int>(i), route_mem_[i].get());
      route_pred_ = std::make_unique<RoutePredictor>(cfg, eng_.options().n_batch + 1);
    }
  }
  local_.slots = n_slots();
  local_.streaming_experts = eng_.tier().streaming();
  update_slot_info();
  stats_ = local_;
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (route_tap_) route_tap_->detach();  // the engine may go before this scheduler
  for (auto& s : slots_)
    if (s->req) finish(*s, Finish::Error, "the server is shutting down");
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& r : waiting_) r->push(final_event(Finish::Error, 0, 0, 0, "the server is shutting down"));
  waiting_.clear();
  for (Action& a : actions_) a.done.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
  actions_.clear();
}

std::future<void> Scheduler::run_on_engine(std::function<void(Engine&)> fn) {
  Action a{std::move(fn), {}};
  std::future<void> f = a.done.get_future();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) a.done.set_exception(std::make_exception_ptr(Error("the server is shutting down")));
    else actions_.push_back(std::move(a));
  }
  cv_.notify_all();
  return f;
}

bool Scheduler::slot_busy(int id) const {
  STRATA_CHECK(id >= 0 && id < n_slots(), "slot {} out of range ({} slots)", id, n_slots());
  return slots_[static_cast<size_t>(id)]->req != nullptr;
}

// Engine thread, between passes: the actions queued so far, in order.
void Scheduler::run_actions() {
  std::deque<Action> run;
  {
    std::lock_guard<std::mutex> lk(mu_);
    run.swap(actions_);
  }
  for (Action& a : run) {
    std::exception_ptr err;
    try {
      a.fn(eng_);
    } catch (...) {
      err = std::current_exception();
    }
    // What /slots shows includes the action before its caller hears it is done.
    update_slot_info();
    {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.slot_info = local_.slot_info;
      stats_.busy = local_.busy;
    }
    if (err) a.done.set_exception(err);
    else a.done.set_value();
  }
}

bool Scheduler::submit(const std::shared_ptr<GenRequest>& r) { return submit(std::vector<std::shared_ptr<GenRequest>>{r}); }

bool Scheduler::submit(const std::vector<std::shared_ptr<GenRequest>>& rs) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_ || !device_lost_.empty()) return false;
    // Requests that a free slot will take at once do not count against the queue.
    const int busy = stats_.busy;
    const int capacity = opt_.max_queue + std::max(0, n_slots() - busy);
    if (static_cast<int>(waiting_.size() + rs.size()) > capacity) return false;
    for (const auto& r : rs) waiting_.push_back(r);
    stats_.queued = static_cast<int>(waiting_.size());
  }
  cv_.notify_all();
  return true;
}

std::string Scheduler::device_lost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return device_lost_;
}

// A lost GPU takes every sequence's KV rows on it along: device_lost() says so from now on and
// submit() refuses new requests. Returns why ("" when the executor, if any, still works).
std::string Scheduler::mark_device_lost() {
  const LayerExecutor* ex = eng_.model().executor();
  const ExpertOffload* off = eng_.model().offload();  // another process's experts (--expert-parallel)
  std::string why = ex ? ex->lost() : std::string();
  if (why.empty() && off) why = off->lost();
  if (why.empty()) return "";
  std::lock_guard<std::mutex> lk(mu_);
  device_lost_ = why;
  return device_lost_;
}

// Fails the requests on every slot and those waiting with `why`.
void Scheduler::fail_all(const std::string& why) {
  std::deque<std::shared_ptr<GenRequest>> waiting;
  {
    std::lock_guard<std::mutex> lk(mu_);
    waiting.swap(waiting_);
    stats_.queued = 0;
  }
  for (auto& sp : slots_)
    if (sp->req) finish(*sp, Finish::Error, why);
  for (auto& r : waiting) {
    r->push(final_event(Finish::Error, static_cast<int>(r->params.prompt.size()), 0, 0, why));
    local_.requests_failed++;
  }
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      auto active = [&] {
        for (const auto& s : slots_)
          if (s->req) return true;
        return false;
      };
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty() || !actions_.empty() || active(); });
      if (stop_) return;
    }
    run_actions();
    try {
      admit();
      step();
    } catch (const std::exception& e) {
      // Failures are handled per request below; this is the net under them (never let the
      // engine thread die): what was running fails.
      for (auto& s : slots_)
        if (s->req) finish(*s, Finish::Error, e.what());
    }
    update_slot_info();
    std::lock_guard<std::mutex> lk(mu_);
    local_.queued = static_cast<int>(waiting_.size());
    stats_ = local_;
  }
}

// Takes waiting requests into free slots (FIFO); each takes the free slot whose rows serve the
// longest prefix of its prompt, among equals the one with the fewest reusable rows (the least to lose).
void Scheduler::admit() {
  std::vector<std::shared_ptr<GenRequest>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Cancelled requests leave the queue wherever they are (their client went away while waiting).
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->cancelled()) {
        dropped.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    while (!waiting_.empty()) {
      Slot* best = nullptr;
      int best_n = -1, best_rows = 0;
      for (auto& s : slots_) {
        if (s->req) continue;
        const int n = eng_.reusable_prefix(s->id, waiting_.front()->params.prompt);
        const int rows = eng_.reusable_rows(s->id);
        if (n > best_n || (n == best_n && rows < best_rows)) best = s.get(), best_n = n, best_rows = rows;
      }
      if (!best) break;
      best->req = waiting_.front();
      waiting_.pop_front();
    }
  }
  for (auto& r : dropped) {
    r->push(final_event(Finish::Cancelled, static_cast<int>(r->params.prompt.size()), 0, 0, ""));
    local_.requests_cancelled++;
  }
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.started) continue;  // free, or already set up
    try {
      start(s);
    } catch (const std::exception& e) {
      finish(s, Finish::Error, e.what(), dynamic_cast<const grammar::GrammarError*>(&e) != nullptr);
    }
  }
}

// Sets up a newly admitted request: the engine keeps the slot's reusable prompt rows.
void Scheduler::start(Slot& s) {
  const GenParams& p = s.req->params;
  const int n_ctx = eng_.options().n_ctx;
  s.started = true;
  s.decoding = false;
  s.next = -1;
  s.n_reused = 0;
  s.n_prompt_done = 0;
  s.t_start = now_s(), s.t_prompt = 0;
  s.gen->start(p, n_ctx);
  // Speculation: a draft source, rows that can be cut back, and no grammar (drafts are not
  // checked against it: a constrained request decodes plainly).
  const bool can_draft = drafter_ && eng_.model().rewindable() && !p.grammar;
  s.draft_max = can_draft ? (p.draft_max < 0 ? opt_.draft_max : p.draft_max) : 0;
  s.draft_min = std::max(1, p.draft_min < 0 ? opt_.draft_min : p.draft_min);
  s.k = 0;
  // The slot's cost fits carry over to its next request with the same draft_max (no warm-up again).
  if (s.draft_max > 0 && opt_.draft_adaptive) {
    if (s.cost && s.cost->k_max() == s.draft_max) s.cost->new_sequence();
    else s.cost = std::make_unique<SpecCostModel>(s.draft_max);
    s.cost->set_k_min(s.draft_min);
    if (route_pred_) s.row_bytes.assign(static_cast<size_t>(s.draft_max), RoutePredictor::kUnknown);
  }
  if (p.prompt.empty() || static_cast<int>(p.prompt.size()) >= n_ctx) {
    finish(s, Finish::Error, "the prompt does not fit the context");
    return;
  }
  if (opt_.prompt_experts) opt_.prompt_experts->set(false);  // scoring passes take the model's own experts
  if (s.req->prompt_probs >= 0) s.req->push(score_prompt(eng_, s.id, p.prompt, s.req->prompt_probs));
  // The draft state (MTP's NextN rows) may follow fewer of the rows the engine could keep.
  const int keep = eng_.reusable_prefix(s.id, p.prompt);
  s.n_reused = eng_.start_prompt(s.id, p.prompt, drafter_ ? drafter_->reusable(s.id, p.prompt, keep) : keep);
  s.n_prompt_done = s.n_reused;
  if (!s.gen->active()) finish(s, s.gen->finish());  // max_tokens 0
}

// What the slot's generator released since the last event: its text and logprobs.
void Scheduler::emit(Slot& s) {
  GenEvent e;
  s.gen->drain(e.text, e.probs);
  if (e.text.empty() && e.probs.empty()) return;
  s.req->push(std::move(e));
}

void Scheduler::finish(Slot& s, Finish f, const std::string& error, bool bad_request) {
  Generator& g = *s.gen;
  if (s.started && g.active()) g.end(f);
  if (s.started && f != Finish::Cancelled && f != Finish::Error) emit(s);
  const int n_prompt = static_cast<int>(s.req->params.prompt.size());
  const int n_gen = s.started ? g.n_generated() : 0;
  GenEvent fin = final_event(f, n_prompt, n_gen, s.n_reused, error);
  fin.bad_request = bad_request;
  fin.t_admitted = s.t_start, fin.t_prompt_done = s.t_prompt, fin.t_finished = now_s();
  if (f == Finish::Stop && s.started) fin.stop_string = g.stop_string();
  s.req->push(std::move(fin));
  local_.prompt_tokens += static_cast<uint64_t>(s.n_prompt_done - s.n_reused);
  local_.prompt_tokens_reused += static_cast<uint64_t>(s.n_reused);
  local_.completion_tokens += static_cast<uint64_t>(n_gen);
  if (f == Finish::Cancelled) local_.requests_cancelled++;
  else if (f == Finish::Error) local_.requests_failed++;
  else local_.requests_done++;
  s.req.reset();
  s.started = false;
  s.decoding = false;
  s.n_reused = 0;
}

// The pass: every decoding sequence's next token, then prompt chunks, oldest slot first, up to
// the per-step cap (Engine::prompt_chunk keeps each sequence's results independent of the others
// in the pass). Fills inputs_ and pass_slots_.
void Scheduler::plan_pass() {
  inputs_.clear();
  pass_slots_.clear();
  const int cap = std::min(opt_.step_tokens, eng_.options().n_batch);
  int n_decode = 0;
  for (auto& sp : slots_) {
    sp->k = 0;
    if (sp->req && sp->decoding) ++n_decode;
  }
  plan_drafts();
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || !s.decoding) continue;
    if (s.k == 0) {
      inputs_.push_back(SeqInput{s.id, &s.next, 1, Logits::Last});
    } else {
      s.batch.assign(1, s.next);
      s.batch.insert(s.batch.end(), s.draft.tokens.begin(), s.draft.tokens.begin() + s.k);
      inputs_.push_back(SeqInput{s.id, s.batch.data(), s.k + 1, Logits::All, /*decode_order=*/true});
      n_decode += s.k;
    }
    pass_slots_.push_back(&s);
  }
  int room = std::min(std::max(cap - n_decode, std::min(cap, 32)), eng_.options().n_batch - n_decode);
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.decoding || room <= 0) continue;
    const auto& prompt = s.req->params.prompt;
    const int rest = static_cast<int>(prompt.size()) - s.n_prompt_done;
    const int take = Engine::prompt_chunk(rest, room);
    if (take <= 0) continue;
    inputs_.push_back(SeqInput{s.id, prompt.data() + s.n_prompt_done, take, take == rest ? Logits::Last : Logits::None});
    pass_slots_.push_back(&s);
    room -= take;
  }
  // Each row's draft owner (-1: a row the pass has anyway), for split_pass and demote_rejected.
  row_owner_.clear();
  n_decoding_ = 0;
  draft_rows_ = 0;
  routed_ = false;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Slot& s = *pass_slots_[i];
    s.row0 = static_cast<int>(row_owner_.size());
    n_decoding_ += s.decoding ? 1 : 0;
    routed_ = routed_ || (s.decoding && s.k > 0);
    for (int r = 0; r < inputs_[i].n; ++r) row_owner_.push_back(s.decoding && s.k > 0 && r > 0 ? s.id : -1);
    draft_rows_ += s.decoding && s.k > 0 ? inputs_[i].n - 1 : 0;
  }
  routed_ = routed_ && routing_ != nullptr;
  row_rejected_.assign(row_owner_.size(), 0);
  long_prompts_ = opt_.prompt_experts && n_decoding_ == 0 && !pass_slots_.empty();
  for (const Slot* s : pass_slots_)
    long_prompts_ = long_prompts_ && static_cast<int>(s->req->params.prompt.size()) - s->n_reused >= opt_.prompt_experts->min_tokens();
}

// Drafts a decoding slot asks for in its next pass (0: a plain row), at most `budget`, the
// request's draft_max, the context's room and the tokens the request may still get; a costly
// source's count is the cost model's choice (made before drafting).
int Scheduler::draft_want(Slot& s, int budget) {
  s.draft.clear();
  const int ctx_room = eng_.options().n_ctx - eng_.seq_length(s.id) - 1;
  int want = std::min({s.draft_max, budget, ctx_room, s.gen->remaining() - 1});
  if (want >= s.draft_min && s.cost && drafter_->costly()) want = s.cost->choose(want);
  return want < s.draft_min ? 0 : want;
}

// Every decoding slot's drafts for the next pass, asked of the draft source at once (a draft
// model drafts all the slots in one batched pass per position); sets each slot's k. A speculating
// slot that drafts nothing this pass lets the source observe its history (MTP keeps in step).
void Scheduler::plan_drafts() {
  int budget = std::min(opt_.step_tokens, eng_.options().n_batch);
  // Logits rows: one per slot, the rest for drafts (EngineOptions::logit_rows, in the memory plan).
  budget = std::min(budget, eng_.options().logit_rows - eng_.n_seq());
  for (auto& sp : slots_)
    if (sp->req && sp->decoding) --budget;  // draft rows come after every decoding slot's own token
  jobs_.clear();
  for (auto& sp : slots_) {
    Slot& s = *sp;
    s.want = 0;
    s.draft_s = s.deferred_s = s.deferred_rows = 0;
    if (!s.req || !s.decoding || s.draft_max == 0) continue;
    s.want = draft_want(s, budget);
    if (s.want == 0) {
      drafter_->observe(s.id, s.gen->history());
      continue;
    }
    budget -= s.want;
    jobs_.push_back(SlotDraftJob{s.id, s.gen->history(), s.want, &s.draft});
  }
  if (jobs_.empty()) return;
  const double t0 = now();
  drafter_->propose(jobs_);
  // The slots share the drafting passes; catching up after passes without drafts is not their cost.
  const double n_jobs = static_cast<double>(jobs_.size()), deferred = drafter_->deferred_s();
  const double each = std::max(0.0, now() - t0 - deferred) / n_jobs;
  for (const SlotDraftJob& j : jobs_) {
    Slot& s = *slots_[static_cast<size_t>(j.slot)];
    s.draft_s = each;
    s.deferred_s = deferred / n_jobs;
    s.deferred_rows = drafter_->deferred_rows() / n_jobs;
    int k = std::min(static_cast<int>(s.draft.tokens.size()), s.want);
    if (s.cost && k >= s.draft_min && !drafter_->costly()) k = choose_drafts(s, k);  // a lookup drafts first: the cost model picks among what it found
    s.k = k < s.draft_min ? 0 : k;
  }
}

// The slot's cost model chooses among its k drafts, each draft row priced by its predicted
// experts' bytes while the prediction is on and experts stream.
int Scheduler::choose_drafts(Slot& s, int k) {
  s.predicted_extra = -1;
  if (!route_pred_ || !eng_.tier().streaming() || static_cast<size_t>(k) > s.row_bytes.size()) return s.cost->choose(k);
  const std::span<const int32_t> held = eng_.seq_tokens(s.id);
  const std::span<double> rb(s.row_bytes.data(), static_cast<size_t>(k));
  route_pred_->price(*route_mem_[static_cast<size_t>(s.id)], static_cast<int>(held.size()), held.empty() ? -1 : held.back(), s.next,
                     std::span<const int32_t>(s.draft.tokens.data(), static_cast<size_t>(k)), eng_.tier(), rb);
  for (const double b : rb) local_.draft_rows_predicted += b >= 0;
  const int c = s.cost->choose(k, rb);
  s.predicted_extra = RoutePredictor::total(rb, c);
  return c;
}

void Scheduler::step() {
  for (auto& sp : slots_)
    if (sp->req && sp->req->cancelled()) finish(*sp, Finish::Cancelled);
  plan_pass();
  if (inputs_.empty()) return;
  const double t0 = now();
  // Counters, not the cache: a background load that ends drops the cache at the start of the pass.
  const ExpertCacheCounters before = eng_.tier().counters();
  if (opt_.prompt_experts) opt_.prompt_experts->set(long_prompts_);
  try {
    run_pass();
  } catch (const std::exception& e) {
    // The engine reset these sequences' rows; the other slots go on unless the GPU is gone (marked
    // first, so that no client hears of its failure before /health and new requests would).
    const std::string lost = mark_device_lost();
    for (Slot* s : pass_slots_) finish(*s, Finish::Error, e.what());
    if (!lost.empty()) fail_all(lost);
    return;
  }
  pass_ = SpecPass{};
  const ExpertCacheCounters after = eng_.tier().counters();
  pass_.bytes_read = after.bytes_read - before.bytes_read;
  pass_.io_wait_s = after.wait_s - before.wait_s;
  pass_.compute_s = std::max(0.0, now() - t0 - pass_.io_wait_s);
  if (draft_rows_ == 0) {  // a plain pass of this many rows
    const size_t rows = row_owner_.size();
    if (plain_s_.size() <= rows) plain_s_.resize(rows + 1, 0.0), plain_n_.resize(rows + 1, 0);
    plain_s_[rows] += std::max(0.125, 1.0 / static_cast<double>(++plain_n_[rows])) * (pass_.compute_s - plain_s_[rows]);
  }
  split_pass();
  int tokens = 0;
  for (const SeqInput& in : inputs_) tokens += in.n;
  const int generated = sample_outputs();
  demote_rejected();
  const double t1 = now();
  update_stats(t0, t1, tokens, generated);
  if (opt_.on_step) opt_.on_step(tokens, generated, t0, t1);
}

// The pass; with drafts in it, routing_ sees which rows routed to which expert (beside the model's
// other routing observers).
void Scheduler::run_pass() {
  if (!routed_) {
    eng_.forward(inputs_, logits_);
    return;
  }
  routing_->begin();
  eng_.model().add_routing_observer(routing_.get());
  try {
    eng_.forward(inputs_, logits_);
  } catch (...) {
    eng_.model().remove_routing_observer(routing_.get());
    throw;
  }
  eng_.model().remove_routing_observer(routing_.get());
}

// Who the pass's reads and compute were for: an expert that only one slot's draft rows routed to
// is that slot's (its bytes read, one unit of the pass's compute), one that only several slots'
// drafts routed to is split among them, every other one is common (observe_pass shares it among
// the decoding slots).
void Scheduler::split_pass() {
  for (DraftShare& d : shares_) d = DraftShare{};
  split_ = PassSplit{};
  split_.common_bytes = pass_.bytes_read;
  if (!routed_) return;
  const auto& touched = routing_->touched();
  read_.resize(touched.size());
  for (size_t i = 0; i < touched.size(); ++i) read_[i] = eng_.tier().batch_read_bytes(touched[i]);
  split_ = attribute_drafts(*routing_, row_owner_, read_, pass_.bytes_read, shares_, seen_);
  for (Slot* s : pass_slots_) s->draft_bytes += shares_[static_cast<size_t>(s->id)].bytes;
}

// Experts the pass read only for rejected draft rows go to the cache's low-priority end.
void Scheduler::demote_rejected() {
  if (!routed_ || !opt_.draft_demote) return;
  if (!eng_.tier().streaming()) return;
  rejected_only(*routing_, row_rejected_, demote_);
  if (!demote_.empty()) local_.draft_experts_demoted += static_cast<uint64_t>(eng_.tier().demote_fresh(demote_));
}

// Engine thread: what /slots shows, and the busy count.
void Scheduler::update_slot_info() {
  local_.slot_info.resize(slots_.size());
  local_.busy = 0;
  for (const auto& sp : slots_) {
    const Slot& s = *sp;
    SlotInfo& in = local_.slot_info[static_cast<size_t>(s.id)];
    in.busy = s.req != nullptr;
    in.n_past = eng_.seq_length(s.id);
    in.n_cached = in.busy ? s.n_reused : eng_.reusable_rows(s.id);
    in.n_prompt = in.busy ? static_cast<int>(s.req->params.prompt.size()) : 0;
    in.n_prompt_done = in.busy ? s.n_prompt_done : 0;
    in.n_decoded = in.busy && s.started ? s.gen->n_generated() : 0;
    in.draft_max = in.busy ? s.draft_max : 0;
    in.draft_min = in.busy && s.draft_max > 0 ? s.draft_min : 0;
    in.n_drafted = s.n_drafted;
    in.n_draft_accepted = s.n_accepted;
    in.draft_bytes_read = s.draft_bytes;
    local_.busy += in.busy ? 1 : 0;
  }
}

// Samples every sequence whose logits came out of the pass (rows in input order); returns how many
// tokens were chosen.
int Scheduler::sample_outputs() {
  const size_t nv = static_cast<size_t>(eng_.config().n_vocab);
  int generated = 0;
  size_t row = 0;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Slot& s = *pass_slots_[i];
    const SeqInput& in = inputs_[i];
    if (!s.decoding) s.n_prompt_done += in.n;
    if (in.logits == Logits::None) continue;
    if (!s.decoding && s.t_prompt == 0) s.t_prompt = now_s();
    const float* lg = logits_.data() + row * nv;
    row += in.logits == Logits::All ? static_cast<size_t>(in.n) : 1;
    try {
      if (s.k > 0) {
        generated += verify_drafts(s, lg);
      } else {
        const bool decoding = s.decoding;
        bool accepted = false;
        take_token(s, lg, -1, accepted);
        ++generated;
        if (decoding) observe_pass(s, 0, 0);
      }
    } catch (const std::exception& e) {
      // This request's sampling or callback failed, not the pass (its grammar's fault: a 400).
      if (s.req) finish(s, Finish::Error, e.what(), dynamic_cast<const grammar::GrammarError*>(&e) != nullptr);
    }
  }
  return generated;
}

// A slot's rows of a pass with k drafts: row m gives the token after the pending token and drafts
// 0..m-1; each token goes out through take_token (stop strings, limits, events), drafts are kept
// while they are the tokens chosen, and the first token that differs (or the one after the last
// draft) becomes the pending token. The rows of rejected drafts are cut back. Returns the tokens chosen.
int Scheduler::verify_drafts(Slot& s, const float* lg) {
  const size_t nv = static_cast<size_t>(eng_.config().n_vocab);
  const int k = s.k, id = s.id, rows = eng_.seq_length(s.id);
  s.k = 0;
  s.n_drafted += k;
  local_.draft_passes++;
  local_.drafts_proposed += static_cast<uint64_t>(k);
  int chosen = 0, kept = 0;
  try {
    for (int m = 0; m <= k; ++m) {
      bool accepted = false;
      const bool go_on = take_token(s, lg + static_cast<size_t>(m) * nv, m < k ? s.draft.tokens[static_cast<size_t>(m)] : -1, accepted);
      ++chosen;
      if (accepted) ++kept;
      if (!go_on || !accepted) break;
    }
  } catch (...) {
    eng_.truncate(id, rows - (k - kept));
    throw;
  }
  s.n_accepted += kept;
  local_.drafts_accepted += static_cast<uint64_t>(kept);
  if (routed_)
    for (int j = kept + 1; j <= k; ++j) row_rejected_[static_cast<size_t>(s.row0 + j)] = 1;
  observe_pass(s, k, kept);
  eng_.truncate(id, rows - (k - kept));  // the pending token's row and the kept drafts'
  return chosen;
}

// A speculating slot's cost model learns from the pass: its drafts and how many were kept, its
// drafting time, and its share of the pass's time and reads: the common part (split_pass) split
// equally among the decoding slots, plus what its own draft rows alone needed. Reads: the bytes
// of those experts; compute: a plain pass's share of the same rows without drafts plus this slot's
// part of what the drafts added (before plain passes of that size were timed: the pass's compute in
// proportion to experts); I/O wait in proportion to bytes. So another slot's drafts
// never look like this slot's cost, and a plain pass costs each slot its share, as the rate a
// draft must beat is the pass's tokens per second.
void Scheduler::observe_pass(Slot& s, int k, int accepted) {
  if (!s.cost || s.draft_max == 0) return;
  SpecPass p = pass_;
  p.k = k;
  p.accepted = accepted;
  p.draft_s = s.draft_s;
  p.deferred_s = s.deferred_s;
  p.deferred_rows = s.deferred_rows;
  const double n = std::max(1, n_decoding_);
  const DraftShare& d = shares_[static_cast<size_t>(s.id)];
  p.predicted_extra = k > 0 ? s.predicted_extra : -1;  // the calibration: what its drafts alone read against the prediction
  p.extra_read = d.bytes;
  const double bytes = static_cast<double>(split_.common_bytes) / n + static_cast<double>(d.bytes);
  p.bytes_read = static_cast<uint64_t>(std::llround(bytes));
  p.io_wait_s = pass_.bytes_read > 0 ? pass_.io_wait_s * bytes / static_cast<double>(pass_.bytes_read) : 0.0;
  const double ex = static_cast<double>(split_.experts);
  p.compute_s = ex > 0 ? pass_.compute_s * (split_.common_experts / n + d.experts) / ex : pass_.compute_s / n;
  // Compute, when plain passes of the rows without drafts have been timed: a plain share of
  // that, plus this slot's part (by draft rows) of everything the drafts added (a larger batch
  // can take a costlier path; each draft row has its own logits row).
  const size_t base = row_owner_.size() - static_cast<size_t>(draft_rows_);
  if (draft_rows_ == 0) p.compute_s = pass_.compute_s / n;
  else if (base < plain_n_.size() && plain_n_[base] > 0)
    p.compute_s = plain_s_[base] / n + std::max(0.0, pass_.compute_s - plain_s_[base]) * k / draft_rows_;
  s.cost->observe(p);
}

// One chosen token of a slot, from its logits row, through its generator (sampling, stop rules,
// text and logprobs), which the request's queue gets. Returns whether the slot goes on decoding
// (false: finished). `draft` (>= 0): the token drafted for this row; `accepted`: whether the
// chosen token keeps it.
bool Scheduler::take_token(Slot& s, const float* lg, int32_t draft, bool& accepted) {
  const bool go_on = s.gen->take(lg, draft, nullptr, accepted);
  if (!go_on) {
    finish(s, s.gen->finish());
    return false;
  }
  emit(s);
  s.next = s.gen->last();
  s.decoding = true;
  return true;
}

void Scheduler::update_stats(double t0, double t1, int tokens, int generated) {
  local_.steps++;
  local_.batch_tokens += static_cast<uint64_t>(tokens);
  local_.busy_s += t1 - t0;
  recent_.emplace_back(t1, generated);
  while (recent_.size() > 1 && t1 - recent_.front().first > 10.0) recent_.pop_front();
  const double span = t1 - recent_.front().first;
  int sum = 0;
  for (size_t i = 1; i < recent_.size(); ++i) sum += recent_[i].second;
  local_.decode_tps = span > 0 ? sum / span : 0.0;
  {
    const ExpertCacheCounters k = eng_.tier().counters();
    local_.expert_hits = k.hits;
    local_.expert_misses = k.misses;
    local_.expert_bytes_read = k.bytes_read;
    local_.expert_wait_s = k.wait_s;
    if (const LayerExecutor* ex = eng_.model().executor()) local_.vram_experts = ex->stats().experts;
  }
}

}  // namespace strata::server
