// MtpDraft: speculative drafts from the target's own NextN block (runtime/draft.h).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "runtime/draft.h"

namespace strata {

MtpDraft::MtpDraft(Engine& eng, int seq, const SamplerParams& sampling, int depth_max, int block, const HiddenRows* rows)
    : eng_(eng), rows_(rows), seq_(seq), depth_(depth_max), block_(block), sampler_(sampling, eng.config().n_vocab) {
  const Model& m = eng.model();
  STRATA_CHECK(m.n_nextn() > block,
               "--draft mtp: {} ({}) has no NextN (multi-token prediction) block{}: MTP drafting needs a file that carries one "
               "(GLM-4.5 files: glm4moe.nextn_predict_layers > 0 and the blk.N.nextn.* tensors); use --draft lookup or -md FILE instead",
               m.gguf().path(), m.config().arch, block > 0 ? fmt::format(" {}", block) : std::string());
  STRATA_CHECK(depth_max >= 1, "MTP draft depth must be at least 1 (got {})", depth_max);
  STRATA_CHECK(m.rewindable(), "MTP drafting: architecture {} cannot cut rejected drafts back", m.config().arch);
  kvp_ = block == 0 ? eng.nextn_kv(seq) : nullptr;
  if (!kvp_) {
    KvCacheOptions ko;
    ko.n_ctx = eng.options().n_ctx;
    ko.n_seq = 1;
    ko.type_k = eng.options().type_k;
    ko.type_v = eng.options().type_v;
    kv_ = m.make_nextn_kv(block, ko);
    kvp_ = kv_.get();
  }
  const size_t d = static_cast<size_t>(m.config().n_embd), nv = static_cast<size_t>(m.config().n_vocab);
  kept_.resize(d);
  kept_next_.resize(d);
  const size_t n_rows = static_cast<size_t>(eng.options().n_batch) + 1;
  tok_.reserve(n_rows);
  pos_.reserve(n_rows);
  h_.reserve(n_rows);
  used_.reserve(static_cast<size_t>(eng.options().n_ctx));
  logits_.resize(static_cast<size_t>(depth_max) * nv);
  p_.resize(nv);
  if (!rows) eng.add_pass_listener(this);
}

MtpDraft::~MtpDraft() {
  if (!rows_) eng_.remove_pass_listener(this);
}

const float* MtpDraft::logits(int d) const {
  return d >= 0 && d < n_logits_ ? logits_.data() + static_cast<size_t>(d) * p_.size() : nullptr;
}

// Rows from p0 on were computed from hidden states the trunk is recomputing, and a row whose
// next token changed is stale: keep the rows that still match `toks` (the trunk's tokens by position).
void MtpDraft::cut(std::span<const int32_t> toks, int p0) {
  done_ = std::max(0, std::min({done_, p0, static_cast<int>(toks.size()) - 1}));
  const auto m = std::mismatch(used_.begin(), used_.begin() + done_, toks.begin() + 1);
  done_ = static_cast<int>(m.first - used_.begin());
  used_.resize(static_cast<size_t>(done_));
}

// One NextN pass over the rows in tok_/pos_/h_ (in passes of at most n_batch rows); the last
// n_out rows give logits.
void MtpDraft::run(bool solo, int n_out, float* logits) {
  const int n = static_cast<int>(tok_.size()), cap = eng_.options().n_batch;
  for (int off = 0; off < n; off += cap) {
    NextnBatch b;
    b.n = std::min(cap, n - off);
    b.tokens = tok_.data() + off;
    b.pos = pos_.data() + off;
    b.h = h_.data() + off;
    b.n_out = off + b.n == n ? std::min(n_out, b.n) : 0;
    b.solo = solo;
    eng_.model().forward_nextn(block_, b, *kvp_, logits);
  }
}

void MtpDraft::on_pass(Engine& eng, std::span<const SeqInput> inputs) {
  for (const SeqInput& in : inputs) {
    if (in.seq != seq_) continue;
    const std::span<const int32_t> toks = eng.seq_tokens(seq_);
    const int p0 = static_cast<int>(toks.size()) - in.n;
    if (p0 == 0) {  // a sequence starts over: nothing stale, nothing lost
      lost_ = false;
      done_ = 0;
      used_.clear();
      kept_pos_ = -1;
    }
    if (kept_pos_ >= p0) kept_pos_ = -1;  // the trunk recomputes that row
    if (lost_) return;
    cut(toks, p0);
    // Rows whose next token is certain now: before this pass, and inside a prompt pass. A decode
    // pass's rows wait for acceptance (propose/observe read them from the engine).
    const int end = in.decode_order ? p0 : p0 + in.n - 1;
    tok_.clear();
    pos_.clear();
    h_.clear();
    for (int i = done_; i < end; ++i) {
      const float* h = i == kept_pos_ ? kept_.data() : hidden(i);
      if (!h) {
        lost_ = true;
        return;
      }
      tok_.push_back(toks[static_cast<size_t>(i) + 1]);
      pos_.push_back(i);
      h_.push_back(h);
    }
    const int last = p0 + in.n - 1;
    if (!in.decode_order) {  // the last prompt row waits for its next token: the one copy
      const float* h = hidden(last);
      STRATA_CHECK(h != nullptr, "MTP: the engine did not keep the hidden row of position {}", last);
      std::memcpy(kept_next_.data(), h, sizeof(float) * kept_next_.size());
    }
    if (!tok_.empty()) {
      run(in.decode_order || in.n == 1, 0, nullptr);
      used_.insert(used_.end(), tok_.begin(), tok_.end());
      done_ = end;
    }
    if (!in.decode_order) {
      kept_.swap(kept_next_);
      kept_pos_ = last;
    }
    return;
  }
}

// Brings the NextN rows up to the history's last trunk row (position L-2, whose next token is
// the pending one); with want_logits, that row's logits land in logits_ (it is recomputed if it
// was already there). False when the rows cannot be had.
bool MtpDraft::sync(std::span<const int32_t> history, bool want_logits) {
  const int len = static_cast<int>(history.size());
  if (lost_ || len < 2) return false;
  const std::span<const int32_t> toks = eng_.seq_tokens(seq_);
  if (static_cast<int>(toks.size()) != len - 1 || !std::equal(toks.begin(), toks.end(), history.begin())) return false;
  cut(history, len - 1);
  if (want_logits && done_ == len - 1) {
    --done_;
    used_.pop_back();
  }
  tok_.clear();
  pos_.clear();
  h_.clear();
  for (int i = done_; i < len - 1; ++i) {
    const float* h = i == kept_pos_ ? kept_.data() : hidden(i);
    if (!h) {
      lost_ = true;
      return false;
    }
    tok_.push_back(history[static_cast<size_t>(i) + 1]);
    pos_.push_back(i);
    h_.push_back(h);
  }
  if (tok_.empty()) return true;
  run(/*solo=*/true, want_logits ? 1 : 0, logits_.data());
  used_.insert(used_.end(), tok_.begin(), tok_.end());
  done_ = len - 1;
  return true;
}

int MtpDraft::reusable(std::span<const int32_t> prompt, int keep) const {
  if (lost_) return 0;
  int r = std::min({keep, done_, static_cast<int>(prompt.size()) - 1});
  const auto m = std::mismatch(used_.begin(), used_.begin() + std::max(r, 0), prompt.begin() + 1);
  return static_cast<int>(m.first - used_.begin());
}

void MtpDraft::observe(std::span<const int32_t> history) { sync(history, false); }

void MtpDraft::propose(std::span<const int32_t> history, int k_max, Draft& out) {
  out.clear();
  n_logits_ = 0;
  const int len = static_cast<int>(history.size());
  k_max = std::min({k_max, depth_, eng_.options().n_ctx - len + 1});
  if (k_max <= 0) {
    sync(history, false);
    return;
  }
  if (!sync(history, true)) return;
  hist_.assign(history.begin(), history.end());
  const size_t nv = p_.size();
  for (int d = 0; d < k_max; ++d) {
    n_logits_ = d + 1;
    sampler_.probs(logits_.data() + static_cast<size_t>(d) * nv, hist_, p_.data());
    const int32_t x = sampler_.greedy() ? Sampler::argmax(p_.data(), static_cast<int>(nv)) : sampler_.draw(p_.data());
    out.tokens.push_back(x);
    if (!sampler_.greedy()) out.q.insert(out.q.end(), p_.begin(), p_.end());
    hist_.push_back(x);
    if (d + 1 == k_max) break;
    // Depth d + 2: the drafted token and the block's own output row, at the next position. Its
    // K/V row is a draft's: the next sync overwrites it with the trunk's.
    const float* h = eng_.model().nextn_hidden_row(0);
    tok_.assign(1, x);
    pos_.assign(1, len - 1 + d);
    h_.assign(1, h);
    run(/*solo=*/true, 1, logits_.data() + static_cast<size_t>(d + 1) * nv);
  }
}

}  // namespace strata
