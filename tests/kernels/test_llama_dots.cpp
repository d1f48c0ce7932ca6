// Quantized dot products against llama.cpp's own CPU kernels (libggml-cpu-haswell.so, its AVX2
// paths), bit for bit: tests/data/llama_dots/dots.bin holds rows written by
// tools/llama_vec_dot_check (`dump`): for every weight type llama.cpp mixes into i-quant,
// K-quant and legacy files, rows of 1..3 super-blocks (or 1..8 32-value blocks, which llama.cpp
// sums in pairs with an odd last block alone) of real and random blocks, the activation row
// its quantizer made, and its float result. Every SIMD table this CPU has must give those bits,
// one token and several; the scalar table too for the grid i-quants and ternary types (the
// other scalar dots are the double-precision reference, compared within tolerance elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"
#include "kernels/kernel_table.h"

namespace strata {
namespace {

struct LlamaDotRow {
  std::string stem;
  int64_t n = 0;
  uint32_t result = 0;
  std::vector<uint8_t> w, a;
};

std::vector<LlamaDotRow> read_llama_dots(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<LlamaDotRow> rows;
  char name[9] = {};
  while (f.read(name, 8)) {
    int32_t n = 0;
    uint32_t res = 0, wn = 0, an = 0;
    f.read(reinterpret_cast<char*>(&n), 4);
    f.read(reinterpret_cast<char*>(&res), 4);
    f.read(reinterpret_cast<char*>(&wn), 4);
    f.read(reinterpret_cast<char*>(&an), 4);
    LlamaDotRow r{name, n, res, std::vector<uint8_t>(wn), std::vector<uint8_t>(an)};
    f.read(reinterpret_cast<char*>(r.w.data()), wn);
    f.read(reinterpret_cast<char*>(r.a.data()), an);
    if (!f) break;
    rows.push_back(std::move(r));
  }
  return rows;
}

uint32_t llama_dot_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool scalar_follows_llama(GgmlType t) {
  switch (t) {
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS: case GgmlType::IQ3_S: case GgmlType::TQ1_0: case GgmlType::TQ2_0:
      return true;
    default:
      return false;
  }
}

TEST(LlamaDots, EveryTableGivesLlamaCppBitsForEveryMixedInType) {
  const auto rows = read_llama_dots(std::string(STRATA_TEST_DATA_DIR) + "/llama_dots/dots.bin");
  ASSERT_EQ(rows.size(), 160u);  // 15 super-block types x 6 rows, 7 32-value types x 10
  std::map<std::string, int> per_type;
  for (const auto& r : rows) ++per_type[r.stem];
  // i-quants, their 32-value fallbacks, the K-quants and legacy types llama.cpp mixes in.
  for (const char* stem : {"iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_xs", "iq4_nl", "tq1_0",
                           "tq2_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4"})
    EXPECT_GE(per_type[stem], 6) << stem;
  int tables = 0;
  for (Isa isa : kAllIsas) {
    const KernelTable* k = kernel_table(isa);
    if (!k) continue;
    ++tables;
    int bad = 0;
    for (const auto& r : rows) {
      const GgmlType t = *ggml_type_from_name(r.stem.c_str());
      if (isa == Isa::Scalar && !scalar_follows_llama(t)) continue;
      const auto ti = static_cast<uint32_t>(t);
      ASSERT_NE(k->vec_dot[ti], nullptr) << r.stem << " " << k->name;
      const float got = k->vec_dot[ti](r.n, r.w.data(), r.a.data());
      // Several tokens: this row third of three (the others are the same activation row).
      float xn[3] = {-1, -1, -1};
      std::vector<uint8_t> three(3 * r.a.size());
      for (int tk = 0; tk < 3; ++tk) std::memcpy(three.data() + tk * r.a.size(), r.a.data(), r.a.size());
      if (k->vec_dot_xn[ti]) k->vec_dot_xn[ti](r.n, r.w.data(), three.data(), r.a.size(), 3, xn, 1);
      else xn[2] = got;
      if (llama_dot_bits(got) != r.result || llama_dot_bits(xn[2]) != r.result) {
        ++bad;
        float want;
        std::memcpy(&want, &r.result, 4);
        ADD_FAILURE() << r.stem << " " << k->name << " n=" << r.n << ": vec_dot " << got << ", vec_dot_xn " << xn[2]
                      << ", llama.cpp " << want;
      }
    }
    EXPECT_EQ(bad, 0) << k->name;
  }
  EXPECT_GE(tables, 1);
}

}  // namespace
}  // namespace strata
