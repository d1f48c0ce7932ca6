// OpenAI /v1/chat/completions and /v1/completions over the request core.
#include <fmt/format.h>

#include "server/api_host.h"

namespace strata::server {

using nlohmann::json;

namespace {

// Chat: the message; completions: the text.
json choice_body(const Job& jb, const toolcall::Parsed& p) {
  if (!jb.chat) return p.content;
  if (jb.tools) return tool_message_json(p);
  json body{{"role", "assistant"}, {"content", p.content}, {"refusal", nullptr}};
  if (!p.reasoning.empty()) body["reasoning_content"] = p.reasoning;
  return body;
}

class OpenAiStream : public WireStream {
 public:
  explicit OpenAiStream(int n) : text_offset_(static_cast<size_t>(n), 0), finals_(static_cast<size_t>(n)), echoed_(static_cast<size_t>(n), 0) {}

  bool begin(CoreRun& run, const Emit& emit) override {
    bool ok = true;
    for (int i = 0; run.job.chat && i < run.n() && ok; ++i)
      ok = emit(sse("", completion_json(run.job, true, json{{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}, i)));
    // echo: each choice's text starts with its prompt (with logprobs: once they came, before its first event).
    for (int i = 0; !run.echo.empty() && run.job.common.n_probs < 0 && i < run.n() && ok; ++i) ok = send_echo(run, i, emit);
    return ok;
  }

  bool event(CoreRun& run, const CoreEvent& e, const Emit& emit) override {
    const Job& jb = run.job;
    if (!run.echo.empty() && !echoed_[static_cast<size_t>(e.choice)] && !send_echo(run, e.choice, emit)) return false;
    auto chunk = [&](const json& body, const json& finish) { return emit(sse("", completion_json(jb, true, body, e.choice, finish, take_logprobs(run, e.choice)))); };
    using K = CoreEvent::Kind;
    switch (e.kind) {
      case K::Text: return chunk(jb.chat ? json{{"content", e.text}} : json(e.text), nullptr);
      case K::Reasoning: return chunk(json{{"reasoning_content", e.text}}, nullptr);
      case K::CallStart:
        return chunk(json{{"tool_calls", json::array({json{{"index", e.call}, {"id", e.id}, {"type", "function"}, {"function", {{"name", e.name}, {"arguments", ""}}}}})}},
                     nullptr);
      case K::CallArgs: return chunk(json{{"tool_calls", json::array({json{{"index", e.call}, {"function", {{"arguments", e.text}}}}})}}, nullptr);
      case K::CallEnd: return true;
      case K::Finish:
        finals_[static_cast<size_t>(e.choice)] = *e.final;
        return chunk(jb.chat ? json::object() : json(""), finish_reason(e.final->finish, e.called));
    }
    return true;
  }

  bool end(CoreRun& run, const Emit& emit) override {
    bool ok = true;
    if (run.job.common.include_usage) {
      json u = completion_json(run.job, /*stream=*/true, std::nullopt);
      u["usage"] = usage_json(finals_, run.job.n_per_prompt);
      ok = emit(sse("", u));
    }
    return ok && emit("data: [DONE]\n\n");
  }

  void error(CoreRun&, const std::string& message, const Emit& emit) override { emit(sse("", error_json(message, "server_error", "", ""))); }

 private:
  // The logprobs of choice i not sent yet (null when the request did not ask for them).
  json take_logprobs(CoreRun& run, int i) {
    if (run.job.common.n_probs < 0) return nullptr;
    const auto probs = run.take_probs(i);
    if (probs.empty()) return nullptr;
    return run.job.chat ? chat_logprobs_json(probs, *run.tok) : completion_logprobs_json(probs, *run.tok, text_offset_[static_cast<size_t>(i)]);
  }
  // The echo chunk of choice i: its prompt's text (and with logprobs the prompt tokens').
  bool send_echo(CoreRun& run, int i, const Emit& emit) {
    const size_t k = static_cast<size_t>(i);
    echoed_[k] = 1;
    json lp = nullptr;
    if (run.job.common.n_probs >= 0) lp = completion_prompt_logprobs_json(run.prompt(i), run.prompt_probs(i), *run.tok, text_offset_[k]);
    else text_offset_[k] = run.echo[k / static_cast<size_t>(run.job.n_per_prompt)].size();
    return emit(sse("", completion_json(run.job, true, json(run.echo[k / static_cast<size_t>(run.job.n_per_prompt)]), i, nullptr, lp)));
  }
  std::vector<size_t> text_offset_;
  std::vector<GenEvent> finals_;
  std::vector<char> echoed_;
};

void respond(httplib::Response& res, CoreRun& run, const ClientSocket& client) {
  const auto results = collect(run, [&] { return client.gone(); });
  if (!results) {
    res.status = 499;
    res.set_content(dump(error_json("the client closed the connection", "invalid_request_error", "", "client_closed")), "application/json");
    return;
  }
  const Job& jb = run.job;
  json out = completion_json(jb, /*stream=*/false, std::nullopt);
  std::vector<GenEvent> finals;
  for (size_t i = 0; i < results->size(); ++i) {
    const ChoiceResult& r = (*results)[i];
    json lp = nullptr;
    const std::string echo = run.echo.empty() ? std::string() : run.echo[i / static_cast<size_t>(jb.n_per_prompt)];
    if (jb.common.n_probs >= 0) {
      size_t offset = 0;
      if (!run.echo.empty()) {  // the prompt's tokens first
        lp = completion_prompt_logprobs_json(run.prompt(static_cast<int>(i)), run.prompt_probs(static_cast<int>(i)), *run.tok, offset);
        append_completion_logprobs(lp, completion_logprobs_json(r.probs, *run.tok, offset));
      } else {
        lp = jb.chat ? chat_logprobs_json(r.probs, *run.tok) : completion_logprobs_json(r.probs, *run.tok, offset);
      }
    }
    const char* finish = finish_reason(r.final.finish, !r.parsed.calls.empty());
    out["choices"].push_back(choice_json(jb, false, jb.chat ? choice_body(jb, r.parsed) : json(echo + r.parsed.content), static_cast<int>(i), finish, lp));
    finals.push_back(r.final);
  }
  out["usage"] = usage_json(finals, jb.n_per_prompt);
  res.set_content(dump(out), "application/json");
}

void completion(ApiHost& host, const httplib::Request& req, httplib::Response& res, bool chat) {
  host.require_ready();
  const Json j = parse_body(req.body);
  const CommonParams common = parse_common(j, host.options().sampling, chat);
  host.check_model(common.model);
  if (!chat) {
    if (auto sfx = opt_string(j, "suffix"); sfx && !sfx->empty())
      throw bad_request("suffix (insertion) is not supported: the prompt is continued at its end only", "suffix", "unsupported_parameter");
    if (auto bo = opt_integer(j, "best_of", 1, kMaxChoices); bo && *bo > 1)
      throw bad_request("best_of is not supported (use n: every choice is returned)", "best_of", "unsupported_parameter");
  }
  auto run = start_request(host.core(), j, chat, common, chat ? "chatcmpl-" : "cmpl-");
  run->job.model = host.model_id();
  if (common.stream) stream_run(res, run, client_of(req), std::make_shared<OpenAiStream>(run->n()), "text/event-stream");
  else respond(res, *run, client_of(req));
}

}  // namespace

void add_openai_routes(ApiHost& host) {
  host.http().Post("/v1/chat/completions", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { completion(host, req, res, true); },
                                                        ErrorShape::OpenAI));
  host.http().Post("/v1/completions", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { completion(host, req, res, false); },
                                                   ErrorShape::OpenAI));
}

}  // namespace strata::server
