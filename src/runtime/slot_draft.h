#pragma once
// Draft sources for several sequence slots of one engine at once (the server's per-slot
// speculation): each slot's draft state follows its own sequence.
//   - SharedSlotDrafter: a DraftSource without per-sequence state (LookupDraft) used for every slot;
//   - ModelSlotDrafter: a draft model with its own Engine of as many slots as the target; the
//     drafts of all the slots that ask are one batched pass of the draft model per draft position
//     (k drafts for n slots: k draft passes, plus the catch-up rows of the tokens the target chose);
//   - MtpSlotDrafter: one MtpDraft per slot (its NextN rows in the engine's per-slot NextN KV),
//     fed by the trunk's hidden rows of the shared pass (copied once per pass, since a NextN pass
//     overwrites the trunk's rows that the other slots still need).
// Drafts are greedy (the draft's argmax): a point mass, so the speculative-sampling rule with
// q = the point mass is exact for sampled requests too.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/draft.h"
#include "runtime/engine.h"

namespace strata {

// One slot's request for drafts: up to k_max tokens to follow `history` (the prompt and every
// token chosen, the pending one last), written to *out.
struct SlotDraftJob {
  int slot = 0;
  std::span<const int32_t> history;
  int k_max = 0;
  Draft* out = nullptr;
};

class SlotDrafter {
 public:
  virtual ~SlotDrafter() = default;
  virtual const char* name() const = 0;
  // As DraftSource::costly: whether to decide on k before drafting (a model) or after (a lookup).
  virtual bool costly() const { return true; }
  // Drafts for every job (distinct slots), all at once.
  virtual void propose(std::span<const SlotDraftJob> jobs) = 0;
  // As DraftSource::deferred_s, for the last propose (all its jobs).
  virtual double deferred_s() const { return 0; }
  virtual int deferred_rows() const { return 0; }
  // A decoding slot that asks for no drafts this pass (same history as propose): state that
  // follows the target stays in step.
  virtual void observe(int slot, std::span<const int32_t> history) {
    (void)slot;
    (void)history;
  }
  // Of the `keep` prompt rows the engine would let a new request of `slot` keep, how many the
  // draft state can follow (the scheduler keeps no more).
  virtual int reusable(int slot, std::span<const int32_t> prompt, int keep) const {
    (void)slot;
    (void)prompt;
    return keep;
  }
};

class SharedSlotDrafter final : public SlotDrafter {
 public:
  explicit SharedSlotDrafter(std::shared_ptr<DraftSource> src) : src_(std::move(src)) {}
  const char* name() const override { return src_->name(); }
  bool costly() const override { return src_->costly(); }
  void propose(std::span<const SlotDraftJob> jobs) override;
  void observe(int slot, std::span<const int32_t> history) override { src_->observe(history); }
  double deferred_s() const override { return deferred_s_; }
  int deferred_rows() const override { return deferred_rows_; }

 private:
  std::shared_ptr<DraftSource> src_;
  double deferred_s_ = 0;
  int deferred_rows_ = 0;
};

class ModelSlotDrafter final : public SlotDrafter {
 public:
  // The draft engine has a slot per target slot (slot i drafts for target slot i).
  explicit ModelSlotDrafter(std::unique_ptr<Engine> draft);
  const char* name() const override { return "model"; }
  void propose(std::span<const SlotDraftJob> jobs) override;
  double deferred_s() const override { return deferred_s_; }
  int deferred_rows() const override { return deferred_rows_; }
  Engine& engine() { return *eng_; }
  uint64_t draft_passes() const { return passes_; }  // forward passes of the draft model so far

 private:
  void catch_up(std::span<const SlotDraftJob> jobs);

  std::unique_ptr<Engine> eng_;
  std::vector<SlotDraftJob> jobs_;    // propose's jobs, k_max capped by the draft's context
  std::vector<int> rest_;             // [jobs] catch-up tokens still to evaluate
  std::vector<int32_t> next_;         // [jobs] the token each job feeds next
  std::vector<SeqInput> in_;
  std::vector<int> in_job_;           // the job of each input
  std::vector<float> logits_, last_;  // a pass's rows; [jobs, n_vocab] each job's latest row
  uint64_t passes_ = 0;
  double deferred_s_ = 0;
  int deferred_rows_ = 0;
};

// A copy of the trunk's hidden rows of the engine's last pass (MtpDraft reads them here).
class PassHiddenCopy final : public HiddenRows {
 public:
  explicit PassHiddenCopy(const Engine& eng);
  void copy(const Engine& eng, std::span<const SeqInput> inputs);
  const float* row(int seq, int pos) const override;
  uint64_t bytes() const;  // what it holds
  // What one holds for an engine of n_batch rows, n_embd wide, n_seq slots (the memory plan's figure).
  static uint64_t planned_bytes(int n_batch, int n_embd, int n_seq);

 private:
  struct Part {
    int seq, pos0, n, row0;
  };
  int n_embd_;
  std::vector<Part> parts_;
  std::vector<float> rows_;  // [n_batch, n_embd]
};

class MtpSlotDrafter final : public SlotDrafter, public PassListener {
 public:
  // Needs the engine's NextN KV (EngineOptions::nextn_kv); installs itself as its pass listener.
  MtpSlotDrafter(Engine& eng, int depth_max = 2);
  ~MtpSlotDrafter() override;
  const char* name() const override { return "mtp"; }
  void propose(std::span<const SlotDraftJob> jobs) override;
  void observe(int slot, std::span<const int32_t> history) override;
  int reusable(int slot, std::span<const int32_t> prompt, int keep) const override;
  void on_pass(Engine& eng, std::span<const SeqInput> inputs) override;
  const MtpDraft& slot(int i) const { return *slots_[static_cast<size_t>(i)]; }
  // Stops listening to the engine (the destructor does; the server calls it at stop, before the
  // engine may go). No drafts after it.
  void detach();

 private:
  Engine& eng_;
  bool attached_ = false;
  PassHiddenCopy rows_;
  std::vector<std::unique_ptr<MtpDraft>> slots_;
};

// Loads `path` as the draft model of a server whose target has vocabulary `target_vocab`
// (checked: a mismatch names both files and the first token that differs), resident, with
// `n_seq` slots of n_ctx positions.
std::unique_ptr<Engine> load_draft_engine(const std::string& path, const std::string& target_path, const tok::Vocab& target_vocab,
                                          const EngineOptions& target_opt);

}  // namespace strata
