#pragma once
// Helpers shared by the chat tests: test data lives next to this file (tests/chat/data).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace strata::chat_test {

// An absolute path from the build (not __FILE__, which a compiler cache may make relative).
inline std::string data_dir() { return std::string(STRATA_TEST_DATA_DIR) + "/../chat/data"; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string read_data(const std::string& name) { return read_file(data_dir() + "/" + name); }

}  // namespace strata::chat_test
