#include "runtime/slot_draft.h"

#include <algorithm>
#include <utility>
#include <cstring>

#include "core/error.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace strata {

void SharedSlotDrafter::propose(std::span<const SlotDraftJob> jobs) {
  deferred_s_ = 0;
  deferred_rows_ = 0;
  for (const SlotDraftJob& j : jobs) {
    src_->propose(j.history, j.k_max, *j.out);
    deferred_s_ += src_->deferred_s();
    deferred_rows_ += src_->deferred_rows();
  }
}

// ---------------------------------------------------------------- ModelSlotDrafter

ModelSlotDrafter::ModelSlotDrafter(std::unique_ptr<Engine> draft) : eng_(std::move(draft)) {
  STRATA_CHECK(eng_->model().rewindable(), "draft model: architecture {} cannot be cut back, so it cannot draft", eng_->config().arch);
  const size_t n = static_cast<size_t>(eng_->n_seq());
  rest_.reserve(n);
  next_.reserve(n);
  in_.reserve(n);
  in_job_.reserve(n);
  last_.reserve(n * static_cast<size_t>(eng_->config().n_vocab));
}

// Brings each job's draft slot to its history: the rows of the longest common prefix stay (at
// least the last history token is evaluated again: its logits), the rest is evaluated in passes
// of up to n_batch tokens shared by the slots. last_ then holds each job's row after its history.
void ModelSlotDrafter::catch_up(std::span<const SlotDraftJob> jobs) {
  const size_t nv = static_cast<size_t>(eng_->config().n_vocab);
  rest_.assign(jobs.size(), 0);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const SlotDraftJob& job = jobs[j];
    if (job.k_max <= 0) continue;
    const std::span<const int32_t> held = eng_->seq_tokens(job.slot);
    const int len = static_cast<int>(job.history.size());
    const int cap = std::min(static_cast<int>(held.size()), len - 1);
    int keep = 0;
    while (keep < cap && held[static_cast<size_t>(keep)] == job.history[static_cast<size_t>(keep)]) ++keep;
    eng_->truncate(job.slot, keep);
    rest_[j] = len - keep;
  }
  // Rows beyond what drafting in every pass leaves are deferred work (deferred_s): prompts, the
  // tokens of passes without drafts.
  int rows = 0, extra = 0;
  for (size_t j = 0; j < jobs.size(); ++j) rows += rest_[j], extra += std::max(0, rest_[j] - kDraftCatchUpRows);
  const double t0 = now_s();
  const int n_batch = eng_->options().n_batch;
  for (;;) {
    in_.clear();
    in_job_.clear();
    int room = n_batch;
    for (size_t j = 0; j < jobs.size() && room > 0; ++j) {
      if (rest_[j] == 0) continue;
      const int take = std::min(rest_[j], room);
      const int len = static_cast<int>(jobs[j].history.size());
      in_.push_back(SeqInput{jobs[j].slot, jobs[j].history.data() + (len - rest_[j]), take, take == rest_[j] ? Logits::Last : Logits::None});
      in_job_.push_back(static_cast<int>(j));
      room -= take;
    }
    if (in_.empty()) break;
    eng_->forward(in_, logits_);
    ++passes_;
    size_t row = 0;
    for (size_t i = 0; i < in_.size(); ++i) {
      const size_t j = static_cast<size_t>(in_job_[i]);
      rest_[j] -= in_[i].n;
      if (in_[i].logits == Logits::None) continue;
      std::copy_n(logits_.begin() + static_cast<ptrdiff_t>(row * nv), nv, last_.begin() + static_cast<ptrdiff_t>(j * nv));
      ++row;
    }
  }
  deferred_s_ = rows > 0 ? (now_s() - t0) * extra / rows : 0.0;
  deferred_rows_ = extra;
}

void ModelSlotDrafter::propose(std::span<const SlotDraftJob> jobs) {
  const size_t nv = static_cast<size_t>(eng_->config().n_vocab);
  const int n_ctx = eng_->options().n_ctx;
  // Jobs whose slot drafts: a history that fits the draft's context (k_max 0 otherwise).
  std::vector<SlotDraftJob>& js = jobs_;
  js.assign(jobs.begin(), jobs.end());
  for (SlotDraftJob& j : js) {
    j.out->clear();
    const int len = static_cast<int>(j.history.size());
    j.k_max = len == 0 ? 0 : std::min(j.k_max, n_ctx - len);
  }
  last_.resize(js.size() * nv);
  catch_up(js);
  next_.assign(js.size(), -1);
  for (int d = 0;; ++d) {
    in_.clear();
    in_job_.clear();
    for (size_t j = 0; j < js.size(); ++j) {
      if (d >= js[j].k_max) continue;
      const int32_t x = Sampler::argmax(last_.data() + j * nv, static_cast<int>(nv));
      js[j].out->tokens.push_back(x);
      if (d + 1 == js[j].k_max) continue;
      next_[j] = x;
      in_.push_back(SeqInput{js[j].slot, &next_[j], 1, Logits::Last});
      in_job_.push_back(static_cast<int>(j));
    }
    if (in_.empty()) return;
    eng_->forward(in_, logits_);
    ++passes_;
    for (size_t i = 0; i < in_.size(); ++i)
      std::copy_n(logits_.begin() + static_cast<ptrdiff_t>(i * nv), nv, last_.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(in_job_[i]) * nv));
  }
}

