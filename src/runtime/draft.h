#pragma once
// Draft sources for speculative decoding, behind one interface: a source proposes tokens that
// may follow the text so far; the target model verifies them in one pass (runtime/speculative.h).
//   - LookupDraft: n-gram lookup in the prompt and the generated text (no model, no reads);
//   - ModelDraft: a small model sharing the target's vocabulary, resident, one sequence slot;
//   - MtpDraft: the target's own NextN (multi-token prediction) block (GLM-4.5), depth 1..2.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace strata {
namespace tok {
class Vocab;
}

// Tokens proposed to follow a history, with the draft's probability of each where it has one.
struct Draft {
  std::vector<int32_t> tokens;  // [k]
  std::vector<float> q;         // [k, n_vocab] the draft's distribution at each position; empty: point masses (q(tokens[i]) = 1)
  void clear() {
    tokens.clear();
    q.clear();
  }
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual const char* name() const = 0;
  // Whether drafting costs time worth deciding on before drafting (a model: yes; a lookup: no,
  // it drafts first and the cost model chooses among what it found).
  virtual bool costly() const { return true; }
  // Proposes up to k_max tokens to follow `history` (the prompt and every token chosen so far, its
  // last token included). A source keeps whatever state it needs and re-syncs it here with the
  // history it is given (accepted and rejected tokens of the last proposal show in it).
  virtual void propose(std::span<const int32_t> history, int k_max, Draft& out) = 0;
  // Called instead of propose when a pass asks for no drafts, with the same history, so that a
  // source whose state follows the target (MTP's NextN rows) stays in step. Default: nothing.
  virtual void observe(std::span<const int32_t> history) { (void)history; }
  // Of the last propose's time, the seconds it spent catching up on history beyond what drafting in
  // every pass would leave it (two rows: the last draft, never evaluated, and the target's token):
  // the prompt, the tokens of passes without drafts. Work deferred from those passes, not a cost
  // of this pass's drafts (the cost model leaves it out of the time per drafted token and charges
  // it to probes, at its seconds per row).
  virtual double deferred_s() const { return 0; }
  virtual int deferred_rows() const { return 0; }  // the rows of that catch-up
  // Frees what the source holds (a draft model's engine) and returns the bytes the memory plan had
  // for it (0: nothing to free). It drafts no more after.
  virtual uint64_t release() { return 0; }
};

// Prompt/history lookup: finds the most recent earlier occurrence of the history's last n tokens
// (n = n_max down to 1, longest first) and proposes the tokens that followed it.
class LookupDraft final : public DraftSource {
 public:
  explicit LookupDraft(int n_max = 3, int n_min = 1);
  const char* name() const override { return "lookup"; }
  bool costly() const override { return false; }
  void propose(std::span<const int32_t> history, int k_max, Draft& out) override;

 private:
  int n_max_, n_min_;
};

// A draft model: its own Engine (one slot). Greedy drafts when `sampling` is greedy, else drafts
// sampled with the same settings, with their distributions q.
class ModelDraft final : public DraftSource {
 public:
  ModelDraft(std::unique_ptr<Engine> engine, const SamplerParams& sampling);
  const char* name() const override { return "model"; }
  void propose(std::span<const int32_t> history, int k_max, Draft& out) override;
  double deferred_s() const override { return deferred_s_; }
  int deferred_rows() const override { return deferred_rows_; }
  uint64_t release() override;
  Engine& engine() { return *eng_; }

 private:
  std::unique_ptr<Engine> eng_;
  Sampler sampler_;
  double deferred_s_ = 0;
  int deferred_rows_ = 0;
  std::vector<int32_t> held_;  // tokens whose rows the draft's slot holds
  std::vector<int32_t> hist_;  // history + drafts so far (penalties)
  std::vector<float> logits_, p_;
};

// Where MtpDraft reads the trunk's hidden rows: by default Engine::hidden_row (valid until the
// next pass, a NextN pass included); the server's slots read a copy (runtime/slot_draft.h).
class HiddenRows {
 public:
  virtual ~HiddenRows() = default;
  virtual const float* row(int seq, int pos) const = 0;
};

