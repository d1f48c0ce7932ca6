// The front's event loop (server/http_front.h): accepts, reads heads and bodies without blocking,
// answers refusals itself, hands whole requests to the worker pool and takes kept-alive
// connections back.
#include "server/http_front.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "server/http_front_io.h"

namespace strata::server {

using namespace front_limits;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kSweepInterval{100};  // how often deadlines are checked
constexpr size_t kTrimAfterBytes = 64 * 1024;             // requests at least this large trim the heap after

const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// The head handed to httplib: the client's, with the body framing replaced by the decoded body's
// Content-Length and without Expect (the front answered it).
std::string rebuilt_head(const RequestHead& h, size_t body_size) {
  std::string s = h.method + " " + h.target + " " + h.version + "\r\n";
  for (const auto& [name, value] : h.headers) {
    if (strcasecmp(name.c_str(), "Content-Length") == 0 || strcasecmp(name.c_str(), "Transfer-Encoding") == 0 || strcasecmp(name.c_str(), "Expect") == 0)
      continue;
    s += name + ": " + value + "\r\n";
  }
  if (h.has_body()) s += "Content-Length: " + std::to_string(body_size) + "\r\n";
  return s + "\r\n";
}

// Addresses of an accepted socket as httplib reports them (numeric host, port).
void socket_addr(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len)) != 0) return;
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&sa), len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// Up to the hard limit of open files: each connection is one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

size_t fd_budget(size_t wanted) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return wanted;
  const size_t reserve = 256;  // model files, the engine's own descriptors
  return std::min(wanted, rl.rlim_cur > reserve * 2 ? static_cast<size_t>(rl.rlim_cur) - reserve : static_cast<size_t>(rl.rlim_cur) / 2);
}

}  // namespace

struct Conn {
  enum class State { Head, Body, Busy, Refusing, Linger, WaitMemory };
  int fd = -1;
  State state = State::Head;
  std::string in;     // bytes read and not yet consumed
  std::string out;    // a refusal (or 100 Continue) being written
  std::string body;   // the decoded body
  RequestHead head;
  size_t head_len = 0;
  size_t scanned = 0;  // bytes of `in` known to hold no '\n' (while reading a head)
  std::optional<ChunkDecoder> chunks;
  Clock::time_point deadline;  // of the current state
  Clock::time_point since;     // when the current state began (eviction order)
  bool after_out_body = false;  // the written `out` was a 100 Continue: go on reading the body
  bool closed = false;          // closed in this round of events (the object lives until its end)
  size_t charged = 0;           // request memory held (FrontOptions::request_memory)
  size_t want_memory = 0;       // WaitMemory: what it waits for
  bool body_done = false;       // WaitMemory: the body is read (dispatch next), else its head only (read the body next)
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;
};

class FrontLoop {
 public:
  FrontLoop(FrontServer& srv, const FrontOptions& opt, FrontHooks hooks) : srv_(srv), opt_(opt), hooks_(std::move(hooks)) {
    opt_.max_connections = fd_budget(opt_.max_connections);
  }
  ~FrontLoop() { close_all(); }

  int bind(const std::string& host, int port);
  int listen_fd() const { return listen_fd_; }
  void run();
  void stop() {
    stopping_.store(true);
    wake();
  }

 private:
  void wake() const {
    const uint64_t one = 1;
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
  }
  void watch(Conn& c, uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = c.fd;
    epoll_ctl(epfd_, op, c.fd, &ev);
  }
  void accept_all();
  void on_event(int fd, uint32_t events);
  void on_readable(Conn& c);
  bool read_some(Conn& c);
  void advance(Conn& c);
  void start_head(Conn& c, Clock::time_point now, std::chrono::milliseconds timeout);
  void on_head(Conn& c);
  void on_body(Conn& c);
  void refuse(Conn& c, const Refusal& r);
  void send_out(Conn& c);
  void dispatch(Conn& c);
  void take_back();
  void sweep();
  bool evict_one();
  void close_conn(int fd);
  void close_all();
  // Request memory: holds `want` for c (more or less than it holds now); false when that would pass
  // the limit (nothing changes then).
  bool charge(Conn& c, size_t want);
  // Charges `want` for c, or (when it could fit but others hold the memory) parks c unread until
  // admit_waiting() can; 413 when it could never fit. False when c is not to go on now.
  bool charge_or_wait(Conn& c, size_t want, bool body_done);
  void admit_waiting();
  void begin_body(Conn& c);
  void dispatch_charged(Conn& c);
  // The refusal for a request that needs `want` of the request memory and cannot have it.
  Refusal no_memory(size_t want) const;

