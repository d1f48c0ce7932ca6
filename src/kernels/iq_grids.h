#pragma once
// The fixed lattice grids and sign tables of ggml's i-quants: format data, shared by every
// kernel table. An entry packs the values of one grid point, value j in byte j (little-endian):
//   IQ2_XXS / IQ2_XS / IQ2_S: 8 magnitudes from {8, 25, 43}
//   IQ3_XXS: 4 magnitudes from {4, 12, 20, 28, 36, 44, 52, 62}; IQ3_S: 4 from {1, 3, ..., 15}
//   IQ1_S / IQ1_M: 8 signed values (int8) from {-1, 0, +1}
// Grid indices are bit fields of the blocks (8, 9, 10, 8, 9 and 11 bits), so every index a
// block can hold is inside its table. Sign patterns: IQ2_XXS, IQ2_XS and IQ3_XXS store 7 sign
// bits per 8 values; the 8th makes the number of negatives even (kSignsIq2).
#include <array>
#include <cstdint>

namespace strata::iq {

inline constexpr int kIq2xxsGridSize = 256, kIq2xsGridSize = 512, kIq2sGridSize = 1024;
inline constexpr int kIq3xxsGridSize = 256, kIq3sGridSize = 512, kIq1sGridSize = 2048;

alignas(64) extern const std::array<uint64_t, kIq2xxsGridSize> kIq2xxsGrid;
alignas(64) extern const std::array<uint64_t, kIq2xsGridSize> kIq2xsGrid;
alignas(64) extern const std::array<uint64_t, kIq2sGridSize> kIq2sGrid;
alignas(64) extern const std::array<uint32_t, kIq3xxsGridSize> kIq3xxsGrid;
alignas(64) extern const std::array<uint32_t, kIq3sGridSize> kIq3sGrid;
alignas(64) extern const std::array<uint64_t, kIq1sGridSize> kIq1sGrid;

// 7 stored sign bits -> 8 sign bits (bit j set: value j is negative), even number of negatives.
alignas(64) extern const std::array<uint8_t, 128> kSignsIq2;
// The same patterns as 8 int8 multipliers (-1 where the sign bit is set, else +1), for SIMD kernels.
alignas(64) extern const std::array<uint64_t, 128> kSignBytesIq2;

// Offset added to every IQ1_S / IQ1_M grid value, with the sign its block stores.
inline constexpr float kIq1Delta = 0.125f;

}  // namespace strata::iq
