#pragma once
// Response and chunk objects of /v1/chat/completions and /v1/completions: choices, logprobs,
// usage.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/toolcall/toolcall.h"
#include "server/openai_api.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// What a completion request turns into, before it is queued.
struct Job {
  bool chat = false;
  bool reasoning = false;        // split <think> into reasoning_content
  bool start_in_think = false;   // the prompt opened <think>
  bool tools = false;            // parse tool calls (the request has tools and tool_choice is not "none")
  toolcall::Format format = toolcall::Format::Generic;
  toolcall::ParserOptions parser;  // tools, reasoning, thinking_open, id prefix
  CommonParams common;
  int n_per_prompt = 1;          // choices per prompt (completions with several prompts: choice k is prompt k / n_per_prompt's)
  std::string id, model;
  int64_t created = 0;
};

const char* finish_reason(Finish f);
// "tool_calls" when the reply made calls, else finish_reason(f); "length" when cut off, calls or not.
const char* finish_reason(Finish f, bool called);

// The non-streaming message of a reply parsed for tool calls: content (null when there are only
// calls), reasoning_content, tool_calls [{id, type: "function", function: {name, arguments}}].
nlohmann::json tool_message_json(const toolcall::Parsed& p);
// A streamed parser event as a chat delta (null for events that send nothing, e.g. CallEnd):
// CallStart -> tool_calls [{index, id, type, function: {name, arguments: ""}}], CallArgs ->
// tool_calls [{index, function: {arguments: fragment}}], Content / Reasoning -> content / reasoning_content.
nlohmann::json event_delta(const toolcall::Event& e);

// cached_tokens: prompt tokens whose KV rows the slot kept from its previous request (prefix reuse).
// With n > 1: each prompt counted once (the first of its `n_per_prompt` choices), completion tokens
// summed over the choices.
nlohmann::json usage_json(const std::vector<GenEvent>& finals, int n_per_prompt = 0);

// A response, or a chunk of one when streaming, with one choice: `body` under "message" / "delta"
// (chat) or "text" (completions). No body: no choice (the usage chunk).
nlohmann::json completion_json(const Job& jb, bool stream, const std::optional<nlohmann::json>& body, int index = 0,
                               const nlohmann::json& finish = nullptr, const nlohmann::json& logprobs = nullptr);

// One element of "choices".
nlohmann::json choice_json(const Job& jb, bool stream, const nlohmann::json& body, int index, const nlohmann::json& finish,
                           const nlohmann::json& logprobs = nullptr);

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json chat_logprobs_json(const std::vector<TokenLogprobs>& probs, const tok::Tokenizer& tok);
// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; `offset`
// (bytes of token text before these tokens) advances.
nlohmann::json completion_logprobs_json(const std::vector<TokenLogprobs>& probs, const tok::Tokenizer& tok, size_t& offset);
// Completions with echo: the prompt's tokens in the same shape, the first one's logprob and
// top_logprobs null (nothing precedes it); `probs` are those of prompt[1..].
nlohmann::json completion_prompt_logprobs_json(const std::vector<int32_t>& prompt, const std::vector<TokenLogprobs>& probs, const tok::Tokenizer& tok,
                                               size_t& offset);
// Appends the arrays of `more` (completions logprobs) to those of `into`.
void append_completion_logprobs(nlohmann::json& into, const nlohmann::json& more);

}  // namespace strata::server
