#include "server/api_host.h"

namespace strata::server {

using nlohmann::json;

json error_body(ErrorShape shape, const ApiError& e) {
  switch (shape) {
    case ErrorShape::OpenAI: return error_json(e);
    case ErrorShape::Anthropic: {
      const char* type = e.status == 401 ? "authentication_error" : e.status == 404 ? "not_found_error" : e.status == 413 ? "request_too_large"
                       : e.status == 503 ? "overloaded_error" : e.status >= 500 ? "api_error" : "invalid_request_error";
      return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}};
    }
    case ErrorShape::Ollama: return json{{"error", e.what()}};
  }
  return error_json(e);
}

ErrorShape shape_of_path(const std::string& path) {
  if (path.rfind("/v1/messages", 0) == 0) return ErrorShape::Anthropic;
  if (path.rfind("/api/", 0) == 0) return ErrorShape::Ollama;
  return ErrorShape::OpenAI;
}

StartedChat start_chat(ApiHost& host, const Json& chat, const char* id_prefix, const char* call_prefix) {
  StartedChat s;
  s.common = parse_common(chat, host.options().sampling, /*chat=*/true);
  host.check_model(s.common.model);
  s.run = start_request(host.core(), chat, /*chat=*/true, s.common, id_prefix, call_prefix);
  s.run->job.model = s.common.model.empty() ? host.model_id() : s.common.model;
  return s;
}

std::string sse(const std::string& event, const json& data) {
  std::string s;
  if (!event.empty()) s = "event: " + event + "\n";
  return s + "data: " + dump(data) + "\n\n";
}

namespace {

struct StreamState {
  std::shared_ptr<CoreRun> run;
  std::shared_ptr<WireStream> ws;
  ClientSocket client;
  bool started = false;
};

// One provider call: forwards what the choices produced; false when the client is gone.
bool stream_step(StreamState& st, httplib::DataSink& sink) {
  CoreRun& run = *st.run;
  const WireStream::Emit emit = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  bool ok = true;
  if (!st.started) {
    st.started = true;
    ok = st.ws->begin(run, emit);
  }
  bool failed = false;
  if (ok) {
    ok = run.pump(50, [&](const CoreEvent& e) {
      if (e.kind == CoreEvent::Kind::Finish && e.final->finish == Finish::Error) {
        st.ws->error(run, e.final->error, emit);
        failed = true;
        return false;
      }
      return st.ws->event(run, e, emit);
    });
  }
  if (failed) {
    run.cancel();
    return false;
  }
  if (ok && run.finished()) {
    st.ws->end(run, emit);
    sink.done();
    return true;
  }
  // A client that hangs up before the first token (a long prompt) is noticed on its socket.
  if (!ok || !sink.is_writable() || st.client.gone()) {
    run.cancel();  // the client is gone: free the slots
    return false;
  }
  return true;
}

}  // namespace

void stream_run(httplib::Response& res, std::shared_ptr<CoreRun> run, const ClientSocket& client, std::shared_ptr<WireStream> ws,
                const char* content_type) {
  auto st = std::make_shared<StreamState>();
  st->run = std::move(run);
  st->ws = std::move(ws);
  st->client = client;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      content_type, [st](size_t, httplib::DataSink& sink) -> bool { return stream_step(*st, sink); }, [st](bool) { st->run->cancel(); });
}

}  // namespace strata::server
