#include "gguf/gguf_value.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace strata {

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < kGgufTypeCount ? names[i] : "invalid";
}

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: case GgufType::BOOL: return true;
    default: return false;
  }
}

template <typename T>
static T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

int64_t GgufValue::array_int(uint64_t idx) const {
  STRATA_CHECK(type == GgufType::ARRAY && raw != nullptr, "metadata value is not a scalar array");
  STRATA_CHECK(idx < count, "array index {} out of range (count {})", idx, count);
  const uint8_t* p = raw + idx * gguf_scalar_size(elem_type);
  switch (elem_type) {
    case GgufType::U8: return load<uint8_t>(p);
    case GgufType::I8: return load<int8_t>(p);
    case GgufType::BOOL: return load<uint8_t>(p) != 0;
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::U64: return static_cast<int64_t>(load<uint64_t>(p));
    case GgufType::I64: return load<int64_t>(p);
    default: fail("array of {} is not an integer array", gguf_type_name(elem_type));
  }
}

double GgufValue::array_float(uint64_t idx) const {
  STRATA_CHECK(type == GgufType::ARRAY && raw != nullptr, "metadata value is not a scalar array");
  STRATA_CHECK(idx < count, "array index {} out of range (count {})", idx, count);
  const uint8_t* p = raw + idx * gguf_scalar_size(elem_type);
  if (elem_type == GgufType::F32) return load<float>(p);
  if (elem_type == GgufType::F64) return load<double>(p);
  return static_cast<double>(array_int(idx));
}

std::string_view GgufValue::array_string(uint64_t idx) const {
  STRATA_CHECK(type == GgufType::ARRAY && elem_type == GgufType::STRING, "metadata value is not a string array");
  STRATA_CHECK(idx < strings.size(), "array index {} out of range (count {})", idx, strings.size());
  return strings[idx];
}

static std::string quote(std::string_view s, size_t max_len) {
  std::string out = "'";
  for (size_t k = 0; k < s.size() && k < max_len; ++k) {
    unsigned char c = static_cast<unsigned char>(s[k]);
    if (c == '\n') out += "\\n";
    else if (c < 0x20) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  out += s.size() > max_len ? "'..." : "'";
  return out;
}

std::string GgufValue::to_string(size_t max_len) const {
  switch (type) {
    case GgufType::STRING:
      if (str.size() > max_len) return fmt::format("<{} chars>", str.size());
      return quote(str, max_len);
    case GgufType::BOOL: return u ? "true" : "false";
    case GgufType::F32: case GgufType::F64: return fmt::format("{}", f);
    case GgufType::ARRAY: {
      if (count > 8 || elem_type == GgufType::ARRAY) return fmt::format("[array of {} {}]", count, gguf_type_name(elem_type));
      std::string s = "[";
      for (uint64_t k = 0; k < count; ++k) {
        if (k) s += ", ";
        if (elem_type == GgufType::STRING) s += quote(strings[k], 32);
        else if (elem_type == GgufType::F32 || elem_type == GgufType::F64) s += fmt::format("{}", array_float(k));
        else s += fmt::format("{}", array_int(k));
      }
      return s + "]";
    }
    default:
      if (type == GgufType::U64) return fmt::format("{}", u);
      return fmt::format("{}", i);
  }
}

}  // namespace strata
