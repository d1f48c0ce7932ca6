#pragma once
// Response and chunk objects of /v1/chat/completions and /v1/completions: choices, logprobs,
// usage.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_api.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// What a completion request turns into, before it is queued.
struct Job {
  bool chat = false;
  bool reasoning = false;        // split <think> into reasoning_content
  bool start_in_think = false;   // the prompt opened <think>
  CommonParams common;
  std::string id, model;
  int64_t created = 0;
};

const char* finish_reason(Finish f);

// cached_tokens: prompt tokens whose KV rows the slot kept from its previous request (prefix reuse).
// With n > 1: the prompt counted once (choice 0's), completion tokens summed over the choices.
nlohmann::json usage_json(const std::vector<GenEvent>& finals);

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

}  // namespace strata::server
