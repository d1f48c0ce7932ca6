#pragma once
// llama-server's conveniences and the expert tier's live figures, registered on the HTTP server:
//   GET /props        n_ctx, slots, chat template, model facts, build info, sampling defaults
//   GET /slots        each slot: idle / processing, n_ctx, rows held, cached prefix, tokens so far
//   POST /tokenize    {content, add_special, parse_special, with_pieces} -> {tokens}
//   POST /detokenize  {tokens} -> {content}
//   GET /stats        the expert tier (TierMonitor::snapshot) plus the scheduler's load
//   GET /stats/stream the same as server-sent events, after each engine pass (at most every
//                     interval_ms, default 250) and at least every 2 s
// Errors are the OpenAI error objects of the other endpoints (the handlers throw ApiError).
#include <httplib.h>

#include <functional>
#include <memory>
#include <string>

#include "model/standin_experts.h"
#include "runtime/calibration.h"
#include "runtime/engine.h"
#include "runtime/expert_parallel.h"
#include "runtime/sampler.h"
#include "server/scheduler.h"
#include "server/tier_monitor.h"
#include "tokenizer/tokenizer.h"

namespace strata::server {

// What the routes read, set once the model is attached.
struct ServedModel {
  Engine* eng = nullptr;
  const tok::Tokenizer* tok = nullptr;
  Scheduler* sched = nullptr;
  TierMonitor* monitor = nullptr;
  std::string model_id, model_path, chat_template, chat_format;
  SamplerParams sampling;
  bool webui = false;
  // Issue 37's knob report (HttpServer::set_knob_report): the --miss-model provider (its counters
  // in /stats), what --quality-budget chose (in /props moe_knobs) and --pp-model's switch; null when not given.
  const StandInExperts* standin = nullptr;
  const QualityChoice* quality = nullptr;
  const PromptExperts* prompt_experts = nullptr;  // --pp-model: its counters in /stats, its threshold in /props
  // --expert-parallel (rank 0): each rank's figures so far in /stats; null without it.
  const ExpertParallel* ep = nullptr;
};

// The expert tier's monitor, installed as the model's routing observer; with `disk_probe` > 0 and
// streaming experts, the disk is measured first (that many bytes of random reads).
std::unique_ptr<TierMonitor> start_monitor(Engine& eng, uint64_t disk_probe);

// Wraps a handler with the server's authentication and error objects.
using HandlerWrap = std::function<httplib::Server::Handler(httplib::Server::Handler)>;
// `served` returns null while the model loads (the routes then answer 503 model_loading).
void add_info_routes(httplib::Server& http, const HandlerWrap& guarded, std::function<const ServedModel*()> served);

}  // namespace strata::server
