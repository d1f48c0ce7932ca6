#pragma once
// The one place where a sequence's next token is chosen and its end decided, for every caller
// (`strata run`, `strata chat`, the server's slots, speculative decoding, the tests): sampling
// (logit_bias, penalties), a grammar's mask, the reasoning budget and forced tokens, logprobs,
// a draft's acceptance, and the stop rules (end of generation, stop strings, the grammar's end,
// max tokens, the context). The callers own the passes; they hand each logits row to take() and
// drain() the text it released.
#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/sampler.h"
#include "runtime/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace strata {

enum class Finish { None, Stop, Length, Cancelled, Error };
const char* finish_name(Finish f);  // "stop", "length", "cancelled", "error"

// Log-probabilities of a sampled token (log-softmax of the model's logits, before penalties,
// temperature or any mask) and of the most likely tokens at that step.
struct TokenProb {
  int32_t token = -1;
  float logprob = 0;
};
struct TokenLogprobs {
  TokenProb chosen;
  std::vector<TokenProb> top;  // most likely first; GenerateParams::n_probs of them
};
// Fills `out` from logits[n_vocab]: `token`'s logprob and the `n_top` best (ties: lower id first).
void token_logprobs(const float* logits, int n_vocab, int32_t token, int n_top, TokenLogprobs& out);

struct GenerateParams {
  std::vector<int32_t> prompt;
  SamplerParams sampling;
  int max_tokens = -1;             // < 0: until the context is full (one rule for every caller)
  std::vector<std::string> stop;   // stop strings (not emitted)
  bool ignore_eos = false;
  int n_probs = -1;                // -1: no logprobs; else report the chosen token and this many alternatives
  // Reasoning budget: tokens generated inside a leading <think> block (`start_in_think`: the prompt
  // opened it) before `think_close` is forced into the sequence; -1: unlimited.
  int reasoning_budget = -1;
  bool start_in_think = false;
  std::vector<int32_t> think_close;
  // With a grammar: the first token of the reasoning block's open (<think>) is also allowed as the
  // first token (the rest of the open is then forced), so the model may think before the constrained
  // output; inside the block the grammar is suspended, after its close it starts from its beginning.
  // Empty: the grammar applies at once.
  std::vector<int32_t> think_open;
  // The output follows this grammar (the mask is applied to the logits before sampling) from the
  // first token outside a <think> block; forced tokens are not checked. Null: free output.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Tests: called with each logits row this generation samples from.
  std::function<void(const float* logits, int n_vocab)> on_logits;
  // Tests: may change each logits row before the grammar mask and sampling (e.g. favour a token).
  std::function<void(float* logits, int n_vocab)> edit_logits;
};

// The speculative-sampling choice at one draft position: x was drafted with draft distribution q
// (nullptr: a point mass at x), p is the target's [n_vocab]. Returns x when accepted, else a token
// drawn from normalize(max(0, p - q)) (from p if that is all zero); `accepted` tells which.
// residual: [n_vocab] scratch.
int32_t spec_accept(Sampler& s, const float* p, const float* q, int32_t x, float* residual, bool& accepted);

// One verified row: the token the target chooses from `logits` (after `history`) where x was
// drafted (q: the draft's distribution there, nullptr: a point mass). Greedy or a point mass: the
// token plain decoding / sampling picks (Sampler::sample, the same draw from its generator), and x
// is accepted iff it is that token (for a point mass, spec_accept's rule); else spec_accept on
// the sampler's distribution. p, residual: [n_vocab] scratch. Generator::take's acceptance rule.
int32_t spec_choose(Sampler& s, const float* logits, const std::vector<int32_t>& history, int32_t x, const float* q, float* p, float* residual,
                    bool& accepted);

// The grammar index of a model's vocabulary: each of its n_logits output rows' bytes (rows past
// the tokenizer's vocabulary are empty: never allowed) and its end-of-generation tokens. Built
// once per model, shared by every generation with a grammar.
std::shared_ptr<const grammar::VocabIndex> vocab_index(int n_logits, const tok::Tokenizer& tok);

class Generator {
 public:
  // vocab: token bytes for grammar masks (needed only by generations with a grammar). tok null:
  // token ids only (no text, no end-of-generation tokens: the tests' and benchmarks' decoding).
  Generator(const tok::Tokenizer* tok, int n_vocab, std::shared_ptr<const grammar::VocabIndex> vocab = nullptr);
  ~Generator();

  // A new generation after p.prompt in a context of n_ctx positions (the sampler starts from the
  // seed again); `p` must outlive it. Throws grammar::GrammarError for a grammar the vocabulary cannot serve. With
  // max_tokens 0 it is over at once (finish() Length).
  void start(const GenerateParams& p, int n_ctx);
  // One chosen token from the logits row of the next position; `draft` (>= 0): the token drafted
  // there (q: the draft's distribution, nullptr: a point mass) and `accepted` whether the chosen
  // token keeps it. Releases its text (drain) and decides whether generation goes on: returns false
  // when it ended with this token (finish()).
  bool take(const float* logits, int32_t draft, const float* q, bool& accepted);
  bool take(const float* logits) {
    bool accepted = false;
    return take(logits, -1, nullptr, accepted);
  }
  // Ends it early (Cancelled: the held text is dropped; Length: interrupted, the held text is released;
  // Error: nothing more).
  void end(Finish f);
  // Moves out the text released since the last call (whole UTF-8 characters, stop strings held back
  // and never released) and the logprobs of the tokens chosen since (n_probs >= 0).
  void drain(std::string& text, std::vector<TokenLogprobs>& probs);
  std::string drain_text();

  bool active() const { return params_ != nullptr && finish_ == Finish::None; }
  Finish finish() const { return finish_; }
  const std::string& stop_string() const { return stop_string_; }  // Finish::Stop at a stop string
  const GenerateParams& params() const { return *params_; }
  // The prompt and every chosen token (the last one not yet evaluated).
  const std::vector<int32_t>& history() const { return history_; }
  int32_t last() const { return history_.empty() ? -1 : history_.back(); }
  int n_generated() const { return n_gen_; }
  // Tokens it may still choose by max_tokens (the context bounds it too).
  int remaining() const { return max_tokens_ - n_gen_; }
  bool greedy() const { return sampler_->greedy(); }
  bool constrained() const { return matcher_ != nullptr; }

 private:
  int32_t choose(const float* lg, int32_t draft, const float* q, bool& accepted);
  int32_t choose_constrained(const float* lg);
  void end_with(Finish f, bool release);

  const tok::Tokenizer* tok_;
  const int n_vocab_;
  std::shared_ptr<const grammar::VocabIndex> vocab_;
  const GenerateParams* params_ = nullptr;
  int n_ctx_ = 0, n_gen_ = 0, max_tokens_ = 0;
  Finish finish_ = Finish::None;
  std::string stop_string_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<tok::StreamDecoder> dec_;
  StopMatcher stopper_;
  ReasoningSplitter think_;       // where the generated text is (inside <think> or not), for the budget
  int n_think_ = 0;               // tokens generated inside the reasoning block
  bool budget_spent_ = false;
  std::deque<int32_t> forced_;    // tokens fed instead of sampled (the reasoning block's open/close)
  std::unique_ptr<grammar::Matcher> matcher_;
  std::vector<int32_t> history_;
  std::vector<float> masked_, edited_, p_, r_;  // [n_vocab] scratch
  std::string text_;
  std::vector<TokenLogprobs> probs_;
};

}  // namespace strata
