#include "server/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "server/text_stream.h"

namespace strata::server {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::Stop: return "stop";
    case Finish::Length: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Error: return "error";
    case Finish::None: break;
  }
  return "none";
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
    if (!e.final && !q_.empty() && !q_.back().final) q_.back().text += e.text;
    else q_.push_back(std::move(e));
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- Scheduler

struct Scheduler::Slot {
  int id = 0;
  std::shared_ptr<GenRequest> req;  // null: free
  int n_prompt_done = 0;            // prompt tokens already in the KV cache
  int n_past = 0;                   // tokens in the KV cache
  bool decoding = false;
  int32_t next = -1;                // token fed in the next step when decoding
  int n_gen = 0, max_tokens = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<tok::StreamDecoder> dec;
  StopMatcher stopper;
  std::vector<int32_t> history;
  // Prompt tokens whose KV rows (positions 0..) this slot holds from its last request, computed in
  // prompt chunks of two tokens or more, so a fresh run would compute the very same rows. Rows of
  // generated tokens were computed one token at a time (another attention summation order): never reused.
  std::vector<int32_t> kv_prompt;
  int n_reused = 0;  // prompt tokens of the current request taken from kv_prompt
};

Scheduler::Scheduler(Engine& eng, const tok::Tokenizer& tok, const SchedulerOptions& opt) : eng_(eng), tok_(tok), opt_(opt) {
  STRATA_CHECK(opt_.step_tokens >= 2, "step token cap must be at least 2 (got {})", opt_.step_tokens);
  for (int i = 0; i < eng_.kv().n_seq(); ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  local_.slots = n_slots();
  local_.streaming_experts = eng_.tier().cache() != nullptr;
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
  for (auto& s : slots_)
    if (s->req) finish(*s, Finish::Error, "the server is shutting down");
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& r : waiting_) r->push(GenEvent{"", true, Finish::Error, 0, 0, 0, "the server is shutting down"});
  waiting_.clear();
}

bool Scheduler::submit(const std::shared_ptr<GenRequest>& r) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) return false;
    // Requests that a free slot will take at once do not count against the queue.
    const int busy = stats_.busy;
    const int capacity = opt_.max_queue + std::max(0, n_slots() - busy);
    if (static_cast<int>(waiting_.size()) >= capacity) return false;
    waiting_.push_back(r);
    stats_.queued = static_cast<int>(waiting_.size());
  }
  cv_.notify_all();
  return true;
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
      cv_.wait(lk, [&] { return stop_ || !waiting_.empty() || active(); });
      if (stop_) return;
    }
    try {
      admit();
      step();
    } catch (const std::exception& e) {
      // Never let a request take the engine thread down: fail what was running.
      for (auto& s : slots_)
        if (s->req) finish(*s, Finish::Error, e.what());
    } catch (...) {
      for (auto& s : slots_)
        if (s->req) finish(*s, Finish::Error, "internal error in the engine thread");
    }
    int busy = 0;
    for (const auto& s : slots_) busy += s->req ? 1 : 0;
    std::lock_guard<std::mutex> lk(mu_);
    local_.busy = busy;
    local_.queued = static_cast<int>(waiting_.size());
    stats_ = local_;
  }
}

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
    // FIFO; each request takes the free slot that holds the longest prefix of its prompt, among
    // equals the one that holds the fewest reusable rows (the least to lose).
    while (!waiting_.empty()) {
      Slot* best = nullptr;
      int best_n = -1;
      for (auto& s : slots_) {
        if (s->req) continue;
        const int n = reusable_prefix(*s, waiting_.front()->params.prompt);
        if (n > best_n || (n == best_n && s->kv_prompt.size() < best->kv_prompt.size())) best = s.get(), best_n = n;
      }
      if (!best) break;
      best->req = waiting_.front();
      waiting_.pop_front();
    }
  }
  for (auto& r : dropped) {
    r->push(GenEvent{"", true, Finish::Cancelled, static_cast<int>(r->params.prompt.size()), 0, 0, ""});
    local_.requests_cancelled++;
  }
  const int n_ctx = eng_.options().n_ctx;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.sampler) continue;  // free, or already set up
    const GenParams& p = s.req->params;
    // Prefix reuse: the rows of the shared prompt prefix stay; the rest is overwritten.
    s.n_reused = reusable_prefix(s, p.prompt);
    s.n_prompt_done = s.n_reused;
    s.n_past = s.n_reused;
    s.kv_prompt.resize(static_cast<size_t>(s.n_reused));
    s.decoding = false;
    s.next = -1;
    s.n_gen = 0;
    s.max_tokens = p.max_tokens < 0 ? n_ctx : p.max_tokens;
    s.sampler = std::make_unique<Sampler>(p.sampling, eng_.config().n_vocab);
    s.dec = std::make_unique<tok::StreamDecoder>(tok_);
    s.stopper = StopMatcher(p.stop);
    s.history = p.prompt;
    if (s.n_reused == 0) eng_.kv().clear(s.id);  // positions restart at 0: rows are overwritten
    if (p.prompt.empty() || static_cast<int>(p.prompt.size()) >= n_ctx)
      finish(s, Finish::Error, "the prompt does not fit the context");
    else if (s.max_tokens == 0)
      finish(s, Finish::Length);
  }
}