// MTP: drafts with the target's NextN block j from the trunk's final hidden state. Depth 1: the
// block over (h_t, x_{t+1}) gives the logits of x_{t+2}; depth d > 1 feeds the drafted token and
// the block's own output hidden state back in. The block has its own KV rows (one layer, one
// slot of the engine's context) that follow the trunk: as the engine's PassListener it adds the
// rows of prompt passes whose next token is known (keeping a copy of the last row only), and
// propose/observe add those of decode passes once acceptance is known, reading the hidden rows
// from the engine (no copy); rows of rejected drafts are cut back as the trunk's are. Its routed
// experts go through the engine's expert tier. Greedy drafts when `sampling` is greedy, else
// sampled with their q.
class MtpDraft final : public DraftSource, public PassListener {
 public:
  // Throws when the model has no NextN block. Without `rows`: installs itself as the engine's pass
  // listener (create it before the prompt is evaluated; the destructor removes it) and reads the
  // engine's hidden rows; with `rows`, the owner forwards on_pass and the rows come from there.
  // The NextN KV rows are the engine's (Engine::nextn_kv(seq)) where it has them, else its own.
  MtpDraft(Engine& eng, int seq, const SamplerParams& sampling, int depth_max = 2, int block = 0, const HiddenRows* rows = nullptr);
  ~MtpDraft() override;
  const char* name() const override { return "mtp"; }
  void propose(std::span<const int32_t> history, int k_max, Draft& out) override;
  void observe(std::span<const int32_t> history) override;
  void on_pass(Engine& eng, std::span<const SeqInput> inputs) override;
  // The NextN logits [n_vocab] the last proposal drafted depth d (0-based) from; nullptr past it.
  const float* logits(int d) const;
  size_t logits_size() const { return p_.size(); }  // n_vocab
  int nextn_rows() const { return done_; }  // NextN rows that hold the history: positions 0..nextn_rows()-1
  bool lost() const { return lost_; }       // a hidden row it needed was gone: no drafts until a prompt restarts at 0
  // Of `keep` leading rows of `prompt` the trunk could keep, how many the NextN rows follow (rows
  // computed with the tokens the prompt has there); 0 when lost.
  int reusable(std::span<const int32_t> prompt, int keep) const;

 private:
  bool sync(std::span<const int32_t> history, bool want_logits);
  void cut(std::span<const int32_t> toks, int p0);
  void run(bool solo, int n_out, float* logits);
  const float* hidden(int pos) const { return rows_ ? rows_->row(seq_, pos) : eng_.hidden_row(seq_, pos); }

  Engine& eng_;
  const HiddenRows* rows_;
  KvCache* kvp_ = nullptr;  // the engine's NextN rows of this slot, or kv_
  int seq_, depth_, block_;
  Sampler sampler_;
  std::unique_ptr<KvCache> kv_;
  int done_ = 0;                 // NextN rows valid: positions [0, done_)
  std::vector<int32_t> used_;    // [done_] the token each row was computed with (x_{i+1})
  bool lost_ = false;
  std::vector<float> kept_, kept_next_;  // the last row of the last prompt pass (its next token was unknown)
  int kept_pos_ = -1;
  std::vector<int32_t> tok_, pos_;  // rows of the next NextN pass
  std::vector<const float*> h_;
  std::vector<float> logits_;       // [depth, n_vocab]
  int n_logits_ = 0;
  std::vector<int32_t> hist_;
  std::vector<float> p_;
};

// Throws unless the two vocabularies are the same (size and every token's text); the error names
// both files and the first id that differs.
void check_same_vocab(const tok::Vocab& target, const std::string& target_path, const tok::Vocab& draft, const std::string& draft_path);

// The batch size of a draft model's engine for a target engine's options: its passes are one row
// per slot per draft position, plus catch-up on tokens the target chose (a prompt, or the gap
// after passes without drafts), so its scratch is planned for up to kDraftBatch rows (at least
// one per slot), not for the target's prompt batch: under a tight --ram-budget it takes less of
// the expert cache's room.
inline constexpr int kDraftBatch = 64;
// Rows a draft model evaluates before drafting when it drafted in the pass before: the last draft
// (proposed, never evaluated) and the target's token after the accepted drafts.
inline constexpr int kDraftCatchUpRows = 2;
int draft_batch_size(const EngineOptions& target_opt);
// The bytes a draft model's engine takes in its target's memory plan (MemoryPlan::draft): its
// weights, KV cache and scratch.
uint64_t draft_plan_bytes(const Engine& draft);

// Loads `path` as a draft model for a target with vocabulary `target_vocab` (checked), resident,
// one slot of n_ctx positions.
std::unique_ptr<ModelDraft> load_model_draft(const std::string& path, const std::string& target_path, const tok::Vocab& target_vocab,
                                             const EngineOptions& target_opt, const SamplerParams& sampling);

}  // namespace strata