std::unique_ptr<Engine> load_draft_engine(const std::string& path, const std::string& target_path, const tok::Vocab& target_vocab,
                                          const EngineOptions& target_opt) {
  auto model = Model::load(path);
  const auto vocab = tok::Vocab::from_gguf(model->gguf());
  check_same_vocab(target_vocab, target_path, *vocab, path);
  STRATA_CHECK(model->config().n_vocab == target_vocab.n_tokens(), "draft model {}: output head of {} rows for a vocabulary of {} tokens", path,
               model->config().n_vocab, target_vocab.n_tokens());
  STRATA_CHECK(model->rewindable(), "draft model {}: architecture {} cannot be cut back, so it cannot draft", path, model->config().arch);
  EngineOptions eo;
  eo.n_ctx = target_opt.n_ctx;
  eo.n_seq = target_opt.n_seq;
  eo.n_threads = target_opt.n_threads;
  eo.n_batch = draft_batch_size(target_opt);
  eo.type_k = target_opt.type_k;
  eo.type_v = target_opt.type_v;
  eo.logit_rows = eo.n_seq;  // one row per slot and pass
  return std::make_unique<Engine>(std::move(model), eo);
}

// ---------------------------------------------------------------- MTP

uint64_t PassHiddenCopy::planned_bytes(int n_batch, int n_embd, int n_seq) {
  return static_cast<uint64_t>(n_batch) * static_cast<uint64_t>(n_embd) * sizeof(float) + static_cast<uint64_t>(n_seq) * sizeof(Part);
}

uint64_t PassHiddenCopy::bytes() const { return rows_.capacity() * sizeof(float) + parts_.capacity() * sizeof(Part); }

PassHiddenCopy::PassHiddenCopy(const Engine& eng) : n_embd_(eng.config().n_embd) {
  rows_.resize(static_cast<size_t>(eng.options().n_batch) * static_cast<size_t>(n_embd_));
  parts_.reserve(static_cast<size_t>(eng.n_seq()));
}

void PassHiddenCopy::copy(const Engine& eng, std::span<const SeqInput> inputs) {
  parts_.clear();
  const size_t d = static_cast<size_t>(n_embd_);
  int row0 = 0;
  for (const SeqInput& in : inputs) {
    const int p0 = eng.seq_length(in.seq) - in.n;
    for (int i = 0; i < in.n; ++i) {
      const float* h = eng.hidden_row(in.seq, p0 + i);
      STRATA_CHECK(h != nullptr, "MTP: the engine did not keep the hidden row of position {} of slot {}", p0 + i, in.seq);
      std::memcpy(rows_.data() + static_cast<size_t>(row0 + i) * d, h, sizeof(float) * d);
    }
    parts_.push_back({in.seq, p0, in.n, row0});
    row0 += in.n;
  }
}

const float* PassHiddenCopy::row(int seq, int pos) const {
  for (const Part& p : parts_)
    if (p.seq == seq && pos >= p.pos0 && pos < p.pos0 + p.n) return rows_.data() + static_cast<size_t>(p.row0 + pos - p.pos0) * static_cast<size_t>(n_embd_);
  return nullptr;
}

MtpSlotDrafter::MtpSlotDrafter(Engine& eng, int depth_max) : eng_(eng), rows_(eng) {
  SamplerParams greedy;
  greedy.temp = 0;
  for (int i = 0; i < eng.n_seq(); ++i) {
    slots_.push_back(std::make_unique<MtpDraft>(eng, i, greedy, depth_max, 0, &rows_));
    STRATA_CHECK(eng.nextn_kv(i) != nullptr, "MTP drafting in the server needs the engine's NextN KV rows (EngineOptions::nextn_kv)");
  }
  eng.add_pass_listener(this);
  attached_ = true;
}

MtpSlotDrafter::~MtpSlotDrafter() { detach(); }

void MtpSlotDrafter::detach() {
  if (attached_) eng_.remove_pass_listener(this);
  attached_ = false;
}

void MtpSlotDrafter::on_pass(Engine& eng, std::span<const SeqInput> inputs) {
  rows_.copy(eng, inputs);  // before any NextN pass overwrites the trunk's rows
  for (auto& s : slots_) s->on_pass(eng, inputs);
}

void MtpSlotDrafter::propose(std::span<const SlotDraftJob> jobs) {
  if (!attached_) return;
  for (const SlotDraftJob& j : jobs) slots_[static_cast<size_t>(j.slot)]->propose(j.history, j.k_max, *j.out);
}

void MtpSlotDrafter::observe(int slot, std::span<const int32_t> history) { slots_[static_cast<size_t>(slot)]->observe(history); }

int MtpSlotDrafter::reusable(int slot, std::span<const int32_t> prompt, int keep) const {
  return slots_[static_cast<size_t>(slot)]->reusable(prompt, keep);
}

}  // namespace strata
