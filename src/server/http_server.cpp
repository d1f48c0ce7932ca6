#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "core/error.h"
#include "server/api_host.h"
#include "server/http_front.h"
#include "server/http_policy.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/server_info.h"
#include "server/slot_actions.h"
#include "server/webui.h"

namespace strata::server {

using nlohmann::json;

namespace {

std::string endpoint_label(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/health",
                        "/metrics", "/api/chat", "/api/generate", "/api/tags", "/api/show", "/api/ps", "/api/version"})
    if (path == p) return p;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models";
  return "other";
}

}  // namespace

struct HttpServer::Impl final : ApiHost {
  ServerOptions opt;
  FrontServer server;  // httplib's routing and handlers behind an event-driven front (http_front.h)
  FrontOptions front;  // as configured
  std::thread thread;
  int port = -1;
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  Engine* eng = nullptr;
  const tok::Tokenizer* tok = nullptr;
  std::unique_ptr<TierMonitor> monitor;  // outlives the scheduler that feeds it
  bool monitor_closed = false;
  std::shared_ptr<MtpSlotDrafter> mtp;   // --draft mtp: the engine's pass listener until stop()
  std::unique_ptr<Scheduler> sched;
  ServedModel served;  // what server_info's routes read
  const StandInExperts* standin = nullptr;  // set_knob_report
  const QualityChoice* quality = nullptr;
  PromptExperts* prompt_experts = nullptr;
  const ExpertParallel* ep = nullptr;  // set_expert_parallel
  std::string id;  // the served model's name
  std::string path;
  ChatFormat chat_format;
  CoreContext core_ctx;
  std::vector<int32_t> think_close;  // forced when a reasoning budget is spent
  std::vector<int32_t> think_open;   // <think>: may open the output before a grammar
  toolcall::Format tool_format = toolcall::Format::Generic;  // from the template
  std::vector<std::string> names;  // accepted "model" values
  int64_t created_at = unix_time();
  RequestCounters counters;

  explicit Impl(const ServerOptions& o) : opt(o) { routes(); }

  // ApiHost
  const ServerOptions& options() const override { return opt; }
  const CoreContext& core() const override { return core_ctx; }
  std::string model_id() const override { return id; }
  int64_t created() const override { return created_at; }
  const Engine& engine() const override { return *eng; }
  const std::string& model_path() const override { return path; }
  httplib::Server& http() override { return server; }
  httplib::Server::Handler guarded(Handler f, ErrorShape shape) override { return guard(std::move(f), shape, true); }