 public:
  std::atomic<size_t> in_use_{0};  // request memory held (the loop takes it, workers give it back)

 private:
  FrontServer& srv_;
  FrontOptions opt_;
  FrontHooks hooks_;
  int listen_fd_ = -1, epfd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::unordered_map<int, std::unique_ptr<Conn>> conns_;
  std::vector<std::unique_ptr<Conn>> closed_;  // closed during this round of events (callers may still hold them)
  std::unique_ptr<WorkerPool> pool_;
  std::mutex back_mu_;
  std::vector<std::pair<int, bool>> back_;  // (fd, keep alive) of requests the workers finished
  std::deque<int> mem_waiters_;             // connections in WaitMemory, in arrival order

 public:
  int bind_errno_ = 0;  // why the last bind() failed (EADDRINUSE: another server has the port)
  Clock::time_point next_sweep_{};
};

int FrontLoop::bind(const std::string& host, int port) {
  raise_fd_limit();
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res) != 0) return -1;
  for (addrinfo* ai = res; ai && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) listen_fd_ = fd;
    else bind_errno_ = errno, ::close(fd);
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) return -1;
  std::string ip;
  int bound = -1;
  socket_addr(listen_fd_, /*peer=*/false, ip, bound);
  return bound;
}

void FrontLoop::run() {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  pool_ = std::make_unique<WorkerPool>(static_cast<size_t>(std::max(1, opt_.workers)));
  for (int fd : {listen_fd_, wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  }
  std::vector<epoll_event> events(256);
  while (!stopping_.load()) {
    const int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()), static_cast<int>(kSweepInterval.count()));
    for (int i = 0; i < n && !stopping_.load(); ++i) on_event(events[static_cast<size_t>(i)].data.fd, events[static_cast<size_t>(i)].events);
    if (Clock::now() >= next_sweep_) sweep();
    closed_.clear();
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  for (auto it = conns_.begin(); it != conns_.end();) {  // busy ones are the workers' until they finish
    if (it->second->state == Conn::State::Busy) ++it;
    else ::close(it->first), it = conns_.erase(it);
  }
  pool_.reset();  // joins the workers (the handlers end: the scheduler stopped first)
  close_all();
}

void FrontLoop::on_event(int fd, uint32_t events) {
  if (fd == listen_fd_) return accept_all();
  if (fd == wake_fd_) {
    uint64_t v;
    while (::read(wake_fd_, &v, sizeof v) > 0) {
    }
    return take_back();
  }
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (c.state == Conn::State::WaitMemory) {
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) close_conn(fd);
    return;
  }
  if ((events & EPOLLOUT) && c.state == Conn::State::Refusing) return send_out(c);
  if ((events & EPOLLOUT) && c.after_out_body) return send_out(c);
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
}

void FrontLoop::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN, or out of descriptors (retried on the next wake)
    }
    if (conns_.size() >= opt_.max_connections && !evict_one()) {
      ::close(fd);  // every connection is running a request
      continue;
    }
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    socket_addr(fd, /*peer=*/true, c->remote_ip, c->remote_port);
    socket_addr(fd, /*peer=*/false, c->local_ip, c->local_port);
    start_head(*c, Clock::now(), kHeadTimeout);
    watch(*c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    conns_.emplace(fd, std::move(c));
  }
}

// The connection waiting longest for a head (or idle) makes room for a new one.
bool FrontLoop::evict_one() {
  Conn* oldest = nullptr;
  for (auto& [fd, c] : conns_)
    if (c->state != Conn::State::Busy && (!oldest || c->since < oldest->since)) oldest = c.get();
  if (!oldest) return false;
  close_conn(oldest->fd);
  return true;
}

bool FrontLoop::charge(Conn& c, size_t want) {
  if (want <= c.charged) {
    in_use_.fetch_sub(c.charged - want);
    c.charged = want;
    return true;
  }
  const size_t more = want - c.charged;
  size_t used = in_use_.load();
  do {  // workers give memory back meanwhile
    if (opt_.request_memory > 0 && used + more > opt_.request_memory) return false;
  } while (!in_use_.compare_exchange_weak(used, used + more));
  c.charged = want;
  return true;
}

