#pragma once
// The front's worker side (server/http_front.h): a whole request in a buffer, the httplib::Stream
// a handler runs over (reads from that buffer, writes to the socket with a write timeout), and the
// worker pool (a throwing task is caught, never the end of the process).
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata::server {

struct BufferedRequest {
  std::string bytes;  // head (body framing: Content-Length) + decoded body
  int fd = -1;        // the connection (responses are written to it)
  std::string remote_ip, local_ip;
  int remote_port = 0, local_port = 0;
  size_t charge = 0;  // request memory it holds (given back by the worker when the handler returns)
};

class FrontStream final : public httplib::Stream {
 public:
  FrontStream(const BufferedRequest& req, std::chrono::milliseconds write_timeout) : req_(req), timeout_ms_(static_cast<int>(write_timeout.count())) {}

  bool is_readable() const override { return pos_ < req_.bytes.size(); }
  // Waits (up to the write timeout) until the socket takes bytes; false once the peer is gone.
  bool is_writable() const override {
    pollfd p{req_.fd, POLLOUT, 0};
    return ::poll(&p, 1, timeout_ms_) > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, req_.bytes.size() - pos_);
    std::memcpy(ptr, req_.bytes.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  // All of it, or -1 (an error, or no progress within the write timeout).
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::send(req_.fd, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!is_writable()) return -1;
      } else {
        return -1;
      }
    }
    return static_cast<ssize_t>(done);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = req_.remote_ip, port = req_.remote_port; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = req_.local_ip, port = req_.local_port; }
  socket_t socket() const override { return req_.fd; }

 private:
  const BufferedRequest& req_;
  size_t pos_ = 0;
  int timeout_ms_;
};

// Fixed threads taking tasks in order; the destructor runs what was posted, then joins.
class WorkerPool {
 public:
  explicit WorkerPool(size_t n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void post(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      tasks_.push_back(std::move(f));
    }
    cv_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return done_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        f = std::move(tasks_.front());
        tasks_.pop_front();
      }
      try {
        f();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata serve: a request task failed: %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "strata serve: a request task failed\n");
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  bool done_ = false;
};

}  // namespace strata::server