// How many leading prompt tokens can keep slot s's KV rows: the common prefix with its kv_prompt,
// leaving at least two prompt tokens to evaluate (one chunk that is not a lone token, whose last
// row gives the logits). None for architectures with extra per-sequence cache state (DeepSeek-V4).
int Scheduler::reusable_prefix(const Slot& s, const std::vector<int32_t>& prompt) const {
  if (eng_.kv().ext() || prompt.size() < 3) return 0;
  const size_t cap = std::min(s.kv_prompt.size(), prompt.size() - 2);
  size_t n = 0;
  while (n < cap && s.kv_prompt[n] == prompt[n]) ++n;
  return static_cast<int>(n);
}

void Scheduler::emit(Slot& s, const std::string& text) {
  if (!text.empty()) s.req->push(GenEvent{text, false, Finish::None, 0, 0, 0, ""});
}

void Scheduler::finish(Slot& s, Finish f, const std::string& error) {
  if (f == Finish::Stop || f == Finish::Length || f == Finish::Cancelled) {
    if (s.dec && !s.stopper.matched()) {
      std::string tail = s.stopper.push(s.dec->flush());
      tail += s.stopper.flush();
      if (f != Finish::Cancelled) emit(s, tail);
    }
  }
  const int n_prompt = static_cast<int>(s.req->params.prompt.size());
  s.req->push(GenEvent{"", true, f, n_prompt, s.n_gen, s.n_reused, error});
  local_.prompt_tokens += static_cast<uint64_t>(s.n_prompt_done - s.n_reused);
  local_.prompt_tokens_reused += static_cast<uint64_t>(s.n_reused);
  // Keep the prompt rows for the next request unless the engine failed (rows of unknown state) or
  // the prompt was a lone token (computed as a decode step).
  const auto& prompt = s.req->params.prompt;
  if (f == Finish::Error || s.n_prompt_done < 2) s.kv_prompt.clear();
  else s.kv_prompt.assign(prompt.begin(), prompt.begin() + s.n_prompt_done);
  s.n_reused = 0;
  local_.completion_tokens += static_cast<uint64_t>(s.n_gen);
  if (f == Finish::Cancelled) local_.requests_cancelled++;
  else if (f == Finish::Error) local_.requests_failed++;
  else local_.requests_done++;
  s.req.reset();
  s.sampler.reset();
  s.dec.reset();
  s.history.clear();
  s.decoding = false;
}