Refusal FrontLoop::no_memory(size_t want) const {
  if (want > opt_.request_memory)
    return Refusal{413, "the request needs " + std::to_string(want) + " bytes of request memory (" + std::to_string(kBodyFactor) + " per body byte, " +
                            std::to_string(kValueBytes) + " per JSON value, " + std::to_string(kHandlingBase) + " more); the server has " +
                            std::to_string(opt_.request_memory) + " (--request-memory)", "request_too_large"};
  return Refusal{503, "the server's request memory is in use by other requests; retry shortly", "server_busy"};
}

bool FrontLoop::charge_or_wait(Conn& c, size_t want, bool body_done) {
  // A request that holds memory already (its body read) goes before those that wait for their first.
  if ((body_done || mem_waiters_.empty()) && charge(c, want)) return true;
  if (opt_.request_memory > 0 && want > opt_.request_memory) {
    refuse(c, no_memory(want));
    return false;
  }
  c.state = Conn::State::WaitMemory;
  c.want_memory = want;
  c.body_done = body_done;
  c.deadline = Clock::now() + opt_.memory_wait;
  watch(c, EPOLLRDHUP, EPOLL_CTL_MOD);  // nothing is read meanwhile; a client that leaves is noticed
  if (body_done) mem_waiters_.push_front(c.fd);
  else mem_waiters_.push_back(c.fd);
  return false;
}

