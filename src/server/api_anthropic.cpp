// Anthropic Messages: POST /v1/messages (streaming or not) and /v1/messages/count_tokens over the
// request core. The request becomes an OpenAI chat body; core events become content blocks.
#include <fmt/format.h>

#include "core/json_depth.h"
#include "server/api_host.h"

namespace strata::server {

using nlohmann::json;

namespace {

ApiError invalid(const std::string& where, const std::string& what) { return bad_request(where + " " + what, where, "invalid_value"); }

std::string block_type(const Json& b, const std::string& w) {
  if (!b.is_object()) throw bad_request(w + " must be a content block object", w, "invalid_type");
  auto t = opt_string(b, "type", w);
  if (!t) throw bad_request(w + ".type is required", w + ".type", "missing_required_parameter");
  return *t;
}

std::string text_of(const Json& b, const std::string& w) {
  auto t = opt_string(b, "text", w);
  if (!t) throw bad_request(w + ".text is required", w + ".text", "missing_required_parameter");
  return *t;
}

// A string, or text blocks (system, tool_result content).
std::string plain_text(const Json& c, const std::string& w) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request(w + " must be a string or an array of text blocks", w, "invalid_type");
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string bw = fmt::format("{}[{}]", w, i);
    if (block_type(c[i], bw) != "text") throw invalid(bw + ".type", "must be \"text\" here (images and documents are not supported)");
    out += text_of(c[i], bw);
  }
  return out;
}

