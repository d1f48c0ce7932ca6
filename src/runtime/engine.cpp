#include "runtime/engine.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/routing_memory.h"
#include "runtime/slot_draft.h"

namespace strata {

Engine::Engine(std::unique_ptr<Model> model, const EngineOptions& opt) : model_(std::move(model)), opt_(opt) {
  if (opt_.n_ctx <= 0) opt_.n_ctx = model_->config().n_ctx_train > 0 ? model_->config().n_ctx_train : 4096;
  if (opt_.n_threads <= 0) opt_.n_threads = default_thread_count();
  STRATA_CHECK(opt_.n_batch > 0, "batch size must be positive (got {})", opt_.n_batch);
  STRATA_CHECK(opt_.n_seq > 0, "sequence slots must be positive (got {})", opt_.n_seq);
  pool_ = std::make_unique<ThreadPool>(opt_.n_threads);
  KvCacheOptions ko;
  ko.n_ctx = opt_.n_ctx;
  ko.n_seq = opt_.n_seq;
  ko.type_k = opt_.type_k;
  ko.type_v = opt_.type_v;
  model_->set_threads(pool_.get());
  if (opt_.routed_only) {
    start_routed_only(ko);
    return;
  }
  kv_ = std::make_unique<KvCache>(model_->config(), ko);
  // Everything a pass needs is allocated first, so the plan counts what is really held.
  model_->prepare(*kv_, opt_.n_batch, opt_.n_threads);
  // The logits rows of a pass: the caller's buffer of forward() and eval_rows' buffer (at least two
  // rows: a pass that gives rows is never a lone token).
  opt_.logit_rows = std::clamp(opt_.logit_rows > 0 ? opt_.logit_rows : opt_.n_batch, 1, opt_.n_batch);
  const uint64_t row = sizeof(float) * static_cast<uint64_t>(model_->config().n_vocab);
  const int part_rows = std::max(opt_.logit_rows, 2);
  part_.reserve(static_cast<size_t>(part_rows) * static_cast<size_t>(model_->config().n_vocab));
  TierOptions tier = opt_.tier;
  tier.logits_bytes += row * static_cast<uint64_t>(opt_.logit_rows + part_rows);
  if (opt_.nextn_kv && model_->n_nextn() > 0) {
    KvCacheOptions nk = ko;
    nk.n_seq = 1;
    for (int i = 0; i < opt_.n_seq; ++i) {
      nextn_kv_.push_back(model_->make_nextn_kv(0, nk));
      tier.draft_bytes += nextn_kv_.back()->bytes();
    }
    if (opt_.nextn_hidden_copy) tier.draft_bytes += PassHiddenCopy::planned_bytes(opt_.n_batch, model_->config().n_embd, opt_.n_seq);
  }
  if (opt_.routing_memory) tier.draft_bytes += routing_memory_bytes(model_->config(), opt_.n_ctx, opt_.n_batch, opt_.n_seq);
  tier_ = std::make_unique<ExpertTier>(*model_, kv_->bytes(), model_->scratch_bytes(), tier);
  seqs_.resize(static_cast<size_t>(opt_.n_seq));
  last_.reserve(static_cast<size_t>(opt_.n_seq));
}

// A shard server's engine: a KV cache of no layers (the pass context needs one; it holds nothing),
// the routed jobs' scratch, and the tier's plan without dense weights.
void Engine::start_routed_only(KvCacheOptions ko) {
  ModelConfig none = model_->config();
  none.layers.clear();
  ko.n_ctx = ko.n_seq = 1;
  kv_ = std::make_unique<KvCache>(none, ko);
  model_->prepare_routed(*kv_, opt_.n_batch, opt_.n_threads);
  opt_.logit_rows = 0;
  TierOptions tier = opt_.tier;
  tier.routed_only = true;
  tier.draft_bytes = tier.logits_bytes = 0;
  tier_ = std::make_unique<ExpertTier>(*model_, kv_->bytes(), model_->scratch_bytes(), tier);
  seqs_.resize(static_cast<size_t>(opt_.n_seq));
}

const float* Engine::hidden_row(int seq, int pos) const {
  for (const PassRows& r : last_)
    if (r.seq == seq && pos >= r.pos0 && pos < r.pos0 + r.n) return model_->hidden_row(r.row0 + pos - r.pos0);
  return nullptr;
}

Engine::Seq& Engine::seq_at(int seq) {
  STRATA_CHECK(seq >= 0 && seq < opt_.n_seq, "sequence slot {} out of range ({} slots)", seq, opt_.n_seq);
  return seqs_[static_cast<size_t>(seq)];
}

const Engine::Seq& Engine::seq_at(int seq) const {
  STRATA_CHECK(seq >= 0 && seq < opt_.n_seq, "sequence slot {} out of range ({} slots)", seq, opt_.n_seq);
  return seqs_[static_cast<size_t>(seq)];
}

int Engine::seq_length(int seq) const { return static_cast<int>(seq_at(seq).tokens.size()); }

void Engine::truncate(int seq, int n) {
  Seq& s = seq_at(seq);
  const int len = static_cast<int>(s.tokens.size());
  STRATA_CHECK(n >= 0 && n <= len, "cannot cut sequence {} back to {} tokens: it holds {}", seq, n, len);
  STRATA_CHECK(n == len || n == 0 || model_->rewindable(),
               "architecture {} keeps per-sequence state beyond the KV rows: sequence {} cannot be cut back to {} of {} tokens",
               config().arch, seq, n, len);
  s.tokens.resize(static_cast<size_t>(n));
  s.n_chunked = std::min(s.n_chunked, n);
}

int Engine::reusable_prefix(int seq, std::span<const int32_t> prompt) const {
  const Seq& s = seq_at(seq);
  if (!model_->rewindable() || prompt.size() < 3) return 0;
  const size_t cap = std::min(static_cast<size_t>(s.n_chunked), prompt.size() - 2);
  size_t n = 0;
  while (n < cap && s.tokens[n] == prompt[n]) ++n;
  return static_cast<int>(n);
}

int Engine::reusable_rows(int seq) const { return model_->rewindable() ? seq_at(seq).n_chunked : 0; }

void Engine::adopt_rows(int seq, std::span<const int32_t> tokens, int n_chunked) {
  Seq& s = seq_at(seq);
  STRATA_CHECK(static_cast<int>(tokens.size()) <= opt_.n_ctx, "{} tokens exceed the context size {}", tokens.size(), opt_.n_ctx);
  STRATA_CHECK(n_chunked >= 0 && n_chunked <= static_cast<int>(tokens.size()), "{} chunked rows of {} tokens", n_chunked, tokens.size());
  s.tokens.assign(tokens.begin(), tokens.end());
  s.n_chunked = n_chunked;
  std::erase_if(last_, [seq](const PassRows& r) { return r.seq == seq; });  // its hidden rows are another history's
}

int Engine::start_prompt(int seq, std::span<const int32_t> prompt, int max_keep) {
  const int keep = std::max(0, std::min(reusable_prefix(seq, prompt), max_keep));
  truncate(seq, keep);
  return keep;
}

int Engine::prompt_chunk(int rest, int room) {
  int take = std::min(rest, room);
  if (take < rest && rest - take == 1) --take;  // would leave a lone token
  if (take == 1 && rest > 1) take = 0;          // would be a lone token itself
  return std::max(take, 0);
}

size_t Engine::check_inputs(std::span<const SeqInput> inputs, size_t cap) const {
  STRATA_CHECK(!opt_.routed_only, "this engine serves routed experts only (an --expert-parallel shard): it runs no forward pass");
  STRATA_CHECK(!inputs.empty(), "nothing to evaluate");
  int total = 0;
  size_t rows = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeqInput& in = inputs[i];
    const Seq& s = seq_at(in.seq);
    STRATA_CHECK(in.n > 0 && in.tokens != nullptr, "input {} of the pass has no tokens", i);
    for (size_t j = 0; j < i; ++j) STRATA_CHECK(inputs[j].seq != in.seq, "sequence {} appears twice in one pass", in.seq);
    const int end = static_cast<int>(s.tokens.size()) + in.n;
    STRATA_CHECK(end <= opt_.n_ctx, "{} tokens at position {} exceed the context size {} (use -c to enlarge it)", in.n, s.tokens.size(),
                 opt_.n_ctx);
    total += in.n;
    rows += in.logits == Logits::All ? static_cast<size_t>(in.n) : in.logits == Logits::Last ? 1 : 0;
  }
  STRATA_CHECK(total <= opt_.n_batch, "a pass of {} tokens exceeds the batch size {} the memory plan was made for", total, opt_.n_batch);
  STRATA_CHECK(cap == 0 || rows <= cap, "a pass asking {} logits rows exceeds the {} the memory plan was made for (EngineOptions::logit_rows)",
               rows, cap);
  return rows;
}

