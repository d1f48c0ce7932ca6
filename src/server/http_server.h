#pragma once
// strata serve: an HTTP server over one Engine speaking the OpenAI (chat, completions,
// responses), Anthropic Messages and Ollama wire formats through one request core.
//
//   HttpServer srv(opts);
//   int port = srv.bind();          // opts.port 0: an ephemeral port
//   srv.start();                    // /health answers 503 {"status":"loading"} from here on
//   srv.attach(engine, tokenizer, model_path);  // ready: the scheduler thread starts
//   ...
//   srv.begin_drain();              // optional (SIGTERM): /health 503 {"status":"draining"}, new requests 503
//   while (srv.requests_in_flight() > 0) ...;
//   srv.stop();
//
// Endpoints: see src/server/README.md (the wire formats in api_*.cpp; /props, /slots, /tokenize, /detokenize,
// /stats in server_info.h; the web page at / in webui.h). Every failure is that API's error object with its HTTP status.
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "model/standin_experts.h"
#include "runtime/calibration.h"
#include "runtime/engine.h"
#include "runtime/expert_parallel.h"
#include "runtime/sampler.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                      // 0: any free port
  std::string api_key;                  // "": no authentication
  size_t max_body = 1u << 20;           // bytes; larger bodies get 413
  // Bytes of requests held at once (server/http_front.h, request_charge); 0: room for two requests
  // of max_body at once.
  size_t request_memory = 0;
  int memory_wait_ms = 30'000;          // a request waiting for request memory this long gets 503
  int max_queue = 64;                   // requests waiting for a slot; more get 503
  int step_tokens = 256;                // tokens per forward pass
  int http_threads = 0;                 // 0: queue + 64
  std::string alias;                    // extra accepted model name; also the id when set
  bool strict_model = false;            // a request's "model" must name the served model (else 404); false: anything goes
  std::string reasoning_format = "deepseek";  // deepseek: <think> text -> reasoning_content; none
  std::string chat_template;            // template text replacing the GGUF's ("" : the GGUF's)
  nlohmann::ordered_json chat_template_kwargs;  // null or an object: template variables under the request's
  int reasoning_budget = -1;            // tokens inside <think> before "</think>" is forced; -1 unlimited
  SamplerParams sampling;               // defaults for fields a request leaves out
  bool webui = true;                    // the web page at / (server/webui.h)
  std::vector<std::string> cors;        // --cors (http_policy.h parse_cors): origins whose pages may call; empty: no CORS
  uint64_t disk_probe = 0;              // bytes read at attach to measure the disk for /stats (streaming experts; 0: not measured)
  // Per-slot speculation: "lookup" (prompt/history n-gram drafts), "model" (a draft model: the
  // drafter given to attach), "mtp" (the model's NextN block; the engine needs
  // EngineOptions::nextn_kv) or "none"; the drafts per pass at most and fewer than which a pass is
  // plain, for requests without speculative.n_max / n_min.
  std::string draft = "none";
  int draft_max = 4, draft_min = 1;
  bool draft_adaptive = true;           // false (--draft-fixed): every draft found is verified
  bool draft_predict = true;            // false (--no-draft-predict): no predicted routing (SchedulerOptions::draft_predict)
  std::string slot_save_path;           // --slot-save-path: slot files for POST /slots/{id}?action=...; "": those answer 501
  std::string replica;                  // --replica: names this server in a fleet (a label on /metrics, header X-Strata-Replica); "": none
};

// A --replica name: 1..64 of [A-Za-z0-9_.:-] (a Prometheus label value and a header as written);
// throws strata::Error otherwise.
void check_replica_name(const std::string& name);

// Stack an HTTP worker thread touches in the plan (handlers bound their recursion: core/json_depth.h).
inline constexpr uint64_t kHttpThreadStackPlan = 64 * 1024;  // measured: 12 KiB idle, 19 KiB after requests

class HttpServer {
 public:
  explicit HttpServer(const ServerOptions& opt);
  ~HttpServer();

  // Binds the listening socket; returns the port. Throws strata::Error when it cannot.
  int bind();
  // Serves in a background thread.
  void start();
  // The model is loaded: starts the scheduler (slots = the engine's KV sequences). `draft`: the
  // draft model's drafter for draft "model" (runtime/slot_draft.h).
  // `vocab`: the grammar index (strata::vocab_index), built here when null.
  void attach(Engine& eng, const tok::Tokenizer& tok, const std::string& model_path, std::shared_ptr<SlotDrafter> draft = nullptr,
              std::shared_ptr<const grammar::VocabIndex> vocab = nullptr);
  // Issue 37's knobs for /props and /stats (before attach; the pointers outlive the server's
  // routes): the --miss-model provider, what --quality-budget chose and --pp-model's switch (the
  // scheduler sets it per pass), each null when not given.
  void set_knob_report(const StandInExperts* standin, const QualityChoice* quality, PromptExperts* prompt_experts = nullptr);
  // --expert-parallel on rank 0 (before attach; it outlives the server's routes): each rank's
  // figures in /metrics (strata_ep_rank_*{rank="r"}) and /stats ("expert_parallel").
  void set_expert_parallel(const ExpertParallel* ep);
  void stop();
  // Fleet drain (SIGTERM): /health answers 503 {"status":"draining"} so a balancer stops sending,
  // requests already admitted go on, new ones (but /health, /metrics) get 503 with Retry-After.
  void begin_drain();
  bool draining() const;
  // Requests being handled or answered (a stream until its last byte); 0: a drain may end.
  int requests_in_flight() const;
  // What request handling holds beside the engine, for the memory plan (TierOptions::request_bytes):
  // the request memory, the HTTP threads' stacks, each slot's n_vocab sampling buffers.
  uint64_t request_bytes(int n_vocab, int n_slots) const;
  // The request memory the front admits requests against (ServerOptions::request_memory).
  size_t request_memory() const;
  size_t request_memory_in_use() const;

  int port() const;
  bool ready() const;
  // Why the engine cannot compute any more (a lost GPU, an expert-parallel rank that did not answer:
  // the requests it had failed, new ones get 503); "" while it can.
  std::string lost() const;
  std::string model_id() const;
  Scheduler* scheduler();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::server
