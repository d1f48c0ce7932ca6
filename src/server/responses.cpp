#include "server/responses.h"

#include <algorithm>

namespace strata::server {

using nlohmann::json;

const char* finish_reason(Finish f) { return f == Finish::Length ? "length" : "stop"; }
const char* finish_reason(Finish f, bool called) { return called && f != Finish::Length ? "tool_calls" : finish_reason(f); }

json tool_message_json(const toolcall::Parsed& p) {
  json m{{"role", "assistant"}, {"content", p.content}, {"refusal", nullptr}};
  if (!p.reasoning.empty()) m["reasoning_content"] = p.reasoning;
  if (p.calls.empty()) return m;
  if (p.content.empty()) m["content"] = nullptr;
  json calls = json::array();
  for (const auto& c : p.calls) calls.push_back(json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  m["tool_calls"] = std::move(calls);
  return m;
}

json event_delta(const toolcall::Event& e) {
  using K = toolcall::Event::Kind;
  switch (e.kind) {
    case K::Content: return e.text.empty() ? json(nullptr) : json{{"content", e.text}};
    case K::Reasoning: return e.text.empty() ? json(nullptr) : json{{"reasoning_content", e.text}};
    case K::CallStart:
      return json{{"tool_calls", json::array({json{{"index", e.index}, {"id", e.id}, {"type", "function"}, {"function", {{"name", e.name}, {"arguments", ""}}}}})}};
    case K::CallArgs:
      return e.text.empty() ? json(nullptr) : json{{"tool_calls", json::array({json{{"index", e.index}, {"function", {{"arguments", e.text}}}}})}};
    case K::CallEnd: break;
  }
  return nullptr;
}

json usage_json(const std::vector<GenEvent>& finals, int n_per_prompt) {
  const size_t step = n_per_prompt > 0 ? static_cast<size_t>(n_per_prompt) : std::max<size_t>(1, finals.size());
  int completion = 0, prompt = 0, cached = 0;
  for (size_t i = 0; i < finals.size(); ++i) {
    completion += finals[i].completion_tokens;
    if (i % step != 0) continue;
    prompt += finals[i].prompt_tokens;
    cached += finals[i].cached_tokens;
  }
  return json{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json completion_json(const Job& jb, bool stream, const std::optional<json>& body, int index, const json& finish, const json& logprobs) {
  json c{{"id", jb.id}, {"created", jb.created}, {"model", jb.model}, {"choices", json::array()}};
  c["object"] = !jb.chat ? "text_completion" : stream ? "chat.completion.chunk" : "chat.completion";
  if (stream && jb.common.include_usage) c["usage"] = nullptr;  // every chunk before the last, which carries it
  if (body) c["choices"].push_back(choice_json(jb, stream, *body, index, finish, logprobs));
  return c;
}

json choice_json(const Job& jb, bool stream, const json& body, int index, const json& finish, const json& logprobs) {
  const char* key = !jb.chat ? "text" : stream ? "delta" : "message";
  return json{{"index", index}, {key, body}, {"logprobs", logprobs}, {"finish_reason", finish}};
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json prob_entry(const TokenProb& p, const tok::Tokenizer& tok) {
  const std::string piece = tok.token_to_piece(p.token, /*special=*/false);
  return json{{"token", piece}, {"logprob", p.logprob}, {"bytes", bytes_of(piece)}};
}

}  // namespace

json chat_logprobs_json(const std::vector<TokenLogprobs>& probs, const tok::Tokenizer& tok) {
  json content = json::array();
  for (const auto& tp : probs) {
    json e = prob_entry(tp.chosen, tok);
    e["top_logprobs"] = json::array();
    for (const auto& alt : tp.top) e["top_logprobs"].push_back(prob_entry(alt, tok));
    content.push_back(std::move(e));
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs_json(const std::vector<TokenLogprobs>& probs, const tok::Tokenizer& tok, size_t& offset) {
  json out{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  for (const auto& tp : probs) {
    const std::string piece = tok.token_to_piece(tp.chosen.token, /*special=*/false);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(tp.chosen.logprob);
    json top = json::object();
    for (const auto& alt : tp.top) top[tok.token_to_piece(alt.token, false)] = alt.logprob;
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(offset);
    offset += piece.size();
  }
  return out;
}

json completion_prompt_logprobs_json(const std::vector<int32_t>& prompt, const std::vector<TokenLogprobs>& probs, const tok::Tokenizer& tok,
                                     size_t& offset) {
  json out{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
  if (prompt.empty()) return out;
  const std::string first = tok.token_to_piece(prompt[0], /*special=*/false);
  out["tokens"].push_back(first);
  out["token_logprobs"].push_back(nullptr);
  out["top_logprobs"].push_back(nullptr);
  out["text_offset"].push_back(offset);
  offset += first.size();
  append_completion_logprobs(out, completion_logprobs_json(probs, tok, offset));
  return out;
}

void append_completion_logprobs(json& into, const json& more) {
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const auto& v : more[k]) into[k].push_back(v);
}

}  // namespace strata::server
