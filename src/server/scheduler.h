#pragma once
// Continuous batching over one Engine: a single engine thread drives it. Each step hands the
// engine ONE pass holding every decoding sequence's next token plus chunks of pending prompts
// (capped per step so decoding is not starved), samples each sequence whose logits came out and
// streams its text to the request's queue. Requests beyond the slots wait in a bounded FIFO.
// Speculation per slot (SchedulerOptions::draft): a slot's pending token and the tokens a draft
// source proposes go into the SAME pass as the other slots' rows (decode order: each row's logits
// are plain decoding's), so the pass still reads each expert once for all of them; the slot keeps
// the drafts its own choices agree with (runtime/speculative.h's rule) and cuts the rest back.
// The engine owns the sequences, their KV rows and the prefix-reuse rule; this file knows
// requests, sampling and text, and no architecture.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "grammar/grammar.h"
#include "model/executor.h"
#include "runtime/draft.h"
#include "runtime/slot_draft.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/pass_routing.h"
#include "runtime/prompt_experts.h"
#include "runtime/routing_memory.h"
#include "runtime/sampler.h"
#include "runtime/spec_cost.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// The generator's types, as the server's code and tests name them.
using strata::Finish;
using strata::finish_name;
using strata::TokenProb;
using strata::TokenLogprobs;
using strata::token_logprobs;

// Wakes a reader that waits on several requests (the choices of one `n` request).
class EventSignal {
 public:
  void notify();
  uint64_t count() const;
  // Waits until count() != seen or the timeout passes.
  void wait(uint64_t seen, int timeout_ms);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

// A request: what the generator needs (runtime/generator.h), plus how the server reports it and
// speculates for it.
struct GenParams : GenerateParams {
  std::shared_ptr<EventSignal> signal;  // notified on every event (may be null)
  // Speculation (when the scheduler has a draft source): drafts verified per pass at most (0: off
  // for this request) and fewer than draft_min make a plain pass; -1: the scheduler's defaults.
  // A request with a grammar does not speculate.
  int draft_max = -1, draft_min = -1;
};

// What the engine thread hands to the HTTP side, in order.
struct GenEvent {
  std::string text;                // generated text (whole UTF-8 characters, stop strings removed)
  std::vector<TokenLogprobs> probs;  // one per generated token since the last event (GenParams::n_probs >= 0)
  bool final = false;
  Finish finish = Finish::None;    // set on the final event
  int prompt_tokens = 0, completion_tokens = 0;
  int cached_tokens = 0;           // prompt tokens whose KV rows the slot kept from its previous request
  std::string error;               // Finish::Error
  bool bad_request = false;        // Finish::Error caused by the request itself (its grammar: too ambiguous, or no token fits): a 400
  std::string stop_string;         // Finish::Stop at a stop string: that string ("" at EOS / grammar end)
  // The final event: engine-thread times (now_s()) when a slot took the request, when its prompt's
  // last pass ended (0: it never did) and when it finished (Ollama's timings).
  double t_admitted = 0, t_prompt_done = 0, t_finished = 0;
  // GenRequest::prompt_probs >= 0: the prompt tokens' logprobs from the second token on, in one
  // event before any other.
  std::vector<TokenLogprobs> prompt_probs;
};

// One request in flight: its parameters, its event queue, and a cancel flag.
class GenRequest {
 public:
  explicit GenRequest(GenParams p) : params(std::move(p)) {}
  const GenParams params;
  // /v1/completions echo with logprobs: before generating, the slot evaluates the prompt in passes
  // of its own that keep every row's logits (Engine::eval_rows, within the planned logit rows) and
  // reports each prompt token's logprob with this many alternatives (GenEvent::prompt_probs); -1: no.
  // Set before submit.
  int prompt_probs = -1;

  // HTTP side: waits up to `timeout_ms` for events; returns what is there (maybe nothing).
  std::vector<GenEvent> wait(int timeout_ms);
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  bool done() const;

