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
#include "server/client_socket.h"
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

const char* finish_reason(Finish f) { return f == Finish::Length ? "length" : "stop"; }

// cached_tokens: prompt tokens whose KV rows the slot kept from its previous request (prefix reuse).
json usage_json(const GenEvent& fin) {
  return json{{"prompt_tokens", fin.prompt_tokens}, {"completion_tokens", fin.completion_tokens},
              {"total_tokens", fin.prompt_tokens + fin.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", fin.cached_tokens}}}};
}

bool ends_with(std::string_view s, std::string_view t) { return s.size() >= t.size() && s.substr(s.size() - t.size()) == t; }

// What a completion request turns into, before it is queued.
struct Job {
  bool chat = false;
  bool reasoning = false;        // split <think> into reasoning_content
  bool start_in_think = false;   // the prompt opened <think>
  CommonParams common;
  std::string id, model;
  int64_t created = 0;
};

// A streamed response in progress (owned by the content provider).
struct StreamState {
  Job job;
  std::shared_ptr<GenRequest> req;
  ReasoningSplitter rs;
  bool started = false;
};

// A response, or a chunk of one when streaming, with one choice: `body` under "message" / "delta"
// (chat) or "text" (completions). No body: no choice (the usage chunk).
json completion_json(const Job& jb, bool stream, const std::optional<json>& body, const json& finish = nullptr) {
  json c{{"id", jb.id}, {"created", jb.created}, {"model", jb.model}, {"choices", json::array()}};
  c["object"] = !jb.chat ? "text_completion" : stream ? "chat.completion.chunk" : "chat.completion";
  if (body) {
    const char* key = !jb.chat ? "text" : stream ? "delta" : "message";
    c["choices"].push_back(json{{"index", 0}, {key, *body}, {"logprobs", nullptr}, {"finish_reason", finish}});
  }
  return c;
}

json chunk(const Job& jb, const json& delta_or_text, const json& finish) { return completion_json(jb, true, delta_or_text, finish); }

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
    m["meta"] = {{"n_ctx_per_slot", eng->options().n_ctx}, {"slots", eng->n_seq()}, {"n_vocab", eng->config().n_vocab},
                 {"architecture", eng->config().arch}, {"aliases", names}, {"chat_format", chat_format_name(chat_format)}};
    return m;
  }

  void completion(const httplib::Request& req, httplib::Response& res, bool chat) {
    require_ready();
    const json j = parse_body(req.body);
    Job jb;
    jb.chat = chat;
    jb.common = parse_common(j, opt.sampling);
    check_model(jb.common.model);
    jb.id = random_id(chat ? "chatcmpl-" : "cmpl-");
    jb.model = model_id;
    jb.created = unix_time();

    GenParams gp;
    const char* param = chat ? "messages" : "prompt";
    if (chat) {
      const std::vector<ChatMsg> msgs = parse_messages(j);
      ChatPrompt cp;
      try {
        cp = format_chat(msgs, chat_format);
      } catch (const std::exception& e) {
        throw bad_request(fmt::format("the chat template cannot render these messages: {}", e.what()), "messages", "chat_template_error");
      }
      jb.reasoning = opt.reasoning_format == "deepseek";
      jb.start_in_think = ends_with(cp.text, "<think>") || ends_with(cp.text, "<think>\n");
      gp.prompt = tok->encode(cp.text, cp.add_special, /*parse_special=*/true);
    } else {
      PromptInput in = parse_prompt(j);
      if (in.is_tokens) {
        for (int32_t t : in.tokens)
          if (t >= tok->n_vocab()) throw bad_request(fmt::format("token id {} is outside the vocabulary (0..{})", t, tok->n_vocab() - 1), "prompt", "invalid_value");
        gp.prompt = std::move(in.tokens);
      } else {
        gp.prompt = tok->encode(in.text, /*add_special=*/true, /*parse_special=*/true);
      }
    }
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
    auto r = std::make_shared<GenRequest>(std::move(gp));
    if (!sched->submit(r))
      throw ApiError(503, "the server is busy: every slot is taken and the wait queue is full; retry later", "server_error", "", "queue_full");
    const ClientSocket client(req.remote_addr, req.remote_port, req.local_port);
    if (jb.common.stream) stream(res, jb, r, client);
    else respond(res, jb, r, client);
  }

  void respond(httplib::Response& res, const Job& jb, const std::shared_ptr<GenRequest>& r, const ClientSocket& client) {
    std::string text;
    GenEvent fin;
    for (bool done = false; !done;) {
      for (auto& ev : r->wait(100)) {
        text += ev.text;
        if (ev.final) fin = ev, done = true;
      }
      if (!done && client.gone()) {
        r->cancel();  // the slot frees at the next engine step; nobody reads this answer
        res.status = 499;
        res.set_content(dump(error_json("the client closed the connection", "invalid_request_error", "", "client_closed")), "application/json");
        return;
      }
    }
    if (fin.finish == Finish::Error) throw ApiError(500, fin.error, "server_error");
    json body = text;
    if (jb.chat) {
      ReasoningSplitter rs(jb.reasoning, jb.start_in_think);
      auto a = rs.push(text), b = rs.flush();
      body = json{{"role", "assistant"}, {"content", a.content + b.content}};
      if (!(a.reasoning + b.reasoning).empty()) body["reasoning_content"] = a.reasoning + b.reasoning;
    }
    json out = completion_json(jb, /*stream=*/false, body, finish_reason(fin.finish));
    out["usage"] = usage_json(fin);
    res.set_content(dump(out), "application/json");
  }

  void stream(httplib::Response& res, const Job& jb, const std::shared_ptr<GenRequest>& r, const ClientSocket& client) {
    auto st = std::make_shared<StreamState>();
    st->job = jb;
    st->req = r;
    st->rs = ReasoningSplitter(jb.chat && jb.reasoning, jb.start_in_think);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st, client](size_t, httplib::DataSink& sink) -> bool {
          const Job& jb = st->job;
          auto send = [&](const json& j) {
            const std::string s = "data: " + dump(j) + "\n\n";
            return sink.write(s.data(), s.size());
          };
          auto send_text = [&](const ReasoningSplitter::Out& o) {
            bool ok = true;
            if (!jb.chat) return o.content.empty() || send(chunk(jb, o.content, nullptr));
            if (!o.reasoning.empty()) ok = ok && send(chunk(jb, json{{"reasoning_content", o.reasoning}}, nullptr));
            if (!o.content.empty()) ok = ok && send(chunk(jb, json{{"content", o.content}}, nullptr));
            return ok;
          };
          bool ok = true;
          if (!st->started) {
            st->started = true;
            if (jb.chat) ok = send(chunk(jb, json{{"role", "assistant"}, {"content", ""}}, nullptr));
          }
          for (auto& ev : ok ? st->req->wait(50) : std::vector<GenEvent>{}) {
            if (!ev.text.empty()) ok = ok && send_text(st->rs.push(ev.text));
            if (!ev.final || !ok) continue;
            if (ev.finish == Finish::Error) {
              ok = send(error_json(ev.error, "server_error", "", ""));
            } else {
              ok = send_text(st->rs.flush());
              ok = ok && send(chunk(jb, jb.chat ? json::object() : json(""), finish_reason(ev.finish)));
              if (ok && jb.common.include_usage) {
                json u = completion_json(jb, /*stream=*/true, std::nullopt);
                u["usage"] = usage_json(ev);
                ok = send(u);
              }
            }
            static const std::string kDone = "data: [DONE]\n\n";
            if (ok) sink.write(kDone.data(), kDone.size());
            sink.done();
            return true;
          }
          // A client that hangs up before the first token (a long prompt) is noticed on its socket.
          if (!ok || !sink.is_writable() || client.gone()) {
            st->req->cancel();  // the client is gone: free the slot
            return false;
          }
          return true;
        },
        [r](bool) {
          if (!r->done()) r->cancel();
        });
  }
};

HttpServer::HttpServer(const ServerOptions& opt) : impl_(std::make_unique<Impl>(opt)) {
  STRATA_CHECK(opt.reasoning_format == "deepseek" || opt.reasoning_format == "none", "--reasoning-format must be deepseek or none (got '{}')",
               opt.reasoning_format);
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
  m.chat_format = chat_format_from_gguf(eng.model().gguf());
  const std::string general = eng.config().name;
  const std::filesystem::path p(model_path);
  m.model_id = !m.opt.alias.empty() ? m.opt.alias : !general.empty() ? general : p.stem().string();
  for (const std::string& n : {m.model_id, m.opt.alias, general, p.filename().string(), p.stem().string(), std::string("strata"), std::string("default")})
    if (!n.empty() && std::find(m.names.begin(), m.names.end(), n) == m.names.end()) m.names.push_back(n);
  SchedulerOptions so;
  so.step_tokens = m.opt.step_tokens;
  so.max_queue = m.opt.max_queue;
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
