#include "runtime/generator.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata {

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

void token_logprobs(const float* logits, int n_vocab, int32_t token, int n_top, TokenLogprobs& out) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  out.chosen = TokenProb{token, logits[token] - log_z};
  // The n_top best by insertion into a short sorted list (n_top <= 20).
  out.top.clear();
  n_top = std::min(n_top, n_vocab);
  for (int i = 0; i < n_vocab && n_top > 0; ++i) {
    if (static_cast<int>(out.top.size()) == n_top && logits[i] <= out.top.back().logprob) continue;
    if (static_cast<int>(out.top.size()) == n_top) out.top.pop_back();
    auto at = std::upper_bound(out.top.begin(), out.top.end(), logits[i], [](float v, const TokenProb& p) { return v > p.logprob; });
    out.top.insert(at, TokenProb{i, logits[i]});
  }
  for (auto& p : out.top) p.logprob -= log_z;
}

int32_t spec_accept(Sampler& s, const float* p, const float* q, int32_t x, float* residual, bool& accepted) {
  const float qx = q ? q[x] : 1.0f;
  accepted = qx > 0 && s.uniform() * qx < p[x];  // u < p/q, without dividing
  if (accepted) return x;
  const int nv = s.n_vocab();
  bool any = false;
  for (int i = 0; i < nv; ++i) {
    const float qi = q ? q[i] : (i == x ? 1.0f : 0.0f);
    residual[i] = std::max(0.0f, p[i] - qi);
    any = any || residual[i] > 0;
  }
  return s.draw(any ? residual : p);
}

int32_t spec_choose(Sampler& s, const float* logits, const std::vector<int32_t>& history, int32_t x, const float* q, float* p, float* residual,
                    bool& accepted) {
  // A point-mass draft (q null: lookup, greedy drafts): the rule accepts x with probability p(x)
  // and else draws from p without x, which is drawing t from p and accepting iff t == x. Drawn
  // as plain sampling draws (one number from the sampler's generator per token), so the output
  // is plain sampling's for the same seed, token for token, greedy or not.
  if (s.greedy() || !q) {
    const int32_t t = s.sample(logits, history);
    accepted = t == x;
    return t;
  }
  s.probs(logits, history, p);
  return spec_accept(s, p, q, x, residual, accepted);
}

std::shared_ptr<const grammar::VocabIndex> vocab_index(int n_logits, const tok::Tokenizer& tok) {
  std::vector<std::string> bytes(static_cast<size_t>(n_logits));
  std::vector<int32_t> eog;
  for (int32_t t = 0; t < std::min(n_logits, tok.n_vocab()); ++t) {
    bytes[static_cast<size_t>(t)] = tok.token_to_piece(t, /*special=*/false);
    if (tok.is_eog(t)) eog.push_back(t);
  }
  return std::make_shared<grammar::VocabIndex>(std::move(bytes), std::move(eog));
}

// ---------------------------------------------------------------- Generator

Generator::Generator(const tok::Tokenizer* tok, int n_vocab, std::shared_ptr<const grammar::VocabIndex> vocab)
    : tok_(tok), n_vocab_(n_vocab), vocab_(std::move(vocab)) {}

Generator::~Generator() = default;

void Generator::start(const GenerateParams& p, int n_ctx) {
  params_ = &p;
  n_ctx_ = n_ctx;
  n_gen_ = 0;
  max_tokens_ = p.max_tokens < 0 ? INT_MAX : p.max_tokens;
  finish_ = Finish::None;
  stop_string_.clear();
  history_ = p.prompt;
  sampler_ = std::make_unique<Sampler>(p.sampling, n_vocab_);
  dec_ = tok_ ? std::make_unique<tok::StreamDecoder>(*tok_) : nullptr;
  stopper_ = StopMatcher(p.stop);
  think_ = ReasoningSplitter(/*enabled=*/true, p.start_in_think);
  n_think_ = 0;
  budget_spent_ = false;
  forced_.clear();
  text_.clear();
  probs_.clear();
  matcher_.reset();
  if (p.grammar) {
    STRATA_CHECK(vocab_ != nullptr, "a generation with a grammar needs the vocabulary index");
    matcher_ = std::make_unique<grammar::Matcher>(p.grammar, vocab_);
    masked_.resize(static_cast<size_t>(n_vocab_));
  }
  if (!sampler_->greedy()) p_.resize(static_cast<size_t>(n_vocab_)), r_.resize(static_cast<size_t>(n_vocab_));
  if (max_tokens_ == 0) finish_ = Finish::Length;
}

