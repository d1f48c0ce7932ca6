// OpenAI Responses, stateless: POST /v1/responses (streaming or not) over the request core. The
// input items become an OpenAI chat body; core events become output items (reasoning, message,
// function_call) and, streaming, the response.* events with their sequence_number.
#include <fmt/format.h>

#include "server/api_host.h"

namespace strata::server {

using nlohmann::json;

namespace {

ApiError invalid(const std::string& where, const std::string& what) { return bad_request(where + " " + what, where, "invalid_value"); }

// A string or content parts (input_text / output_text / text).
std::string part_text(const Json& c, const std::string& w) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request(w + " must be a string or an array of text parts", w, "invalid_type");
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pw = fmt::format("{}[{}]", w, i);
    const Json& p = c[i];
    const std::string type = p.is_object() ? opt_string(p, "type", pw).value_or("") : "";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "summary_text" && type != "reasoning_text")
      throw invalid(pw + ".type", "must be input_text or output_text (other inputs are not supported)");
    auto t = opt_string(p, "text", pw);
    if (!t) throw bad_request(pw + ".text is required", pw + ".text", "missing_required_parameter");
    out += *t;
  }
  return out;
}

// The last message when it is an assistant's (function calls and reasoning attach to it), else a new one.
Json& assistant(Json& msgs) {
  if (msgs.empty() || msgs.back()["role"] != "assistant") msgs.push_back(Json{{"role", "assistant"}, {"content", ""}});
  return msgs.back();
}

