#pragma once
// Helpers shared by the chat tests: test data lives next to this file (tests/chat/data).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace strata::chat_test {

inline std::string data_dir() {
  const std::string f = __FILE__;
  return f.substr(0, f.rfind('/')) + "/data";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string read_data(const std::string& name) { return read_file(data_dir() + "/" + name); }

}  // namespace strata::chat_test