// A grammar's choice: the mask, then sampling; the first token may open a reasoning block instead
// (the grammar waits for its close). (An open of several tokens only when its first token is not
// the grammar's own, e.g. not the "<" of "<tool_call>".)
int32_t Generator::choose_constrained(const float* lg) {
  const GenerateParams& p = *params_;
  std::copy(lg, lg + n_vocab_, masked_.begin());
  matcher_->apply(masked_.data());
  const bool may_think = n_gen_ == 0 && !p.think_open.empty() && p.think_open[0] >= 0 && p.think_open[0] < n_vocab_ &&
                         (p.think_open.size() == 1 || std::isinf(masked_[static_cast<size_t>(p.think_open[0])]));
  if (may_think) masked_[static_cast<size_t>(p.think_open[0])] = lg[p.think_open[0]];
  const int32_t t = sampler_->sample(masked_.data(), history_);
  if (may_think && t == p.think_open[0]) {
    forced_.assign(p.think_open.begin() + 1, p.think_open.end());  // the rest of the open, if several tokens
    return t;
  }
  STRATA_CHECK(matcher_->accept(t), "the grammar rejected token {} that its own mask allowed", t);
  return t;
}

// The sampled token, or the next forced one. Once the reasoning block has had its budget of
// tokens, its close is forced (then sampling goes on). A forced token keeps a draft when it is
// that token; a constrained generation is not given drafts.
int32_t Generator::choose(const float* lg, int32_t draft, const float* q, bool& accepted) {
  accepted = false;
  const GenerateParams& p = *params_;
  if (p.reasoning_budget >= 0 && !budget_spent_ && think_.in_think() && n_think_ >= p.reasoning_budget) {
    budget_spent_ = true;
    forced_.assign(p.think_close.begin(), p.think_close.end());
  }
  if (forced_.empty() && matcher_ && !think_.in_think()) return choose_constrained(lg);
  if (forced_.empty() && draft >= 0) return spec_choose(*sampler_, lg, history_, draft, q, p_.data(), r_.data(), accepted);
  if (forced_.empty()) return sampler_->sample(lg, history_);
  const int32_t t = forced_.front();
  forced_.pop_front();
  accepted = t == draft;
  return t;
}

bool Generator::take(const float* lg, int32_t draft, const float* q, bool& accepted) {
  accepted = false;
  STRATA_CHECK(active(), "the generation is over (or was never started)");
  const GenerateParams& p = *params_;
  if (p.on_logits) p.on_logits(lg, n_vocab_);
  if (p.edit_logits) {
    edited_.assign(lg, lg + n_vocab_);
    p.edit_logits(edited_.data(), n_vocab_);
    lg = edited_.data();
  }
  const int32_t t = choose(lg, draft, q, accepted);
  history_.push_back(t);
  n_gen_++;
  if (!p.ignore_eos && tok_ && tok_->is_eog(t)) {
    end_with(Finish::Stop, /*release=*/true);
    return false;
  }
  if (p.n_probs >= 0) {
    probs_.emplace_back();
    token_logprobs(lg, n_vocab_, t, p.n_probs, probs_.back());
  }
  const std::string piece = dec_ ? dec_->push(t) : std::string();
  const bool was_thinking = think_.in_think();
  think_.push(piece);
  if (was_thinking && think_.in_think()) n_think_++;
  text_ += stopper_.push(piece);
  // The rows the sequence holds once the token is fed: the history but the token itself.
  const int rows = static_cast<int>(history_.size()) - 1;
  if (stopper_.matched()) {
    stop_string_ = stopper_.which();
    end_with(Finish::Stop, true);
  } else if (matcher_ && matcher_->must_end()) {
    end_with(Finish::Stop, true);
  } else if (n_gen_ >= max_tokens_ || rows >= n_ctx_) {
    end_with(Finish::Length, true);
  }
  return finish_ == Finish::None;
}

void Generator::end_with(Finish f, bool release) {
  if (!stopper_.matched() && dec_) {
    std::string tail = stopper_.push(dec_->flush());
    tail += stopper_.flush();
    if (release) text_ += tail;
  }
  finish_ = f;
}

void Generator::end(Finish f) {
  if (!active()) return;
  if (f == Finish::Error) {
    finish_ = f;
    return;
  }
  end_with(f, f != Finish::Cancelled);
}

void Generator::drain(std::string& text, std::vector<TokenLogprobs>& probs) {
  text = std::move(text_);
  text_.clear();
  probs = std::move(probs_);
  probs_.clear();
}

std::string Generator::drain_text() {
  std::string t = std::move(text_);
  text_.clear();
  probs_.clear();
  return t;
}

}  // namespace strata
