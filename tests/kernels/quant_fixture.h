#pragma once
// Loader for the golden ggml block data in ../shared/fixtures/quant-blocks (see its README.md).
#include <gtest/gtest.h>
#include "../fixture_sets.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/ggml_type.h"

namespace strata::test {

inline std::filesystem::path quant_fixture_dir() {
  return std::filesystem::path(STRATA_FIXTURES_DIR) / "quant-blocks";
}

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
inline std::vector<float> read_f32(const std::filesystem::path& p) {
  const auto b = read_bytes(p);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// One type's golden files.
struct QuantGolden {
  GgmlType type;
  nlohmann::json meta;              // <type>.json
  int n_rows = 0, n_cols = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> blocks;      // [n_rows, row_bytes]
  std::vector<float> dequant;       // [n_rows, n_cols]
  std::vector<float> input;         // [n_rows, n_cols]
  std::vector<float> activation;    // [n_cols]
  std::vector<uint8_t> act_blocks;  // activation in vec_dot_type
};

// File stem of a type: ggml's name in lower case ("q4_K" -> "q4_k").
inline std::string fixture_stem(GgmlType t) {
  std::string s = ggml_type_name(t);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline QuantGolden load_golden(GgmlType t) {
  const auto dir = quant_fixture_dir();
  const std::string stem = fixture_stem(t);
  QuantGolden g;
  g.type = t;
  std::ifstream jf(dir / (stem + ".json"));
  g.meta = nlohmann::json::parse(jf);
  g.n_rows = g.meta.at("n_rows").get<int>();
  g.n_cols = g.meta.at("n_cols").get<int>();
  g.row_bytes = g.meta.at("row_bytes").get<size_t>();
  g.blocks = read_bytes(dir / (stem + ".blocks"));
  g.dequant = read_f32(dir / (stem + ".f32"));
  g.input = read_f32(dir / "input.f32");
  g.activation = read_f32(dir / "activation.f32");
  if (g.meta.contains("vec_dot")) g.act_blocks = read_bytes(dir / g.meta["vec_dot"].at("activation_blocks_file").get<std::string>());
  return g;
}

#define STRATA_SKIP_WITHOUT_QUANT_FIXTURES()                                                        \
  do {                                                                                              \
    if (!std::filesystem::exists(::strata::test::quant_fixture_dir() / "index.json"))               \
      STRATA_MISSING_FIXTURE(::strata::test::quant_fixture_dir().string() + "/index.json (quant-blocks golden tests)"); \
  } while (0)

}  // namespace strata::test