  void send_error(httplib::Response& res, const ApiError& e, ErrorShape shape) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", "1");
    res.set_content(dump(error_body(shape, e)), "application/json");
  }

  // Authorization: Bearer KEY, or (Anthropic clients) x-api-key: KEY. The front checked it before
  // the body was read (http_policy.h); checked again here, in constant time too.
  void check_auth(const httplib::Request& req) {
    if (opt.api_key.empty()) return;
    const std::string h = req.get_header_value("Authorization");
    const std::string x = req.get_header_value("x-api-key");
    const bool bearer = h.rfind("Bearer ", 0) == 0 && key_matches(std::string_view(h).substr(7), opt.api_key);
    if (!bearer && !key_matches(x, opt.api_key))
      throw ApiError(401, h.empty() && x.empty() ? "missing API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')" : "incorrect API key provided",
                     "invalid_request_error", "", "invalid_api_key");
  }

  // The scheduler's device_lost() once it runs ("" before).
  std::string device_lost() const { return ready.load(std::memory_order_acquire) && sched ? sched->device_lost() : std::string(); }

  void require_ready() const override {
    if (!ready.load(std::memory_order_acquire)) throw ApiError(503, "the model is loading", "server_error", "", "model_loading");
  }

  // Any name is accepted (one model is served) unless --strict-model.
  void check_model(const std::string& m) const override {
    if (m.empty() || !opt.strict_model) return;
    for (const auto& n : names)
      if (m == n) return;
    throw ApiError(404, fmt::format("The model '{}' does not exist (this server serves '{}')", m, id), "invalid_request_error", "model",
                   "model_not_found");
  }

  httplib::Server::Handler guard(Handler f, ErrorShape shape, bool auth) {
    return [this, f = std::move(f), shape, auth](const httplib::Request& req, httplib::Response& res) {
      try {
        if (auth) check_auth(req);
        f(req, res);
      } catch (const ApiError& e) {
        send_error(res, e, shape);
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "server_error"), shape);
      } catch (...) {
        send_error(res, ApiError(500, "internal error", "server_error"), shape);
      }
    };
  }
  httplib::Server::Handler guarded(Handler f) { return guard(std::move(f), ErrorShape::OpenAI, true); }

  void routes() {
    server.Get("/health", guard(
                            [this](const httplib::Request&, httplib::Response& res) {
                              const bool ok = ready.load(std::memory_order_acquire), drain = draining.load(std::memory_order_acquire);
                              const std::string lost = device_lost();
                              res.status = ok && !drain && lost.empty() ? 200 : 503;
                              if (res.status == 503) res.set_header("Retry-After", "1");
                              if (!lost.empty()) res.set_content(dump(json{{"status", "error"}, {"error", lost}}), "application/json");
                              else res.set_content(drain ? R"({"status":"draining"})" : ok ? R"({"status":"ok"})" : R"({"status":"loading"})",
                                                   "application/json");
                            },
                            ErrorShape::OpenAI, /*auth=*/false));
    server.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
      const bool ok = ready.load(std::memory_order_acquire);
      SchedulerStats s;
      if (ok) s = sched->stats();
      const ServerState state{ok, draining.load(std::memory_order_acquire), opt.replica};
      std::vector<EpRankStats> ranks;
      if (ok && ep) ranks = ep->live();
      res.set_content(render_metrics(ok ? &s : nullptr, counters, state, ep ? &ranks : nullptr), "text/plain; version=0.0.4; charset=utf-8");
    }));
    server.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
      require_ready();
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
    }));
    server.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
      require_ready();
      check_model(req.matches[1]);
      res.set_content(dump(model_json()), "application/json");
    }));
    add_openai_routes(*this);
    add_anthropic_routes(*this);
    add_responses_routes(*this);
    add_ollama_routes(*this);
    add_slot_action_routes(*this);
    add_info_routes(server, [this](httplib::Server::Handler h) { return guarded(std::move(h)); },
                    [this]() -> const ServedModel* { return ready.load(std::memory_order_acquire) ? &served : nullptr; });
    if (opt.webui) add_webui_routes(server);

    // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad request line...)
    // still answer with an error object.
    server.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string msg, code;
      if (res.status == 404) msg = fmt::format("no such endpoint: {} {}", req.method, req.path), code = "not_found";
      else if (res.status == 413) msg = fmt::format("the request body exceeds the limit of {} bytes", opt.max_body), code = "request_too_large";
      else if (res.status == 405) msg = "method not allowed", code = "method_not_allowed";
      else msg = fmt::format("HTTP {}", res.status);
      res.set_content(dump(error_body(shape_of_path(req.path), ApiError(res.status, msg, res.status >= 500 ? "server_error" : "invalid_request_error", "", code))),
                      "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
      send_error(res, ApiError(500, "internal error", "server_error"), shape_of_path(req.path));
    });
    // Counted before the response is written (the logger runs after it, so a client could read
    // /metrics before its own request was counted).
    server.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      counters.add(endpoint_label(req.path), res.status);
      add_cors_headers(req, res);
      if (!opt.replica.empty()) res.set_header("X-Strata-Replica", opt.replica);
    });
    // CORS preflight (--cors): 204 with the allow headers for an allowed Origin, else 403.
    server.Options(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string origin = req.get_header_value("Origin");
      if (origin.empty()) {  // not a preflight
        res.status = 204;
        res.set_header("Allow", "GET, POST, OPTIONS");
        return;
      }
      if (!cors_allows(opt.cors, origin)) {
        send_error(res, ApiError(403, fmt::format("origin '{}' may not call this server (see --cors)", origin), "invalid_request_error", "", "forbidden_origin"),
                   shape_of_path(req.path));
        return;
      }
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, x-api-key" : asked);
      res.set_header("Access-Control-Max-Age", "600");
    });
    FrontOptions fo;
    fo.max_body = opt.max_body;
    fo.workers = opt.http_threads > 0 ? opt.http_threads : opt.max_queue + 64;
    fo.request_memory = opt.request_memory > 0 ? opt.request_memory : 2 * request_charge(opt.max_body);
    fo.memory_wait = std::chrono::milliseconds(opt.memory_wait_ms);
    front = fo;
    AccessPolicy policy{opt.api_key, is_loopback_bind(opt.host), opt.webui, opt.cors};
    server.configure(fo, FrontHooks{[this, policy](const RequestHead& h) {
                                      if (auto r = drain_refusal(h.path)) return r;
                                      return check_head(policy, h);
                                    },
                                    [this](const RequestHead& h, const Refusal& r) { return refusal_body(h, r); }});
  }

  // Access-Control-Allow-Origin for a request whose Origin --cors allows: that origin (also under
  // "*", so that requests with credentials work too).
  void add_cors_headers(const httplib::Request& req, httplib::Response& res) const {
    const std::string origin = req.get_header_value("Origin");
    if (!cors_allows(opt.cors, origin)) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    res.set_header("Access-Control-Expose-Headers", "Retry-After");
  }

  // While draining, every request but /health and /metrics is refused (503, Retry-After: the
  // balancer retries it on another replica).
  std::optional<Refusal> drain_refusal(const std::string& path) const {
    if (path == "/health" || path == "/metrics") return std::nullopt;
    if (const std::string lost = device_lost(); !lost.empty())
      return Refusal{503, "this server cannot compute: " + lost + "; restart it (or retry on another replica)", "device_lost"};
    if (!draining.load(std::memory_order_acquire)) return std::nullopt;
    return Refusal{503, "this server is draining (shutting down); retry on another replica", "draining"};
  }

  // A refusal of the front (answered before the body is read) as that API's error object, counted.
  std::pair<std::string, std::string> refusal_body(const RequestHead& h, const Refusal& r) {
    counters.add(endpoint_label(h.path), r.status);
    const ApiError e(r.status, r.message, r.status >= 500 ? "server_error" : "invalid_request_error", "", r.code);
    return {dump(error_body(shape_of_path(h.path), e)), "application/json"};
  }

  json model_json() const {
    json m{{"id", id}, {"object", "model"}, {"created", created_at}, {"owned_by", "strata"}};
    m["meta"] = {{"n_ctx", eng->options().n_ctx},          {"n_ctx_per_slot", eng->options().n_ctx}, {"n_ctx_train", eng->config().n_ctx_train},
                 {"slots", eng->n_seq()},                  {"n_vocab", eng->config().n_vocab},      {"architecture", eng->config().arch},
                 {"aliases", names},                       {"chat_format", chat_format_name(chat_format)}};
    return m;
  }

};

