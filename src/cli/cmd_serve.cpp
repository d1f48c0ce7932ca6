// strata serve: an OpenAI-compatible HTTP server (continuous batching over --parallel slots).
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/common_options.h"
#include "core/error.h"
#include "core/units.h"
#include "model/model.h"
#include "runtime/slot_draft.h"
#include "server/http_front.h"
#include "server/http_policy.h"
#include "server/http_server.h"
#include "tokenizer/vocab.h"

namespace strata::cli {
namespace {

// --expert-parallel: how long a job whose rank stopped answering waits for the failed requests'
// answers to go out before it ends.
constexpr double kEpFailFlushS = 5.0;

struct ServeOptions {
  ModelOptions model;
  server::ServerOptions server;
  int parallel = 4;
  std::string template_file, template_kwargs;
  std::string disk_probe = "256M";
  std::string draft_model;  // -md FILE
  std::string api_key_file;  // --api-key-file FILE
  double drain_timeout = 30;  // --drain-timeout seconds
};

// The API key: --api-key, else --api-key-file (first line, surrounding whitespace dropped), else
// $STRATA_API_KEY; the file and the variable keep it out of /proc/PID/cmdline.
void resolve_api_key(ServeOptions& o) {
  STRATA_CHECK(o.server.api_key.empty() || o.api_key_file.empty(), "--api-key and --api-key-file are exclusive");
  if (!o.api_key_file.empty()) {
    std::string k = read_file_bytes(o.api_key_file);
    k = k.substr(0, k.find('\n'));
    while (!k.empty() && std::isspace(static_cast<unsigned char>(k.back()))) k.pop_back();
    while (!k.empty() && std::isspace(static_cast<unsigned char>(k.front()))) k.erase(0, 1);
    STRATA_CHECK(!k.empty(), "--api-key-file {}: no key in the file", o.api_key_file);
    o.server.api_key = k;
  } else if (const char* env = std::getenv("STRATA_API_KEY"); o.server.api_key.empty() && env && *env) {
    o.server.api_key = env;
  }
}

// --draft model: the draft model's engine (a slot per --parallel slot), which load_engine loads
// against the target's vocabulary and counts in the target's memory plan.
std::shared_ptr<SlotDrafter> serve_draft(const ServeOptions& o, Loaded& l) {
  if (!l.draft) return nullptr;
  std::fprintf(stderr, "strata serve: draft model %s (%s): %s\n", o.draft_model.c_str(), l.draft->config().arch.c_str(),
               format_bytes(l.engine->tier().plan().draft).c_str());
  return std::make_shared<ModelSlotDrafter>(std::move(l.draft));
}

std::atomic<int> g_term{0};  // SIGTERMs received
void on_term(int) { g_term.fetch_add(1); }

// SIGTERM: drain (the balancer sees /health 503 and stops sending; what is in flight finishes) until
// no request is in flight, --drain-timeout has passed, or a second SIGTERM or Ctrl-C comes.
void drain(server::HttpServer& srv, double timeout_s) {
  srv.begin_drain();
  std::fprintf(stderr, "strata serve: draining: %d requests in flight, new ones get 503 (at most %gs; SIGTERM again to stop now)\n",
               srv.requests_in_flight(), timeout_s);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (srv.requests_in_flight() > 0 && !interrupted() && g_term.load() < 2) {
    if (std::chrono::steady_clock::now() >= end) {
      std::fprintf(stderr, "strata serve: drain timeout: %d requests still in flight are cut\n", srv.requests_in_flight());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int serve(ServeOptions& o) {
  STRATA_CHECK(o.parallel >= 1 && o.parallel <= 256, "--parallel must be 1..256 (got {})", o.parallel);
  STRATA_CHECK(o.server.max_queue >= 0, "--queue must be >= 0 (got {})", o.server.max_queue);
  STRATA_CHECK(o.drain_timeout >= 0 && o.drain_timeout <= 86400, "--drain-timeout must be 0..86400 seconds (got {})", o.drain_timeout);
  if (!o.server.replica.empty()) server::check_replica_name(o.server.replica);
  if (!o.template_file.empty()) {
    o.server.chat_template = read_file_bytes(o.template_file);
    STRATA_CHECK(!o.server.chat_template.empty(), "--chat-template-file {}: the file is empty", o.template_file);
  }
  if (!o.template_kwargs.empty()) {
    o.server.chat_template_kwargs = nlohmann::ordered_json::parse(o.template_kwargs, nullptr, /*allow_exceptions=*/false);
    STRATA_CHECK(o.server.chat_template_kwargs.is_object(), "--chat-template-kwargs must be a JSON object, got: {}", o.template_kwargs);
  }
  STRATA_CHECK(o.server.draft_max >= 0 && o.server.draft_max <= 63, "--draft-max must be 0..63 (got {})", o.server.draft_max);
  STRATA_CHECK(o.server.draft_min >= 0 && o.server.draft_min <= 63, "--draft-min must be 0..63 (got {})", o.server.draft_min);
  resolve_api_key(o);
  STRATA_CHECK(o.server.max_body >= 64, "--max-body must be at least 64 bytes (got {})", o.server.max_body);
  o.server.disk_probe = parse_bytes(o.disk_probe);
  if (!o.draft_model.empty() && o.server.draft == "none") o.server.draft = "model";
  STRATA_CHECK(o.draft_model.empty() || o.server.draft == "model", "-md FILE is the draft model of --draft model (got --draft {})", o.server.draft);
  STRATA_CHECK(o.server.draft != "model" || !o.draft_model.empty(), "--draft model needs the draft model's file (-md FILE)");
  // Request memory: room for two requests of --max-body, at most a quarter of --ram-budget.
  if (o.server.request_memory == 0) {
    o.server.request_memory = 2 * server::request_charge(o.server.max_body);
    if (!o.model.ram_budget.empty()) o.server.request_memory = std::min<size_t>(o.server.request_memory, parse_bytes(o.model.ram_budget) / 4);
    o.server.request_memory = std::max<size_t>(o.server.request_memory, server::request_charge(0));
  }
  server::HttpServer srv(o.server);
  // --expert-parallel: rank 0 serves HTTP; the other ranks serve its experts (inside load_engine).
  const bool http = !o.model.expert_parallel || expert_parallel_rank() == 0;
  const int port = http ? srv.bind() : 0;
  if (http) srv.start();
  if (http) std::fprintf(stderr, "strata serve: listening on http://%s:%d (loading %s)\n", o.server.host.c_str(), port, o.model.path.c_str());
  o.model.n_seq = o.parallel;
  o.model.ep.fail_passes = true;  // --expert-parallel: a silent rank fails the requests, then the job ends (below)
  if (o.server.draft == "model") {
    STRATA_CHECK(!o.draft_model.empty(), "--draft model needs the draft model's file (-md FILE)");
    o.model.draft_model = o.draft_model;
    o.model.draft_seq = o.parallel;
  }
  o.model.nextn_kv = o.model.nextn_hidden_copy = o.server.draft == "mtp";
  // Predicted routing of lookup drafts (the scheduler's per-slot routing memory) is in the plan.
  o.model.routing_memory = o.server.draft == "lookup" && o.server.draft_predict && o.server.draft_adaptive;
  // One logits row per slot, and one per draft (the scheduler keeps a pass's drafts within them).
  o.model.logit_rows = o.parallel * (1 + (o.server.draft == "none" ? 0 : o.server.draft_max));
  // The grammar index (with the tokenizer, in the plan's vocabulary) and request handling are planned.
  std::shared_ptr<const grammar::VocabIndex> vocab;
  o.model.before_engine = [&](const Model& m, const tok::Tokenizer& tk) {
    vocab = vocab_index(m.config().n_vocab, tk);
    return srv.request_bytes(m.config().n_vocab, o.parallel);
  };
  auto loaded = load_engine(o.model);  // also installs the Ctrl-C handler
  std::shared_ptr<SlotDrafter> draft = serve_draft(o, loaded);
  std::signal(SIGTERM, on_term);
  srv.set_knob_report(loaded.standin_experts.get(), loaded.quality ? &*loaded.quality : nullptr, loaded.prompt_experts.get());
  srv.set_expert_parallel(loaded.ep.get());
  srv.attach(*loaded.engine, *loaded.tokenizer, o.model.path, std::move(draft), std::move(vocab));
  std::fprintf(stderr, "strata serve: ready: model '%s', %d slots x %d tokens of context, queue %d%s\n", srv.model_id().c_str(), o.parallel,
               loaded.engine->options().n_ctx, o.server.max_queue, o.server.api_key.empty() ? "" : ", API key required");
  std::fprintf(stderr, "%s\n", tier_summary(*loaded.engine, 0, 0).c_str());
  if (o.server.draft != "none" && !loaded.engine->model().rewindable())
    std::fprintf(stderr, "strata serve: speculation off: architecture %s cannot cut rejected drafts back\n", loaded.engine->config().arch.c_str());
  if (o.server.webui) std::fprintf(stderr, "strata serve: web page at http://%s:%d/\n", o.server.host.c_str(), port);
  // --expert-parallel: once a rank stopped answering, the requests it had failed with the reason
  // and new ones get 503; then the whole job ends (the other ranks may be stuck or gone).
  const auto ep_lost = [&] { return loaded.ep ? srv.lost() : std::string(); };
  while (!interrupted() && !g_term.load() && ep_lost().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (const std::string why = ep_lost(); !why.empty()) {
    // The failed requests' answers go out first (bounded: kEpFailFlushS).
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kEpFailFlushS);
    while (srv.requests_in_flight() > 0 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    srv.stop();
    loaded.ep->abort_job("strata serve: " + why + "; the requests in flight failed; ending the job");
  }
  if (!interrupted()) drain(srv, o.drain_timeout);
  std::fprintf(stderr, "strata serve: shutting down\n");
  srv.stop();
  finish_expert_parallel(loaded.ep);
  finish_numa(loaded);
  return 0;
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models, /health, /metrics), llama-server's /props /slots /tokenize /detokenize, /stats and a web page at /");
  add_model_options(sub, o->model);
  add_ep_options(sub, o->model);
  add_pp_options(sub, o->model);
  sub->add_option("--host", o->server.host,
                  "Address to listen on; without an API key a loopback address also refuses requests whose Host is not loopback "
                  "or whose Origin is another site's")->capture_default_str();
  sub->add_option("--port", o->server.port, "Port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  sub->add_option("--api-key", o->server.api_key,
                  "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (all endpoints but /health and the web page); "
                  "visible to local users in the process list: prefer --api-key-file or $STRATA_API_KEY");
  sub->add_option("--api-key-file", o->api_key_file, "Read the API key from the first line of FILE (else $STRATA_API_KEY, if set)");
  sub->add_option("--parallel", o->parallel, "Sequences decoded together (KV slots of -c tokens each)")->capture_default_str()->check(CLI::Range(1, 256));
  sub->add_option("--max-body", o->server.max_body, "Largest request body in bytes (413 beyond)")->capture_default_str()->check(CLI::Range(1, 1 << 30));
  sub->add_option_function<std::string>(
         "--request-memory", [o](const std::string& v) { o->server.request_memory = static_cast<size_t>(parse_bytes(v)); },
         "Bytes of requests held at once, in the memory plan: each request holds 32 bytes per body byte, 256 per JSON value and 1 MiB "
         "while it is read and "
         "handled (413 if it could never fit, 503 while others hold it); default: two requests of --max-body, at most a quarter of --ram-budget");
  sub->add_option("--queue", o->server.max_queue, "Requests waiting for a slot (503 beyond)")->capture_default_str()->check(CLI::Range(0, 1 << 16));
  sub->add_option("--step-tokens", o->server.step_tokens, "Tokens per forward pass (decode tokens first, then prompt chunks)")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  sub->add_option("--http-threads", o->server.http_threads, "HTTP worker threads (0: queue + 64)")->check(CLI::Range(0, 4096));
  sub->add_option_function<std::string>(
      "--cors",
      [o](const std::string& v) {
        try {
          o->server.cors = server::parse_cors(v);
        } catch (const std::invalid_argument& e) {
          throw CLI::ValidationError("--cors", e.what());
        }
      },
      "Origins whose web pages may call the server (CORS): a comma list of scheme://host[:port], or * for any; answers OPTIONS "
      "preflights and sends Access-Control-Allow-Origin to them. Default: none (no CORS headers; without an API key on a loopback "
      "address, requests from other sites' pages stay refused). '*' without a key lets every web page you visit use the server");
 sub->add_option("--replica", o->server.replica,
                  "Name of this server in a fleet of replicas (deploy/haproxy): a replica=\"NAME\" label on every /metrics sample and an "
                  "X-Strata-Replica header on every answer; 1..64 of A-Z a-z 0-9 _ . : -");
  sub->add_option("--drain-timeout", o->drain_timeout,
                  "SIGTERM drains: /health answers 503 {\"status\":\"draining\"}, new requests get 503 with Retry-After, requests in flight "
                  "(streams included) finish; the server exits when none is left or after this many seconds (a second SIGTERM: at once)")
      ->capture_default_str();
  sub->add_option("--alias", o->server.alias, "Model id to report (and accept) instead of the GGUF general.name");
  sub->add_flag("--strict-model", o->server.strict_model, "Answer 404 to a request whose model is not the served one (default: any name is accepted)");
  sub->add_option("--reasoning-format", o->server.reasoning_format, "deepseek: <think>...</think> goes to reasoning_content; none: left in content")
      ->check(CLI::IsMember({"deepseek", "none"}))
      ->capture_default_str();
  sub->add_option("--chat-template-file", o->template_file,
                  "Jinja chat template to use instead of the model's tokenizer.chat_template (a model without one is served in ChatML, "
                  "as `strata chat` does)");
  sub->add_option("--chat-template-kwargs", o->template_kwargs,
                  "JSON object of template variables for every request (a request's chat_template_kwargs override them), e.g. '{\"enable_thinking\": false}'");
  sub->add_option("--reasoning-budget", o->server.reasoning_budget,
                  "Tokens a reply may spend inside <think> before the server closes the block (-1: unlimited, 0: none; requests may set reasoning_budget)")
      ->capture_default_str();
  sub->add_flag("--no-webui{false}", o->server.webui, "No web page at / (404)");
  sub->add_option("--slot-save-path", o->server.slot_save_path,
                  "Directory of slot files (created if missing): POST /slots/{id}?action=save|restore with {\"filename\": NAME} writes a slot's "
                  "tokens and KV rows to DIR/NAME or reads them back (same model, cache types and -c), action=erase empties it; without "
                  "this option those answer 501");
  sub->add_option("--disk-probe", o->disk_probe,
                  "Bytes of random reads that measure the disk at start when experts stream (the ceiling /stats compares reads against; 0: skip)")
      ->capture_default_str();
  sub->add_option("--draft", o->server.draft,
                  "Per-slot speculative decoding: lookup (drafts from n-gram matches in the prompt and the output), model (a draft model, -md "
                  "FILE, with a slot per --parallel slot; all the slots' drafts in one draft pass per position) or mtp (the model's NextN block, "
                  "GLM-4.5 files; per-slot NextN rows) or none; drafts are verified in the slots' shared pass, greedy output is unchanged; "
                  "requests may set speculative.n_max (0: off) and speculative.n_min")
      ->check(CLI::IsMember({"none", "lookup", "model", "mtp"}))
      ->capture_default_str();
  sub->add_option("--model-draft", o->draft_model,
                  "-md FILE: draft model GGUF for --draft model (same vocabulary as the model, resident; implies --draft model)");
  sub->add_option("--draft-max", o->server.draft_max, "Speculation: most drafted tokens per slot and pass (requests: speculative.n_max)")
      ->capture_default_str();
  sub->add_option("--draft-min", o->server.draft_min, "Speculation: fewer drafts than this make a plain pass (requests: speculative.n_min)")
      ->capture_default_str();
  sub->add_flag("--draft-fixed{false}", o->server.draft_adaptive,
                "Speculation: verify every draft found (up to the request's n_max) instead of letting each slot's cost model choose "
                "how many per pass (0..n_max, from its acceptance and the passes' measured time and reads)");
  sub->add_flag("--no-draft-predict{false}", o->server.draft_predict,
                "Speculation while experts stream (--draft lookup): do not price draft rows by their experts predicted from the "
                "routing of earlier positions (each slot's cost model then charges every draft row its fitted bytes)");
  add_sampling_options(sub, o->server.sampling);
  return {sub, [o]() { return serve(*o); }};
}

}  // namespace strata::cli
