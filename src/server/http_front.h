#pragma once
// The server's connection front: one epoll thread owns every connection and reads each request
// (head, then body) without blocking into that connection's buffer, under named limits; only a
// whole request goes to a worker thread, which runs cpp-httplib's routing and handlers
// (httplib::Server::process_request) over a Stream that reads the buffer and writes the socket.
//
// Why: httplib 0.11 gives each connection a worker thread from accept on and reads the whole
// body before a handler (the API key check) runs, so slow clients hold every worker (slowloris)
// and a client without a key makes the server buffer any body it sends. Here a slow or idle
// connection costs a buffer and an fd, never a thread; the head is checked (FrontHooks::gate:
// route, key, Host / Origin) before a body byte is accepted, and bodies are capped whether sized
// or chunked.
//
//   FrontServer front;            // routes registered with Get / Post as on any httplib::Server
//   front.configure(opts, hooks);
//   int port = front.bind_front("127.0.0.1", 0);
//   std::thread t([&] { front.serve(); });
//   ...
//   front.shutdown(); t.join();
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::server {

// Limits of the front (src/server/README.md, "Limits").
namespace front_limits {
inline constexpr size_t kMaxHeadBytes = 64 * 1024;  // request line + headers (431 beyond)
inline constexpr size_t kMaxHeaders = 100;          // header lines (431 beyond)
inline constexpr size_t kMaxChunkLine = 1024;       // a chunk-size line of a chunked body (400 beyond)
inline constexpr std::chrono::milliseconds kHeadTimeout{10'000};       // from a head's first byte to its end
inline constexpr std::chrono::milliseconds kBodyIdleTimeout{30'000};   // a body read that makes no progress
inline constexpr std::chrono::milliseconds kKeepAliveTimeout{30'000};  // an idle kept-alive connection
inline constexpr std::chrono::milliseconds kWriteTimeout{30'000};      // a response write that makes no progress
inline constexpr std::chrono::milliseconds kLingerTimeout{2'000};      // draining a refused request's body before close
inline constexpr size_t kMaxConnections = 4096;     // open connections (then the oldest idle or slow one is closed)
inline constexpr std::chrono::milliseconds kMemoryWait{30'000};  // a request waiting for request memory (then 503)
inline constexpr size_t kReadChunk = 64 * 1024;     // bytes per read()
// Request memory (FrontOptions::request_memory): a request is admitted against request_charge(),
// held until its handler returns; a head being read holds its bytes. The charge bounds what handling
// costs at its peak (its JSON tree, the template's values, the rendered prompt and its tokens, a
// grammar from its schemas): kBodyFactor per body byte (from the head: a long prompt costs 21x),
// kValueBytes per JSON value (once the body is whole: `[0,0,...]` carried into the template costs
// 100x its bytes, 200 bytes a value) and kHandlingBase; measured on the worst bodies
// (tests/server/test_request_memory.cpp).
inline constexpr size_t kBodyFactor = 32;
inline constexpr size_t kValueBytes = 256;
inline constexpr size_t kHandlingBase = 1024 * 1024;
}  // namespace front_limits

// What admitting a request of `body` bytes holding `values` JSON values (0: not known yet) holds of
// the request memory.
inline size_t request_charge(size_t body, size_t values = 0) {
  return body * front_limits::kBodyFactor + values * front_limits::kValueBytes + front_limits::kHandlingBase;
}
// At least the number of JSON values in `body` (1 + the '[', ',' and ':' outside strings); any text.
size_t json_values_bound(std::string_view body);

// A request's line and headers as the front parsed them (before any body byte is accepted).
struct RequestHead {
  std::string method, target, path, version;  // path: target before '?'
  std::vector<std::pair<std::string, std::string>> headers;
  bool chunked = false;
  size_t content_length = 0;  // sized bodies
  bool has_body() const { return chunked || content_length > 0; }
  // The first header of that name (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

// An answer the front gives itself, closing the connection (the body is not read).
struct Refusal {
  int status = 400;
  std::string message, code;
};

struct FrontHooks {
  // Called once per request with its whole head, before any body byte is accepted.
  std::function<std::optional<Refusal>(const RequestHead&)> gate;
  // The body and content type of a refusal (the API's error object); also counts it.
  std::function<std::pair<std::string, std::string>(const RequestHead&, const Refusal&)> render;
};

struct FrontOptions {
  size_t max_body = 1u << 20;  // a body (sized or chunked, decoded) beyond: 413
  int workers = 128;           // threads running handlers
  size_t max_connections = front_limits::kMaxConnections;
  // Bytes of requests held at once (heads being read, admitted requests: request_charge): a request
  // that could never fit gets 413; one that does not fit now waits (unread, in arrival order) for
  // the requests before it to end, 503 with Retry-After after memory_wait. 0: no limit.
  size_t request_memory = 0;
  std::chrono::milliseconds memory_wait = front_limits::kMemoryWait;
};

// The head of a request at the start of `buf`. Returns the head's length (terminating empty line
// included) once it is whole, 0 while it is not; a refusal (400 / 431 / 501) when it cannot be one.
struct HeadParse {
  size_t length = 0;
  std::optional<Refusal> refusal;
};
HeadParse parse_head(std::string_view buf, RequestHead& head);

// A chunked body decoded as it arrives, its decoded size capped.
class ChunkDecoder {
 public:
  explicit ChunkDecoder(size_t cap) : cap_(cap) {}
  // Consumes bytes of `in` (returns how many), appending data to `out`; stops after the last chunk
  // and its trailers (done()). A refusal (400 malformed, 413 over the cap) ends the body.
  size_t feed(std::string_view in, std::string& out, std::optional<Refusal>& refusal);
  bool done() const { return state_ == State::Done; }

 private:
  enum class State { Size, Data, DataEnd, Trailer, Done };
  bool size_line(std::optional<Refusal>& refusal);
  State state_ = State::Size;
  std::string line_;
  size_t remaining_ = 0, total_ = 0, trailers_ = 0, cap_;
};

class FrontServer : public httplib::Server {
 public:
  FrontServer();
  ~FrontServer() override;
  void configure(const FrontOptions& opt, FrontHooks hooks);
  // Listens (backlog SOMAXCONN) on host:port (0: any free port); returns the port, -1 on failure
  // (bind_error(): its errno). No SO_REUSEPORT: a port another server listens on is EADDRINUSE.
  int bind_front(const std::string& host, int port);
  int bind_error() const;
  // The event loop on the calling thread until shutdown().
  void serve();
  void shutdown();

 private:
  friend class FrontLoop;
  // One request read whole: httplib's routing, handler and response over `strm`.
  bool handle(httplib::Stream& strm, bool& connection_closed);
 public:
  // Request memory held now (FrontOptions::request_memory), for /stats and tests.
  size_t request_memory_in_use() const;
  // Requests whose handler runs or whose response is being written (streams until their end).
  int requests_in_flight() const { return in_flight_.load(std::memory_order_acquire); }
 private:
  std::unique_ptr<class FrontLoop> loop_;
  std::atomic<int> in_flight_{0};
};

}  // namespace strata::server
