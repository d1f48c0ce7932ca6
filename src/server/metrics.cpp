#include "server/metrics.h"

#include <fmt/format.h>

namespace strata::server {

void RequestCounters::add(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  n_[{endpoint, status}]++;
}

std::map<std::pair<std::string, int>, uint64_t> RequestCounters::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return n_;
}

namespace {
std::string render_samples(const SchedulerStats* s, const RequestCounters& requests, const ServerState& state);

void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}

// --expert-parallel: one counter family per figure, a sample per rank.
void render_ep_ranks(std::string& out, const std::vector<EpRankStats>& ranks) {
  struct Family {
    const char* name;
    const char* help;
    double (*get)(const EpRankStats&);
  };
  static const Family kFamilies[] = {
      {"strata_ep_rank_hits_total", "Expert cache hits of each rank (rank 0: its own shard).", [](const EpRankStats& x) { return double(x.hits); }},
      {"strata_ep_rank_misses_total", "Expert cache misses of each rank.", [](const EpRankStats& x) { return double(x.misses); }},
      {"strata_ep_rank_bytes_read_total", "Bytes of experts each rank read from its disk.", [](const EpRankStats& x) { return double(x.bytes_read); }},
      {"strata_ep_rank_jobs_total", "MoE-layer jobs each rank served (rank 0: sent to the others).", [](const EpRankStats& x) { return double(x.jobs); }},
      {"strata_ep_rank_pairs_total", "Routed (token, expert) pairs each rank computed (rank 0: sent to the others).",
       [](const EpRankStats& x) { return double(x.pairs); }},
      {"strata_ep_rank_compute_seconds_total", "Seconds each rank other than 0 spent computing routed experts.",
       [](const EpRankStats& x) { return x.compute_s; }},
  };
  for (const Family& f : kFamilies) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", f.name, f.help, f.name);
    for (size_t r = 0; r < ranks.size(); ++r) out += fmt::format("{}{{rank=\"{}\"}} {}\n", f.name, r, f.get(ranks[r]));
  }
}
}  // namespace

std::string add_label(const std::string& text, const std::string& name, const std::string& value) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  const std::string label = fmt::format("{}=\"{}\"", name, value);
  size_t p = 0;
  while (p < text.size()) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    const std::string_view line(text.data() + p, e - p);
    const size_t brace = line.find('{'), space = line.find(' ');
    if (line.empty() || line[0] == '#' || space == std::string_view::npos) out += line;
    else if (brace != std::string_view::npos && brace < space) out += fmt::format("{}{},{}", line.substr(0, brace + 1), label, line.substr(brace + 1));
    else out += fmt::format("{}{{{}}}{}", line.substr(0, space), label, line.substr(space));
    if (e < text.size()) out += '\n';
    p = e + 1;
  }
  return out;
}

std::string render_metrics(const SchedulerStats* s, const RequestCounters& requests, const ServerState& state, const std::vector<EpRankStats>* ep) {
  std::string out = render_samples(s, requests, state);
  if (s && ep) render_ep_ranks(out, *ep);
  return state.replica.empty() ? out : add_label(out, "replica", state.replica);
}

