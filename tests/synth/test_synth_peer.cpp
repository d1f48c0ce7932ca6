// Synthetic files are real files: llama.cpp loads each synth shape and recipe of
// tests/data/synth_peer/manifest.txt, and its logits (stored, from tools/peer/synth_golden.sh)
// match Strata's on the same regenerated file (strata synth is deterministic in its arguments).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "runtime/engine.h"

using namespace strata;

namespace {

struct PeerCase {
  std::string name, args;
  std::vector<int32_t> tokens;
};

std::string peer_trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<PeerCase> read_manifest(const std::string& path) {
  std::ifstream f(path);
  std::vector<PeerCase> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto p1 = line.find('|'), p2 = line.find('|', p1 + 1);
    if (p1 == std::string::npos || p2 == std::string::npos) continue;
    PeerCase c{peer_trim(line.substr(0, p1)), peer_trim(line.substr(p1 + 1, p2 - p1 - 1)), {}};
    std::istringstream ids(line.substr(p2 + 1));
    for (int32_t t; ids >> t;) c.tokens.push_back(t);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v;
  float x;
  while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  return v;
}

}  // namespace

TEST(SynthPeer, LlamaCppLogitsMatchOnEverySynthShapeAndRecipe) {
  const std::string dir = std::string(STRATA_TEST_DATA_DIR) + "/synth_peer";
  const auto cases = read_manifest(dir + "/manifest.txt");
  ASSERT_GE(cases.size(), 8u) << "manifest " << dir << "/manifest.txt";
  const auto scratch = std::filesystem::temp_directory_path() / ("strata-synth-peer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(scratch);
  for (const auto& c : cases) {
    const std::string model = (scratch / (c.name + ".gguf")).string();
    const std::string cmd = std::string(STRATA_BINARY) + " synth " + c.args + " --out " + model + " > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const std::vector<float> want = read_f32(dir + "/" + c.name + ".logits.f32");
    EngineOptions eo;
    eo.n_ctx = 64;
    eo.n_threads = 2;
    Engine eng(Model::load(model), eo);
    ASSERT_EQ(static_cast<size_t>(eng.config().n_vocab), want.size()) << c.name;
    std::vector<float> got;
    eng.eval(0, c.tokens.data(), static_cast<int>(c.tokens.size()), 0, false, got);
    double dot = 0, na = 0, nb = 0, maxd = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      dot += static_cast<double>(want[i]) * got[i];
      na += static_cast<double>(want[i]) * want[i];
      nb += static_cast<double>(got[i]) * got[i];
      maxd = std::max(maxd, std::fabs(static_cast<double>(want[i]) - got[i]));
    }
    const double cos = dot / std::sqrt(na * nb), rms = std::sqrt(na / static_cast<double>(want.size()));
    std::printf("[%-22s] cosine %.7f, max |diff| %.4f (logit rms %.3f)\n", c.name.c_str(), cos, maxd, rms);
    EXPECT_GT(cos, 0.9995) << c.name;
    EXPECT_LT(maxd, 0.1 * rms) << c.name;
    std::filesystem::remove(model);
  }
  std::filesystem::remove_all(scratch);
}
