#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/error.h"
#include "server/chat_format.h"
#include "server/chat_request.h"
#include "server/responses.h"
#include "server/client_socket.h"
#include "server/constraints.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/text_stream.h"

namespace strata::server {

using nlohmann::json;

namespace {

std::string endpoint_label(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})
    if (path == p) return p;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

bool ends_with(std::string_view s, std::string_view t) { return s.size() >= t.size() && s.substr(s.size() - t.size()) == t; }

// Puts `text` at the start of the system message (a new one when the conversation has none).
void add_system_text(std::vector<ChatMsg>& messages, const std::string& text) {
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    messages[0].content = text + "\n\n" + messages[0].content.value_or("");
    return;
  }
  messages.insert(messages.begin(), ChatMsg("system", text));
}

// The choices of one request (one GenRequest each) read together.
struct Choices {
  std::vector<std::shared_ptr<GenRequest>> reqs;
  std::shared_ptr<EventSignal> signal;  // n > 1: wakes the reader on any choice's event

  // Events that arrived, per choice index; waits up to `ms` when there are none.
  std::vector<std::pair<int, std::vector<GenEvent>>> wait(int ms) {
    std::vector<std::pair<int, std::vector<GenEvent>>> out;
    if (reqs.size() == 1) {
      auto ev = reqs[0]->wait(ms);
      if (!ev.empty()) out.emplace_back(0, std::move(ev));
      return out;
    }
    for (int pass = 0; pass < 2 && out.empty(); ++pass) {
      const uint64_t seen = signal->count();
      for (size_t i = 0; i < reqs.size(); ++i) {
        auto ev = reqs[i]->wait(0);
        if (!ev.empty()) out.emplace_back(static_cast<int>(i), std::move(ev));
      }
      if (out.empty() && pass == 0) signal->wait(seen, ms);
    }
    return out;
  }
  void cancel() {
    for (auto& r : reqs)
      if (!r->done()) r->cancel();
  }
};

// A streamed response in progress (owned by the content provider).
struct StreamState {
  Job job;
  Choices choices;
  const tok::Tokenizer* tok = nullptr;
  std::vector<ReasoningSplitter> rs;              // per choice (no tools)
  std::vector<std::unique_ptr<toolcall::StreamParser>> parsers;  // per choice (tools)
  std::vector<char> called;                       // per choice: a tool call started
  std::vector<std::vector<TokenLogprobs>> probs;  // per choice: not yet sent
  std::vector<size_t> text_offset;                // per choice (completions logprobs)
  std::vector<GenEvent> finals;                   // per choice
  int n_done = 0;
  bool started = false;
};

}  // namespace

struct HttpServer::Impl {
  ServerOptions opt;
  httplib::Server http;
  std::thread thread;
  int port = -1;
  std::atomic<bool> ready{false};
  Engine* eng = nullptr;
  const tok::Tokenizer* tok = nullptr;
  std::unique_ptr<Scheduler> sched;
  std::string model_id;
  ChatFormat chat_format;
  std::vector<int32_t> think_close;  // forced when a reasoning budget is spent
  std::vector<int32_t> think_open;   // <think>: may open the output before a grammar
  toolcall::Format tool_format = toolcall::Format::Generic;  // from the template
  std::vector<std::string> names;  // accepted "model" values
  int64_t created = unix_time();
  RequestCounters counters;

