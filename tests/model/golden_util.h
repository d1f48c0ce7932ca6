#pragma once
// Reading the llama.cpp golden sets in ../shared/fixtures (see each set's README.md).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../fixture_sets.h"

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

// How a set is held to llama.cpp's outputs, by general.file_type (llama_ftype).
enum class Criterion { Exact, Tolerance };

// By llama_ftype: all F32 (0) and mostly Q8_0 (7) are exact; the types of 6 bits or fewer per
// weight get tolerances. F16/BF16 (1, 32) and unknown types have no criterion yet.
inline std::optional<Criterion> criterion_of(int64_t file_type) {
  switch (file_type) {
    case 0:
    case 7:
      return Criterion::Exact;
    case 2: case 3: case 8: case 9:                                        // Q4_0 Q4_1 Q5_0 Q5_1
    case 10: case 11: case 12: case 13: case 14: case 15: case 16: case 17:  // Q2_K .. Q5_K_M
    case 18: case 19: case 20: case 21: case 22: case 23: case 24: case 25:  // Q6_K, IQ*
    case 26: case 27: case 28: case 29: case 30: case 31: case 36: case 37:  // IQ*, TQ1_0 TQ2_0
    case 38:                                                               // MXFP4_MOE
      return Criterion::Tolerance;
    default:
      return std::nullopt;
  }
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

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bitwise comparison of two logit rows; "" when equal, else where and by how much they differ.
inline std::string row_difference(const float* got, const float* want, size_t n) {
  size_t diff = 0, first = n;
  double max_abs = 0;
  for (size_t i = 0; i < n; ++i) {
    if (float_bits(got[i]) == float_bits(want[i])) continue;
    if (!diff++) first = i;
    max_abs = std::max(max_abs, std::abs(double(got[i]) - want[i]));
  }
  if (!diff) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf, "%zu of %zu logits differ (first: id %zu, %.9g vs llama.cpp %.9g; max |d| %.3g)", diff, n, first, got[first],
                want[first], max_abs);
  return buf;
}

}  // namespace strata::test