void Engine::forward(std::span<const SeqInput> inputs, std::vector<float>& logits) {
  const size_t rows = check_inputs(inputs, static_cast<size_t>(opt_.logit_rows));
  logits.resize(rows * static_cast<size_t>(config().n_vocab));
  pass(inputs, logits.data(), rows);
}

void Engine::pass(std::span<const SeqInput> inputs, float* out, size_t rows) {
  tier_->poll_load();  // between passes: a finished background load switches to resident
  last_.clear();
  tokens_.clear();
  pos_.clear();
  seq_.clear();
  want_.clear();
  solo_.clear();
  bool any_solo = false;
  for (const SeqInput& in : inputs) {
    const int p0 = static_cast<int>(seq_at(in.seq).tokens.size());
    for (int i = 0; i < in.n; ++i) {
      tokens_.push_back(in.tokens[i]);
      pos_.push_back(p0 + i);
      seq_.push_back(in.seq);
      want_.push_back(in.logits == Logits::All || (in.logits == Logits::Last && i == in.n - 1) ? 1 : 0);
      solo_.push_back(in.decode_order ? 1 : 0);
    }
    any_solo = any_solo || in.decode_order;
  }
  Batch b;
  b.n = static_cast<int>(tokens_.size());
  b.tokens = tokens_.data();
  b.pos = pos_.data();
  b.seq = seq_.data();
  b.logits = want_.data();
  b.solo = any_solo ? solo_.data() : nullptr;
  try {
    model_->forward(b, *kv_, out);
    if (opt_.check_finite && !all_finite(out, rows * static_cast<size_t>(config().n_vocab))) fail("{}", non_finite_report(b));
  } catch (...) {
    for (const SeqInput& in : inputs) reset(in.seq);  // rows of unknown state
    throw;
  }
  int row0 = 0;
  for (const SeqInput& in : inputs) {
    Seq& s = seq_at(in.seq);
    last_.push_back({in.seq, static_cast<int>(s.tokens.size()), in.n, row0});
    row0 += in.n;
    // A lone token of its sequence (or a decode-order input) is computed in the decode order: its
    // rows end the reusable run.
    if (in.n > 1 && !in.decode_order && s.n_chunked == static_cast<int>(s.tokens.size())) s.n_chunked += in.n;
    s.tokens.insert(s.tokens.end(), in.tokens, in.tokens + in.n);
  }
  for (PassListener* l : listeners_) l->on_pass(*this, inputs);
}