  explicit Impl(const ServerOptions& o) : opt(o) { routes(); }

  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(dump(error_json(e)), "application/json");
  }

  void check_auth(const httplib::Request& req) {
    if (opt.api_key.empty()) return;
    const std::string h = req.get_header_value("Authorization");
    if (h != "Bearer " + opt.api_key)
      throw ApiError(401, h.empty() ? "missing API key (send 'Authorization: Bearer KEY')" : "incorrect API key provided", "invalid_request_error", "",
                     "invalid_api_key");
  }

  void require_ready() {
    if (!ready.load(std::memory_order_acquire)) throw ApiError(503, "the model is loading", "server_error", "", "model_loading");
  }

  void check_model(const std::string& m) {
    if (m.empty()) return;
    for (const auto& n : names)
      if (m == n) return;
    throw ApiError(404, fmt::format("The model '{}' does not exist (this server serves '{}')", m, model_id), "invalid_request_error", "model",
                   "model_not_found");
  }

  template <typename F>
  httplib::Server::Handler guarded(F f, bool auth = true) {
    return [this, f, auth](const httplib::Request& req, httplib::Response& res) {
      try {
        if (auth) check_auth(req);
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "server_error"));
      } catch (...) {
        send_error(res, ApiError(500, "internal error", "server_error"));
      }
    };
  }

  void routes() {
    http.Get("/health", guarded(
                            [this](const httplib::Request&, httplib::Response& res) {
                              const bool ok = ready.load(std::memory_order_acquire);
                              res.status = ok ? 200 : 503;
                              res.set_content(ok ? R"({"status":"ok"})" : R"({"status":"loading"})", "application/json");
                            },
                            /*auth=*/false));
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      const bool ok = ready.load(std::memory_order_acquire);
      SchedulerStats s;
      if (ok) s = sched->stats();
      res.set_content(render_metrics(ok ? &s : nullptr, counters, ok), "text/plain; version=0.0.4; charset=utf-8");
    }));
    http.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
      require_ready();
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    }));
    http.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
      require_ready();
      check_model(req.matches[1]);
      res.set_content(dump(model_json()), "application/json");
    }));
    http.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); }));
    http.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); }));

    // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad request line...)
    // still answer with an error object.
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string msg, code;
      if (res.status == 404) msg = fmt::format("no such endpoint: {} {}", req.method, req.path), code = "not_found";
      else if (res.status == 413) msg = fmt::format("the request body exceeds the limit of {} bytes", opt.max_body), code = "request_too_large";
      else if (res.status == 405) msg = "method not allowed", code = "method_not_allowed";
      else msg = fmt::format("HTTP {}", res.status);
      res.set_content(dump(error_json(msg, res.status >= 500 ? "server_error" : "invalid_request_error", "", code)), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, ApiError(500, "internal error", "server_error"));
    });
    // Counted before the response is written (the logger runs after it, so a client could read
    // /metrics before its own request was counted).
    http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) { counters.add(endpoint_label(req.path), res.status); });
    http.set_payload_max_length(opt.max_body);
    const int threads = opt.http_threads > 0 ? opt.http_threads : opt.max_queue + 64;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  }

  json model_json() const {
    json m{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "strata"}};
    m["meta"] = {{"n_ctx", eng->options().n_ctx},          {"n_ctx_per_slot", eng->options().n_ctx}, {"n_ctx_train", eng->config().n_ctx_train},
                 {"slots", eng->n_seq()},                  {"n_vocab", eng->config().n_vocab},      {"architecture", eng->config().arch},
                 {"aliases", names},                       {"chat_format", chat_format_name(chat_format)}};
    return m;
  }

  // Chat messages -> the prompt tokens; reasoning settings.
  void prepare_chat(const Json& j, Job& jb, GenParams& gp) {
    ChatRequest cr = parse_chat_request(j);
    ChatInputs in;
    // tool_choice "none": the template is not told about the tools (history still renders) and
    // the reply is not parsed for calls.
    jb.tools = cr.tools.is_array() && cr.tool_choice.mode != ToolChoice::Mode::None;
    if (jb.tools) {
      in.tools = cr.tools;
      jb.format = tool_format;
      jb.parser.tools = tool_specs(cr.tools);
      jb.parser.id_prefix = random_id("call_") + "_";
      // A template without a tool syntax: the tools are described in the system message and the
      // reply is the generic JSON object.
      if (jb.format == toolcall::Format::Generic) add_system_text(cr.messages, toolcall::generic_tools_prompt(jb.parser.tools, cr.parallel_tool_calls));
    }
    ToolConstraint tc;
    tc.format = jb.format;
    tc.tools = jb.tools ? &jb.parser.tools : nullptr;
    tc.choice = cr.tool_choice;
    tc.parallel = cr.parallel_tool_calls;
    gp.grammar = request_grammar(j, &tc);
    in.kwargs = cr.kwargs;
    ChatPrompt cp;
    try {
      cp = format_chat(cr.messages, chat_format, in);
    } catch (const std::exception& e) {
      throw bad_request(fmt::format("the chat template cannot render these messages: {}", e.what()), "messages", "chat_template_error");
    }
    jb.reasoning = opt.reasoning_format == "deepseek";
    jb.start_in_think = ends_with(cp.text, "<think>") || ends_with(cp.text, "<think>\n");
    jb.parser.reasoning = jb.reasoning;
    jb.parser.thinking_open = jb.start_in_think;
    gp.prompt = tok->encode(cp.text, cp.add_special, /*parse_special=*/true);
    gp.reasoning_budget = cr.reasoning_budget.value_or(opt.reasoning_budget);
    gp.start_in_think = jb.start_in_think;
    gp.think_close = think_close;
    // A template with a reasoning block the prompt did not open: the model may open it before a
    // forced tool call or a response_format.
    if (jb.reasoning && !jb.start_in_think && gp.reasoning_budget != 0 && chat_format.model_template.find("<think>") != std::string::npos)
      gp.think_open = think_open;
  }

  void prepare_prompt(const Json& j, GenParams& gp) {
    gp.grammar = request_grammar(j, nullptr);
    PromptInput in = parse_prompt(j);
    if (in.is_tokens) {
      for (int32_t t : in.tokens)
        if (t >= tok->n_vocab()) throw bad_request(fmt::format("token id {} is outside the vocabulary (0..{})", t, tok->n_vocab() - 1), "prompt", "invalid_value");
      gp.prompt = std::move(in.tokens);
    } else {
      gp.prompt = tok->encode(in.text, /*add_special=*/true, /*parse_special=*/true);
    }
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    require_ready();
    const Json j = parse_body(req.body);
    Job jb;
    jb.chat = chat;
    jb.common = parse_common(j, opt.sampling, chat);
    check_model(jb.common.model);
    jb.id = random_id(chat ? "chatcmpl-" : "cmpl-");
    jb.model = model_id;
    jb.created = unix_time();

    GenParams gp;
    const char* param = chat ? "messages" : "prompt";
    if (chat) prepare_chat(j, jb, gp);
    else prepare_prompt(j, gp);
    const int n_ctx = sched->n_ctx();
    if (gp.prompt.empty()) throw bad_request("the prompt is empty (no tokens)", param, "empty_prompt");
    if (static_cast<int>(gp.prompt.size()) >= n_ctx)
      throw bad_request(fmt::format("This model's maximum context length is {} tokens per request, but the prompt has {} tokens (at least one "
                                    "token must remain for the completion). Shorten the prompt or restart the server with a larger -c.",
                                    n_ctx, gp.prompt.size()),
                        param, "context_length_exceeded");
    gp.sampling = jb.common.sampling;
    gp.max_tokens = jb.common.max_tokens;
    gp.stop = jb.common.stop;
    gp.ignore_eos = jb.common.ignore_eos;
    gp.n_probs = jb.common.n_probs;
    Choices ch;
    if (jb.common.n > 1) ch.signal = std::make_shared<EventSignal>();
    for (int i = 0; i < jb.common.n; ++i) {
      GenParams g = gp;
      g.sampling.seed = choice_seed(gp.sampling.seed, i);
      g.signal = ch.signal;
      ch.reqs.push_back(std::make_shared<GenRequest>(std::move(g)));
    }
    if (!sched->submit(ch.reqs))
      throw ApiError(503, "the server is busy: every slot is taken and the wait queue is full; retry later", "server_error", "", "queue_full");
    const ClientSocket client(req.remote_addr, req.remote_port, req.local_port);
    if (jb.common.stream) stream(res, jb, std::move(ch), client);
    else respond(res, jb, ch, client);
  }

  void respond(httplib::Response& res, const Job& jb, Choices& ch, const ClientSocket& client) {
    const size_t n = ch.reqs.size();
    std::vector<std::string> text(n);
    std::vector<std::vector<TokenLogprobs>> probs(n);
    std::vector<GenEvent> fin(n);
    for (size_t done = 0; done < n;) {
      for (auto& [i, evs] : ch.wait(100)) {
        for (auto& ev : evs) {
          text[i] += ev.text;
          for (auto& p : ev.probs) probs[i].push_back(std::move(p));
          if (ev.final) fin[i] = ev, ++done;
        }
      }
      if (done < n && client.gone()) {
        ch.cancel();  // the slots free at the next engine step; nobody reads this answer
        res.status = 499;
        res.set_content(dump(error_json("the client closed the connection", "invalid_request_error", "", "client_closed")), "application/json");
        return;
      }
    }
    for (const auto& f : fin)
      if (f.finish == Finish::Error) throw ApiError(500, f.error, "server_error");
    json out = completion_json(jb, /*stream=*/false, std::nullopt);
    for (size_t i = 0; i < n; ++i) {
      json body = text[i];
      json lp = nullptr;
      const char* finish = finish_reason(fin[i].finish);
      if (jb.chat && jb.tools) {
        const toolcall::Parsed parsed = toolcall::parse_all(jb.format, jb.parser, text[i]);
        body = tool_message_json(parsed);
        finish = finish_reason(fin[i].finish, !parsed.calls.empty());
        if (jb.common.n_probs >= 0) lp = chat_logprobs_json(probs[i], *tok);
      } else if (jb.chat) {
        ReasoningSplitter rs(jb.reasoning, jb.start_in_think);
        auto a = rs.push(text[i]), b = rs.flush();
        body = json{{"role", "assistant"}, {"content", a.content + b.content}};
        if (!(a.reasoning + b.reasoning).empty()) body["reasoning_content"] = a.reasoning + b.reasoning;
        if (jb.common.n_probs >= 0) lp = chat_logprobs_json(probs[i], *tok);
      } else if (jb.common.n_probs >= 0) {
        size_t offset = 0;
        lp = completion_logprobs_json(probs[i], *tok, offset);
      }
      out["choices"].push_back(choice_json(jb, false, body, static_cast<int>(i), finish, lp));
    }
    out["usage"] = usage_json(fin);
    res.set_content(dump(out), "application/json");
  }

  // The logprobs of choice i not sent yet (null when the request did not ask for them).
  static json take_logprobs(StreamState& st, int i) {
    if (st.job.common.n_probs < 0 || st.probs[i].empty()) return nullptr;
    json lp = st.job.chat ? chat_logprobs_json(st.probs[i], *st.tok) : completion_logprobs_json(st.probs[i], *st.tok, st.text_offset[i]);
    st.probs[i].clear();
    return lp;
  }

  // One provider call: forwards what the choices produced; false when the client is gone.
  static bool stream_step(StreamState& st, httplib::DataSink& sink, const ClientSocket& client) {
    const Job& jb = st.job;
    auto send = [&](const json& j) {
      const std::string s = "data: " + dump(j) + "\n\n";
      return sink.write(s.data(), s.size());
    };
    auto chunk = [&](int i, const json& body, const json& finish) { return send(completion_json(jb, true, body, i, finish, take_logprobs(st, i))); };
    auto send_text = [&](int i, const ReasoningSplitter::Out& o) {
      if (!jb.chat) return o.content.empty() || chunk(i, o.content, nullptr);
      bool ok = true;
      if (!o.reasoning.empty()) ok = ok && chunk(i, json{{"reasoning_content", o.reasoning}}, nullptr);
      if (!o.content.empty()) ok = ok && chunk(i, json{{"content", o.content}}, nullptr);
      return ok;
    };
    std::vector<toolcall::Event> events;
    // Text of choice i through its tool-call parser (or the <think> splitter); `last`: flush.
    auto send_piece = [&](int i, const std::string& text, bool last) {
      if (!jb.tools) return send_text(i, last ? st.rs[i].flush() : st.rs[i].push(text));
      events.clear();
      if (last) st.parsers[i]->finish(events);
      else st.parsers[i]->feed(text, events);
      bool ok = true;
      for (const auto& e : events) {
        if (e.kind == toolcall::Event::Kind::CallStart) st.called[i] = 1;
        const json d = event_delta(e);
        if (!d.is_null()) ok = ok && chunk(i, d, nullptr);
      }
      return ok;
    };
    bool ok = true;
    if (!st.started) {
      st.started = true;
      for (int i = 0; jb.chat && i < static_cast<int>(st.choices.reqs.size()) && ok; ++i)
        ok = send(completion_json(jb, true, json{{"role", "assistant"}, {"content", ""}}, i));
    }
    for (auto& [i, evs] : ok ? st.choices.wait(50) : std::vector<std::pair<int, std::vector<GenEvent>>>{}) {
      for (auto& ev : evs) {
        for (auto& p : ev.probs) st.probs[i].push_back(std::move(p));
        if (!ev.text.empty()) ok = ok && send_piece(i, ev.text, false);
        if (!ev.final || !ok) continue;
        if (ev.finish == Finish::Error) {
          send(error_json(ev.error, "server_error", "", ""));
          st.choices.cancel();
          return false;
        }
        ok = send_piece(i, "", true);
        ok = ok && chunk(i, jb.chat ? json::object() : json(""), finish_reason(ev.finish, st.called[i] != 0));
        st.finals[i] = ev;
        st.n_done++;
      }
    }
    if (ok && st.n_done == static_cast<int>(st.choices.reqs.size())) {
      if (jb.common.include_usage) {
        json u = completion_json(jb, /*stream=*/true, std::nullopt);
        u["usage"] = usage_json(st.finals);
        ok = send(u);
      }
      static const std::string kDone = "data: [DONE]\n\n";
      if (ok) sink.write(kDone.data(), kDone.size());
      sink.done();
      return true;
    }
    // A client that hangs up before the first token (a long prompt) is noticed on its socket.
    if (!ok || !sink.is_writable() || client.gone()) {
      st.choices.cancel();  // the client is gone: free the slots
      return false;
    }
    return true;
  }

  void stream(httplib::Response& res, const Job& jb, Choices ch, const ClientSocket& client) {
    auto st = std::make_shared<StreamState>();
    const size_t n = ch.reqs.size();
    st->job = jb;
    st->choices = std::move(ch);
    st->tok = tok;
    st->rs.assign(n, ReasoningSplitter(jb.chat && jb.reasoning, jb.start_in_think));
    for (size_t i = 0; i < n && jb.tools; ++i) st->parsers.push_back(toolcall::StreamParser::make(jb.format, jb.parser));
    st->called.assign(n, 0);
    st->probs.resize(n);
    st->text_offset.assign(n, 0);
    st->finals.resize(n);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream", [st, client](size_t, httplib::DataSink& sink) -> bool { return stream_step(*st, sink, client); },
        [st](bool) { st->choices.cancel(); });
  }
};