  // Engine side.
  void push(GenEvent e);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenEvent> q_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int step_tokens = 256;   // tokens per forward call (decode tokens first, then prompt chunks)
  int max_queue = 64;      // waiting requests beyond the slots
  std::shared_ptr<const grammar::VocabIndex> vocab;  // token bytes for grammar masks (needed by requests with a grammar)
  // Called on the engine thread after every pass: tokens in it, tokens sampled, its start and end (now_s()).
  std::function<void(int tokens, int generated, double t0, double t1)> on_step;
  // Draft source of per-slot speculation (shared by the slots: it keeps no per-sequence state, as
  // LookupDraft); null: no request speculates. Off too where the architecture cannot cut rows back.
  std::shared_ptr<DraftSource> draft;
  // Or drafts with per-slot state (a draft model, MTP: runtime/slot_draft.h), all the slots' drafts
  // of a pass asked for at once; used instead of `draft` when set.
  std::shared_ptr<SlotDrafter> slot_draft;
  int draft_max = 4, draft_min = 1;  // for requests that leave GenParams::draft_max / draft_min at -1
  // true: each speculating slot's SpecCostModel chooses k per pass (0..what the lookup found) from
  // its acceptance and the passes' measured time and reads; false: every draft found is verified.
  bool draft_adaptive = true;
  // Experts a pass read only for draft rows that were then rejected enter the cache at low
  // priority (evicted first), so rejected drafts do not push out experts plain decoding needs.
  bool draft_demote = true;
  // While experts stream, with the cost model on and drafts found before it chooses (lookup): each
  // slot remembers its history's routing and the cost model prices each draft row by the bytes of
  // its predicted experts (runtime/routing_memory.h).
  bool draft_predict = true;
  // The clock the passes and drafting are timed by, for the cost models (null: the steady clock);
  // tests inject one so that speculation's decisions do not depend on the machine's speed.
  std::function<double()> clock;
  // --pp-model: a pass whose every row is a prompt row of a prompt with at least min_tokens() tokens
  // to evaluate takes the low-bit copy's experts that are not in memory (runtime/prompt_experts.h);
  // any pass with a decoding row, and any shorter prompt's, the model's own. Null: off.
  PromptExperts* prompt_experts = nullptr;
};

// One slot as /slots shows it (copied by the engine thread after every step).
struct SlotInfo {
  bool busy = false;
  int n_past = 0;         // rows the slot's KV cache holds
  int n_cached = 0;       // busy: prompt rows kept from the previous request; idle: rows a later prompt could reuse
  int n_prompt = 0;       // busy: prompt tokens of the request
  int n_prompt_done = 0;  // busy: of those, evaluated (or kept)
  int n_decoded = 0;      // busy: tokens generated so far
  int draft_max = 0, draft_min = 0;        // busy: the request's speculation (draft_max 0: none)
  int64_t n_drafted = 0, n_draft_accepted = 0;  // drafts this slot verified / accepted, over all its requests
  uint64_t draft_bytes_read = 0;  // expert bytes read for this slot's draft rows alone (see observe_pass), over all its requests
};

// Figures for /metrics, copied by the engine thread after every step.
struct SchedulerStats {
  int slots = 0, busy = 0, queued = 0;
  uint64_t steps = 0, batch_tokens = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  uint64_t prompt_tokens_reused = 0;  // prompt tokens whose KV rows a slot kept from its previous request
  uint64_t requests_done = 0, requests_cancelled = 0, requests_failed = 0;
  double busy_s = 0;              // seconds inside the engine's passes + sampling
  double decode_tps = 0;          // generated tokens per second, recent window
  bool streaming_experts = false;
  uint64_t expert_hits = 0, expert_misses = 0, expert_bytes_read = 0;
  double expert_wait_s = 0;
  DeviceExpertStats vram_experts;  // the device's VRAM expert cache (slots 0: none)
  uint64_t draft_passes = 0;      // slot passes that verified drafts
  uint64_t drafts_proposed = 0, drafts_accepted = 0;
  uint64_t draft_experts_demoted = 0;  // experts read only for rejected draft rows, put at the cache's low priority
  uint64_t draft_rows_predicted = 0;   // draft rows the cost models priced by their predicted experts (draft_predict)
  std::vector<SlotInfo> slot_info;  // [slots]
};

class Scheduler {
 public:
  Scheduler(Engine& eng, const tok::Tokenizer& tok, const SchedulerOptions& opt);
  ~Scheduler();  // stops the engine thread; pending requests end with Finish::Error
  // What one slot holds per vocabulary entry: its sampler's (penalized logits, candidates, counts),
  // the grammar-masked and edited logits, speculation's sampling rows.
  static uint64_t slot_vocab_bytes(int n_vocab) { return 32ull * static_cast<uint64_t>(n_vocab); }

