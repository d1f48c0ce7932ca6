#pragma once
// `strata serve ARGS` as a subprocess for tests: stderr goes to a log file, ready() waits until it
// answers /health (or exits), stop() sends SIGTERM and returns its wait status; the destructor
// stops it if the test did not.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../wait_until.h"
#include "server_util.h"

extern char** environ;

namespace strata::test {

inline std::string slurp_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class ServeProcess {
 public:
  // `tag` names the log file (/tmp/strata_<tag>_<pid>.log).
  // `wrapper`: a command that runs `strata serve ...` (e.g. a cgroup runner), empty: none.
  ServeProcess(const std::string& tag, std::vector<std::string> args, std::vector<std::string> wrapper = {})
      : log_("/tmp/strata_" + tag + "_" + std::to_string(::getpid()) + ".log") {
    args.insert(args.begin(), {STRATA_BINARY, "serve"});
    args.insert(args.begin(), wrapper.begin(), wrapper.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&fa);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  ~ServeProcess() {
    if (pid_ > 0) stop();
    std::remove(log_.c_str());
  }

  // Waits for /health 200 (wait_until's limit); false when the process exits first (exited() then
  // tells) or never gets there.
  bool ready() {
    if (pid_ <= 0) return false;
    bool gone = false;
    const bool ok = wait_until([&] {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return gone = true;
      std::smatch m;
      const std::string text = log();
      static const std::regex re("listening on http://127\\.0\\.0\\.1:(\\d+)");
      if (port_ == 0 && std::regex_search(text, m, re)) port_ = std::stoi(m[1]);
      if (!port_) return false;
      httplib::Client c("127.0.0.1", port_);
      auto h = c.Get("/health");
      return h && h->status == 200;
    });
    if (gone) pid_ = 0, exited_ = true;
    return ok && !gone;
  }
  // SIGTERM, then its wait status (-1 when it was not running).
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_) st = -1;
    pid_ = 0;
    return st;
  }
  // Sends `sig` (the process keeps running until reap() sees it end).
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits (wait_until's limit) for the process to end; its wait status, -1 when it did not end.
  int reap() {
    if (pid_ <= 0) return -1;
    int st = 0;
    if (!wait_until([&] { return ::waitpid(pid_, &st, WNOHANG) == pid_; })) return -1;
    pid_ = 0;
    exited_ = true;
    return st;
  }
  bool started() const { return pid_ > 0 || exited_; }
  pid_t pid() const { return pid_; }
  // A /proc/PID/status figure of the process in bytes (VmHWM: peak RSS, VmRSS), -1 when gone.
  long status_bytes(const char* key) const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind(key, 0) == 0 && line.size() > std::strlen(key) && line[std::strlen(key)] == ':') return std::stol(line.substr(std::strlen(key) + 1)) * 1024;
    return -1;
  }
  bool exited() const { return exited_; }
  int port() const { return port_; }
  std::string log() const { return slurp_file(log_); }

 private:
  std::string log_;
  pid_t pid_ = 0;
  int port_ = 0;
  bool exited_ = false;
};

// Four greedy /v1/completions sent to `s` at once; their texts in request order ("(failed)" for a
// request that did not answer 200). The tests that compare a server with one process use it.
inline std::vector<std::string> four_completion_texts(ServeProcess& s) {
  std::vector<std::string> out(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", s.port());
      c.set_read_timeout(60);
      const nlohmann::json req = {{"prompt", "Request " + std::to_string(i) + ": the quick brown fox"}, {"max_tokens", 8}, {"temperature", 0}};
      auto r = c.Post("/v1/completions", req.dump(), "application/json");
      out[i] = r && r->status == 200 ? nlohmann::json::parse(r->body)["choices"][0]["text"].get<std::string>() : "(failed)";
    });
  for (auto& t : th) t.join();
  return out;
}

}  // namespace strata::test