HttpServer::HttpServer(const ServerOptions& opt) : impl_(std::make_unique<Impl>(opt)) {
  STRATA_CHECK(opt.reasoning_format == "deepseek" || opt.reasoning_format == "none", "--reasoning-format must be deepseek or none (got '{}')",
               opt.reasoning_format);
  STRATA_CHECK(opt.chat_template_kwargs.is_null() || opt.chat_template_kwargs.is_object(), "--chat-template-kwargs must be a JSON object (got {})",
               opt.chat_template_kwargs.dump());
  STRATA_CHECK(opt.reasoning_budget >= -1, "--reasoning-budget must be -1 (unlimited) or >= 0 (got {})", opt.reasoning_budget);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& m = *impl_;
  if (m.opt.port == 0) m.port = m.http.bind_to_any_port(m.opt.host);
  else m.port = m.http.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1;
  STRATA_CHECK(m.port > 0, "cannot listen on {}:{}", m.opt.host, m.opt.port);
  return m.port;
}

void HttpServer::start() {
  std::signal(SIGPIPE, SIG_IGN);
  if (impl_->port < 0) bind();
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
}

void HttpServer::attach(Engine& eng, const tok::Tokenizer& tok, const std::string& model_path) {
  Impl& m = *impl_;
  m.eng = &eng;
  m.tok = &tok;
  m.chat_format = chat_format_from_gguf(eng.model().gguf(), m.opt.chat_template);
  m.chat_format.options.extra_context = m.opt.chat_template_kwargs;
  m.tool_format = toolcall::detect_format(m.chat_format.model_template);
  m.think_close = tok.encode("</think>\n\n", /*add_special=*/false, /*parse_special=*/true);
  m.think_open = tok.encode("<think>", /*add_special=*/false, /*parse_special=*/true);
  const std::string general = eng.config().name;
  const std::filesystem::path p(model_path);
  m.model_id = !m.opt.alias.empty() ? m.opt.alias : !general.empty() ? general : p.stem().string();
  for (const std::string& n : {m.model_id, m.opt.alias, general, p.filename().string(), p.stem().string(), std::string("strata"), std::string("default")})
    if (!n.empty() && std::find(m.names.begin(), m.names.end(), n) == m.names.end()) m.names.push_back(n);
  SchedulerOptions so;
  so.step_tokens = m.opt.step_tokens;
  so.max_queue = m.opt.max_queue;
  // Token bytes as the output shows them (control tokens empty) for grammar masks, one per logit
  // (rows of the output head past the tokenizer's vocabulary stay empty: never allowed).
  const int32_t n_logits = eng.config().n_vocab;
  std::vector<std::string> bytes(static_cast<size_t>(n_logits));
  std::vector<int32_t> eog;
  for (int32_t t = 0; t < std::min(n_logits, tok.n_vocab()); ++t) {
    bytes[static_cast<size_t>(t)] = tok.token_to_piece(t, /*special=*/false);
    if (tok.is_eog(t)) eog.push_back(t);
  }
  so.vocab = std::make_shared<grammar::VocabIndex>(std::move(bytes), std::move(eog));
  m.sched = std::make_unique<Scheduler>(eng, tok, so);
  m.ready.store(true, std::memory_order_release);
}

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.sched) m.sched->stop();  // waiting handlers get their final events first
  m.http.stop();
  if (m.thread.joinable()) m.thread.join();
}

int HttpServer::port() const { return impl_->port; }
bool HttpServer::ready() const { return impl_->ready.load(); }
std::string HttpServer::model_id() const { return impl_->model_id; }
Scheduler* HttpServer::scheduler() { return impl_->sched.get(); }

}  // namespace strata::server
