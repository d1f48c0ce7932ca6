#include "gguf/ggml_type.h"

#include <array>
#include <cctype>
#include <string>

#include "core/error.h"

namespace strata {
namespace {

constexpr GgmlTypeInfo kInvalid{GgmlType::F32, nullptr, 0, 0, false};

constexpr std::array<GgmlTypeInfo, kGgmlTypeCount> make_table() {
  std::array<GgmlTypeInfo, kGgmlTypeCount> t{};
  for (auto& e : t) e = kInvalid;
  auto set = [&](GgmlType ty, const char* name, int bs, int ts, bool q) {
    t[static_cast<uint32_t>(ty)] = GgmlTypeInfo{ty, name, bs, ts, q};
  };
  set(GgmlType::F32, "f32", 1, 4, false);
  set(GgmlType::F16, "f16", 1, 2, false);
  set(GgmlType::Q4_0, "q4_0", 32, 18, true);
  set(GgmlType::Q4_1, "q4_1", 32, 20, true);
  set(GgmlType::Q5_0, "q5_0", 32, 22, true);
  set(GgmlType::Q5_1, "q5_1", 32, 24, true);
  set(GgmlType::Q8_0, "q8_0", 32, 34, true);
  set(GgmlType::Q8_1, "q8_1", 32, 36, true);
  set(GgmlType::Q2_K, "q2_K", 256, 84, true);
  set(GgmlType::Q3_K, "q3_K", 256, 110, true);
  set(GgmlType::Q4_K, "q4_K", 256, 144, true);
  set(GgmlType::Q5_K, "q5_K", 256, 176, true);
  set(GgmlType::Q6_K, "q6_K", 256, 210, true);
  set(GgmlType::Q8_K, "q8_K", 256, 292, true);
  set(GgmlType::IQ2_XXS, "iq2_xxs", 256, 66, true);
  set(GgmlType::IQ2_XS, "iq2_xs", 256, 74, true);
  set(GgmlType::IQ3_XXS, "iq3_xxs", 256, 98, true);
  set(GgmlType::IQ1_S, "iq1_s", 256, 50, true);
  set(GgmlType::IQ4_NL, "iq4_nl", 32, 18, true);
  set(GgmlType::IQ3_S, "iq3_s", 256, 110, true);
  set(GgmlType::IQ2_S, "iq2_s", 256, 82, true);
  set(GgmlType::IQ4_XS, "iq4_xs", 256, 136, true);
  set(GgmlType::I8, "i8", 1, 1, false);
  set(GgmlType::I16, "i16", 1, 2, false);
  set(GgmlType::I32, "i32", 1, 4, false);
  set(GgmlType::I64, "i64", 1, 8, false);
  set(GgmlType::F64, "f64", 1, 8, false);
  set(GgmlType::IQ1_M, "iq1_m", 256, 56, true);
  set(GgmlType::BF16, "bf16", 1, 2, false);
  set(GgmlType::TQ1_0, "tq1_0", 256, 54, true);
  set(GgmlType::TQ2_0, "tq2_0", 256, 66, true);
  set(GgmlType::MXFP4, "mxfp4", 32, 17, true);
  return t;
}

constexpr auto kTable = make_table();

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  if (id >= kGgmlTypeCount || kTable[id].name == nullptr) return std::nullopt;
  return kTable[id];
}

const GgmlTypeInfo& ggml_info(GgmlType t) {
  const auto id = static_cast<uint32_t>(t);
  STRATA_CHECK(id < kGgmlTypeCount && kTable[id].name != nullptr, "invalid ggml type id {}", id);
  return kTable[id];
}

const char* ggml_type_name(GgmlType t) { return ggml_info(t).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& e : kTable) {
    if (!e.name) continue;
    std::string n;
    for (const char* p = e.name; *p; ++p) n += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
    if (n == lower) return e.type;
  }
  return std::nullopt;
}

}  // namespace strata
