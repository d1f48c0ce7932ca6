#include "server/server_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/cpu_features.h"
#include "core/version.h"
#include "experts/disk_probe.h"
#include "runtime/model_copy.h"
#include "kernels/kernel_table.h"
#include "server/openai_api.h"
#include "runtime/text_stream.h"

namespace strata::server {

using nlohmann::json;

namespace {

const ServedModel& need(const std::function<const ServedModel*()>& served) {
  const ServedModel* m = served();
  if (!m) throw ApiError(503, "the model is loading", "server_error", "", "model_loading");
  return *m;
}

json props_json(const ServedModel& m) {
  const Engine& eng = *m.eng;
  const ModelConfig& cfg = m.eng->config();
  int n_expert = 0, n_expert_used = 0, n_moe = 0;
  for (const auto& l : cfg.layers) {
    n_expert = std::max(n_expert, l.n_expert);
    n_expert_used = std::max(n_expert_used, l.n_expert_used);
    n_moe += l.n_expert > 0 ? 1 : 0;
  }
  const SamplerParams& s = m.sampling;
  const json params{{"temperature", s.temp},       {"top_k", s.top_k},
                    {"top_p", s.top_p},            {"min_p", s.min_p},
                    {"repeat_penalty", s.repeat_penalty}, {"repeat_last_n", s.repeat_last_n},
                    {"presence_penalty", s.presence_penalty}, {"frequency_penalty", s.frequency_penalty},
                    {"seed", s.seed},
                    {"speculative.n_max", m.sched->default_draft_max()}, {"speculative.n_min", m.sched->default_draft_min()}};
  const MoeKnobs& kn = m.eng->model().moe_knobs();  // set at start, per server: read-only since
  const json knobs{{"k", kn.k},
                   {"min_mass", kn.min_mass},
                   {"route_cache", kn.route.on() ? json{{"keep", kn.route.keep}, {"cands", kn.route.cands}} : json(nullptr)},
                   {"quality_budget", m.quality ? quality_choice_json(*m.quality) : json(nullptr)},
                   {"pp_min_tokens", m.prompt_experts ? json(m.prompt_experts->min_tokens()) : json(nullptr)}};
  const MemoryPlan plan = m.eng->tier().plan_snapshot();  // an HTTP thread: the engine thread may change it
  const auto token_text = [&](int32_t t) { return t >= 0 && t < m.tok->n_vocab() ? m.tok->token_text(t) : std::string(); };
  return json{{"default_generation_settings", {{"n_ctx", eng.options().n_ctx}, {"params", params}}},
              {"total_slots", m.eng->n_seq()},
              {"model_path", m.model_path},
              {"model_alias", m.model_id},
              {"chat_template", m.chat_template},
              {"chat_format", m.chat_format},
              {"bos_token", token_text(m.tok->bos())},
              {"eos_token", token_text(m.tok->eos())},
              {"build_info", fmt::format("strata {} ({})", strata_version(), compiler_version())},
              {"kernels", kernel_choice()},
              {"cpu", cpu_features().describe()},
              {"modalities", {{"vision", false}, {"audio", false}}},
              {"webui", m.webui},
              {"model", {{"architecture", cfg.arch},
                         {"name", cfg.name},
                         {"n_vocab", cfg.n_vocab},
                         {"n_embd", cfg.n_embd},
                         {"n_layer", cfg.n_layer},
                         {"n_moe_layers", n_moe},
                         {"n_expert", n_expert},
                         {"n_expert_used", n_expert_used},
                         {"n_ctx_train", cfg.n_ctx_train}}},
              {"moe_knobs", knobs},
              {"expert_tier", {{"mode", plan.streaming ? "streaming" : "resident"},
                               {"budget", plan.budget},
                               {"dense_bytes", plan.dense},
                               {"experts_bytes", plan.experts_total},
                               {"expert_cache_bytes", plan.expert_cache},
                               {"cache_slots", plan.cache_slots},
                               {"plan", plan.describe()}}},
              {"gpu", plan.vram.planned ? json{{"device", plan.vram.device}, {"gpu_layers", plan.vram.gpu_layers}, {"n_layer", plan.vram.n_layer},
                                               {"vram_budget", plan.vram.budget}, {"vram_planned", plan.vram.total()}, {"vram_used", plan.vram.held}}
                                        : json(nullptr)}};
}

json slots_json(const ServedModel& m) {
  const SchedulerStats st = m.sched->stats();
  json out = json::array();
  for (size_t i = 0; i < st.slot_info.size(); ++i) {
    const SlotInfo& s = st.slot_info[i];
    out.push_back(json{{"id", i},
                       {"state", s.busy ? "processing" : "idle"},
                       {"is_processing", s.busy},
                       {"n_ctx", m.sched->n_ctx()},
                       {"n_past", s.n_past},
                       {"n_cached", s.n_cached},
                       {"n_prompt_tokens", s.n_prompt},
                       {"n_prompt_tokens_processed", s.n_prompt_done},
                       {"n_decoded", s.n_decoded},
                       {"speculative.n_max", s.draft_max},
                       {"speculative.n_min", s.draft_min},
                       {"n_draft_total", s.n_drafted},
                       {"n_draft_accepted", s.n_draft_accepted}});
  }
  return out;
}

json tokenize_json(const ServedModel& m, const Json& j) {
  const Json* c = field(j, "content");
  if (!c) throw bad_request("'content' is required", "content", "missing_required_parameter");
  if (!c->is_string()) throw wrong_type("content", "a string");
  const bool add_special = opt_boolean(j, "add_special").value_or(false);
  const bool parse_special = opt_boolean(j, "parse_special").value_or(true);
  const bool with_pieces = opt_boolean(j, "with_pieces").value_or(false);
  const std::vector<int32_t> ids = m.tok->encode(c->get<std::string>(), add_special, parse_special);
  json tokens = json::array();
  for (int32_t t : ids) {
    if (!with_pieces) {
      tokens.push_back(t);
      continue;
    }
    // A piece that is not whole UTF-8 (a byte token, part of a character) is its bytes.
    const std::string piece = m.tok->token_to_piece(t, /*special=*/true);
    json p = piece;
    if (!valid_utf8(piece)) p = std::vector<uint8_t>(piece.begin(), piece.end());
    tokens.push_back(json{{"id", t}, {"piece", p}});
  }
  return json{{"tokens", tokens}};
}

json detokenize_json(const ServedModel& m, const Json& j) {
  const Json* t = field(j, "tokens");
  if (!t) throw bad_request("'tokens' is required", "tokens", "missing_required_parameter");
  if (!t->is_array()) throw wrong_type("tokens", "an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const std::string name = fmt::format("tokens[{}]", i);
    const Json& v = (*t)[i];
    if (!v.is_number_integer()) throw wrong_type(name, "an integer");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= m.tok->n_vocab())
      throw bad_request(fmt::format("token id {} is outside the vocabulary (0..{})", id, m.tok->n_vocab() - 1), name, "invalid_value");
    ids.push_back(static_cast<int32_t>(id));
  }
  return json{{"content", m.tok->decode(ids, /*remove_special=*/false, /*unparse_special=*/true)}};
}

json stats_json(const ServedModel& m) {
  json j = m.monitor->snapshot(now_s());
  const SchedulerStats st = m.sched->stats();
  j["model"] = m.model_id;
  j["slots"] = {{"total", st.slots}, {"busy", st.busy}, {"queued", st.queued}};
  j["requests"] = {{"completed", st.requests_done}, {"cancelled", st.requests_cancelled}, {"failed", st.requests_failed}};
  if (m.eng->model().moe_knobs().route.on()) {  // --route-cache: what it chose since start (relaxed atomics)
    const RouteCacheCounters& rc = m.eng->model().route_counters();
    j["route_cache"] = {{"slots", rc.slots.load(std::memory_order_relaxed)},
                        {"changed", rc.changed.load(std::memory_order_relaxed)},
                        {"route_agreement", rc.agreement()}};
  }
  if (m.standin)  // --miss-model: experts computed from the stand-in since start, and their bytes (relaxed atomics)
    j["miss_model"] = {{"experts", m.standin->counters().experts.load(std::memory_order_relaxed)},
                       {"bytes", m.standin->counters().bytes.load(std::memory_order_relaxed)},
                       {"admits", m.standin->counters().admits.load(std::memory_order_relaxed)}};
  if (m.prompt_experts)  // --pp-model: experts long prompts took from the low-bit copy since start, and their bytes
    j["pp_model"] = {{"experts", m.prompt_experts->counters().experts.load(std::memory_order_relaxed)},
                     {"bytes", m.prompt_experts->counters().bytes.load(std::memory_order_relaxed)}};
  if (m.ep) {  // --expert-parallel: each rank's figures as of its latest answer
    json ranks = json::array();
    for (const EpRankStats& x : m.ep->live())
      ranks.push_back({{"hits", x.hits}, {"misses", x.misses}, {"bytes_read", x.bytes_read}, {"jobs", x.jobs}, {"pairs", x.pairs}, {"compute_s", x.compute_s}});
    j["expert_parallel"] = {{"ranks", m.ep->ranks()}, {"per_rank", ranks}};
  }
  return j;
}

// /stats/stream: one event now, then after engine passes (at most every interval) or every 2 s.
void stats_stream(const httplib::Request& req, httplib::Response& res, const ServedModel& m) {
  int interval = 250;
  if (req.has_param("interval_ms")) {
    const std::string v = req.get_param_value("interval_ms");
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 50 || n > 2000) throw bad_request("'interval_ms' must be an integer from 50 to 2000", "interval_ms", "invalid_value");
    interval = static_cast<int>(n);
  }
  struct State {
    uint64_t seen = ~0ull;
  };
  auto st = std::make_shared<State>();
  const ServedModel* mp = &m;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream", [st, mp, interval](size_t, httplib::DataSink& sink) {
    if (st->seen != ~0ull) {
      if (!mp->monitor->pause(interval) || !mp->monitor->wait(st->seen, 2000)) {
        sink.done();  // the server is stopping
        return true;
      }
    }
    st->seen = mp->monitor->steps();
    const std::string ev = "data: " + dump(stats_json(*mp)) + "\n\n";
    return sink.write(ev.data(), ev.size());
  });
}

}  // namespace

