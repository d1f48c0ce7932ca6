#pragma once
// GGUF metadata values. Strings and scalar arrays are views into the mapped file (no copy);
// only nested arrays and string arrays own a vector of views.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
inline constexpr uint32_t kGgufTypeCount = 13;

const char* gguf_type_name(GgufType t);
// Size in bytes of a fixed-size scalar type; 0 for STRING and ARRAY.
size_t gguf_scalar_size(GgufType t);

struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars (by type): integers widened, floats as double.
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string_view str;  // STRING
  // ARRAY
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;             // scalar arrays: count * gguf_scalar_size(elem_type) bytes
  std::vector<std::string_view> strings;    // string arrays
  std::vector<GgufValue> items;             // arrays of arrays

  bool is_integer() const;
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  bool is_array() const { return type == GgufType::ARRAY; }

  // Element i of a scalar array, converted (checked: throws on wrong type / index).
  int64_t array_int(uint64_t idx) const;
  double array_float(uint64_t idx) const;
  std::string_view array_string(uint64_t idx) const;

  // Short human rendering: scalars in full, strings quoted (truncated), arrays summarized.
  std::string to_string(size_t max_len = 80) const;
};

}  // namespace strata