// One Anthropic message -> OpenAI messages: a user turn's tool_result blocks become tool messages.
void convert_message(const Json& m, const std::string& w, Json& out) {
  if (!m.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
  const std::string role = opt_string(m, "role", w).value_or("");
  if (role != "user" && role != "assistant") throw invalid(w + ".role", "must be \"user\" or \"assistant\"");
  const Json* c = field(m, "content");
  if (!c) throw bad_request(w + ".content is required", w + ".content", "missing_required_parameter");
  if (c->is_string()) {
    out.push_back(Json{{"role", role}, {"content", c->get<std::string>()}});
    return;
  }
  if (!c->is_array()) throw bad_request(w + ".content must be a string or an array of content blocks", w + ".content", "invalid_type");
  std::string text, thinking;
  Json calls = Json::array();
  for (size_t i = 0; i < c->size(); ++i) {
    const std::string bw = fmt::format("{}.content[{}]", w, i);
    const Json& b = (*c)[i];
    const std::string type = block_type(b, bw);
    if (type == "text") {
      text += text_of(b, bw);
    } else if (type == "thinking" && role == "assistant") {
      thinking += opt_string(b, "thinking", bw).value_or("");
    } else if (type == "redacted_thinking" && role == "assistant") {
    } else if (type == "tool_use" && role == "assistant") {
      auto id = opt_string(b, "id", bw);
      auto name = opt_string(b, "name", bw);
      if (!id || !name || name->empty()) throw bad_request(bw + " needs an id and a name", bw, "missing_required_parameter");
      const Json* in = field(b, "input");
      if (in && !in->is_object()) throw bad_request(bw + ".input must be an object", bw + ".input", "invalid_type");
      calls.push_back(Json{{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", in ? in->dump() : "{}"}}}});
    } else if (type == "tool_result" && role == "user") {
      auto id = opt_string(b, "tool_use_id", bw);
      if (!id) throw bad_request(bw + ".tool_use_id is required", bw + ".tool_use_id", "missing_required_parameter");
      const Json* rc = field(b, "content");
      std::string result = rc ? plain_text(*rc, bw + ".content") : "";
      if (opt_boolean(b, "is_error").value_or(false)) result = "Error: " + result;
      out.push_back(Json{{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else {
      throw invalid(bw + ".type", fmt::format("'{}' is not supported in a {} message", type, role));
    }
  }
  if (role == "user") {
    if (!text.empty() || out.empty() || out.back()["role"] != "tool") out.push_back(Json{{"role", "user"}, {"content", text}});
    return;
  }
  Json a{{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) a["tool_calls"] = calls;
  if (!thinking.empty()) a["reasoning_content"] = thinking;
  out.push_back(std::move(a));
}

Json convert_tools(const Json& ts) {
  if (!ts.is_array()) throw wrong_type("tools", "an array");
  Json out = Json::array();
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const Json& t = ts[i];
    if (!t.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
    if (auto type = opt_string(t, "type", w); type && *type != "custom") throw invalid(w + ".type", fmt::format("'{}' is not supported (client tools only)", *type));
    auto name = opt_string(t, "name", w);
    if (!name || name->empty()) throw bad_request(w + ".name is required", w + ".name", "missing_required_parameter");
    const Json* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) throw bad_request(w + ".input_schema must be a JSON Schema object", w + ".input_schema", "invalid_type");
    Json f{{"name", *name}, {"parameters", *schema}};
    if (auto d = opt_string(t, "description", w)) f["description"] = *d;
    out.push_back(Json{{"type", "function"}, {"function", f}});
  }
  return out;
}

// The Anthropic request as the core's OpenAI chat body.
Json to_chat(const Json& j) {
  Json o = Json::object();
  for (const char* k : {"model", "stream", "temperature", "top_p", "top_k"})
    if (const Json* v = field(j, k)) o[k] = *v;
  const Json* mt = field(j, "max_tokens");
  if (!mt) throw bad_request("max_tokens is required", "max_tokens", "missing_required_parameter");
  if (!mt->is_number_integer() || mt->get<int64_t>() < 1) throw invalid("max_tokens", "must be an integer >= 1");
  o["max_tokens"] = *mt;
  if (const Json* s = field(j, "stop_sequences")) o["stop"] = *s;
  Json msgs = Json::array();
  if (const Json* s = field(j, "system")) msgs.push_back(Json{{"role", "system"}, {"content", plain_text(*s, "system")}});
  const Json* ms = field(j, "messages");
  if (!ms) throw bad_request("messages is required", "messages", "missing_required_parameter");
  if (!ms->is_array() || ms->empty()) throw invalid("messages", "must be a non-empty array");
  for (size_t i = 0; i < ms->size(); ++i) convert_message((*ms)[i], fmt::format("messages[{}]", i), msgs);
  o["messages"] = std::move(msgs);
  if (const Json* ts = field(j, "tools"); ts && !ts->empty()) o["tools"] = convert_tools(*ts);
  if (const Json* tc = field(j, "tool_choice")) {
    if (!tc->is_object()) throw wrong_type("tool_choice", "an object");
    const std::string type = opt_string(*tc, "type", "tool_choice").value_or("");
    if (type == "auto") o["tool_choice"] = "auto";
    else if (type == "any") o["tool_choice"] = "required";
    else if (type == "none") o["tool_choice"] = "none";
    else if (type == "tool") o["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", opt_string(*tc, "name", "tool_choice").value_or("")}}}};
    else throw invalid("tool_choice.type", "must be auto, any, tool or none");
    if (opt_boolean(*tc, "disable_parallel_tool_use").value_or(false)) o["parallel_tool_calls"] = false;
    if (type != "none" && type != "auto" && !o.contains("tools")) throw invalid("tool_choice", "needs tools");
  }
  if (const Json* th = field(j, "thinking")) {
    if (!th->is_object()) throw wrong_type("thinking", "an object");
    const std::string type = opt_string(*th, "type", "thinking").value_or("");
    if (type == "enabled") o["reasoning_budget"] = opt_integer(*th, "budget_tokens", 0, INT32_MAX).value_or(-1);
    else if (type == "disabled") o["reasoning_budget"] = 0;
    else throw invalid("thinking.type", "must be enabled or disabled");
  }
  return o;
}

const char* stop_reason(const GenEvent& f, bool called) {
  if (f.finish == Finish::Length) return "max_tokens";  // also when a call was cut off
  if (called) return "tool_use";
  return f.stop_string.empty() ? "end_turn" : "stop_sequence";
}

json stop_sequence(const GenEvent& f) { return f.stop_string.empty() || f.finish != Finish::Stop ? json(nullptr) : json(f.stop_string); }

// The arguments as an object; a call cut off by max_tokens: as far as they parse.
json tool_input(const std::string& args) {
  if (json_nesting(args).over()) return json::object();
  return toolcall::arguments_object(args);
}

json message_json(const CoreRun& run, const ChoiceResult* r) {
  json m{{"id", run.job.id}, {"type", "message"}, {"role", "assistant"}, {"model", run.job.model}, {"content", json::array()}};
  m["stop_reason"] = r ? json(stop_reason(r->final, !r->parsed.calls.empty())) : json(nullptr);
  m["stop_sequence"] = r ? stop_sequence(r->final) : json(nullptr);
  m["usage"] = {{"input_tokens", run.prompt_tokens}, {"output_tokens", r ? r->final.completion_tokens : 0}};
  if (!r) return m;
  m["usage"]["cache_read_input_tokens"] = r->final.cached_tokens;
  const toolcall::Parsed& p = r->parsed;
  if (!p.reasoning.empty()) m["content"].push_back(json{{"type", "thinking"}, {"thinking", p.reasoning}, {"signature", ""}});
  if (!p.content.empty() || p.calls.empty()) m["content"].push_back(json{{"type", "text"}, {"text", p.content}});
  for (const auto& c : p.calls) m["content"].push_back(json{{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_input(c.arguments)}});
  return m;
}

// message_start, content blocks (start / deltas / stop) as the kind of event changes,
// message_delta, message_stop.
class AnthropicStream : public WireStream {
 public:
  bool begin(CoreRun& run, const Emit& emit) override {
    return emit(sse("message_start", json{{"type", "message_start"}, {"message", message_json(run, nullptr)}}));
  }
  bool event(CoreRun&, const CoreEvent& e, const Emit& emit) override {
    using K = CoreEvent::Kind;
    switch (e.kind) {
      case K::Reasoning: return open("thinking", json{{"type", "thinking"}, {"thinking", ""}}, emit) && delta(json{{"type", "thinking_delta"}, {"thinking", e.text}}, emit);
      case K::Text: return open("text", json{{"type", "text"}, {"text", ""}}, emit) && delta(json{{"type", "text_delta"}, {"text", e.text}}, emit);
      case K::CallStart:
        return close(emit) && open("tool_use", json{{"type", "tool_use"}, {"id", e.id}, {"name", e.name}, {"input", json::object()}}, emit);
      case K::CallArgs: return delta(json{{"type", "input_json_delta"}, {"partial_json", e.text}}, emit);
      case K::CallEnd: return close(emit);
      case K::Finish: {
        if (!close(emit)) return false;
        json md{{"type", "message_delta"}, {"delta", {{"stop_reason", stop_reason(*e.final, e.called)}, {"stop_sequence", stop_sequence(*e.final)}}}};
        md["usage"] = {{"output_tokens", e.final->completion_tokens}};
        return emit(sse("message_delta", md));
      }
    }
    return true;
  }
  bool end(CoreRun&, const Emit& emit) override { return emit(sse("message_stop", json{{"type", "message_stop"}})); }
  void error(CoreRun&, const std::string& message, const Emit& emit) override {
    emit(sse("error", error_body(ErrorShape::Anthropic, ApiError(500, message, "server_error"))));
  }

 private:
  bool open(const std::string& kind, const json& block, const Emit& emit) {
    if (kind_ == kind && kind != "tool_use") return true;
    if (!close(emit)) return false;
    kind_ = kind;
    return emit(sse("content_block_start", json{{"type", "content_block_start"}, {"index", index_}, {"content_block", block}}));
  }
  bool delta(const json& d, const Emit& emit) {
    return emit(sse("content_block_delta", json{{"type", "content_block_delta"}, {"index", index_}, {"delta", d}}));
  }
  bool close(const Emit& emit) {
    if (kind_.empty()) return true;
    kind_.clear();
    return emit(sse("content_block_stop", json{{"type", "content_block_stop"}, {"index", index_++}}));
  }
  std::string kind_;  // the open block ("" none)
  int index_ = 0;
};

void messages(ApiHost& host, const httplib::Request& req, httplib::Response& res) {
  host.require_ready();
  const Json j = parse_body(req.body);
  auto [common, run] = start_chat(host, to_chat(j), "msg_", "toolu_");
  if (common.stream) return stream_run(res, run, client_of(req), std::make_shared<AnthropicStream>(), "text/event-stream");
  const auto results = collect(*run, [c = client_of(req)] { return c.gone(); });
  if (!results) throw ApiError(499, "the client closed the connection", "invalid_request_error");
  res.set_content(dump(message_json(*run, &(*results)[0])), "application/json");
}

// The prompt's token count, without generating.
void count_tokens(ApiHost& host, const httplib::Request& req, httplib::Response& res) {
  host.require_ready();
  Json j = parse_body(req.body);
  if (!field(j, "max_tokens")) j["max_tokens"] = 1;
  j["stream"] = false;
  const Json chat = to_chat(j);
  const CommonParams common = parse_common(chat, host.options().sampling, true);
  host.check_model(common.model);
  res.set_content(dump(json{{"input_tokens", count_prompt_tokens(host.core(), chat)}}), "application/json");
}

}  // namespace

void add_anthropic_routes(ApiHost& host) {
  host.http().Post("/v1/messages", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { messages(host, req, res); }, ErrorShape::Anthropic));
  host.http().Post("/v1/messages/count_tokens",
                   host.guarded([&host](const httplib::Request& req, httplib::Response& res) { count_tokens(host, req, res); }, ErrorShape::Anthropic));
}

}  // namespace strata::server
