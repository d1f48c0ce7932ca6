#pragma once
// Helpers shared by the kernel tests: the golden quant-blocks fixtures
// (shared/fixtures/quant-blocks, see its README.md) and test-side dequantization.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "gguf/ggml_type.h"
#include "kernels/kernel_table.h"
#include "kernels/blocks.h"
#include "../fixture_sets.h"

namespace strata::testing {

namespace fs = std::filesystem;

inline const fs::path kDir = fs::path(STRATA_FIXTURES_DIR) / "quant-blocks";
inline const char* const kTypes[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k",
                              "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4", "bf16", "f16",
                              "iq1_s", "iq1_m", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "tq1_0", "tq2_0"};

inline std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
inline std::vector<float> read_f32(const fs::path& p) {
  const auto b = read_bytes(p);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

struct Golden {
  std::string file;         // lower-case stem, e.g. "q4_k"
  GgmlType type, act_type;
  int64_t rows, cols, row_bytes;
  std::vector<uint8_t> blocks, act_blocks;
  std::vector<float> deq;   // [rows, cols]
  std::vector<float> result;
};

inline Golden load_golden(const std::string& stem) {
  Golden g;
  g.file = stem;
  std::ifstream jf(kDir / (stem + ".json"));
  const auto j = nlohmann::json::parse(jf);
  g.type = *ggml_type_from_name(j["type"].get<std::string>());
  g.act_type = *ggml_type_from_name(j["vec_dot"]["vec_dot_type"].get<std::string>());
  g.rows = j["n_rows"];
  g.cols = j["n_cols"];
  g.row_bytes = j["row_bytes"];
  g.blocks = read_bytes(kDir / (stem + ".blocks"));
  g.act_blocks = read_bytes(kDir / j["vec_dot"]["activation_blocks_file"].get<std::string>());
  g.deq = read_f32(kDir / (stem + ".f32"));
  g.result = j["vec_dot"]["result"].get<std::vector<float>>();
  return g;
}

// Activation block -> dequantized floats (test-side reference, double friendly).
inline std::vector<double> dequant_act(GgmlType t, const uint8_t* p, int64_t n) {
  std::vector<double> out(n);
  switch (t) {
    case GgmlType::Q8_0:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto* a = reinterpret_cast<const block_q8_0*>(p) + b;
        for (int k = 0; k < 32; ++k) out[b * 32 + k] = double(f16_to_f32(a->d)) * a->qs[k];
      }
      break;
    case GgmlType::Q8_1:
      for (int64_t b = 0; b < n / 32; ++b) {
        const auto* a = reinterpret_cast<const block_q8_1*>(p) + b;
        for (int k = 0; k < 32; ++k) out[b * 32 + k] = double(f16_to_f32(a->d)) * a->qs[k];
      }
      break;
    case GgmlType::Q8_K:
      for (int64_t b = 0; b < n / 256; ++b) {
        const auto* a = reinterpret_cast<const block_q8_K*>(p) + b;
        for (int k = 0; k < 256; ++k) out[b * 256 + k] = double(a->d) * a->qs[k];
      }
      break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
      break;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
      break;
    default: ADD_FAILURE() << "unexpected activation type";
  }
  return out;
}

// Q8_1 activations carry s = f16(d * sum(q)); kernels use it for the weight minimum term, so
// the exact reference adds m * (s - d * sum(q)) per block (m: weight block minimum).
inline double q8_1_min_correction(GgmlType wt, const uint8_t* w, const uint8_t* a, int64_t n) {
  if (wt != GgmlType::Q4_1 && wt != GgmlType::Q5_1) return 0.0;
  const int wbytes = ggml_info(wt).type_size;
  double c = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t m;
    std::memcpy(&m, w + b * wbytes + 2, 2);
    const auto* ab = reinterpret_cast<const block_q8_1*>(a) + b;
    int sum = 0;
    for (int k = 0; k < 32; ++k) sum += ab->qs[k];
    c += double(f16_to_f32(m)) * (double(f16_to_f32(ab->s)) - double(f16_to_f32(ab->d)) * sum);
  }
  return c;
}

// n_tok activation rows (token scales vary over 4 decades), quantized by the table into rows
// `stride` bytes apart.
inline std::vector<uint8_t> random_act(const KernelTable& k, GgmlType at, int64_t cols, int n_tok, size_t stride,
                                std::mt19937& rng) {
  std::vector<uint8_t> act(stride * n_tok, 0xAB);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-2.0f, 2.0f);
  std::vector<float> x(cols);
  for (int t = 0; t < n_tok; ++t) {
    const float scale = std::pow(10.0f, ex(rng));
    for (auto& v : x) v = scale * nd(rng);
    k.quantize_act[static_cast<uint32_t>(at)](x.data(), act.data() + t * stride, cols);
  }
  return act;
}

// The SIMD kernel tables this CPU can run (AVX2, AVX-512, AVX-VNNI; NEON, NEON dotprod).
inline std::vector<const KernelTable*> simd_kernel_tables() {
  std::vector<const KernelTable*> v;
  for (Isa isa : kSimdIsas)
    if (const KernelTable* k = kernel_table(isa)) v.push_back(k);
  return v;
}

// The NEON tables have no tile kernels (matmul takes their multi-token ones); every x86 SIMD
// table has them for the grid i-quants.
inline bool is_neon(const KernelTable& k) { return k.isa == Isa::Neon || k.isa == Isa::NeonDotprod; }

}  // namespace strata::testing
