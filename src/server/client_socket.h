#pragma once
// Noticing that an HTTP client hung up while its request waits for the engine.
//
// cpp-httplib 0.11 (Debian 12) gives a handler neither the connection's socket nor a "closed"
// callback, and a non-streaming handler writes nothing until the answer is complete. A
// ClientSocket finds the connection's socket once, among this process's descriptors, by its
// addresses (the request's local and remote address and port); the socket stays open while the
// handler runs. gone() then polls it without blocking.
#include <string>

namespace strata::server {

class ClientSocket {
 public:
  ClientSocket() = default;
  // The TCP socket whose local port is `local_port` and whose peer is remote_addr:remote_port
  // (-1 when there is none, e.g. a unix socket: gone() is then always false).
  ClientSocket(const std::string& remote_addr, int remote_port, int local_port);
  explicit ClientSocket(int fd) : fd_(fd) {}

  int fd() const { return fd_; }
  // True once the peer closed or reset the connection. The request body has been read, so the
  // socket has nothing to read until the peer closes it or pipelines its next request (then it
  // is alive). A client that half-closes its side after sending counts as gone.
  bool gone() const;

 private:
  int fd_ = -1;
};

}  // namespace strata::server