HttpServer::HttpServer(const ServerOptions& opt) : impl_(std::make_unique<Impl>(opt)) {
  if (!opt.replica.empty()) check_replica_name(opt.replica);
  STRATA_CHECK(opt.reasoning_format == "deepseek" || opt.reasoning_format == "none", "--reasoning-format must be deepseek or none (got '{}')",
               opt.reasoning_format);
  STRATA_CHECK(opt.chat_template_kwargs.is_null() || opt.chat_template_kwargs.is_object(), "--chat-template-kwargs must be a JSON object (got {})",
               opt.chat_template_kwargs.dump());
  STRATA_CHECK(opt.reasoning_budget >= -1, "--reasoning-budget must be -1 (unlimited) or >= 0 (got {})", opt.reasoning_budget);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& m = *impl_;
  m.port = m.server.bind_front(m.opt.host, m.opt.port);
  STRATA_CHECK(m.port > 0, "cannot listen on {}:{}: {}", m.opt.host, m.opt.port,
               m.server.bind_error() == EADDRINUSE ? "address in use (another server listens there)"
               : m.server.bind_error() ? std::strerror(m.server.bind_error()) : "no address");
  return m.port;
}

void HttpServer::start() {
  std::signal(SIGPIPE, SIG_IGN);
  if (impl_->port < 0) bind();
  impl_->thread = std::thread([this] { impl_->server.serve(); });  // stop() ends it, also before it began
}

uint64_t HttpServer::request_bytes(int n_vocab, int n_slots) const {
  const FrontOptions& fo = impl_->front;
  return fo.request_memory + static_cast<uint64_t>(fo.workers) * kHttpThreadStackPlan +
         static_cast<uint64_t>(n_slots) * Scheduler::slot_vocab_bytes(n_vocab);
}

size_t HttpServer::request_memory() const { return impl_->front.request_memory; }
size_t HttpServer::request_memory_in_use() const { return impl_->server.request_memory_in_use(); }