void Engine::eval(int seq, const int32_t* tokens, int n, int pos0, bool all_logits, std::vector<float>& logits) {
  const size_t nv = static_cast<size_t>(config().n_vocab);
  if (!all_logits) {
    eval_rows(seq, tokens, n, pos0, n - 1, [&](int, const float* row) { logits.assign(row, row + nv); });
    return;
  }
  STRATA_CHECK(n > 0, "nothing to evaluate");
  STRATA_CHECK(pos0 >= 0 && pos0 + n <= opt_.n_ctx, "{} tokens at position {} exceed the context size {} (use -c to enlarge it)", n, pos0,
               opt_.n_ctx);
  STRATA_CHECK(pos0 <= seq_length(seq), "position {} is past the end of sequence {} ({} tokens)", pos0, seq, seq_length(seq));
  truncate(seq, pos0);
  logits.resize(static_cast<size_t>(n) * nv);
  for (int off = 0; off < n;) {
    int m = prompt_chunk(n - off, opt_.n_batch);
    if (m == 0) m = std::min(n - off, opt_.n_batch);  // a batch size of 1 or 2 cannot avoid lone tokens
    const SeqInput in{seq, tokens + off, m, Logits::All};
    pass({&in, 1}, logits.data() + static_cast<size_t>(off) * nv, check_inputs({&in, 1}, 0));
    off += m;
  }
}

void Engine::eval_rows(int seq, const int32_t* tokens, int n, int pos0, int first, const RowSink& sink) {
  STRATA_CHECK(n > 0, "nothing to evaluate");
  STRATA_CHECK(first >= 0 && first < n, "rows from {} asked of {} tokens", first, n);
  STRATA_CHECK(pos0 >= 0 && pos0 + n <= opt_.n_ctx, "{} tokens at position {} exceed the context size {} (use -c to enlarge it)", n, pos0,
               opt_.n_ctx);
  STRATA_CHECK(pos0 <= seq_length(seq), "position {} is past the end of sequence {} ({} tokens)", pos0, seq, seq_length(seq));
  truncate(seq, pos0);
  const size_t nv = static_cast<size_t>(config().n_vocab);
  const int cap = std::max(opt_.logit_rows, 2);  // part_'s planned rows
  for (int off = 0; off < n;) {
    int m = prompt_chunk(n - off, opt_.n_batch);
    if (m == 0) m = std::min(n - off, opt_.n_batch);  // a batch size of 1 or 2 cannot avoid lone tokens
    Logits want = off + m - 1 < first ? Logits::None : first >= off + m - 1 ? Logits::Last : Logits::All;
    if (want == Logits::All && m > cap) {
      m = prompt_chunk(n - off, cap);
      if (m == 0) m = std::min(n - off, cap);
      want = off + m - 1 < first ? Logits::None : first >= off + m - 1 ? Logits::Last : Logits::All;
    }
    const SeqInput in{seq, tokens + off, m, want};
    const size_t rows = check_inputs({&in, 1}, 0);
    part_.resize(rows * nv);
    pass({&in, 1}, part_.data(), rows);
    if (want == Logits::Last) sink(off + m - 1, part_.data());
    if (want == Logits::All)
      for (int i = std::max(off, first); i < off + m; ++i) sink(i, part_.data() + static_cast<size_t>(i - off) * nv);
    off += m;
  }
}

}  // namespace strata
