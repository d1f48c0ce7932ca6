#pragma once
// Draft sources for speculative decoding, behind one interface: a source proposes tokens that
// may follow the text so far; the target model verifies them in one pass (runtime/speculative.h).
//   - LookupDraft: n-gram lookup in the prompt and the generated text (no model, no reads);
//   - ModelDraft: a small model sharing the target's vocabulary, resident, one sequence slot.
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
  Engine& engine() { return *eng_; }

 private:
  std::unique_ptr<Engine> eng_;
  Sampler sampler_;
  std::vector<int32_t> held_;  // tokens whose rows the draft's slot holds
  std::vector<int32_t> hist_;  // history + drafts so far (penalties)
  std::vector<float> logits_, p_;
};

// Throws unless the two vocabularies are the same (size and every token's text); the error names
// both files and the first id that differs.
void check_same_vocab(const tok::Vocab& target, const std::string& target_path, const tok::Vocab& draft, const std::string& draft_path);

// Loads `path` as a draft model for a target with vocabulary `target_vocab` (checked), resident,
// one slot of n_ctx positions.
std::unique_ptr<ModelDraft> load_model_draft(const std::string& path, const std::string& target_path, const tok::Vocab& target_vocab,
                                             const EngineOptions& target_opt, const SamplerParams& sampling);

}  // namespace strata
