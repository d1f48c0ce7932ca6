#pragma once
// Running the strata binary from tests.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace strata::test {

struct CmdResult {
  int code = -1;
  std::string out;  // stdout (stderr goes to err)
  std::string err;
};

// A shell command line (its stderr captured apart).
inline CmdResult run_shell(const std::string& line) {
  static int counter = 0;
  const std::string errf = "/tmp/strata_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::string cmd = line + " 2>" + errf;
  CmdResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (FILE* e = std::fopen(errf.c_str(), "rb")) {
    while ((n = std::fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
    std::fclose(e);
  }
  std::remove(errf.c_str());
  return r;
}

// The strata binary with `args`, after environment assignments `env` ("A=1 B=2", or "").
inline CmdResult run_cmd_env(const std::string& env, const std::string& args) {
  return run_shell((env.empty() ? "" : env + " ") + std::string(STRATA_BINARY) + " " + args);
}

inline CmdResult run_cmd(const std::string& args) { return run_cmd_env("", args); }

inline std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// The tensors `strata run --dump-tensors DIR` wrote for every pass, in order (DIR/index.csv),
// concatenated; fails the test when fewer than two were written.
inline std::string dumped_tensors(const std::string& dir) {
  std::ifstream idx(dir + "/index.csv");
  std::string line, all;
  std::getline(idx, line);  // header
  int files = 0;
  while (std::getline(idx, line)) {
    std::ifstream f(dir + "/" + line.substr(line.rfind(',') + 1), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    all += ss.str();
    ++files;
  }
  EXPECT_GT(files, 1) << dir;
  return all;
}

}  // namespace strata::test

