#pragma once
// What the wire-format adapters (api_openai, api_anthropic, api_responses, api_ollama) get from
// the server: readiness, the model check, the request core, handlers wrapped with auth and
// that API's error shape, and the streaming glue from core events to a chunked response.
#include <httplib.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/client_socket.h"
#include "server/http_server.h"
#include "server/request_core.h"

namespace strata::server {

// The error object each API sends: OpenAI {"error": {message, type, param, code}}, Anthropic
// {"type": "error", "error": {type, message}}, Ollama {"error": "message"}.
enum class ErrorShape { OpenAI, Anthropic, Ollama };
nlohmann::json error_body(ErrorShape shape, const ApiError& e);
// The shape of the API a path belongs to (/v1/messages..., /api/..., else OpenAI).
ErrorShape shape_of_path(const std::string& path);

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

class ApiHost {
 public:
  virtual ~ApiHost() = default;
  virtual const ServerOptions& options() const = 0;
  virtual void require_ready() const = 0;                 // 503 while the model loads
  virtual void check_model(const std::string& m) const = 0;  // 404 with --strict-model for an unknown name
  virtual const CoreContext& core() const = 0;
  virtual std::string model_id() const = 0;
  virtual int64_t created() const = 0;
  virtual const Engine& engine() const = 0;
  virtual const std::string& model_path() const = 0;
  // A route handler with authentication (Bearer or x-api-key) whose ApiErrors answer in `shape`.
  virtual httplib::Server::Handler guarded(Handler f, ErrorShape shape) = 0;
  virtual httplib::Server& http() = 0;
};

// Writes the events of a run in one wire format.
class WireStream {
 public:
  using Emit = std::function<bool(const std::string&)>;
  virtual ~WireStream() = default;
  virtual bool begin(CoreRun&, const Emit&) { return true; }
  virtual bool event(CoreRun& run, const CoreEvent& e, const Emit& emit) = 0;  // Finish events included (not errors)
  virtual bool end(CoreRun& run, const Emit& emit) = 0;                        // every choice finished
  virtual void error(CoreRun& run, const std::string& message, const Emit& emit) = 0;  // a choice failed
};

// Streams `run` through `ws` as a chunked response; cancels the run when the client goes away.
void stream_run(httplib::Response& res, std::shared_ptr<CoreRun> run, const ClientSocket& client, std::shared_ptr<WireStream> ws,
                const char* content_type);

// The client of a request (to notice it hanging up).
inline ClientSocket client_of(const httplib::Request& req) { return ClientSocket(req.remote_addr, req.remote_port, req.local_port); }

// Starts a chat request already converted to the core's (OpenAI chat) shape: its common fields,
// the model check, the run (named after the requested model, or the served one).
struct StartedChat {
  CommonParams common;
  std::shared_ptr<CoreRun> run;
};
StartedChat start_chat(ApiHost& host, const Json& chat, const char* id_prefix, const char* call_prefix);

// "event: NAME\ndata: JSON\n\n" (name empty: no event line).
std::string sse(const std::string& event, const nlohmann::json& data);

// Routes of each API.
void add_openai_routes(ApiHost& host);
void add_anthropic_routes(ApiHost& host);
void add_responses_routes(ApiHost& host);
void add_ollama_routes(ApiHost& host);

}  // namespace strata::server
