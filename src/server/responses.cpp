#include "server/responses.h"

namespace strata::server {

using nlohmann::json;

const char* finish_reason(Finish f) { return f == Finish::Length ? "length" : "stop"; }
const char* finish_reason(Finish f, bool called) { return called ? "tool_calls" : finish_reason(f); }

json tool_message_json(const toolcall::Parsed& p) {
  json m{{"role", "assistant"}, {"content", p.content}};
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

json usage_json(const std::vector<GenEvent>& finals) {
  int completion = 0;
  for (const auto& f : finals) completion += f.completion_tokens;
  const int prompt = finals.empty() ? 0 : finals[0].prompt_tokens;
  const int cached = finals.empty() ? 0 : finals[0].cached_tokens;
  return json{{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json completion_json(const Job& jb, bool stream, const std::optional<json>& body, int index, const json& finish, const json& logprobs) {
  json c{{"id", jb.id}, {"created", jb.created}, {"model", jb.model}, {"choices", json::array()}};
  c["object"] = !jb.chat ? "text_completion" : stream ? "chat.completion.chunk" : "chat.completion";
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
  return json{{"content", std::move(content)}};
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

}  // namespace strata::server