// Requests waiting for request memory go on, first come first served, while it lasts.
void FrontLoop::admit_waiting() {
  while (!mem_waiters_.empty()) {
    auto it = conns_.find(mem_waiters_.front());
    if (it == conns_.end() || it->second->state != Conn::State::WaitMemory) {
      mem_waiters_.pop_front();
      continue;
    }
    Conn& c = *it->second;
    if (!charge(c, c.want_memory)) return;
    mem_waiters_.pop_front();
    if (c.body_done) {
      dispatch_charged(c);
    } else {
      watch(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
      begin_body(c);
      if (!c.closed && c.state == Conn::State::Body) on_body(c);
    }
  }
}

void FrontLoop::start_head(Conn& c, Clock::time_point now, std::chrono::milliseconds timeout) {
  c.state = Conn::State::Head;
  c.since = now;
  c.deadline = now + timeout;
  c.head = RequestHead{};
  c.head_len = 0;
  c.scanned = 0;
  c.body.clear();
  c.chunks.reset();
}

// Reads what the socket has (at most kReadChunk per call); false when the peer is gone.
bool FrontLoop::read_some(Conn& c) {
  char buf[kReadChunk];
  const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (c.state == Conn::State::Linger) return true;  // a refused body: discarded
  if (c.state == Conn::State::Head && c.in.empty() && c.deadline - Clock::now() > kHeadTimeout) c.deadline = Clock::now() + kHeadTimeout;  // a kept-alive connection's next head
  if (c.state == Conn::State::Body) c.deadline = Clock::now() + kBodyIdleTimeout;
  c.in.append(buf, static_cast<size_t>(n));
  // A head's bytes are held against the request memory (a body's were, when its head was admitted).
  if (c.state == Conn::State::Head && !charge(c, c.in.size())) {
    refuse(c, no_memory(c.in.size()));
    return true;
  }
  return true;
}

void FrontLoop::on_readable(Conn& c) {
  if (c.state == Conn::State::Busy || c.state == Conn::State::Refusing) return;
  if (!read_some(c)) return close_conn(c.fd);
  if (c.state == Conn::State::Refusing) return;
  advance(c);
}

// Moves the connection on with the bytes it has: head, body, then the request.
void FrontLoop::advance(Conn& c) {
  if (c.state == Conn::State::Head) on_head(c);
  if (!c.closed && c.state == Conn::State::Body) on_body(c);
}

void FrontLoop::on_head(Conn& c) {
  if (c.in.find('\n', c.scanned) == std::string::npos && c.in.size() <= kMaxHeadBytes) {
    c.scanned = c.in.size();  // no new line: the head cannot have ended (each byte is looked at once)
    return;
  }
  const HeadParse p = parse_head(c.in, c.head);
  if (p.refusal) return refuse(c, *p.refusal);
  if (p.length == 0) {  // not whole yet (bounded by kMaxHeadBytes): it ends with a line still to come
    c.scanned = c.in.size();
    return;
  }
  c.head_len = p.length;
  std::optional<Refusal> r = hooks_.gate ? hooks_.gate(c.head) : std::nullopt;
  if (!r && !c.head.chunked && c.head.content_length > opt_.max_body)
    r = Refusal{413, "the request body exceeds the limit of " + std::to_string(opt_.max_body) + " bytes", "request_too_large"};
  // Admitted against the request memory before a body byte is read: a sized body for its length, a
  // chunked one as it grows (on_body), a bodyless request for its handling.
  if (r) return refuse(c, *r);
  const size_t want = std::max(request_charge(c.head.chunked ? 0 : c.head.content_length), c.in.size());
  if (charge_or_wait(c, want, /*body_done=*/false)) begin_body(c);
}

void FrontLoop::begin_body(Conn& c) {
  c.in.erase(0, c.head_len);
  c.state = Conn::State::Body;
  c.deadline = Clock::now() + kBodyIdleTimeout;
  if (c.head.chunked) c.chunks.emplace(opt_.max_body);
  const std::string* expect = c.head.header("Expect");
  if (expect && strcasecmp(expect->c_str(), "100-continue") == 0 && c.head.has_body() && c.in.empty()) {
    c.out = "HTTP/1.1 100 Continue\r\n\r\n";
    c.after_out_body = true;
    send_out(c);  // may close it (advance() looks at `closed`)
  }
}

void FrontLoop::on_body(Conn& c) {
  if (c.chunks) {
    std::optional<Refusal> r;
    const size_t used = c.chunks->feed(c.in, c.body, r);
    c.in.erase(0, used);
    if (!r && !charge(c, std::max(request_charge(c.body.size()), c.in.size()))) r = no_memory(request_charge(c.body.size()));
    if (r) return refuse(c, *r);
    if (c.chunks->done()) dispatch(c);
    return;
  }
  const size_t take = std::min(c.head.content_length - c.body.size(), c.in.size());
  c.body.append(c.in, 0, take);
  c.in.erase(0, take);
  if (c.body.size() == c.head.content_length) dispatch(c);
}

// Answers the refusal, then drains (and drops) what the client still sends for a while, so that
// it reads the answer instead of a reset.
void FrontLoop::refuse(Conn& c, const Refusal& r) {
  auto [body, type] = hooks_.render ? hooks_.render(c.head, r) : std::pair<std::string, std::string>{r.message, "text/plain"};
  c.out = "HTTP/1.1 " + std::to_string(r.status) + " " + reason(r.status) + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n" + (r.status == 401 ? "WWW-Authenticate: Bearer\r\n" : "") +
          (r.status == 503 ? "Retry-After: 1\r\n" : "") + "\r\n" + body;
  c.in.clear();
  c.in.shrink_to_fit();
  c.body.clear();
  c.body.shrink_to_fit();
  charge(c, 0);
  c.after_out_body = false;
  c.state = Conn::State::Refusing;
  c.deadline = Clock::now() + kWriteTimeout;
  send_out(c);
}

void FrontLoop::send_out(Conn& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))  // a refusal does not read meanwhile (level-triggered EPOLLIN would spin)
      return watch(c, c.state == Conn::State::Refusing ? EPOLLOUT : EPOLLIN | EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_MOD);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return close_conn(c.fd);
    c.out.erase(0, static_cast<size_t>(n));
  }
  watch(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
  if (c.after_out_body) {
    c.after_out_body = false;
    return;
  }
  ::shutdown(c.fd, SHUT_WR);
  c.state = Conn::State::Linger;
  c.since = Clock::now();
  c.deadline = c.since + kLingerTimeout;
}

// A whole request: to a worker; the loop leaves the socket alone until the worker gives it back.
void FrontLoop::dispatch(Conn& c) {
  // The body is whole: its JSON values are charged too.
  if (c.head.has_body() && !charge_or_wait(c, request_charge(c.body.size(), json_values_bound(c.body)), /*body_done=*/true)) return;
  dispatch_charged(c);
}