namespace {
std::string render_samples(const SchedulerStats* s, const RequestCounters& requests, const ServerState& state) {
  std::string out;
  out += "# HELP strata_requests_total HTTP requests handled, by endpoint and status code.\n# TYPE strata_requests_total counter\n";
  for (const auto& [k, v] : requests.snapshot())
    out += fmt::format("strata_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, v);
  metric(out, "strata_ready", "gauge", "1 when the model is loaded.", state.ready ? 1 : 0);
  metric(out, "strata_draining", "gauge", "1 while the server drains (SIGTERM): in-flight requests finish, new ones get 503.", state.draining ? 1 : 0);
  if (!s) return out;
  metric(out, "strata_prompt_tokens_total", "counter", "Prompt tokens evaluated.", static_cast<double>(s->prompt_tokens));
  metric(out, "strata_prompt_tokens_reused_total", "counter", "Prompt tokens whose KV rows a slot kept from its previous request (shared prefix).",
         static_cast<double>(s->prompt_tokens_reused));
  metric(out, "strata_completion_tokens_total", "counter", "Tokens generated.", static_cast<double>(s->completion_tokens));
  metric(out, "strata_generation_tokens_per_second", "gauge", "Tokens generated per second over the last 10 seconds.", s->decode_tps);
  metric(out, "strata_requests_completed_total", "counter", "Generations that ended normally (stop or length).", static_cast<double>(s->requests_done));
  metric(out, "strata_requests_cancelled_total", "counter", "Generations cancelled (client gone).", static_cast<double>(s->requests_cancelled));
  metric(out, "strata_requests_failed_total", "counter", "Generations that ended with an error.", static_cast<double>(s->requests_failed));
  metric(out, "strata_queue_length", "gauge", "Requests waiting for a slot.", s->queued);
  metric(out, "strata_slots_busy", "gauge", "Sequence slots generating or reading a prompt.", s->busy);
  metric(out, "strata_slots_total", "gauge", "Sequence slots (--parallel).", s->slots);
  metric(out, "strata_engine_steps_total", "counter", "Forward passes (one batch each).", static_cast<double>(s->steps));
  metric(out, "strata_batch_tokens_total", "counter", "Tokens over all forward passes.", static_cast<double>(s->batch_tokens));
  metric(out, "strata_engine_busy_seconds_total", "counter", "Seconds in forward passes and sampling.", s->busy_s);
  metric(out, "strata_draft_passes_total", "counter", "Slot passes that verified drafted tokens (speculation).", static_cast<double>(s->draft_passes));
  metric(out, "strata_draft_tokens_total", "counter", "Drafted tokens verified.", static_cast<double>(s->drafts_proposed));
  metric(out, "strata_draft_tokens_accepted_total", "counter", "Drafted tokens accepted (the tokens the model chose).",
         static_cast<double>(s->drafts_accepted));
  metric(out, "strata_draft_experts_demoted_total", "counter", "Experts read only for rejected drafted tokens, put at the cache's low priority.",
         static_cast<double>(s->draft_experts_demoted));
  const double acc = static_cast<double>(s->expert_hits + s->expert_misses);
  metric(out, "strata_expert_streaming", "gauge", "1 when routed experts stream from disk through the cache.", s->streaming_experts ? 1 : 0);
  metric(out, "strata_expert_cache_hits_total", "counter", "Expert cache hits.", static_cast<double>(s->expert_hits));
  metric(out, "strata_expert_cache_misses_total", "counter", "Expert cache misses.", static_cast<double>(s->expert_misses));
  metric(out, "strata_expert_cache_hit_ratio", "gauge", "Expert cache hits / accesses (1 when experts are resident).",
         s->streaming_experts ? (acc > 0 ? s->expert_hits / acc : 0.0) : 1.0);
  metric(out, "strata_expert_bytes_read_total", "counter", "Bytes of experts read from disk.", static_cast<double>(s->expert_bytes_read));
  metric(out, "strata_expert_fetch_wait_seconds_total", "counter", "Seconds the forward pass waited for expert reads.", s->expert_wait_s);
  const DeviceExpertStats& v = s->vram_experts;
  if (v.slots > 0) {
    metric(out, "strata_vram_expert_slots", "gauge", "Expert slots of the VRAM tier.", v.slots);
    metric(out, "strata_vram_experts_resident", "gauge", "Experts in the VRAM tier now.", v.resident);
    metric(out, "strata_vram_expert_hits_total", "counter", "Routed expert uses computed on the GPU from VRAM.", static_cast<double>(v.vram_hits));
    metric(out, "strata_vram_expert_cpu_total", "counter", "Routed expert uses computed on the CPU (RAM hits and disk reads).", static_cast<double>(v.cpu));
    metric(out, "strata_vram_expert_uploads_total", "counter", "Experts promoted to VRAM.", static_cast<double>(v.uploads));
    metric(out, "strata_vram_expert_upload_bytes_total", "counter", "Bytes of experts promoted to VRAM.", static_cast<double>(v.upload_bytes));
    metric(out, "strata_vram_expert_evictions_total", "counter", "Experts that left VRAM for others.", static_cast<double>(v.evictions));
  }
  return out;
}
}  // namespace

}  // namespace strata::server
