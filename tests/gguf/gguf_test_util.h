#pragma once
// Helpers shared by the GGUF tests: a byte assembler for hand-made (often malformed) files and
// a per-test scratch directory.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "gguf/gguf_file.h"

namespace strata::test {

// Little-endian GGUF byte assembler.
struct Raw {
  std::string b;

  Raw& u8(uint8_t v) { return put(v); }
  Raw& u16(uint16_t v) { return put(v); }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& bytes(std::string_view s) {
    b.append(s);
    return *this;
  }
  Raw& str(std::string_view s) { return u64(s.size()).bytes(s); }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) { return u32(kGgufMagic).u32(version).u64(n_tensors).u64(n_kv); }
  Raw& type(GgufType t) { return u32(static_cast<uint32_t>(t)); }
  Raw& kv_u32(std::string_view key, uint32_t v) { return str(key).type(GgufType::U32).u32(v); }
  Raw& kv_str(std::string_view key, std::string_view v) { return str(key).type(GgufType::STRING).str(v); }
  Raw& tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t ggml_type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) u64(d);
    return u32(ggml_type).u64(offset);
  }
  Raw& pad(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
  Raw& zeros(size_t n) {
    b.append(n, '\0');
    return *this;
  }

 private:
  template <typename T>
  Raw& put(T v) {
    char c[sizeof(T)];
    std::memcpy(c, &v, sizeof(T));
    b.append(c, sizeof(T));
    return *this;
  }
};

inline void patch_u32(std::string& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
inline void patch_u64(std::string& b, size_t at, uint64_t v) { std::memcpy(&b[at], &v, 8); }

// A fresh directory per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string n = std::string("strata-") + info->test_suite_name() + "-" + info->name();
    for (char& c : n)
      if (c == '/') c = '_';
    dir_ = std::filesystem::temp_directory_path() / (n + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = path(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace strata::test