void FrontLoop::dispatch_charged(Conn& c) {
  c.state = Conn::State::Busy;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, c.fd, nullptr);
  auto req = std::make_shared<BufferedRequest>();
  req->bytes = rebuilt_head(c.head, c.body.size());
  req->bytes += c.body;
  c.body.clear();
  c.body.shrink_to_fit();
  req->fd = c.fd;
  req->charge = c.charged;  // the worker gives it back as soon as the handler returns
  c.charged = 0;
  req->remote_ip = c.remote_ip, req->local_ip = c.local_ip;
  req->remote_port = c.remote_port, req->local_port = c.local_port;
  const int fd = c.fd;
  pool_->post([this, fd, req] {
    bool keep = false;
    try {
      FrontStream strm(*req, kWriteTimeout);
      bool closed = false;
      keep = srv_.handle(strm, closed) && !closed && !stopping_.load();
    } catch (...) {  // handlers catch their own; nothing may end the worker
    }
    // What a large request's handling freed goes back to the system rather than staying in this
    // thread's malloc arena (RSS would keep the high-water mark of every arena); then its request
    // memory is free for the next request, before the loop hears of it.
    const bool large = req->bytes.size() >= kTrimAfterBytes;
    std::string().swap(req->bytes);
    if (large) malloc_trim(0);
    in_use_.fetch_sub(req->charge);
    {
      std::lock_guard<std::mutex> lk(back_mu_);
      back_.emplace_back(fd, keep);
    }
    wake();
  });
}

// Connections whose request a worker finished: kept alive (their next pipelined request may be
// buffered already) or closed.
void FrontLoop::take_back() {
  std::vector<std::pair<int, bool>> back;
  {
    std::lock_guard<std::mutex> lk(back_mu_);
    back.swap(back_);
  }
  for (auto [fd, keep] : back) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) continue;
    if (!keep || stopping_.load()) {
      close_conn(fd);
      continue;
    }
    Conn& c = *it->second;
    charge(c, c.in.size());  // pipelined bytes are charged as a head (the worker gave the request's back)
    start_head(c, Clock::now(), c.in.empty() ? kKeepAliveTimeout : kHeadTimeout);
    watch(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    if (!c.in.empty()) advance(c);
  }
  admit_waiting();
}

// Closes the connections past their deadline (a slow head, a stalled body, an idle keep-alive, a
// refusal not read, a drain that lasted long enough).
void FrontLoop::sweep() {
  const auto now = Clock::now();
  next_sweep_ = now + kSweepInterval;
  std::vector<int> expired;
  for (auto& [fd, c] : conns_)
    if (c->state != Conn::State::Busy && now >= c->deadline) expired.push_back(fd);
  for (int fd : expired) {
    auto it = conns_.find(fd);
    if (it != conns_.end() && it->second->state == Conn::State::WaitMemory) {
      watch(*it->second, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
      refuse(*it->second, Refusal{503, "the server's request memory stayed in use by other requests; retry shortly", "server_busy"});
    } else {
      close_conn(fd);
    }
  }
  admit_waiting();  // closed connections gave memory back
}

void FrontLoop::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (it->second->state != Conn::State::Busy) epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  charge(*it->second, 0);
  it->second->closed = true;
  closed_.push_back(std::move(it->second));
  conns_.erase(it);
}

void FrontLoop::close_all() {
  for (auto& [fd, c] : conns_) ::close(fd);
  conns_.clear();
  for (int* fd : {&listen_fd_, &epfd_, &wake_fd_})
    if (*fd >= 0) ::close(*fd), *fd = -1;
}

FrontServer::FrontServer() = default;
FrontServer::~FrontServer() = default;

void FrontServer::configure(const FrontOptions& opt, FrontHooks hooks) {
  loop_ = std::make_unique<FrontLoop>(*this, opt, std::move(hooks));
  set_payload_max_length(opt.max_body);
  set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(kKeepAliveTimeout).count());
  set_keep_alive_max_count(1000);  // only the Keep-Alive header's figure: the front keeps any number
}

int FrontServer::bind_front(const std::string& host, int port) {
  const int bound = loop_->bind(host, port);
  // httplib's content providers (streams) run while svr_sock_ is valid: the front's socket stands
  // for it until shutdown().
  if (bound > 0) svr_sock_ = loop_->listen_fd();
  return bound;
}
void FrontServer::serve() { loop_->run(); }
void FrontServer::shutdown() {
  svr_sock_ = INVALID_SOCKET;  // streams end
  if (loop_) loop_->stop();
}

int FrontServer::bind_error() const { return loop_ ? loop_->bind_errno_ : 0; }

size_t FrontServer::request_memory_in_use() const { return loop_ ? loop_->in_use_.load(std::memory_order_relaxed) : 0; }

bool FrontServer::handle(httplib::Stream& strm, bool& connection_closed) {
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  struct Done {
    std::atomic<int>& n;
    ~Done() { n.fetch_sub(1, std::memory_order_acq_rel); }
  } done{in_flight_};
  return process_request(strm, /*close_connection=*/false, connection_closed, nullptr);
}

}  // namespace strata::server