void HttpServer::attach(Engine& eng, const tok::Tokenizer& tok, const std::string& model_path, std::shared_ptr<SlotDrafter> draft,
                        std::shared_ptr<const grammar::VocabIndex> vocab) {
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
  m.id = !m.opt.alias.empty() ? m.opt.alias : !general.empty() ? general : p.stem().string();
  for (const std::string& n : {m.id, m.opt.alias, general, p.filename().string(), p.stem().string(), std::string("strata"), std::string("default")})
    if (!n.empty() && std::find(m.names.begin(), m.names.end(), n) == m.names.end()) m.names.push_back(n);
  SchedulerOptions so;
  so.step_tokens = m.opt.step_tokens;
  so.max_queue = m.opt.max_queue;
  const std::string& kind = m.opt.draft;
  STRATA_CHECK(kind == "none" || kind == "lookup" || kind == "model" || kind == "mtp", "--draft must be none, lookup, model or mtp (got '{}')", kind);
  STRATA_CHECK(kind != "model" || draft, "--draft model needs the draft model's file (-md FILE)");
  if (kind == "lookup") so.draft = std::make_shared<LookupDraft>();
  if (kind == "model") so.slot_draft = std::move(draft);
  if (kind == "mtp" && eng.model().rewindable()) {
    m.mtp = std::make_shared<MtpSlotDrafter>(eng);
    so.slot_draft = m.mtp;
  }
  so.draft_max = m.opt.draft_max;
  so.draft_min = m.opt.draft_min;
  so.draft_adaptive = m.opt.draft_adaptive;
  so.draft_predict = m.opt.draft_predict;
  so.vocab = vocab ? std::move(vocab) : vocab_index(eng.config().n_vocab, tok);
  so.prompt_experts = m.prompt_experts;
  m.monitor = start_monitor(eng, m.opt.disk_probe);
  so.on_step = [mon = m.monitor.get()](int tokens, int generated, double t0, double t1) { mon->on_step(tokens, generated, t0, t1); };
  m.sched = std::make_unique<Scheduler>(eng, tok, so);
  m.path = model_path;
  m.core_ctx.tok = &tok;
  m.core_ctx.sched = m.sched.get();
  m.core_ctx.chat_format = &m.chat_format;
  m.core_ctx.tool_format = m.tool_format;
  m.core_ctx.think_close = &m.think_close;
  m.core_ctx.think_open = &m.think_open;
  m.core_ctx.reasoning = m.opt.reasoning_format == "deepseek";
  m.core_ctx.reasoning_budget = m.opt.reasoning_budget;
  m.served = ServedModel{&eng, &tok, m.sched.get(), m.monitor.get(), m.id, model_path, m.chat_format.model_template,
                         chat_format_name(m.chat_format), m.opt.sampling, m.opt.webui, m.standin, m.quality, m.prompt_experts, m.ep};
  m.ready.store(true, std::memory_order_release);
}

void HttpServer::stop() {
  Impl& m = *impl_;
  if (m.sched) m.sched->stop();  // waiting handlers get their final events first
  if (m.monitor && !m.monitor_closed) {
    m.monitor->close();  // ends /stats/stream responses
    m.eng->model().remove_routing_observer(m.monitor.get());
    m.monitor_closed = true;  // a second stop() may come after the engine is gone
  }
  m.server.shutdown();
  if (m.thread.joinable()) m.thread.join();
  if (m.mtp) m.mtp->detach();  // the engine may go before this server
}

void HttpServer::begin_drain() { impl_->draining.store(true, std::memory_order_release); }
bool HttpServer::draining() const { return impl_->draining.load(std::memory_order_acquire); }
int HttpServer::requests_in_flight() const { return impl_->server.requests_in_flight(); }

void check_replica_name(const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '-';
  });
  STRATA_CHECK(ok, "--replica must be 1..64 characters of A-Z a-z 0-9 _ . : - (got '{}')", name);
}

void HttpServer::set_expert_parallel(const ExpertParallel* ep) { impl_->ep = ep; }

void HttpServer::set_knob_report(const StandInExperts* standin, const QualityChoice* quality, PromptExperts* prompt_experts) {
  impl_->standin = standin;
  impl_->quality = quality;
  impl_->prompt_experts = prompt_experts;
}

int HttpServer::port() const { return impl_->port; }
bool HttpServer::ready() const { return impl_->ready.load(); }
std::string HttpServer::lost() const { return impl_->device_lost(); }
std::string HttpServer::model_id() const { return impl_->id; }
Scheduler* HttpServer::scheduler() { return impl_->sched.get(); }

}  // namespace strata::server
