// The layer contract of docs/ARCHITECTURE.md, checked on the sources: a folder of src/ includes
// only itself and the folders listed for it here. Dependencies point down only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;

// folder -> the folders it may include besides itself.
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> m = {
      {"core", {}},
      {"gguf", {"core"}},
      {"kernels", {"gguf", "core"}},
      {"experts", {"gguf", "core"}},
      {"tokenizer", {"gguf", "core"}},
      {"chat", {"gguf", "core"}},
      {"grammar", {"core"}},
      {"synth", {"kernels", "gguf", "core"}},
      {"gpu", {"kernels", "gguf", "core"}},
      {"model", {"gpu", "kernels", "experts", "gguf", "core"}},
      {"runtime", {"model", "kernels", "experts", "tokenizer", "chat", "grammar", "gguf", "core"}},
      {"server", {"runtime", "model", "kernels", "experts", "tokenizer", "chat", "grammar", "gguf", "core"}},
      {"cli", {"server", "runtime", "model", "kernels", "experts", "tokenizer", "chat", "grammar", "synth", "gpu", "gguf", "core"}},
  };
  return m;
}

}  // namespace

TEST(Layering, IncludesPointDownOnly) {
  const fs::path src = STRATA_SOURCE_DIR;
  ASSERT_TRUE(fs::is_directory(src)) << src;
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cpp") continue;
    const fs::path rel = fs::relative(entry.path(), src);
    const std::string folder = rel.begin()->string();
    const auto rule = allowed().find(folder);
    ASSERT_NE(rule, allowed().end()) << "src/" << folder << " has no place in the layer order (add it to this test and docs/ARCHITECTURE.md)";
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    for (int no = 1; std::getline(in, line); ++no) {
      const std::string tag = "#include \"";
      const size_t at = line.find(tag);
      if (at == std::string::npos || line.find_first_not_of(" \t") != at) continue;
      const std::string target = line.substr(at + tag.size(), line.find('"', at + tag.size()) - at - tag.size());
      const size_t slash = target.find('/');
      if (slash == std::string::npos) continue;  // same folder, or a third-party header
      const std::string dep = target.substr(0, slash);
      if (dep == folder || !allowed().count(dep)) continue;
      EXPECT_TRUE(rule->second.count(dep)) << "src/" << rel.string() << ":" << no << ": " << folder << "/ must not include " << target;
    }
  }
  EXPECT_GT(files, 100);
}
