// libFuzzer target for Model::load: every architecture's config readers and weight binders. The
// input edits a golden set's file in place (the file's layout stays, so it always parses and reaches
// the readers): byte 0 picks the set, then each 6-byte edit [what, index, value u32 LE] overwrites
//   what % 3 == 0: the index-th integer metadata value (counts, sizes, ids: widened or cut to its type)
//   what % 3 == 1: one dimension of the index-th tensor (dimension = value >> 28, size = value & 0xfffffff)
//   what % 3 == 2: the ggml type of the index-th tensor.
// Model::load must then give a model or throw strata::Error; a crash, another exception, a hang or
// unbounded memory is a finding. Sets come from STRATA_FIXTURES (default: the build's fixtures).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "model/model.h"

namespace {

struct Slot {
  uint64_t at;  // file offset of the value
  int width;    // bytes
};

struct Base {
  std::vector<uint8_t> bytes;
  std::vector<Slot> ints;        // integer metadata values
  std::vector<uint64_t> dims;    // per tensor: offset of ne[0] (ne[d] at + 8 d)
  std::vector<uint32_t> n_dims;  // per tensor
};

std::vector<Base> g_bases;
int g_fd = -1;
constexpr uint64_t kMaxBaseBytes = 8u << 20;  // the smaller sets: each run copies its file

int int_width(strata::GgufType t) {
  using strata::GgufType;
  switch (t) {
    case GgufType::U8: case GgufType::I8: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: return 4;
    case GgufType::U64: case GgufType::I64: return 8;
    default: return 0;
  }
}

void add_base(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  Base b;
  b.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  auto g = strata::GgufFile::parse(b.bytes.data(), b.bytes.size(), path);
  uint64_t cursor = 0;
  for (size_t k = 0; k < g->kv.size(); ++k) {
    const auto& [key, v] = g->kv[k];
    const uint64_t value_at = g->kv_offsets[k] + 8 + key.size() + 4;
    cursor = value_at;
    if (const int w = int_width(v.type)) b.ints.push_back({value_at, w});
  }
  for (const auto& t : g->tensors) {  // infos follow the metadata in order: name, n_dims, ne[], type, offset
    const auto it = std::search(b.bytes.begin() + static_cast<std::ptrdiff_t>(cursor), b.bytes.end(), t.name.begin(), t.name.end());
    if (it == b.bytes.end()) return;  // not found: skip this set
    const uint64_t name_at = static_cast<uint64_t>(it - b.bytes.begin());
    b.n_dims.push_back(static_cast<uint32_t>(t.n_dims));
    b.dims.push_back(name_at + t.name.size() + 4);
    cursor = name_at + t.name.size();
  }
  g_bases.push_back(std::move(b));
}

void apply(Base& b, std::vector<uint8_t>& out, const uint8_t* e) {
  uint32_t v;
  std::memcpy(&v, e + 2, 4);
  switch (e[0] % 3) {
    case 0: {
      if (b.ints.empty()) return;
      const Slot& s = b.ints[e[1] % b.ints.size()];
      const uint64_t wide = v;
      std::memcpy(out.data() + s.at, &wide, static_cast<size_t>(s.width));
      return;
    }
    case 1: {
      if (b.dims.empty()) return;
      const size_t t = e[1] % b.dims.size();
      const uint64_t d = (v >> 28) % b.n_dims[t];
      const uint64_t ne = (v & 0xfffffffu) ? (v & 0xfffffffu) : 1;
      std::memcpy(out.data() + b.dims[t] + 8 * d, &ne, 8);
      return;
    }
    default: {
      if (b.dims.empty()) return;
      const size_t t = e[1] % b.dims.size();
      const uint32_t type = v % 42;
      std::memcpy(out.data() + b.dims[t] + 8 * b.n_dims[t], &type, 4);
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("STRATA_FIXTURES");
  const std::filesystem::path dir = env ? env : STRATA_FIXTURES_DIR;
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto m = e.path() / "model.gguf";
    if (std::filesystem::exists(m) && std::filesystem::file_size(m) <= kMaxBaseBytes) paths.push_back(m.string());
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) add_base(p);
  if (g_bases.empty()) {
    std::fprintf(stderr, "fuzz_model: no golden set under %s (STRATA_FIXTURES)\n", dir.c_str());
    std::abort();  // a fuzzer that cannot run fails
  }
  g_fd = ::memfd_create("fuzz_model.gguf", 0);
  if (g_fd < 0) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Base& b = g_bases[data[0] % g_bases.size()];
  std::vector<uint8_t> file = b.bytes;
  for (size_t i = 1; i + 6 <= size; i += 6) apply(b, file, data + i);
  if (::ftruncate(g_fd, 0) != 0 || ::pwrite(g_fd, file.data(), file.size(), 0) != static_cast<ssize_t>(file.size())) std::abort();
  try {
    auto m = strata::Model::load("/proc/self/fd/" + std::to_string(g_fd));
  } catch (const strata::Error&) {
  }
  return 0;
}
