#include "runtime/draft.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

namespace strata {

LookupDraft::LookupDraft(int n_max, int n_min) : n_max_(n_max), n_min_(n_min) {
  STRATA_CHECK(n_min >= 1 && n_max >= n_min, "lookup draft: n-gram sizes must satisfy 1 <= n_min <= n_max (got {}..{})", n_min, n_max);
}

void LookupDraft::propose(std::span<const int32_t> history, int k_max, Draft& out) {
  out.clear();
  const int len = static_cast<int>(history.size());
  if (k_max <= 0) return;
  for (int n = std::min(n_max_, len - 1); n >= n_min_; --n) {
    const int32_t* suffix = history.data() + len - n;
    // Most recent earlier occurrence first: start j of a match, followed by at least one token.
    for (int j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, suffix + n, history.data() + j)) continue;
      const int from = j + n, take = std::min(k_max, len - from);
      out.tokens.assign(history.begin() + from, history.begin() + from + take);
      return;
    }
  }
}

ModelDraft::ModelDraft(std::unique_ptr<Engine> engine, const SamplerParams& sampling)
    : eng_(std::move(engine)), sampler_(sampling, eng_->config().n_vocab) {
  STRATA_CHECK(eng_->model().rewindable(), "draft model: architecture {} cannot be cut back, so it cannot draft", eng_->config().arch);
  const size_t nv = static_cast<size_t>(eng_->config().n_vocab);
  logits_.reserve(nv);
  p_.resize(nv);
}

void ModelDraft::propose(std::span<const int32_t> history, int k_max, Draft& out) {
  out.clear();
  deferred_s_ = 0;
  deferred_rows_ = 0;
  const int len = static_cast<int>(history.size());
  k_max = std::min(k_max, eng_->options().n_ctx - len);
  if (k_max <= 0 || len == 0) return;
  // Keep the rows of the longest common prefix, but evaluate at least the last history token (its logits).
  int keep = 0;
  const int cap = std::min(static_cast<int>(held_.size()), len - 1);
  while (keep < cap && held_[keep] == history[keep]) ++keep;
  held_.resize(static_cast<size_t>(keep));
  held_.insert(held_.end(), history.begin() + keep, history.end());
  const double t0 = now_s();
  eng_->eval(0, history.data() + keep, len - keep, keep, false, logits_);
  const int rows = len - keep, deferred = std::max(0, rows - kDraftCatchUpRows);
  deferred_s_ = (now_s() - t0) * static_cast<double>(deferred) / static_cast<double>(rows);
  deferred_rows_ = deferred;
  hist_.assign(history.begin(), history.end());
  const size_t nv = p_.size();
  for (int i = 0; i < k_max; ++i) {
    sampler_.probs(logits_.data(), hist_, p_.data());
    const int32_t x = sampler_.greedy() ? Sampler::argmax(p_.data(), static_cast<int>(nv)) : sampler_.draw(p_.data());
    out.tokens.push_back(x);
    if (!sampler_.greedy()) out.q.insert(out.q.end(), p_.begin(), p_.end());
    hist_.push_back(x);
    if (i + 1 == k_max) break;
    const SeqInput in{0, &x, 1, Logits::Last};
    eng_->forward({&in, 1}, logits_);
    held_.push_back(x);
  }
}

uint64_t ModelDraft::release() {
  if (!eng_) return 0;
  const uint64_t bytes = draft_plan_bytes(*eng_);
  eng_.reset();
  held_.clear();
  return bytes;
}

uint64_t draft_plan_bytes(const Engine& draft) {
  const MemoryPlan& p = draft.tier().plan();
  return p.dense + p.kv + p.scratch - kProcessAllowance + p.experts_total;
}

int draft_batch_size(const EngineOptions& target_opt) { return std::max(target_opt.n_seq, std::min(target_opt.n_batch, kDraftBatch)); }

void check_same_vocab(const tok::Vocab& target, const std::string& target_path, const tok::Vocab& draft, const std::string& draft_path) {
  STRATA_CHECK(target.n_tokens() == draft.n_tokens(), "draft model {} has {} tokens but the target {} has {}: their vocabularies differ", draft_path,
               draft.n_tokens(), target_path, target.n_tokens());
  for (int32_t i = 0; i < target.n_tokens(); ++i)
    STRATA_CHECK(target.tokens[i].text == draft.tokens[i].text,
                 "draft model {} and target {} have different vocabularies: token {} is '{}' in the draft and '{}' in the target", draft_path,
                 target_path, i, draft.tokens[i].text, target.tokens[i].text);
}

std::unique_ptr<ModelDraft> load_model_draft(const std::string& path, const std::string& target_path, const tok::Vocab& target_vocab,
                                             const EngineOptions& target_opt, const SamplerParams& sampling) {
  auto model = Model::load(path);
  const auto vocab = tok::Vocab::from_gguf(model->gguf());
  check_same_vocab(target_vocab, target_path, *vocab, path);
  STRATA_CHECK(model->config().n_vocab == target_vocab.n_tokens(), "draft model {}: output head of {} rows for a vocabulary of {} tokens", path,
               model->config().n_vocab, target_vocab.n_tokens());
  EngineOptions eo;
  eo.n_ctx = target_opt.n_ctx;
  eo.n_seq = 1;
  eo.n_threads = target_opt.n_threads;
  eo.n_batch = draft_batch_size(target_opt);
  eo.type_k = target_opt.type_k;
  eo.type_v = target_opt.type_v;
  eo.logit_rows = eo.n_seq;  // one row per slot and pass
  return std::make_unique<ModelDraft>(std::make_unique<Engine>(std::move(model), eo), sampling);
}

}  // namespace strata
