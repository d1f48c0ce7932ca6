#pragma once
// The request core every wire format shares. An adapter turns its request into the normalized
// shape (an OpenAI chat body: messages, tools, tool_choice, response_format, sampling...; or a
// completions prompt), and the core renders the template, builds the tool grammar, queues one
// GenRequest per choice and turns the generated text into semantic events per choice:
// reasoning / text deltas, tool call start / argument fragments / end, and the finish.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_format.h"
#include "server/openai_api.h"
#include "server/responses.h"
#include "server/scheduler.h"
#include "runtime/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// What the server holds for the core (valid once the model is attached).
struct CoreContext {
  const tok::Tokenizer* tok = nullptr;
  Scheduler* sched = nullptr;
  const ChatFormat* chat_format = nullptr;
  toolcall::Format tool_format = toolcall::Format::Generic;
  const std::vector<int32_t>* think_close = nullptr;  // forced when a reasoning budget is spent
  const std::vector<int32_t>* think_open = nullptr;   // <think>: may open the output before a grammar
  bool reasoning = true;                              // --reasoning-format deepseek
  int reasoning_budget = -1;                          // the server's default
};

struct CoreEvent {
  enum class Kind { Reasoning, Text, CallStart, CallArgs, CallEnd, Finish } kind;
  int choice = 0;
  int call = 0;            // tool call index (CallStart / CallArgs / CallEnd)
  std::string id, name;    // CallStart
  std::string text;        // Reasoning / Text / CallArgs
  const GenEvent* final = nullptr;  // Finish: finish reason, token counts, error
  bool called = false;     // Finish: the choice made a tool call
  bool cut = false;        // CallEnd: the output ended inside this call (max tokens): its arguments may be incomplete
};

// One request in flight: its choices, their parsers, the logprobs not yet taken.
class CoreRun {
 public:
  Job job;
  int prompt_tokens = 0;            // of every prompt
  std::vector<std::string> echo;   // completions with `echo`: per prompt, its text (comes first in its choices' text)
  const tok::Tokenizer* tok = nullptr;

  int n() const { return static_cast<int>(reqs_.size()); }
  bool finished() const { return n_done_ == n(); }
  // Waits up to `ms` for generated text and passes the events it makes, in order, to `on`;
  // false as soon as `on` returns false.
  bool pump(int ms, const std::function<bool(const CoreEvent&)>& on);
  // The logprobs of choice i generated so far and not taken yet.
  std::vector<TokenLogprobs> take_probs(int i);
  // Echo with logprobs: choice i's prompt tokens and their logprobs from the second on (arrived
  // before any other event of that choice).
  const std::vector<int32_t>& prompt(int i) const { return reqs_[static_cast<size_t>(i)]->params.prompt; }
  const std::vector<TokenLogprobs>& prompt_probs(int i) const { return prompt_probs_[static_cast<size_t>(i)]; }
  void cancel();
  const std::vector<GenEvent>& finals() const { return finals_; }

 private:
  friend std::shared_ptr<CoreRun> start_request(const CoreContext&, const Json&, bool, const CommonParams&, const char*, const char*);
  // `last`: flush; `cut`: the output was cut off (max tokens, context), calls come out as far as they parse.
  bool feed(int i, const std::string& text, bool last, bool cut, const std::function<bool(const CoreEvent&)>& on);
  std::vector<std::shared_ptr<GenRequest>> reqs_;
  std::shared_ptr<EventSignal> signal_;
  std::vector<ReasoningSplitter> rs_;
  std::vector<std::unique_ptr<toolcall::StreamParser>> parsers_;
  std::vector<char> called_;
  std::vector<std::vector<TokenLogprobs>> probs_;
  std::vector<std::vector<TokenLogprobs>> prompt_probs_;
  std::vector<GenEvent> finals_;
  std::vector<toolcall::Event> scratch_;
  int n_done_ = 0;
};

// Prepares and queues a request: `body` is an OpenAI chat body (chat) or a completions body
// (prompt); `common` its parsed common fields; ids are `id_prefix` + random, tool call ids
// `call_prefix` + random. Throws ApiError (400 bad fields, 503 queue full).
std::shared_ptr<CoreRun> start_request(const CoreContext& ctx, const Json& body, bool chat, const CommonParams& common, const char* id_prefix,
                                       const char* call_prefix = "call_");

// The prompt tokens of an OpenAI chat body as start_request would render them (tools included).
int count_prompt_tokens(const CoreContext& ctx, const Json& chat_body);

// A whole reply per choice (non-streaming).
struct ChoiceResult {
  toolcall::Parsed parsed;  // content, reasoning, calls
  std::vector<TokenLogprobs> probs;
  GenEvent final;
};
// Waits for every choice; nullopt (and the request cancelled) when `gone()` turns true first.
// A choice that failed is a 500 ApiError.
std::optional<std::vector<ChoiceResult>> collect(CoreRun& run, const std::function<bool()>& gone);

}  // namespace strata::server