std::unique_ptr<TierMonitor> start_monitor(Engine& eng, uint64_t disk_probe) {
  TierMonitorOptions o;
  if (eng.tier().cache() && disk_probe > 0) {
    const TierOptions& t = eng.options().tier;
    const DriveProbe probe = measure_tier_drives(eng.tier(), t, disk_probe_depth(t.ram_budget, t.queue_depth), disk_probe);
    o.disk_bw = probe.all_bw;  // every drive at once: the limit
    if (probe.drive_bw.size() > 1) o.disk_drives_bw = probe.drive_bw;
    o.disk_probe_bytes = disk_probe;
  }
  auto m = std::make_unique<TierMonitor>(eng, o);
  eng.model().add_routing_observer(m.get());
  return m;
}

void add_info_routes(httplib::Server& http, const HandlerWrap& guarded, std::function<const ServedModel*()> served) {
  auto get = [&](const char* path, std::function<json(const ServedModel&)> f) {
    http.Get(path, guarded([served, f](const httplib::Request&, httplib::Response& res) { res.set_content(dump(f(need(served))), "application/json"); }));
  };
  get("/props", props_json);
  get("/slots", slots_json);
  get("/stats", stats_json);
  http.Get("/stats/stream", guarded([served](const httplib::Request& req, httplib::Response& res) { stats_stream(req, res, need(served)); }));
  auto post = [&](const char* path, std::function<json(const ServedModel&, const Json&)> f) {
    http.Post(path, guarded([served, f](const httplib::Request& req, httplib::Response& res) {
      const ServedModel& m = need(served);
      res.set_content(dump(f(m, parse_body(req.body))), "application/json");
    }));
  };
  post("/tokenize", tokenize_json);
  post("/detokenize", detokenize_json);
}

}  // namespace strata::server
