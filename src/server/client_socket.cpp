#include "server/client_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace strata::server {

namespace {

// Port and numeric address of a socket address (IPv4 or IPv6); false for other families.
bool addr_of(const sockaddr_storage& sa, int& port, std::string& addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(sa);
    port = ntohs(a.sin_port);
    if (!inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf)) return false;
  } else if (sa.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(sa);
    port = ntohs(a.sin6_port);
    if (!inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf)) return false;
  } else {
    return false;
  }
  addr = buf;
  return true;
}

std::vector<int> open_fds() {
  std::vector<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return fds;
  const int own = dirfd(d);
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && v != own) fds.push_back(static_cast<int>(v));
  }
  closedir(d);
  return fds;
}

}  // namespace

ClientSocket::ClientSocket(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return;
  int by_port = -1, n_by_port = 0;
  for (int fd : open_fds()) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    int lp = 0, pp = 0;
    std::string la, pa;
    if (!addr_of(local, lp, la) || !addr_of(peer, pp, pa) || lp != local_port || pp != remote_port) continue;
    if (pa == remote_addr) {  // exact match
      fd_ = fd;
      return;
    }
    by_port = fd;  // the address may be spelled differently (e.g. an IPv4-mapped IPv6 address)
    ++n_by_port;
  }
  if (n_by_port == 1) fd_ = by_port;
}

bool ClientSocket::gone() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLIN;
#ifdef POLLRDHUP
  p.events |= POLLRDHUP;
#endif
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace strata::server
