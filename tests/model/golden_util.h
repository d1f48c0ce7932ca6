#pragma once
// Reading the llama.cpp golden sets in ../shared/fixtures (see each set's README.md).
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace strata::test {

inline std::string fixtures_dir() {
  if (const char* e = std::getenv("STRATA_FIXTURES")) return e;
  return STRATA_FIXTURES_DIR;
}

inline bool have_fixtures() { return std::filesystem::is_directory(fixtures_dir()); }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(f);
}

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  f.seekg(0, std::ios::end);
  const size_t n = static_cast<size_t>(f.tellg()) / 4;
  f.seekg(0);
  std::vector<float> v(n);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  return v;
}

// Model sets: every fixture folder with model.gguf and golden/.
inline std::vector<std::string> model_sets() {
  std::vector<std::string> v;
  if (!have_fixtures()) return v;
  for (const auto& e : std::filesystem::directory_iterator(fixtures_dir()))
    if (std::filesystem::exists(e.path() / "model.gguf") && std::filesystem::is_directory(e.path() / "golden")) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

inline std::vector<std::string> golden_prompts(const std::string& set) {
  std::vector<std::string> v;
  for (const auto& e : std::filesystem::directory_iterator(fixtures_dir() + "/" + set + "/golden"))
    if (e.path().extension() == ".json") v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

struct LogitCompare {
  double cosine = 0, max_abs = 0, ref_std = 0;
};

inline LogitCompare compare_logits(const float* a, const float* ref, size_t n) {
  double dot = 0, na = 0, nr = 0, mean = 0;
  LogitCompare c;
  for (size_t i = 0; i < n; ++i) {
    dot += double(a[i]) * ref[i];
    na += double(a[i]) * a[i];
    nr += double(ref[i]) * ref[i];
    mean += ref[i];
    c.max_abs = std::max(c.max_abs, std::abs(double(a[i]) - ref[i]));
  }
  mean /= double(n);
  double var = 0;
  for (size_t i = 0; i < n; ++i) var += (ref[i] - mean) * (ref[i] - mean);
  c.ref_std = std::sqrt(var / double(n));
  c.cosine = dot / std::sqrt(na * nr + 1e-300);
  return c;
}

}  // namespace strata::test