  // Queues the request; false when the wait queue is full.
  bool submit(const std::shared_ptr<GenRequest>& r);
  // All or none (the choices of one request).
  bool submit(const std::vector<std::shared_ptr<GenRequest>>& rs);
  SchedulerStats stats() const;
  // "" while the engine can compute; once its GPU was lost, why (any thread). Every request in
  // flight or waiting then failed with it, and submit() refuses new ones.
  std::string device_lost() const;
  int n_ctx() const { return eng_.options().n_ctx; }
  int n_vocab() const { return eng_.config().n_vocab; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  // Speculation for requests that do not set it: drafts per pass at most (0: none, also when there
  // is no draft source or the architecture cannot cut rows back), and the fewest that make a pass.
  int default_draft_max() const { return drafter_ && eng_.model().rewindable() ? opt_.draft_max : 0; }
  int default_draft_min() const { return opt_.draft_min; }
  void stop();
  // Runs fn on the engine thread between passes (slot files: server/slot_actions.cpp); the future
  // holds fn's exception, or an Error when the scheduler stopped before running it.
  std::future<void> run_on_engine(std::function<void(Engine&)> fn);
  // Whether slot `id` holds a request (admitted, maybe not started). Engine thread only (inside fn).
  bool slot_busy(int id) const;

 private:
  struct Slot;
  struct Action {
    std::function<void(Engine&)> fn;
    std::promise<void> done;
  };
  void run_actions();
  void loop();
  void admit();
  void start(Slot& s);
  void step();
  void plan_pass();
  int draft_want(Slot& s, int budget);
  int choose_drafts(Slot& s, int k);
  void plan_drafts();
  int sample_outputs();
  int verify_drafts(Slot& s, const float* logits);
  bool take_token(Slot& s, const float* logits, int32_t draft, bool& accepted);
  void observe_pass(Slot& s, int k, int accepted);
  void run_pass();
  void split_pass();
  void demote_rejected();
  void update_stats(double t0, double t1, int tokens, int generated);
  void update_slot_info();
  void finish(Slot& s, Finish f, const std::string& error = {}, bool bad_request = false);
  std::string mark_device_lost();
  void fail_all(const std::string& why);
  void emit(Slot& s);
  double now() const { return opt_.clock ? opt_.clock() : now_s(); }

  Engine& eng_;
  const tok::Tokenizer& tok_;
  SchedulerOptions opt_;
  std::shared_ptr<SlotDrafter> drafter_;  // slot_draft, or draft for every slot; null: none
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<GenRequest>> waiting_;
  std::deque<Action> actions_;  // run_on_engine's, under mu_
  bool stop_ = false;
  SchedulerStats stats_;  // under mu_
  std::string device_lost_;  // under mu_

  // engine thread only
  std::vector<SeqInput> inputs_;   // the pass being run
  std::vector<Slot*> pass_slots_;  // the slot of each input
  std::vector<SlotDraftJob> jobs_;  // the pass's draft requests
  std::vector<float> logits_;
  SpecPass pass_;  // the running pass's time and reads, for the slots' cost models
  // Per-slot shares of a pass with drafts (split_pass): which rows routed to which expert, each
  // row's draft owner (-1: common), the bytes read per touched expert, each slot's share.
  std::unique_ptr<PassRouting> routing_;
  bool routed_ = false;            // the pass ran with routing_ installed
  int n_decoding_ = 0;             // decoding slots in the pass
  bool long_prompts_ = false;      // every row of the pass is a prompt row of a prompt long enough for --pp-model
  int draft_rows_ = 0;             // rows of the pass that are drafts
  // Compute seconds of passes without drafts, by their row count (running means): the base a
  // pass with drafts is measured against, so its draft rows carry all of what they added.
  std::vector<double> plain_s_;
  std::vector<int64_t> plain_n_;
  std::vector<int> row_owner_, seen_;
  std::vector<uint8_t> row_rejected_;
  std::vector<uint64_t> read_;
  std::vector<DraftShare> shares_;  // [slots]
  PassSplit split_;
  std::vector<ExpertKey> demote_;
  // Predicted routing (draft_predict): each slot's routing by position, the tap that records it
  // (declared after them: it goes first), the prediction of a slot's pass rows.
  std::vector<std::unique_ptr<SeqRouting>> route_mem_;  // [slots] or empty
  std::unique_ptr<RoutingTap> route_tap_;
  std::unique_ptr<RoutePredictor> route_pred_;
  std::deque<std::pair<double, int>> recent_;  // (time, tokens generated) for decode_tps
  SchedulerStats local_;
  std::thread thread_;
};

}  // namespace strata::server
