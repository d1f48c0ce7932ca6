#pragma once
// A fleet for tests: N replicas of `strata serve` (subprocesses, --replica r1..rN) behind HAProxy
// started with the shipped configuration (deploy/haproxy/strata.cfg plus one server line per
// replica), all on loopback. HAProxy is Debian's `haproxy` package; without it the fleet does not
// start and says which package to install.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "serve_process.h"

namespace strata::test {

// The haproxy executable in one of `dirs` (a ':' list), or "" with *why naming the package to install.
inline std::string find_haproxy(const std::string& dirs, std::string* why) {
  std::stringstream ss(dirs);
  for (std::string d; std::getline(ss, d, ':');)
    if (!d.empty() && ::access((d + "/haproxy").c_str(), X_OK) == 0) return d + "/haproxy";
  *why = "haproxy is not installed (looked in " + dirs + "): install Debian's package 'haproxy' (scripts/install-deps.sh installs it; `make test` runs that script)";
  return "";
}

inline std::string haproxy_dirs() {
  const char* path = std::getenv("PATH");
  return std::string(path ? path : "") + ":/usr/sbin:/sbin";
}

// A port nobody listens on now (bound and released; HAProxy binds it right after).
// Whether a loopback TCP port can be bound now.
inline bool loopback_port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

// The first of `n` consecutive loopback ports that are free now, for a process started later (a
// script that listens on PORT + i): drawn below Linux's ephemeral range (32768..), from which the
// servers other tests start with --port 0 get theirs, so those cannot take them in between; 0 when
// none was found. The base stays 100 below that range, as scripts/fleet.sh puts HAProxy's status
// page on PORT + 100.
inline int free_loopback_ports(int n) {
  static std::mt19937 rng(static_cast<uint32_t>(::getpid()) * 2654435761u ^ static_cast<uint32_t>(std::random_device{}()));
  std::uniform_int_distribution<int> base(20000, 32767 - 100 - n);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int p = base(rng);
    bool all = true;
    for (int i = 0; i < n && all; ++i) all = loopback_port_free(p + i);
    if (all) return p;
  }
  return 0;
}
inline int free_loopback_port() { return free_loopback_ports(1); }

// Starts `args` (args[0]: the executable's path) with this process's environment plus `extra_env`
// ("NAME=value"), stdout and stderr to the file `log`; its pid, 0 when it could not start.
inline pid_t spawn_logged(std::vector<std::string> args, const std::vector<std::string>& extra_env, const std::string& log) {
  std::vector<std::string> env = extra_env;
  for (char** e = environ; *e; ++e) {  // the extra values replace the inherited ones of their names
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& x : extra_env) replaced = replaced || kv.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0;
    if (!replaced) env.push_back(kv);
  }
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : 0;
}

class Fleet {
 public:
  // `serve_args`: each replica's `strata serve` options (the fixture model, port and name are added).
  Fleet(int n, const std::vector<std::string>& serve_args) : tag_("fleet_" + std::to_string(::getpid())) {
    for (int i = 1; i <= n; ++i) {
      std::vector<std::string> args{"-m", server_fixture(), "--port", "0", "--replica", "r" + std::to_string(i)};
      args.insert(args.end(), serve_args.begin(), serve_args.end());
      replicas_.push_back(std::make_unique<ServeProcess>(tag_ + "_r" + std::to_string(i), args));
    }
  }
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;
  ~Fleet() {
    if (haproxy_ > 0) {
      ::kill(haproxy_, SIGTERM);
      ::waitpid(haproxy_, nullptr, 0);
    }
    std::remove(cfg_.c_str());
    std::remove(log_.c_str());
  }

  // Every replica answers /health, HAProxy runs and has marked every replica UP; else false and *why.
  bool start(std::string* why) {
    const std::string haproxy = find_haproxy(haproxy_dirs(), why);
    if (haproxy.empty()) return false;
    for (size_t i = 0; i < replicas_.size(); ++i)
      if (!replicas_[i]->ready()) return *why = "replica r" + std::to_string(i + 1) + " did not start:\n" + replicas_[i]->log(), false;
    if (!spawn_haproxy(haproxy, why)) return false;
    for (int i = 1; i <= size(); ++i)
      if (!wait_until([&] { return server_status(i) == "UP"; })) return *why = "HAProxy did not mark r" + std::to_string(i) + " UP: " + stats_csv(), false;
    return true;
  }

  int size() const { return static_cast<int>(replicas_.size()); }
  ServeProcess& replica(int i) { return *replicas_[i - 1]; }  // 1-based, as named
  int port() const { return lb_port_; }
  httplib::Client client(int read_timeout_s = 60) const {
    httplib::Client c("127.0.0.1", lb_port_);
    c.set_read_timeout(read_timeout_s, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  std::string haproxy_log() const { return slurp_file(log_); }

  // HAProxy's status of replica ri ("UP", "DOWN", "UP 1/2", ...; "" when unknown), from its CSV stats.
  std::string server_status(int i) const {
    std::stringstream ss(stats_csv());
    for (std::string line; std::getline(ss, line);) {
      std::vector<std::string> f;
      std::stringstream ls(line);
      for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
      if (f.size() > 17 && f[0] == "strata" && f[1] == "r" + std::to_string(i)) return f[17];  // pxname, svname, ..., status
    }
    return "";
  }

 private:
  std::string stats_csv() const {
    httplib::Client c("127.0.0.1", stats_port_);
    c.set_connection_timeout(2, 0);
    c.set_url_encode(false);  // HAProxy reads the ';csv' suffix as written
    auto r = c.Get("/stats;csv");
    return r && r->status == 200 ? r->body : "";
  }

  bool spawn_haproxy(const std::string& haproxy, std::string* why) {
    cfg_ = "/tmp/strata_" + tag_ + ".cfg";
    log_ = "/tmp/strata_" + tag_ + "_haproxy.log";
    std::string cfg = slurp_file(std::string(STRATA_SOURCE_DIR) + "/../deploy/haproxy/strata.cfg");
    if (cfg.empty()) return *why = "cannot read deploy/haproxy/strata.cfg", false;
    for (int i = 1; i <= size(); ++i) cfg += "    server r" + std::to_string(i) + " 127.0.0.1:" + std::to_string(replica(i).port()) + "\n";
    std::ofstream(cfg_) << cfg;
    lb_port_ = free_loopback_port();
    stats_port_ = free_loopback_port();
    haproxy_ = spawn_logged({haproxy, "-db", "-f", cfg_},
                            {"STRATA_LB_BIND=127.0.0.1:" + std::to_string(lb_port_), "STRATA_LB_STATS=127.0.0.1:" + std::to_string(stats_port_)}, log_);
    if (haproxy_ == 0) return *why = "cannot start " + haproxy, false;
    bool gone = false;
    const bool up = wait_until([&] { return (gone = ::waitpid(haproxy_, nullptr, WNOHANG) == haproxy_) || !stats_csv().empty(); });
    if (gone || !up) return haproxy_ = gone ? 0 : haproxy_, *why = "HAProxy did not start:\n" + haproxy_log(), false;
    return true;
  }

  std::string tag_, cfg_, log_;
  std::vector<std::unique_ptr<ServeProcess>> replicas_;
  pid_t haproxy_ = 0;
  int lb_port_ = 0, stats_port_ = 0;
};

}  // namespace strata::test