void Scheduler::step() {
  for (auto& sp : slots_)
    if (sp->req && sp->req->cancelled()) finish(*sp, Finish::Cancelled);

  tokens_.clear();
  pos_.clear();
  seq_.clear();
  want_.clear();
  std::vector<Slot*> out_slots;  // slot of each logits row, in batch order
  // 1. Every decoding sequence's next token.
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || !s.decoding) continue;
    tokens_.push_back(s.next);
    pos_.push_back(s.n_past);
    seq_.push_back(s.id);
    want_.push_back(1);
    out_slots.push_back(&s);
  }
  // 2. Prompt chunks, oldest first, up to the per-step cap. A prompt is never split so that a
  // chunk of a single token remains (attention treats a sequence's lone token as a decode step),
  // which keeps each sequence's results independent of the other sequences in the batch.
  int budget = std::max(opt_.step_tokens - static_cast<int>(tokens_.size()), std::min(opt_.step_tokens, 32));
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.decoding || budget <= 0) continue;
    const auto& prompt = s.req->params.prompt;
    const int rest = static_cast<int>(prompt.size()) - s.n_prompt_done;
    int take = std::min(rest, budget);
    if (take < rest && rest - take == 1) --take;
    if (take == 1 && rest > 1) take = 0;
    if (take <= 0) continue;
    for (int i = 0; i < take; ++i) {
      tokens_.push_back(prompt[static_cast<size_t>(s.n_prompt_done + i)]);
      pos_.push_back(s.n_prompt_done + i);
      seq_.push_back(s.id);
      const bool last = s.n_prompt_done + i + 1 == static_cast<int>(prompt.size());
      want_.push_back(last ? 1 : 0);
      if (last) out_slots.push_back(&s);
    }
    s.n_prompt_done += take;
    s.n_past = s.n_prompt_done;
    budget -= take;
  }
  if (tokens_.empty()) return;

  const int nv = eng_.config().n_vocab;
  logits_.resize(out_slots.size() * static_cast<size_t>(nv));
  Batch b;
  b.n = static_cast<int>(tokens_.size());
  b.tokens = tokens_.data();
  b.pos = pos_.data();
  b.seq = seq_.data();
  b.logits = want_.data();
  const double t0 = now_s();
  eng_.model().forward(b, eng_.kv(), logits_.data());
  for (auto& sp : slots_)
    if (sp->req && sp->decoding) sp->n_past++;  // the token just fed is in the cache now

  // 3. Sample every sequence whose logits came out.
  int generated = 0;
  const int n_ctx = eng_.options().n_ctx;
  for (size_t r = 0; r < out_slots.size(); ++r) {
    Slot& s = *out_slots[r];
    const float* lg = logits_.data() + r * static_cast<size_t>(nv);
    const GenParams& p = s.req->params;
    if (p.on_logits) p.on_logits(lg, nv);
    const int32_t t = s.sampler->sample(lg, s.history);
    s.history.push_back(t);
    s.n_gen++;
    ++generated;
    if (!p.ignore_eos && tok_.is_eog(t)) {
      finish(s, Finish::Stop);
      continue;
    }
    emit(s, s.stopper.push(s.dec->push(t)));
    if (s.stopper.matched()) {
      finish(s, Finish::Stop);
    } else if (s.n_gen >= s.max_tokens || s.n_past >= n_ctx) {
      finish(s, Finish::Length);
    } else {
      s.next = t;
      s.decoding = true;
    }
  }
  const double t1 = now_s();

  local_.steps++;
  local_.batch_tokens += tokens_.size();
  local_.busy_s += t1 - t0;
  recent_.emplace_back(t1, generated);
  while (recent_.size() > 1 && t1 - recent_.front().first > 10.0) recent_.pop_front();
  const double span = t1 - recent_.front().first;
  int sum = 0;
  for (size_t i = 1; i < recent_.size(); ++i) sum += recent_[i].second;
  local_.decode_tps = span > 0 ? sum / span : 0.0;
  if (ExpertCache* c = eng_.tier().cache()) {
    const auto& k = c->counters();
    local_.expert_hits = k.hits;
    local_.expert_misses = k.misses;
    local_.expert_bytes_read = k.bytes_read;
    local_.expert_wait_s = k.wait_s;
  }
}

}  // namespace strata::server
