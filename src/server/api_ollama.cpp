// Ollama: /api/chat and /api/generate (NDJSON streaming by default) over the request core;
// /api/tags, /api/ps, /api/show, /api/version describe the one served model.
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "core/json_depth.h"
#include "server/api_host.h"

namespace strata::server {

using nlohmann::json;

namespace {

ApiError invalid(const std::string& where, const std::string& what) { return bad_request(where + " " + what, where, "invalid_value"); }

std::string now_iso() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  return fmt::format("{}.{:06d}Z", buf, us);
}

void no_images(const Json& j, const std::string& w) {
  if (const Json* im = field(j, "images"); im && !(im->is_array() && im->empty())) throw invalid(w + ".images", "are not supported (text models only)");
}

// options {temperature, top_p, top_k, seed, num_predict, stop, num_ctx, ...} and format / think -> the chat body.
void convert_common(const Json& j, Json& o, int n_ctx) {
  for (const char* k : {"model"})
    if (const Json* v = field(j, k)) o[k] = *v;
  o["stream"] = opt_boolean(j, "stream").value_or(true);
  if (const Json* op = field(j, "options")) {
    if (!op->is_object()) throw wrong_type("options", "an object");
    for (const char* k : {"temperature", "top_p", "top_k", "seed", "stop", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"})
      if (const Json* v = field(*op, k)) o[k] = *v;
    if (auto np = opt_integer(*op, "num_predict", -2, INT32_MAX); np && *np >= 0) o["max_tokens"] = *np;
    // num_ctx: the server's context is fixed at start; a request may ask for at most that.
    if (auto nc = opt_integer(*op, "num_ctx", 1, INT32_MAX); nc && *nc > n_ctx)
      throw invalid("options.num_ctx", fmt::format("{} exceeds this server's context of {} tokens per request (set with -c at start)", *nc, n_ctx));
  }
  if (const Json* f = field(j, "format")) {
    if (f->is_string() && f->get<std::string>() == "json") o["response_format"] = Json{{"type", "json_object"}};
    else if (f->is_object()) o["response_format"] = Json{{"type", "json_schema"}, {"json_schema", {{"name", "format"}, {"schema", *f}}}};
    else if (!(f->is_string() && f->get<std::string>().empty())) throw invalid("format", "must be \"json\" or a JSON Schema object");
  }
  if (const Json* t = field(j, "think")) {
    if (t->is_boolean()) {
      if (!t->get<bool>()) o["reasoning_budget"] = 0;
    } else if (t->is_string()) {
      o["reasoning_effort"] = *t;
    } else {
      throw wrong_type("think", "a boolean or low / medium / high");
    }
  }
}

Json convert_messages(const Json& ms) {
  if (!ms.is_array() || ms.empty()) throw invalid("messages", "must be a non-empty array");
  Json out = Json::array();
  std::vector<std::pair<std::string, std::string>> pending;  // (id, name) of calls without a result yet
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string w = fmt::format("messages[{}]", i);
    const Json& m = ms[i];
    if (!m.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
    no_images(m, w);
    const std::string role = opt_string(m, "role", w).value_or("");
    Json om{{"role", role}, {"content", opt_string(m, "content", w).value_or("")}};
    if (role == "assistant") {
      if (auto th = opt_string(m, "thinking", w)) om["reasoning_content"] = *th;
      if (const Json* tc = field(m, "tool_calls")) {
        if (!tc->is_array()) throw wrong_type(w + ".tool_calls", "an array");
        Json calls = Json::array();
        for (size_t k = 0; k < tc->size(); ++k) {
          const std::string cw = fmt::format("{}.tool_calls[{}]", w, k);
          const Json* f = (*tc)[k].is_object() ? field((*tc)[k], "function") : nullptr;
          if (!f || !f->is_object()) throw bad_request(cw + ".function must be an object", cw + ".function", "invalid_type");
          const std::string name = opt_string(*f, "name", cw + ".function").value_or("");
          const Json* a = field(*f, "arguments");
          if (a && !a->is_object()) throw wrong_type(cw + ".function.arguments", "an object");
          const std::string id = fmt::format("call_{}_{}", i, k);
          pending.emplace_back(id, name);
          calls.push_back(Json{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", a ? a->dump() : "{}"}}}});
        }
        om["tool_calls"] = std::move(calls);
      }
    } else if (role == "tool") {
      const std::string name = opt_string(m, "tool_name", w).value_or(opt_string(m, "name", w).value_or(""));
      auto it = pending.begin();
      while (it != pending.end() && !name.empty() && it->second != name) ++it;
      if (it != pending.end()) om["tool_call_id"] = it->first, pending.erase(it);
      if (!name.empty()) om["name"] = name;
    }
    out.push_back(std::move(om));
  }
  return out;
}

Json chat_body(const Json& j, int n_ctx) {
  Json o = Json::object();
  convert_common(j, o, n_ctx);
  const Json* ms = field(j, "messages");
  if (!ms) throw bad_request("messages is required", "messages", "missing_required_parameter");
  o["messages"] = convert_messages(*ms);
  if (const Json* ts = field(j, "tools"); ts && !ts->empty()) o["tools"] = *ts;  // OpenAI's shape
  for (const char* k : {"tool_choice", "parallel_tool_calls"})  // strata extensions (OpenAI's values)
    if (const Json* v = field(j, k)) o[k] = *v;
  return o;
}

// generate: the prompt (and system) through the chat template, or raw: as it is.
Json generate_body(const Json& j, int n_ctx, bool& chat) {
  no_images(j, "request");
  for (const char* k : {"suffix", "template", "context"})
    if (const Json* v = field(j, k); v && !(v->is_string() && v->get<std::string>().empty()) && !(v->is_array() && v->empty()))
      throw invalid(k, "is not supported");
  Json o = Json::object();
  convert_common(j, o, n_ctx);
  auto prompt = opt_string(j, "prompt");
  if (!prompt || prompt->empty()) throw bad_request("prompt is required", "prompt", "missing_required_parameter");
  chat = !opt_boolean(j, "raw").value_or(false);
  if (!chat) {
    o["prompt"] = *prompt;
    return o;
  }
  Json msgs = Json::array();
  if (auto sys = opt_string(j, "system"); sys && !sys->empty()) msgs.push_back(Json{{"role", "system"}, {"content", *sys}});
  msgs.push_back(Json{{"role", "user"}, {"content", *prompt}});
  o["messages"] = std::move(msgs);
  return o;
}

// A call with its arguments as an object (cut off by num_predict: as far as they parse).
json call_json(const toolcall::ToolCall& c) {
  const json args = json_nesting(c.arguments).over() ? json::object() : toolcall::arguments_object(c.arguments);
  return json{{"function", {{"name", c.name}, {"arguments", args}}}};
}

// The counts and durations (ns) of the last line, from the engine thread's times (now_s()): load
// = from the request's arrival (t0) until a slot took it (parsing, template, the wait for a slot;
// the model is loaded once at start), prompt eval = until the pass that ended its prompt, eval =
// from there to the end; total = arrival to now, at least their sum.
void add_stats(json& j, const GenEvent& f, double t0) {
  const double t1 = now_s();
  auto ns = [](double s) { return static_cast<int64_t>(std::max(0.0, s) * 1e9); };
  const double admitted = f.t_admitted > 0 ? f.t_admitted : t0;
  const double prompt_done = f.t_prompt_done > 0 ? f.t_prompt_done : admitted;
  const double finished = f.t_finished > 0 ? f.t_finished : prompt_done;
  j["done_reason"] = f.finish == Finish::Length ? "length" : "stop";
  j["total_duration"] = ns(t1 - t0);
  j["load_duration"] = ns(admitted - t0);
  j["prompt_eval_count"] = f.prompt_tokens;
  j["prompt_eval_duration"] = ns(prompt_done - admitted);
  j["eval_count"] = f.completion_tokens;
  j["eval_duration"] = ns(finished - prompt_done);
}

// One JSON object per line; /api/chat puts text under message, /api/generate under response.
class OllamaStream : public WireStream {
 public:
  OllamaStream(bool chat, std::string model, double t0) : chat_(chat), model_(std::move(model)), t0_(t0) {}
  bool event(CoreRun&, const CoreEvent& e, const Emit& emit) override {
    using K = CoreEvent::Kind;
    switch (e.kind) {
      case K::Text: return line(e.text, "", nullptr, emit);
      case K::Reasoning: return line("", e.text, nullptr, emit);
      case K::CallStart: call_ = toolcall::ToolCall{e.id, e.name, ""}; return true;
      case K::CallArgs: call_.arguments += e.text; return true;
      case K::CallEnd: return line("", "", json::array({call_json(call_)}), emit);
      case K::Finish: fin_ = *e.final; return true;
    }
    return true;
  }
  bool end(CoreRun&, const Emit& emit) override {
    json j = base("", "", nullptr);
    j["done"] = true;
    add_stats(j, fin_, t0_);
    return emit(dump(j) + "\n");
  }
  void error(CoreRun&, const std::string& message, const Emit& emit) override { emit(dump(json{{"error", message}}) + "\n"); }

 private:
  json base(const std::string& text, const std::string& thinking, const json& calls) const {
    json j{{"model", model_}, {"created_at", now_iso()}};
    if (chat_) {
      j["message"] = {{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) j["message"]["thinking"] = thinking;
      if (!calls.is_null()) j["message"]["tool_calls"] = calls;
    } else {
      j["response"] = text;
      if (!thinking.empty()) j["thinking"] = thinking;
    }
    return j;
  }
  bool line(const std::string& text, const std::string& thinking, const json& calls, const Emit& emit) {
    json j = base(text, thinking, calls);
    j["done"] = false;
    return emit(dump(j) + "\n");
  }
  bool chat_;
  std::string model_;
  double t0_;  // the request's arrival (now_s())
  toolcall::ToolCall call_;
  GenEvent fin_;
};

// Ollama's /api/chat without messages loads the model and answers at once.
bool load_only(const Json& j) {
  const Json* ms = field(j, "messages");
  return !ms || (ms->is_array() && ms->empty());
}

void run_ollama(ApiHost& host, const httplib::Request& req, httplib::Response& res, bool chat_api) {
  const double t0 = now_s();
  host.require_ready();
  const Json j = parse_body(req.body);
  if (chat_api && load_only(j)) {
    const std::string model = opt_string(j, "model").value_or("");
    host.check_model(model);
    json out{{"model", model.empty() ? host.model_id() : model}, {"created_at", now_iso()}, {"message", {{"role", "assistant"}, {"content", ""}}},
             {"done_reason", "load"}, {"done", true}};
    res.set_content(dump(out) + (opt_boolean(j, "stream").value_or(true) ? "\n" : ""),
                    opt_boolean(j, "stream").value_or(true) ? "application/x-ndjson" : "application/json");
    return;
  }
  bool chat = true;
  const int n_ctx = host.core().sched->n_ctx();
  const Json body = chat_api ? chat_body(j, n_ctx) : generate_body(j, n_ctx, chat);
  const CommonParams common = parse_common(body, host.options().sampling, chat);
  host.check_model(common.model);
  const std::string model = common.model.empty() ? host.model_id() : common.model;
  auto run = start_request(host.core(), body, chat, common, "ollama-");
  if (common.stream) return stream_run(res, run, client_of(req), std::make_shared<OllamaStream>(chat_api, model, t0), "application/x-ndjson");
  const auto results = collect(*run, [c = client_of(req)] { return c.gone(); });
  if (!results) throw ApiError(499, "the client closed the connection", "invalid_request_error");
  const ChoiceResult& r = (*results)[0];
  json out{{"model", model}, {"created_at", now_iso()}};
  if (chat_api) {
    out["message"] = {{"role", "assistant"}, {"content", r.parsed.content}};
    if (!r.parsed.reasoning.empty()) out["message"]["thinking"] = r.parsed.reasoning;
    if (!r.parsed.calls.empty()) {
      out["message"]["tool_calls"] = json::array();
      for (const auto& c : r.parsed.calls) out["message"]["tool_calls"].push_back(call_json(c));
    }
  } else {
    out["response"] = r.parsed.content;
    if (!r.parsed.reasoning.empty()) out["thinking"] = r.parsed.reasoning;
  }
  out["done"] = true;
  add_stats(out, r.final, t0);
  res.set_content(dump(out), "application/json");
}

// The served model as /api/tags and /api/ps list it.
json model_entry(const ApiHost& host) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(host.model_path(), ec);
  const std::string name = host.model_id();
  json details{{"parent_model", ""}, {"format", "gguf"}, {"family", host.engine().config().arch}, {"families", json::array({host.engine().config().arch})},
               {"parameter_size", ""}, {"quantization_level", ""}};
  return json{{"name", name},
              {"model", name},
              {"modified_at", now_iso()},
              {"size", ec ? 0 : size},
              {"digest", fmt::format("{:016x}", std::hash<std::string>{}(host.model_path()))},
              {"details", details}};
}

void show(ApiHost& host, const httplib::Request& req, httplib::Response& res) {
  host.require_ready();
  const Json j = parse_body(req.body);
  auto m = opt_string(j, "model");
  if (!m) m = opt_string(j, "name");
  if (!m) throw bad_request("model is required", "model", "missing_required_parameter");
  host.check_model(*m);
  const auto& cfg = host.engine().config();
  const std::string& tmpl = host.core().chat_format->model_template;
  json caps = json::array({"completion", "tools"});
  if (tmpl.find("<think>") != std::string::npos) caps.push_back("thinking");
  json out{{"license", ""}, {"modelfile", ""}, {"parameters", ""}, {"template", tmpl}, {"details", model_entry(host)["details"]}};
  out["model_info"] = {{"general.architecture", cfg.arch}, {"general.name", cfg.name}, {cfg.arch + ".context_length", cfg.n_ctx_train}};
  out["capabilities"] = caps;
  out["modified_at"] = now_iso();
  res.set_content(dump(out), "application/json");
}

}  // namespace

void add_ollama_routes(ApiHost& host) {
  auto& http = host.http();
  http.Post("/api/chat", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { run_ollama(host, req, res, true); }, ErrorShape::Ollama));
  http.Post("/api/generate", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { run_ollama(host, req, res, false); }, ErrorShape::Ollama));
  http.Post("/api/show", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { show(host, req, res); }, ErrorShape::Ollama));
  http.Get("/api/version", host.guarded([](const httplib::Request&, httplib::Response& res) { res.set_content(R"({"version":"0.12.0"})", "application/json"); },
                                        ErrorShape::Ollama));
  http.Get("/api/tags", host.guarded(
                            [&host](const httplib::Request&, httplib::Response& res) {
                              host.require_ready();
                              res.set_content(dump(json{{"models", json::array({model_entry(host)})}}), "application/json");
                            },
                            ErrorShape::Ollama));
  http.Get("/api/ps", host.guarded(
                          [&host](const httplib::Request&, httplib::Response& res) {
                            host.require_ready();
                            json e = model_entry(host);
                            e["expires_at"] = "2318-01-01T00:00:00Z";  // loaded while the server runs
                            e["size_vram"] = 0;
                            e["context_length"] = host.core().sched->n_ctx();
                            res.set_content(dump(json{{"models", json::array({e})}}), "application/json");
                          },
                          ErrorShape::Ollama));
}

}  // namespace strata::server
