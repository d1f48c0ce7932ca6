// The i-quant lattice grids and sign tables (kernels/iq_grids.h): sizes, value sets, a few
// known entries and checksums of the byte layouts; and malformed blocks (NaN/Inf scales, every
// bit set, unused ternary codes) decode and dot to defined values without touching memory
// outside the tables.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/iq_grids.h"
#include "kernels/kernel_table.h"
#include "kernels/quants.h"

namespace strata {
namespace {

// FNV-1a 64 over the little-endian bytes of a table.
template <typename T, size_t N>
uint64_t fnv1a(const std::array<T, N>& t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (T v : t)
    for (size_t j = 0; j < sizeof(T); ++j) h = (h ^ ((static_cast<uint64_t>(v) >> (8 * j)) & 0xFF)) * 0x100000001b3ull;
  return h;
}

template <typename T, size_t N>
void check_grid(const std::array<T, N>& t, const std::set<int>& allowed, uint64_t checksum, const char* name) {
  SCOPED_TRACE(name);
  std::set<T> distinct;
  for (T v : t) {
    distinct.insert(v);
    for (size_t j = 0; j < sizeof(T); ++j) ASSERT_TRUE(allowed.count(static_cast<int>((v >> (8 * j)) & 0xFF))) << std::hex << v;
  }
  EXPECT_EQ(distinct.size(), N) << "grid points must be distinct";
  EXPECT_EQ(fnv1a(t), checksum) << std::hex << fnv1a(t);
}

TEST(IqGrids, SizesValueSetsAndChecksums) {
  static_assert(iq::kIq2xxsGrid.size() == 256 && iq::kIq2xsGrid.size() == 512 && iq::kIq2sGrid.size() == 1024);
  static_assert(iq::kIq3xxsGrid.size() == 256 && iq::kIq3sGrid.size() == 512 && iq::kIq1sGrid.size() == 2048);
  const std::set<int> iq2{8, 25, 43}, iq3xxs{4, 12, 20, 28, 36, 44, 52, 62}, iq3s{1, 3, 5, 7, 9, 11, 13, 15};
  const std::set<int> iq1{0xFF, 0x00, 0x01};
  check_grid(iq::kIq2xxsGrid, iq2, 0xbb4ee025b5ac6e8eull, "iq2xxs");
  check_grid(iq::kIq2xsGrid, iq2, 0xc9b1ee61e79909bdull, "iq2xs");
  check_grid(iq::kIq2sGrid, iq2, 0x123edd38a3b62b90ull, "iq2s");
  check_grid(iq::kIq3xxsGrid, iq3xxs, 0xdfa5dc83d6a155d5ull, "iq3xxs");
  check_grid(iq::kIq3sGrid, iq3s, 0xfa37020c25b44829ull, "iq3s");
  check_grid(iq::kIq1sGrid, iq1, 0x6703ed863501ae2eull, "iq1s");
  // A few entries as ggml lists them.
  EXPECT_EQ(iq::kIq2xxsGrid[0], 0x0808080808080808ull);
  EXPECT_EQ(iq::kIq2xxsGrid[255], 0x2b2b2b1908081908ull);
  EXPECT_EQ(iq::kIq2xsGrid[511], 0x2b2b2b2b2b2b2b2bull);
  EXPECT_EQ(iq::kIq2sGrid[1022], 0x2b2b2b2b2b082b08ull);
  EXPECT_EQ(iq::kIq3xxsGrid[1], 0x04040414u);
  EXPECT_EQ(iq::kIq3sGrid[2], 0x01010105u);
  EXPECT_EQ(iq::kIq1sGrid[1], 0xffffffffffffff01ull);
}

TEST(IqGrids, SignTable) {
  for (int i = 0; i < 128; ++i) {
    const uint8_t s = iq::kSignsIq2[i];
    EXPECT_EQ(s & 127, i);
    EXPECT_EQ(std::popcount(static_cast<unsigned>(s)) % 2, 0) << i;
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(static_cast<int8_t>(iq::kSignBytesIq2[i] >> (8 * j)), (s >> j) & 1 ? -1 : 1) << i << " " << j;
  }
}

// ---- malformed blocks ----

const GgmlType kLatticeTypes[] = {GgmlType::IQ1_S, GgmlType::IQ1_M, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                                  GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::TQ1_0, GgmlType::TQ2_0};

// Byte offset of the f16 scale d in a block (IQ1_M spreads it over its scales: handled apart).
size_t d_offset(GgmlType t) {
  switch (t) {
    case GgmlType::TQ1_0: return offsetof(block_tq1_0, d);
    case GgmlType::TQ2_0: return offsetof(block_tq2_0, d);
    default: return 0;
  }
}

uint32_t grid_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Dequantizes and dots (with an all-ones activation) one block with the scalar reference; every
// SIMD table this CPU has gives the same dot, one token and several (NaN where it gives NaN).
void decode_and_dot(GgmlType t, const std::vector<uint8_t>& blk, std::vector<float>& y, float& dot) {
  const auto& q = quant_traits(t);
  ASSERT_NE(q.to_float, nullptr);
  ASSERT_NE(q.vec_dot, nullptr);
  y.assign(QK_K, 0.0f);
  q.to_float(blk.data(), y.data(), QK_K);
  std::vector<float> ones(QK_K, 1.0f);
  const size_t ab = ggml_row_size(q.vec_dot_type, QK_K);
  std::vector<uint8_t> act(3 * ab);
  for (int k = 0; k < 3; ++k) quantize_row(q.vec_dot_type, ones.data(), act.data() + k * ab, QK_K);
  dot = q.vec_dot(QK_K, blk.data(), act.data());
  for (Isa isa : kSimdIsas) {
    const KernelTable* k = kernel_table(isa);
    if (!k) continue;
    const auto ti = static_cast<uint32_t>(t);
    const float got = k->vec_dot[ti](QK_K, blk.data(), act.data());
    EXPECT_TRUE(grid_bits(got) == grid_bits(dot) || (std::isnan(got) && std::isnan(dot))) << k->name << ": " << got << " vs " << dot;
    if (!k->vec_dot_xn[ti]) continue;
    float yx[3] = {-1, -1, -1};
    k->vec_dot_xn[ti](QK_K, blk.data(), act.data(), ab, 3, yx, 1);
    for (float v : yx)
      EXPECT_TRUE(grid_bits(v) == grid_bits(dot) || (std::isnan(v) && std::isnan(dot))) << k->name << " (multi-token): " << v << " vs " << dot;
  }
}

void set_d(GgmlType t, std::vector<uint8_t>& blk, uint16_t h) {
  if (t == GgmlType::IQ1_M) {  // d's nibbles in the top nibble of each scale u16
    auto* sc = blk.data() + offsetof(block_iq1_m, scales);
    for (int j = 0; j < 4; ++j) {
      uint16_t v;
      std::memcpy(&v, sc + 2 * j, 2);
      v = static_cast<uint16_t>((v & 0x0FFF) | (((h >> (4 * j)) & 0xF) << 12));
      std::memcpy(sc + 2 * j, &v, 2);
    }
    return;
  }
  std::memcpy(blk.data() + d_offset(t), &h, 2);
}

TEST(IqMalformed, AllBitsSetDecodesInRange) {
  // Every index field at its maximum: the largest grid entries, all signs, the largest scales.
  for (GgmlType t : kLatticeTypes) {
    SCOPED_TRACE(ggml_type_name(t));
    std::vector<uint8_t> blk(ggml_info(t).type_size, 0xFF);
    set_d(t, blk, f32_to_f16(1.0f));
    std::vector<float> y;
    float dot = 0;
    decode_and_dot(t, blk, y, dot);
    double sum = 0;
    for (float v : y) {
      ASSERT_TRUE(std::isfinite(v));
      EXPECT_LE(std::fabs(v), 64.0f * 31.0f);
      sum += v;
    }
    EXPECT_TRUE(std::isfinite(dot));
    // The activation is all ones (Q8_K: d = 1/127, q = 127): the dot is the sum of the values.
    EXPECT_NEAR(dot, sum, 1e-4 * std::fabs(sum) + 1e-3);
  }
}

TEST(IqMalformed, NonFiniteScalePropagates) {
  for (GgmlType t : kLatticeTypes) {
    for (uint16_t h : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E00}}) {  // +Inf, -Inf, NaN
      SCOPED_TRACE(std::string(ggml_type_name(t)) + " d=" + std::to_string(f16_to_f32(h)));
      std::vector<uint8_t> blk(ggml_info(t).type_size, 0x5A);
      set_d(t, blk, h);
      std::vector<float> y;
      float dot = 0;
      decode_and_dot(t, blk, y, dot);
      // No finite value comes out of a non-finite scale: each is +-Inf or NaN (Inf * 0 = NaN).
      for (float v : y) EXPECT_FALSE(std::isfinite(v));
      EXPECT_FALSE(std::isfinite(dot));
    }
  }
}

TEST(IqMalformed, UnusedTernaryCodes) {
  // TQ1_0 bytes >= 243 and TQ2_0 code 3 are never written by the quantizer; they decode to
  // digits in 0..2 (values -1..+1) for TQ1_0 and to +2 for TQ2_0, as ggml does.
  std::vector<uint8_t> b1(sizeof(block_tq1_0), 0xFF);
  set_d(GgmlType::TQ1_0, b1, f32_to_f16(1.0f));
  std::vector<float> y;
  float dot = 0;
  decode_and_dot(GgmlType::TQ1_0, b1, y, dot);
  for (float v : y) EXPECT_TRUE(v == -1.0f || v == 0.0f || v == 1.0f) << v;
  std::vector<uint8_t> b2(sizeof(block_tq2_0), 0xFF);
  set_d(GgmlType::TQ2_0, b2, f32_to_f16(1.0f));
  decode_and_dot(GgmlType::TQ2_0, b2, y, dot);
  for (float v : y) EXPECT_EQ(v, 2.0f);
  EXPECT_NEAR(dot, 512.0f, 1e-3f);
}

}  // namespace
}  // namespace strata