void convert_item(const Json& it, const std::string& w, Json& msgs, std::string& reasoning) {
  if (!it.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
  const std::string type = opt_string(it, "type", w).value_or("message");
  if (type == "message") {
    const std::string role = opt_string(it, "role", w).value_or("");
    if (role != "user" && role != "assistant" && role != "system" && role != "developer") throw invalid(w + ".role", "must be user, assistant, system or developer");
    const Json* c = field(it, "content");
    if (!c) throw bad_request(w + ".content is required", w + ".content", "missing_required_parameter");
    Json m{{"role", role}, {"content", part_text(*c, w + ".content")}};
    if (role == "assistant" && !reasoning.empty()) m["reasoning_content"] = reasoning, reasoning.clear();
    msgs.push_back(std::move(m));
  } else if (type == "function_call") {
    auto id = opt_string(it, "call_id", w);
    auto name = opt_string(it, "name", w);
    if (!id || !name || name->empty()) throw bad_request(w + " needs call_id and name", w, "missing_required_parameter");
    Json& a = assistant(msgs);
    if (!reasoning.empty()) a["reasoning_content"] = reasoning, reasoning.clear();
    a["tool_calls"].push_back(Json{{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", opt_string(it, "arguments", w).value_or("{}")}}}});
  } else if (type == "function_call_output") {
    auto id = opt_string(it, "call_id", w);
    if (!id) throw bad_request(w + ".call_id is required", w + ".call_id", "missing_required_parameter");
    const Json* out = field(it, "output");
    msgs.push_back(Json{{"role", "tool"}, {"tool_call_id", *id}, {"content", out ? part_text(*out, w + ".output") : ""}});
  } else if (type == "reasoning") {
    const Json* c = field(it, "content");
    const Json* s = field(it, "summary");
    reasoning += c ? part_text(*c, w + ".content") : s ? part_text(*s, w + ".summary") : "";
  } else {
    throw invalid(w + ".type", fmt::format("'{}' is not supported (message, function_call, function_call_output, reasoning)", type));
  }
}

Json convert_tools(const Json& ts) {
  if (!ts.is_array()) throw wrong_type("tools", "an array");
  Json out = Json::array();
  for (size_t i = 0; i < ts.size(); ++i) {
    const std::string w = fmt::format("tools[{}]", i);
    const Json& t = ts[i];
    if (!t.is_object()) throw bad_request(w + " must be an object", w, "invalid_type");
    const std::string type = opt_string(t, "type", w).value_or("");
    if (type != "function") throw invalid(w + ".type", fmt::format("'{}' is not supported (function tools only)", type));
    auto name = opt_string(t, "name", w);
    if (!name || name->empty()) throw bad_request(w + ".name is required", w + ".name", "missing_required_parameter");
    Json f{{"name", *name}};
    if (auto d = opt_string(t, "description", w)) f["description"] = *d;
    if (const Json* p = field(t, "parameters")) f["parameters"] = *p;
    out.push_back(Json{{"type", "function"}, {"function", f}});
  }
  return out;
}

Json convert_format(const Json& text) {
  if (!text.is_object()) throw wrong_type("text", "an object");
  const Json* f = field(text, "format");
  if (!f) return nullptr;
  if (!f->is_object()) throw wrong_type("text.format", "an object");
  const std::string type = opt_string(*f, "type", "text.format").value_or("");
  if (type == "text") return nullptr;
  if (type == "json_object") return Json{{"type", "json_object"}};
  if (type != "json_schema") throw invalid("text.format.type", "must be text, json_object or json_schema");
  const Json* schema = field(*f, "schema");
  if (!schema) throw bad_request("text.format.schema is required", "text.format.schema", "missing_required_parameter");
  return Json{{"type", "json_schema"}, {"json_schema", {{"name", opt_string(*f, "name", "text.format").value_or("output")}, {"schema", *schema}}}};
}

Json to_chat(const Json& j) {
  if (field(j, "previous_response_id"))
    throw bad_request("previous_response_id is not supported: this server is stateless (send the whole conversation in input)", "previous_response_id",
                      "unsupported_parameter");
  if (opt_boolean(j, "store").value_or(false))
    throw bad_request("store: true is not supported: this server is stateless (send store: false or leave it out)", "store", "unsupported_parameter");
  Json o = Json::object();
  for (const char* k : {"model", "stream", "temperature", "top_p", "parallel_tool_calls", "seed", "top_k"})
    if (const Json* v = field(j, k)) o[k] = *v;
  if (auto v = opt_integer(j, "max_output_tokens", 1, INT32_MAX)) o["max_tokens"] = *v;
  Json msgs = Json::array();
  if (auto ins = opt_string(j, "instructions")) msgs.push_back(Json{{"role", "system"}, {"content", *ins}});
  const Json* in = field(j, "input");
  if (!in) throw bad_request("input is required", "input", "missing_required_parameter");
  if (in->is_string()) {
    msgs.push_back(Json{{"role", "user"}, {"content", in->get<std::string>()}});
  } else if (in->is_array()) {
    std::string reasoning;
    for (size_t i = 0; i < in->size(); ++i) convert_item((*in)[i], fmt::format("input[{}]", i), msgs, reasoning);
  } else {
    throw wrong_type("input", "a string or an array of items");
  }
  if (msgs.empty()) throw invalid("input", "must not be empty");
  o["messages"] = std::move(msgs);
  if (const Json* ts = field(j, "tools"); ts && !ts->empty()) o["tools"] = convert_tools(*ts);
  if (const Json* tc = field(j, "tool_choice")) {
    if (tc->is_object()) {
      if (opt_string(*tc, "type", "tool_choice").value_or("") != "function") throw invalid("tool_choice.type", "must be \"function\"");
      o["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", opt_string(*tc, "name", "tool_choice").value_or("")}}}};
    } else {
      o["tool_choice"] = *tc;
    }
  }
  if (const Json* r = field(j, "reasoning")) {
    if (!r->is_object()) throw wrong_type("reasoning", "an object");
    if (auto e = opt_string(*r, "effort", "reasoning")) o["reasoning_effort"] = *e;
  }
  if (const Json* t = field(j, "text")) {
    Json rf = convert_format(*t);
    if (!rf.is_null()) o["response_format"] = std::move(rf);
  }
  return o;
}

// The request's tools as the response echoes them: every field the schema requires (strict false
// when not given: arguments are not constrained to the schema unless tool_choice forces a call).
json echoed_tools(const Json& req) {
  json out = json::array();
  const Json* ts = field(req, "tools");
  if (!ts || !ts->is_array()) return out;
  for (const Json& t : *ts) {
    json e = json::parse(t.dump());
    if (!e.contains("description")) e["description"] = nullptr;
    if (!e.contains("parameters")) e["parameters"] = nullptr;
    if (!e.contains("strict") || !e["strict"].is_boolean()) e["strict"] = false;
    out.push_back(std::move(e));
  }
  return out;
}

// The response object around `output`.
json response_json(const CoreRun& run, const Json& req, const json& output, const char* status, const GenEvent* fin) {
  json r{{"id", run.job.id}, {"object", "response"}, {"created_at", run.job.created}, {"status", status}, {"error", nullptr}};
  r["incomplete_details"] = fin && fin->finish == Finish::Length ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  r["model"] = run.job.model;
  r["output"] = output;
  r["instructions"] = req.contains("instructions") ? json::parse(req["instructions"].dump()) : json(nullptr);
  r["parallel_tool_calls"] = req.value("parallel_tool_calls", true);
  r["previous_response_id"] = nullptr;
  r["store"] = false;
  r["temperature"] = run.job.common.sampling.temp;
  r["top_p"] = run.job.common.sampling.top_p;
  r["tool_choice"] = req.contains("tool_choice") ? json::parse(req["tool_choice"].dump()) : json("auto");
  r["tools"] = echoed_tools(req);
  r["max_output_tokens"] = run.job.common.max_tokens < 0 ? json(nullptr) : json(run.job.common.max_tokens);
  r["truncation"] = "disabled";
  r["metadata"] = json::object();
  r["usage"] = nullptr;
  if (fin) {
    r["usage"] = {{"input_tokens", fin->prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", fin->cached_tokens}}},
                  {"output_tokens", fin->completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", fin->prompt_tokens + fin->completion_tokens}};
  }
  return r;
}

const char* final_status(const GenEvent& f) { return f.finish == Finish::Length ? "incomplete" : "completed"; }

json reasoning_item(const std::string& id, const std::string& text) {
  return json{{"id", id}, {"type", "reasoning"}, {"summary", json::array()}, {"content", json::array({json{{"type", "reasoning_text"}, {"text", text}}})}};
}
json output_text(const std::string& text) { return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}}; }
json message_item(const std::string& id, const std::string& text, const char* status) {
  return json{{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", json::array({output_text(text)})}};
}
json call_item(const std::string& id, const toolcall::ToolCall& c, const char* status) {
  return json{{"id", id}, {"type", "function_call"}, {"status", status}, {"arguments", c.arguments}, {"call_id", c.id}, {"name", c.name}};
}

// Cut off at max_output_tokens, the item it ended in is incomplete: a call cut off, else the message.
json output_of(const toolcall::Parsed& p, const GenEvent& fin) {
  const bool cut = fin.finish == Finish::Length;
  json out = json::array();
  if (!p.reasoning.empty()) out.push_back(reasoning_item(random_id("rs_"), p.reasoning));
  const bool in_call = !p.calls.empty() && p.calls.back().cut;
  if (!p.content.empty() || p.calls.empty()) out.push_back(message_item(random_id("msg_"), p.content, cut && !in_call ? "incomplete" : "completed"));
  for (const auto& c : p.calls) out.push_back(call_item(random_id("fc_"), c, c.cut ? "incomplete" : "completed"));
  return out;
}

// The response.* events: one output item per reasoning block, message and function call.
class ResponsesStream : public WireStream {
 public:
  explicit ResponsesStream(Json req) : req_(std::move(req)) {}

  bool begin(CoreRun& run, const Emit& emit) override {
    const json r = response_json(run, req_, json::array(), "in_progress", nullptr);
    return send("response.created", json{{"response", r}}, emit) && send("response.in_progress", json{{"response", r}}, emit);
  }
  bool event(CoreRun& run, const CoreEvent& e, const Emit& emit) override {
    using K = CoreEvent::Kind;
    switch (e.kind) {
      case K::Reasoning:
        if (kind_ != "reasoning" && !open("reasoning", json{{"id", random_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()}, {"content", json::array()}}, emit))
          return false;
        text_ += e.text;
        return send("response.reasoning_text.delta", at(json{{"content_index", 0}, {"delta", e.text}}), emit);
      case K::Text:
        if (kind_ != "message" && !open_message(emit)) return false;
        text_ += e.text;
        return send("response.output_text.delta", at(json{{"content_index", 0}, {"delta", e.text}, {"logprobs", json::array()}}), emit);
      case K::CallStart:
        call_ = toolcall::ToolCall{e.id, e.name, ""};
        return open("function_call", call_item(random_id("fc_"), call_, "in_progress"), emit);
      case K::CallArgs:
        call_.arguments += e.text;
        return send("response.function_call_arguments.delta", at(json{{"delta", e.text}}), emit);
      case K::CallEnd: return close(emit, e.cut);
      case K::Finish:
        fin_ = *e.final;
        // Like the non-streamed output: a message (maybe empty) unless the reply made calls.
        if (!e.called && kind_ != "message" && !has_message_ && !open_message(emit)) return false;
        return close(emit, fin_.finish == Finish::Length);
    }
    (void)run;
    return true;
  }
  bool end(CoreRun& run, const Emit& emit) override {
    const char* status = final_status(fin_);
    const char* name = fin_.finish == Finish::Length ? "response.incomplete" : "response.completed";
    return send(name, json{{"response", response_json(run, req_, output_, status, &fin_)}}, emit);
  }
  void error(CoreRun& run, const std::string& message, const Emit& emit) override {
    json r = response_json(run, req_, output_, "failed", nullptr);
    r["error"] = {{"code", "server_error"}, {"message", message}};
    send("response.failed", json{{"response", r}}, emit);
  }

 private:
  bool send(const char* type, json data, const Emit& emit) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return emit(sse(type, data));
  }
  bool open_message(const Emit& emit) {
    has_message_ = true;
    return open("message", json{{"id", random_id("msg_")}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"}, {"content", json::array()}}, emit) &&
           send("response.content_part.added", at(json{{"content_index", 0}, {"part", output_text("")}}), emit);
  }
  // item_id and output_index of the open item added to `d`.
  json at(json d) const {
    d["item_id"] = item_["id"];
    d["output_index"] = output_.size();
    return d;
  }
  bool open(const std::string& kind, const json& item, const Emit& emit) {
    if (!close(emit)) return false;
    kind_ = kind;
    item_ = item;
    text_.clear();
    return send("response.output_item.added", json{{"output_index", output_.size()}, {"item", item}}, emit);
  }
  // `cut`: the output ended inside this item (max_output_tokens): it is incomplete.
  bool close(const Emit& emit, bool cut = false) {
    if (kind_.empty()) return true;
    const char* status = cut ? "incomplete" : "completed";
    bool ok = true;
    if (kind_ == "reasoning") {
      ok = send("response.reasoning_text.done", at(json{{"content_index", 0}, {"text", text_}}), emit);
      item_ = reasoning_item(item_["id"], text_);
    } else if (kind_ == "message") {
      ok = send("response.output_text.done", at(json{{"content_index", 0}, {"text", text_}, {"logprobs", json::array()}}), emit) &&
           send("response.content_part.done", at(json{{"content_index", 0}, {"part", output_text(text_)}}), emit);
      item_ = message_item(item_["id"], text_, status);
    } else {
      ok = send("response.function_call_arguments.done", at(json{{"name", call_.name}, {"arguments", call_.arguments}}), emit);
      item_ = call_item(item_["id"], call_, status);
    }
    ok = ok && send("response.output_item.done", json{{"output_index", output_.size()}, {"item", item_}}, emit);
    output_.push_back(item_);
    kind_.clear();
    return ok;
  }

  Json req_;
  int64_t seq_ = 0;
  std::string kind_;  // the open item's type ("" none)
  json item_;
  std::string text_;
  toolcall::ToolCall call_;
  json output_ = json::array();
  bool has_message_ = false;
  GenEvent fin_;
};

void responses(ApiHost& host, const httplib::Request& req, httplib::Response& res) {
  host.require_ready();
  const Json j = parse_body(req.body);
  auto [common, run] = start_chat(host, to_chat(j), "resp_", "call_");
  if (common.stream) return stream_run(res, run, client_of(req), std::make_shared<ResponsesStream>(j), "text/event-stream");
  const auto results = collect(*run, [c = client_of(req)] { return c.gone(); });
  if (!results) throw ApiError(499, "the client closed the connection", "invalid_request_error");
  const ChoiceResult& r = (*results)[0];
  res.set_content(dump(response_json(*run, j, output_of(r.parsed, r.final), final_status(r.final), &r.final)), "application/json");
}

}  // namespace

void add_responses_routes(ApiHost& host) {
  host.http().Post("/v1/responses", host.guarded([&host](const httplib::Request& req, httplib::Response& res) { responses(host, req, res); }, ErrorShape::OpenAI));
}

}  // namespace strata::server
