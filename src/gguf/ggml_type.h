#pragma once
// Every ggml tensor type that appears in published GGUF files: id, name, block size and
// bytes per block, so byte sizes are exact even for types without a kernel.
#include <cstdint>
#include <optional>
#include <string_view>

namespace strata {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3,
  // 4, 5: Q4_2 / Q4_3 were removed from ggml
  Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  // 31..33: Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 (removed, repacked at load time now)
  TQ1_0 = 34, TQ2_0 = 35,
  // 36..38: IQ4_NL_4_4 / _4_8 / _8_8 (removed)
  MXFP4 = 39,
};
inline constexpr uint32_t kGgmlTypeCount = 40;

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;     // ggml's spelling, e.g. "q4_K"
  int block_size;       // values per block
  int type_size;        // bytes per block
  bool quantized;
};

// nullopt for ids that are not (or no longer) ggml types.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id);
// Info for a valid type (checked).
const GgmlTypeInfo& ggml_info(GgmlType t);
const char* ggml_type_name(GgmlType t);
// Parses "q4_K", "Q4_K", "f32"... (case-insensitive); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

// Bytes of a row of n values; n must be a multiple of the block size.
inline uint64_t ggml_row_size(GgmlType t, uint64_t n) {
  const auto& i = ggml_info(t);
  return n / static_cast<uint64_t>(i.block_size) * static_cast<uint64_t>(i.type_size);
}

}  // namespace strata
